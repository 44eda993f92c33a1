"""The ``edge-runtime`` parser: the command table and its assembly.

Only the module of the command being run is imported: ``--help`` on a router must not pay for
apsw, msgspec and the service stack. The other commands get placeholder parsers carrying the same
help text, so ``--help`` still lists them all and an unknown command is still refused by argparse.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterable

from edge_runtime.cli.db_path import DB_ENV_VAR, DB_FILE_NAME, DEFAULT_STATE_HOME
from edge_runtime.cli.reporting import EXIT_USAGE, USAGE_ERROR_CODE, VERSION_TEXT, report_error

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
    "env": ("env", "the env entries every Run gets, as QingLong keeps its envs (secrets never shown)"),
    "schedule": ("schedule", "add, list, show, pause, resume or remove schedules (cron)"),
    "migrate": ("migrate", "create the database and apply pending migrations"),
    "check": ("check", "check the database's integrity, migrations and readiness"),
    "panel": ("panel", "set the web panel's password; add, list or remove the apps of its OpenAPI"),
    "import": ("import_qinglong", "bring crons, envs and scripts over from QingLong (a data folder or data.tgz)"),
    "scripts": ("scripts", "show the schedule each script's header asks for, and add them"),
    "subscription": ("subscription", "pull script repositories on a schedule and schedule their scripts"),
    "notify": ("notify", "notification channels, the default rule, the outbox, and a script's own message"),
}


class CliParser(argparse.ArgumentParser):
    #: Whether the command line asks for ``--json`` (set by ``main`` before parsing): then a usage
    #: error is the same one JSON object as any other error, with exit code 2.
    json_errors = False

    def error(self, message: str) -> None:
        # argparse prints the whole usage block; one line that says what to fix reads better in a
        # router's shell and in scripts that capture stderr.
        report_error(CliParser.json_errors, USAGE_ERROR_CODE, f"{message} (try: {self.prog} --help)",
                     plain=f"Error: {message} (try: {self.prog} --help)\n")
        raise SystemExit(EXIT_USAGE)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        # argparse reports an argument no parser took from the top-level parser, whose help is
        # not where the fix is: it is the chosen subcommand's (`logs RUN --bogus`).
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            _chosen(self, parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def _chosen(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest subcommand parser ``parsed`` went through (``parser`` itself when none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices.get(getattr(parsed, action.dest, None) or "")
            if sub is not None:
                return _chosen(sub, parsed)
    return parser


class DecliningParser(CliParser):
    """A parser that prints nothing and never exits: any usage error, ``--help`` or
    ``--version`` raises :class:`Declined` (the submit hand-off then lets the client's own run
    report it, in the client's terminal)."""

    def error(self, message: str) -> None:
        raise Declined(message)

    def exit(self, status: int = 0, message: str | None = None) -> None:
        raise Declined(message or f"exit {status}")

    def _print_message(self, message: str, file: object = None) -> None:
        pass  # nothing of the client's command line is printed by the service


class Declined(Exception):
    """A command line the submit hand-off does not take (see :class:`DecliningParser`)."""


def build_parser(load: Iterable[str] | None = None, parser_class: type[CliParser] | None = None) -> argparse.ArgumentParser:
    """The full parser; ``load`` names the commands whose modules are imported (default: all);
    ``parser_class`` replaces ``CliParser`` at every level (the submit hand-off's quiet parser)."""
    load = set(COMMANDS) if load is None else set(load)
    parser_class = CliParser if parser_class is None else parser_class
    parser = parser_class(
        prog="edge-runtime",
        description="QingLong edge runtime: run commands as durable Runs and cancel them reliably.",
    )
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    parser.add_argument(
        "--db",
        metavar="PATH",
        default=None,
        help=f"database file (default: ${DB_ENV_VAR}, else {DEFAULT_STATE_HOME}/edge-runtime/{DB_FILE_NAME})",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=parser_class)
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
