"""``edge-runtime events RUN``: the Run's append-only event log, in order."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from edge_runtime.cli.common import LOCAL_STORES, READ, add_json_flag, add_run_command, format_ms, open_run, print_json
from edge_runtime.contract.redaction import store_redactor

#: Keys sorted: a payload reads the same whichever store kept it (PostgreSQL's jsonb reorders keys).
_encode = msgspec.json.Encoder(order="sorted").encode


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    add_json_flag(add_run_command(subparsers, "events", run, stores, help=help_text))


def run(args: argparse.Namespace) -> int:
    with open_run(args, READ) as store:
        events = store.runs.events(args.run_id)
        redactor = store_redactor(store)
    if args.json:
        print_json(events, redactor)
        return 0
    for event in events:
        # An event's Attempt is its own column, never repeated in the payload: shown here.
        attempt = "" if event.attempt_id is msgspec.UNSET else f"  attempt {event.attempt_id}"
        sys.stdout.write(
            f"{event.sequence:4}  {format_ms(event.created_at_ms)}  {event.type:28}  "
            f"{event.actor_type}:{event.actor_id}{attempt}  {_encode(redactor.value(event.payload)).decode()}\n"
        )
    return 0
