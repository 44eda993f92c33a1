"""``edge-runtime dispatch show RUN`` and ``dispatch rearm RUN --expected-version V``."""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any

from edge_runtime.cli.common import (
    LOCAL_STORES, READ, WRITE, add_json_flag, add_run_command, format_ms, open_run, present, print_json, wake_service,
)


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = subparsers.add_parser("dispatch", help=help_text)
    actions = parser.add_subparsers(dest="dispatch_action", metavar="ACTION", required=True,
                                    parser_class=type(parser))
    show = add_run_command(actions, "show", run_show, stores, help="show the dispatch record (never the lease token)")
    add_json_flag(show)
    rearm = add_run_command(
        actions, "rearm", run_rearm, stores,
        help="re-arm a blocked dispatch (exact version compare-and-set)",
        description="Move a blocked dispatch back to retry_wait, due now, if and only if it is still "
        "at --expected-version (see `dispatch show`).",
    )
    rearm.add_argument("--expected-version", type=int, required=True, metavar="V")
    add_json_flag(rearm)


def run_show(args: argparse.Namespace) -> int:
    with open_run(args, READ) as store:
        record = store.dispatches.find_by_run_id(args.run_id)
        if record is None:
            store.runs.get(args.run_id)  # RunNotFoundError when there is no such Run
    if record is None:
        if args.json:
            print_json(None)
            return 0
        sys.stdout.write(f"run {args.run_id} has no cancellation dispatch\n")
        return 0
    if args.json:
        print_json(record)
        return 0
    for label, value in (
        ("run", record.run_id),
        ("attempt", record.attempt_id),
        ("status", record.status.value),
        ("version", record.version),
        ("dispatches", record.dispatch_count),
        ("next attempt", format_ms(record.next_attempt_at_ms)),
        ("lease owner", present(record.lease_owner)),
        ("lease expires", format_ms(record.lease_expires_at_ms)),
        ("last result", present(record.last_result)),
        ("last dispatched", format_ms(record.last_dispatched_at_ms)),
        ("updated", format_ms(record.updated_at_ms)),
    ):
        sys.stdout.write(f"{label:16} {value}\n")
    return 0


def run_rearm(args: argparse.Namespace) -> int:
    with open_run(args, WRITE) as store:
        outcome = store.dispatches.rearm(args.run_id, args.expected_version, event_id=str(uuid.uuid4()), actor_id="cli")
        wake_service(store.wake_workers)
    if args.json:
        print_json(outcome)
    else:
        sys.stdout.write(
            f"dispatch of run {args.run_id} re-armed: retry_wait at version {outcome.dispatch.version}, due now\n"
        )
    return 0
