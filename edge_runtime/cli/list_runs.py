"""``edge-runtime list``: the newest Runs."""

from __future__ import annotations

import argparse
import sys

from edge_runtime.cli.common import add_json_flag, format_ms, open_read_only, present, print_json
from edge_runtime.contract.runs import RunStatus
from edge_runtime.local.runs import LocalRunRepository


def _positive(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError("must be between 1 and 10000")
    return value


def register(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    parser = subparsers.add_parser("list", help=help_text)
    parser.add_argument("--status", choices=[s.value for s in RunStatus], help="only Runs in this status")
    parser.add_argument("--limit", type=_positive, default=50, help="at most this many (default 50)")
    add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with open_read_only(args) as db:
        runs = LocalRunRepository(db).list_runs(
            limit=args.limit, status=None if args.status is None else RunStatus(args.status)
        )
    if args.json:
        print_json(runs)
        return 0
    sys.stdout.write(f"{'RUN':36}  {'STATUS':10}  {'CREATED':24}  NAME\n")
    for record in runs:
        sys.stdout.write(
            f"{record.id:36}  {record.status.value:10}  {format_ms(record.created_at_ms):24}  {present(record.name, '')}\n"
        )
    return 0
