"""Parser assembly and the one place that turns errors into exit codes.

Only the module of the command being run is imported: ``--version`` and ``--help`` on a router
must not pay for apsw, msgspec and the service stack (the one-file artifact starts ~90 ms faster).
The other commands get placeholder parsers carrying the same help text, so ``--help`` still lists
them all and an unknown command is still refused by argparse.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Sequence

from edge_runtime import __version__
from edge_runtime.cli.db_path import (
    DB_ENV_VAR, DB_FILE_NAME, DEFAULT_STATE_HOME, default_db_path, require_trusted_database_directory,
)
from edge_runtime.contract.errors import EdgeRuntimeError

#: Exit codes: 0 success, 1 a runtime error (message on stderr), 2 bad usage (argparse's own).
EXIT_ERROR = 1
EXIT_USAGE = 2
#: Like a tool killed by SIGPIPE (128 + 13), without the traceback: ``list | head -1``.
EXIT_BROKEN_PIPE = 141

#: Command name -> (module under edge_runtime.cli, one-line help). The single source of each
#: command's help text: the module's ``register(subparsers, help_text)`` receives it.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("serve", "run the device service (executes Runs, delivers cancels, recovers after restarts)"),
    "submit": ("submit", "queue a command as a new Run and print its id"),
    "cancel": ("cancel", "request cancellation of a Run"),
    "show": ("show", "show a Run, its Attempts and its cancellation dispatch"),
    "list": ("list_runs", "list the newest Runs"),
    "events": ("events", "show a Run's event log"),
    "logs": ("logs", "print the captured output of a Run's Attempt"),
    "dispatch": ("dispatch", "inspect or re-arm a Run's cancellation dispatch"),
    "env": ("env", "set, list or remove the shared variables every Run gets (secrets never shown)"),
    "schedule": ("schedule", "add, list, show, pause, resume or remove schedules (cron)"),
    "migrate": ("migrate", "create the database and apply pending migrations"),
    "check": ("check", "check the database's integrity, migrations and readiness"),
    "panel": ("panel", "set the web panel's password"),
}
_GLOBAL_OPTIONS_WITH_VALUE = frozenset({"--db"})


#: The error code of bad usage, as ``--json`` reports it (exit code 2).
USAGE_ERROR_CODE = "USAGE"


class CliParser(argparse.ArgumentParser):
    #: Whether the command line asks for ``--json`` (set by ``main`` before parsing): then a usage
    #: error is the same one JSON object as any other error, with exit code 2.
    json_errors = False

    def error(self, message: str) -> None:
        # argparse prints the whole usage block; one line that says what to fix reads better in a
        # router's shell and in scripts that capture stderr.
        _report(CliParser.json_errors, USAGE_ERROR_CODE, f"{message} (try: {self.prog} --help)",
                plain=f"Error: {message} (try: {self.prog} --help)\n")
        raise SystemExit(EXIT_USAGE)


def wants_json(argv: Sequence[str]) -> bool:
    """Whether ``--json`` is among the options of ``argv`` (before a ``--``: what follows is a command)."""
    for token in argv:
        if token == "--":
            return False
        if token == "--json":
            return True
    return False


def _command_in(argv: Sequence[str]) -> str | None:
    """The command word of ``argv`` (the first non-option after the global options), if any."""
    tokens = iter(argv)
    for token in tokens:
        if token in _GLOBAL_OPTIONS_WITH_VALUE:
            next(tokens, None)
        elif not token.startswith("-"):
            return token
    return None


def build_parser(load: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The full parser; ``load`` names the commands whose modules are imported (default: all)."""
    load = set(COMMANDS) if load is None else set(load)
    parser = CliParser(
        prog="edge-runtime",
        description="QingLong edge runtime: run commands as durable Runs and cancel them reliably.",
    )
    parser.add_argument("--version", action="version", version=f"edge-runtime {__version__}")
    parser.add_argument(
        "--db",
        metavar="PATH",
        default=None,
        help=f"database file (default: ${DB_ENV_VAR}, else {DEFAULT_STATE_HOME}/edge-runtime/{DB_FILE_NAME})",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CliParser)
    for name, (module_name, help_text) in COMMANDS.items():
        if name in load:
            importlib.import_module(f"edge_runtime.cli.{module_name}").register(subparsers, help_text)
        else:
            subparsers.add_parser(name, help=help_text, add_help=False)
    for sub in subparsers.choices.values():
        _accept_db(sub)
    return parser


def _accept_db(parser: argparse.ArgumentParser) -> None:
    """``--db PATH`` after the command word too (``edge-runtime list --db x.db``), at every level;
    SUPPRESS keeps the global one's value when it is not given there."""
    if not any("--db" in action.option_strings for action in parser._actions):
        parser.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _accept_db(sub)


def require_utf8(what: str, text: str) -> None:
    """Python hands undecodable argument and environment bytes over as lone surrogates, which
    fail deep inside SQLite or msgspec; every id, name, command and path we use is UTF-8 text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
        sys.stderr.write(f"Error: {what} ({shown}) is not valid UTF-8\n")
        raise SystemExit(EXIT_USAGE) from None


def _quiet_broken_pipe() -> int:
    # The reader went away (``| head``): point stdout at /dev/null so the interpreter's own final
    # flush cannot raise again, and leave as a SIGPIPE'd tool would, without a word.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    for position, token in enumerate(argv, 1):
        require_utf8(f"argument {position}", token)
    command = _command_in(argv)
    CliParser.json_errors = wants_json(argv)
    if getattr(sys, "frozen", False):  # first: a one-file child must not outlive its launcher
        from edge_runtime.cli.launcher import bind_to_launcher

        bind_to_launcher(command)
    parser = build_parser(load=() if command is None else (command,))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    def run() -> int:
        if args.db is None:
            args.db = str(default_db_path())
            require_utf8("the database path", args.db)
            require_trusted_database_directory(args.db)  # a path from the environment, maybe another user's
        return args.run(args)

    # Also when --json stands where only the command parses it (`schedule edit ID --json`).
    return execute(run, json_errors=bool(getattr(args, "json", False)) or CliParser.json_errors)


def execute(run: Callable[[], int], *, json_errors: bool = False) -> int:
    """Run a command and turn its errors into the exit codes above (``edge-runtime-cluster`` runs
    the same user commands through it). With ``json_errors`` (the command's ``--json``) an error
    is one JSON object on stderr, ``{"error": {"code": ..., "message": ...}}``, same exit code."""
    try:
        code = run()
        sys.stdout.flush()  # a closed pipe surfaces here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except EdgeRuntimeError as exc:
        _report(json_errors, exc.code, str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        # Ctrl-C in `logs | slow-reader`: the reader is interrupted too, so the interpreter's final
        # flush of stdout would raise BrokenPipeError: drop what is left, as for a closed pipe.
        _quiet_broken_pipe()
        _report(json_errors, "INTERRUPTED", "interrupted")
        return 130


def _report(as_json: bool, code: str, message: str, *, plain: str | None = None) -> None:
    if as_json:
        import msgspec

        sys.stderr.write(msgspec.json.encode({"error": {"code": code, "message": message}}).decode() + "\n")
    else:
        sys.stderr.write(f"Error: {message} [{code}]\n" if plain is None else plain)
