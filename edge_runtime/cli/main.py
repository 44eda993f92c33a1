"""Parser assembly and the one place that turns errors into exit codes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from edge_runtime import __version__
from edge_runtime.cli import cancel, check, dispatch, events, list_runs, logs, migrate, serve, show, submit
from edge_runtime.cli.db_path import DB_ENV_VAR, default_db_path
from edge_runtime.contract.errors import EdgeRuntimeError

#: Exit codes: 0 success, 1 a runtime error (message on stderr), 2 bad usage (argparse's own).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

COMMANDS: tuple[ModuleType, ...] = (serve, submit, cancel, show, list_runs, events, logs, dispatch, migrate, check)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        # argparse prints the whole usage block; one line that says what to fix reads better in a
        # router's shell and in scripts that capture stderr.
        sys.stderr.write(f"Error: {message} (try: {self.prog} --help)\n")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="edge-runtime",
        description="QingLong edge runtime: run commands as durable Runs and cancel them reliably.",
    )
    parser.add_argument("--version", action="version", version=f"edge-runtime {__version__}")
    parser.add_argument(
        "--db",
        metavar="PATH",
        default=None,
        help=f"database file (default: ${DB_ENV_VAR}, else {default_db_path(env={})})",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.db is None:
        args.db = str(default_db_path())
    try:
        return args.run(args)
    except EdgeRuntimeError as exc:
        sys.stderr.write(f"Error: {exc} [{exc.code}]\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("Error: interrupted\n")
        return 130
