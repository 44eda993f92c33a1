"""``edge-runtime logs RUN``: the captured output of a Run's Attempt."""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys

import msgspec

from edge_runtime.cli.common import add_run_argument, open_read_only
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.runs import RunStateConflictError
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.log_capture import open_checked


class LogUnreadableError(EdgeRuntimeError):
    """The Attempt's log path is not a readable regular file (a symlink, FIFO or directory)."""

    code = "LOG_UNREADABLE"


def register(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    parser = subparsers.add_parser("logs", help=help_text)
    add_run_argument(parser)
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
        # Never follows a symlink, never blocks on a FIFO, refuses anything but a regular file.
        fd = open_checked(attempt.log_path, os.O_RDONLY, stat.S_IFREG)
    except FileNotFoundError:
        raise RunStateConflictError(f"log file {attempt.log_path} of run {args.run_id} no longer exists (an empty log is not kept, "
                                    f"and log_total_max_bytes removes the oldest logs first)") from None
    except OSError as exc:
        raise LogUnreadableError(f"cannot read the log file {attempt.log_path}: {exc.strerror or exc}") from None
    with open(fd, "rb") as log:
        shutil.copyfileobj(log, sys.stdout.buffer)
    sys.stdout.flush()
    return 0
