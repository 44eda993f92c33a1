"""``edge-runtime submit [--name N] [--env K=V] [--cwd DIR] -- CMD ARGS...``: queue a command as a new Run; print its id."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from edge_runtime import operations
from edge_runtime.cli.common import CREATE, LOCAL_STORES, add_json_flag, print_json, secret_values
from edge_runtime.contract.runs import MAX_RETRIES


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = subparsers.add_parser(
        "submit",
        help=help_text,
        description="Queue CMD ARGS... as a new Run. The command is executed directly (no shell); "
        "use `-- sh -c '...'` for shell syntax.",
    )
    parser.add_argument("--name", help="a short label shown by list and show")
    parser.add_argument("--timeout", metavar="D", help="cancel the Run (reason timeout) once it ran D (90s, 5m, 1h30m)")
    add_run_options(parser)
    add_json_flag(parser)
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run")
    parser.set_defaults(run=run, stores=stores)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """``--env K=V`` and ``--cwd DIR``, the same on ``submit`` and the schedule commands."""
    parser.add_argument("--env", action="append", metavar="K=V",
                        help="a variable of this task only, over the shared ones (repeatable)")
    parser.add_argument("--cwd", metavar="DIR", help="the working directory (default: the service's work_dir)")
    parser.add_argument("--retries", metavar="N", type=_retries,
                        help=f"start a new Attempt after a failed or lost one, at most N times (0..{MAX_RETRIES})")
    parser.add_argument("--retry-delay", metavar="D",
                        help="wait D before the first retry (default 10s); doubled for each next one, at most 1h")


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The given ``--env``/``--cwd``/``--retries``/``--retry-delay`` as command fields
    (``edge_runtime.operations.run_options``: the panel validates the same way).

    Raises:
        InvalidRunCommandError: a malformed ``K=V``, or ``--cwd`` is not a directory.
    """
    return operations.run_options(env=args.env, cwd=args.cwd, retries=args.retries, retry_delay=args.retry_delay)


def _retries(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number 0..{MAX_RETRIES}, got {text!r}") from None
    if not 0 <= value <= MAX_RETRIES:
        raise argparse.ArgumentTypeError(f"expected a whole number 0..{MAX_RETRIES}, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    # Validate before touching the store: a bad request must not even create the database file.
    command = operations.submit_command(argv, name=args.name, timeout=args.timeout, options=run_options(args))
    with args.stores.open(args, CREATE) as store:
        record = operations.submit(store, command, note_when_none=True)
        secrets = secret_values(store) if args.json else ()
    if args.json:
        print_json(record, secrets)
    else:
        sys.stdout.write(record.id + "\n")
    return 0
