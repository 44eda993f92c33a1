"""``edge-runtime logs RUN``: the captured output of a Run's Attempt."""

from __future__ import annotations

import argparse
import shutil
import sys

import msgspec

from edge_runtime.cli.common import open_read_only
from edge_runtime.contract.runs import RunStateConflictError
from edge_runtime.local.runs import LocalRunRepository


def register(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    parser = subparsers.add_parser("logs", help=help_text)
    parser.add_argument("run_id", metavar="RUN", help="the Run id")
    parser.add_argument("--attempt", type=int, help="attempt number (default: the latest)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with open_read_only(args) as db:
        repository = LocalRunRepository(db)
        repository.get(args.run_id)
        attempts = repository.attempts(args.run_id)
    if args.attempt is not None:
        attempts = [a for a in attempts if a.attempt == args.attempt]
    if not attempts:
        raise RunStateConflictError(f"run {args.run_id} has no attempt{'' if args.attempt is None else f' {args.attempt}'} yet")
    attempt = attempts[-1]
    if attempt.log_path is msgspec.UNSET:
        raise RunStateConflictError(f"attempt {attempt.attempt} of run {args.run_id} has not started; no log yet")
    try:
        with open(attempt.log_path, "rb") as log:
            shutil.copyfileobj(log, sys.stdout.buffer)
    except FileNotFoundError:
        raise RunStateConflictError(f"log file {attempt.log_path} of run {args.run_id} no longer exists") from None
    sys.stdout.flush()
    return 0
