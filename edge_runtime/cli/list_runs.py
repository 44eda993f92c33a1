"""``edge-runtime list``: the newest Runs."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

import msgspec

from edge_runtime.cli.common import LOCAL_STORES, READ, add_json_flag, format_ms, present, print_json, printable
from edge_runtime.contract.durations import format_duration
from edge_runtime.contract.redaction import store_redactor
from edge_runtime.contract.runs import RunStatus, short_id
from edge_runtime.operations import resolve_schedule_id


def _positive(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number between 1 and 10000, got {text!r}") from None
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError("must be between 1 and 10000")
    return value


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = subparsers.add_parser("list", help=help_text)
    parser.add_argument("--status", choices=[s.value for s in RunStatus], help="only Runs in this status")
    parser.add_argument("--limit", type=_positive, default=50, help="at most this many (default 50)")
    parser.add_argument("--name", help="only Runs with this name")
    parser.add_argument("--schedule", metavar="ID", help="only Runs fired by this schedule (its id, or a unique "
                        "prefix or suffix of it of 12 characters at most)")
    add_json_flag(parser)
    parser.set_defaults(run=run, stores=stores)


def run(args: argparse.Namespace) -> int:
    with args.stores.open(args, READ) as store:
        schedule_id = None if args.schedule is None else resolve_schedule_id(store, args.schedule)
        runs = store.runs.list_runs(
            limit=args.limit, status=None if args.status is None else RunStatus(args.status), name=args.name,
            schedule_id=schedule_id,
        )
        redactor = store_redactor(store)
        if args.json:
            print_json(runs, redactor)
            return 0
        runs = redactor.records(runs)  # before a command is quoted or a column cut
        # The last Attempt gives the exit code; the first one's start, the duration.
        attempts = {record.id: store.runs.attempts(record.id) for record in runs}
    sys.stdout.write(f"{'RUN':8}  {'STATUS':10}  {'NAME':16}  {'COMMAND':32}  {'EXIT':>4}  {'TOOK':>8}  CREATED\n")
    for record in runs:
        tried = attempts[record.id]
        exit_code = tried[-1].exit_code if tried and tried[-1].exit_code is not msgspec.UNSET else "-"
        started = tried[0].started_at_ms if tried else msgspec.UNSET
        took = ("-" if started is msgspec.UNSET or record.finished_at_ms is msgspec.UNSET
                else _duration(record.finished_at_ms - started))
        command = "" if record.command is msgspec.UNSET else printable(shlex.join(record.command))
        sys.stdout.write(
            f"{short_id(record.id):8}  {record.status.value:10}  {_cut(present(record.name, ''), 16):16}  "
            f"{_cut(command, 32):32}  {exit_code!s:>4}  {took:>8}  {format_ms(record.created_at_ms)}\n"
        )
    return 0


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _duration(ms: int) -> str:
    if ms < 1000:
        return f"{max(ms, 0)}ms"
    seconds = ms // 1000
    return format_duration(seconds * 1000)
