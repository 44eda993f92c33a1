"""``edge-runtime show RUN``: a Run with its Attempts and cancellation dispatch."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

import msgspec

from edge_runtime import operations
from edge_runtime.cli.common import (
    LOCAL_STORES, READ, add_json_flag, add_run_command, format_ms, open_run, present, print_json, printable,
    run_slot_zone, write_cwd_and_env,
)
from edge_runtime.cli.notify import outbox_line
from edge_runtime.contract.durations import format_duration
from edge_runtime.contract.redaction import store_redactor
from edge_runtime.contract.runs import ACTIVE_ATTEMPT_STATUSES, DEFAULT_RETRY_DELAY_MS, EVENT_CANCEL_ESCAPED, RunStatus


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    add_json_flag(add_run_command(subparsers, "show", run, stores, help=help_text))


def run(args: argparse.Namespace) -> int:
    with open_run(args, READ) as store:
        repository = store.runs
        # A secret's value is never shown, even where a Run's own command, variable or reason repeats it.
        detail = operations.masked_detail(store, args.run_id)
        escaped = {} if args.json else {
            e.attempt_id: e.payload for e in repository.events(args.run_id) if e.type == EVENT_CANCEL_ESCAPED
        }
        authority = {} if args.json else _authority(store, detail)
        slot_zone = None if args.json or detail.schedule_id is msgspec.UNSET else run_slot_zone(store, detail.schedule_id)
        notifications = getattr(store, "notifications", None)
        sent = [] if notifications is None else notifications.list_outbox(run_id=args.run_id, limit=100)
        redactor = store_redactor(store) if sent else None
    if args.json:
        if sent:  # the Run's notifications (docs/notifications.md), beside the contract's fields
            print_json({**msgspec.to_builtins(detail), "notifications": msgspec.to_builtins(sent)}, redactor)
        else:
            print_json(detail)
        return 0
    out = sys.stdout
    out.write(f"run        {detail.id}\n")
    out.write(f"name       {present(detail.name)}\n")
    if detail.command is not msgspec.UNSET:
        out.write(f"command    {printable(shlex.join(detail.command))}\n")
    out.write(f"status     {detail.status.value}\n")
    out.write(f"created    {format_ms(detail.created_at_ms)}\n")
    out.write(f"finished   {format_ms(detail.finished_at_ms)}\n")
    if detail.schedule_id is not msgspec.UNSET:
        out.write(f"schedule   {detail.schedule_id}  slot {format_ms(detail.scheduled_for_ms, slot_zone)}\n")
    if detail.timeout_ms is not msgspec.UNSET:
        timeout = detail.timeout_ms
        out.write(f"timeout    {format_duration(timeout) if timeout % 1000 == 0 else f'{timeout}ms'}\n")
    write_cwd_and_env(out, detail)
    if detail.retries is not msgspec.UNSET:
        delay = DEFAULT_RETRY_DELAY_MS if detail.retry_delay_ms is msgspec.UNSET else detail.retry_delay_ms
        out.write(f"retries    {detail.retries} (first after {format_duration(delay)}, doubling)\n")
    if detail.retry_at_ms is not msgspec.UNSET and detail.status is RunStatus.RETRY_WAIT:
        out.write(f"retry at   {format_ms(detail.retry_at_ms)}\n")
    if detail.cancel_requested_at_ms is not msgspec.UNSET:
        out.write(f"cancel     requested {format_ms(detail.cancel_requested_at_ms)} ({present(detail.cancel_reason, 'no reason')})\n")
    for attempt in detail.attempts:
        out.write(
            f"attempt {attempt.attempt}  {attempt.id}  {attempt.status.value}  pid={present(attempt.pid)}  "
            f"exit={present(attempt.exit_code)}  reason={present(attempt.end_reason)}\n"
        )
        if attempt.id in escaped:
            # Cancel signals the Attempt's process group; these had left it (setsid) when it was sent.
            found = escaped[attempt.id]
            out.write(f"  not signalled: {found['count']} process(es) that had left the group at cancel time, "
                      f"pids {' '.join(map(str, found['pids']))}\n")
        for line in authority.get(attempt.id, ()):
            out.write(f"  {line}\n")
    dispatch = detail.dispatch
    if dispatch is msgspec.UNSET:
        out.write("dispatch   none\n")
    else:
        out.write(
            f"dispatch   {dispatch.status.value}  version={dispatch.version}  count={dispatch.dispatch_count}  "
            f"last={present(dispatch.last_result)}\n"
        )
    for record in sent:
        out.write(f"notify     {redactor.text(outbox_line(record))}\n")
    return 0


def _authority(store: Any, detail: Any) -> dict[str, list[str]]:
    """For each active Attempt: its Run Lease's state and expiry, and its worker session's state,
    by the store's time (``expired`` means only that the authority lapsed, never that a process
    stopped)."""
    lines: dict[str, list[str]] = {}
    active = [a for a in detail.attempts if a.status in ACTIVE_ATTEMPT_STATUSES]
    if not active:
        return lines
    now = store.now_ms()
    for attempt in active:
        lease = store.leases.find_lease(attempt.id)
        if lease is None:
            lines[attempt.id] = ["run lease  none"]
            continue
        state = "expired" if lease.status.value == "leased" and lease.expires_at_ms <= now else "live" \
            if lease.status.value == "leased" else lease.status.value
        found = [f"run lease  {lease.status.value} ({state})  worker={printable(lease.worker_id)}  "
                 f"expires {format_ms(lease.expires_at_ms)}"]
        session = store.leases.find_session(lease.worker_id)
        if session is None:
            found.append(f"worker     {printable(lease.worker_id)}  no session")
        else:
            lapsed = session.lease_expires_at_ms <= now
            current = session.generation == lease.session_generation
            found.append(f"worker     {printable(lease.worker_id)}  session {session.status.value}"
                         f"{' (expired)' if lapsed else ''}{'' if current else ' (a newer session)'}  "
                         f"expires {format_ms(session.lease_expires_at_ms)}")
        lines[attempt.id] = found
    return lines
