"""``edge-runtime cancel RUN [--reason R]``: durably request that a Run be cancelled."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from edge_runtime import operations
from edge_runtime.cli.common import LOCAL_STORES, WRITE, add_json_flag, add_run_command, print_json
from edge_runtime.contract.redaction import store_redactor
from edge_runtime.contract.runs import CancelRunCommand, RunStatus


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = add_run_command(
        subparsers, "cancel", run, stores,
        help=help_text,
        description="Record a durable cancel request. The service delivers it to the Run's process "
        "group (SIGTERM, then SIGKILL after the grace period), even across restarts.",
    )
    parser.add_argument("--reason", help="why, kept with the Run")
    add_json_flag(parser)


def run(args: argparse.Namespace) -> int:
    CancelRunCommand(run_id=args.run_id, reason=msgspec.UNSET if args.reason is None else args.reason)  # before the store
    with args.stores.open(args, WRITE) as store:
        record = operations.cancel(store, args.run_id, reason=args.reason)
        redactor = store_redactor(store) if args.json else None
    if args.json:
        print_json(record, redactor)
    elif record.status is RunStatus.CANCELLED:
        sys.stdout.write(f"run {record.id} cancelled (it had not started)\n")
    else:
        sys.stdout.write(f"cancel requested for run {record.id} (status {record.status.value})\n")
    return 0
