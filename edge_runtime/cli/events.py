"""``edge-runtime events RUN``: the Run's append-only event log, in order."""

from __future__ import annotations

import argparse
import sys

import msgspec

from edge_runtime.cli.common import add_json_flag, add_run_argument, format_ms, open_read_only, print_json
from edge_runtime.local.runs import LocalRunRepository

_encode = msgspec.json.Encoder().encode


def register(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    parser = subparsers.add_parser("events", help=help_text)
    add_run_argument(parser)
    add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with open_read_only(args) as db:
        events = LocalRunRepository(db).events(args.run_id)
    if args.json:
        print_json(events)
        return 0
    for event in events:
        sys.stdout.write(
            f"{event.sequence:4}  {format_ms(event.created_at_ms)}  {event.type:28}  "
            f"{event.actor_type}:{event.actor_id}  {_encode(event.payload).decode()}\n"
        )
    return 0
