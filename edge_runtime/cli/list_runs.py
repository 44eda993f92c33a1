"""``edge-runtime list``: the newest Runs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from edge_runtime.cli.common import LOCAL_STORES, READ, add_json_flag, format_ms, present, print_json
from edge_runtime.contract.runs import RunStatus


def _positive(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError("must be between 1 and 10000")
    return value


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = subparsers.add_parser("list", help=help_text)
    parser.add_argument("--status", choices=[s.value for s in RunStatus], help="only Runs in this status")
    parser.add_argument("--limit", type=_positive, default=50, help="at most this many (default 50)")
    add_json_flag(parser)
    parser.set_defaults(run=run, stores=stores)


def run(args: argparse.Namespace) -> int:
    with args.stores.open(args, READ) as store:
        runs = store.runs.list_runs(
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
