"""``edge-runtime panel password [--stdin]``: set the web panel's password (docs/panel.md).

From a terminal it is asked twice without echo; otherwise (or with ``--stdin``) one line is read
from stdin (its line end dropped). Only a salted slow hash is stored, and every panel session
ends. There is no default password and no other way to set one: the panel refuses to start
without it.
"""

from __future__ import annotations

import argparse
import sys

from edge_runtime.cli.common import read_hidden_line
from edge_runtime.cli.local_database import open_or_create
from edge_runtime.contract.errors import EdgeRuntimeError


class PasswordEntryError(EdgeRuntimeError, code="PANEL_PASSWORD_ENTRY"):
    """The new password could not be read, or its two entries differ."""


#: More than any password: a line this long on stdin is not one.
_MAX_LINE = 4096


def register(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    parser = subparsers.add_parser("panel", help=help_text, description="The web panel served by `serve --panel-listen`.")
    commands = parser.add_subparsers(dest="panel_command", metavar="COMMAND", required=True)
    password = commands.add_parser(
        "password", help="set the panel's password (ends every panel session)",
        description="Asks twice from a terminal; reads one line from stdin otherwise.")
    password.add_argument("--stdin", action="store_true", help="read one line from stdin even on a terminal")
    parser.set_defaults(run=run)


def _read_password(force_stdin: bool) -> str:
    if not force_stdin and sys.stdin.isatty():
        first = _ask("New panel password: ")
        if _ask("Again: ") != first:
            raise PasswordEntryError("the two passwords differ; nothing changed")
        return first
    line = sys.stdin.readline(_MAX_LINE + 1)
    if len(line) > _MAX_LINE:
        raise PasswordEntryError(f"the line on stdin is longer than {_MAX_LINE} characters; nothing changed")
    return line[:-1] if line.endswith("\n") else line


def _ask(prompt: str) -> str:
    return read_hidden_line(prompt, _MAX_LINE, PasswordEntryError)


def run(args: argparse.Namespace) -> int:
    from edge_runtime.local.panel_auth import LocalPanelAuth, PanelPasswordInvalidError, password_problem

    password = _read_password(args.stdin)
    problem = password_problem(password)
    if problem is not None:  # before the database is touched
        raise PanelPasswordInvalidError(problem + "; nothing changed")
    with open_or_create(args) as db:
        LocalPanelAuth(db).set_password(password)
    sys.stdout.write("panel password set; every panel session ended\n")
    return 0
