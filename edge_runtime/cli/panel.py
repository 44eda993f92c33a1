"""``edge-runtime panel password [--stdin]``: set the web panel's password (docs/panel.md);
``edge-runtime panel app add|list|remove``: the apps whose tokens open the OpenAPI (docs/qinglong.md).

From a terminal the password is asked twice without echo; otherwise (or with ``--stdin``) one
line is read from stdin (its line end dropped). Only a salted slow hash is stored, and every
panel session ends. There is no default password and no other way to set one: the panel refuses
to start without it.

``panel app add NAME --scopes crons,envs,logs [--token-ttl D]`` prints one JSON object with the
app's ``client_id`` and ``client_secret``: the secret is shown this once (only its digest is
kept). ``panel app remove NAME`` ends the app and every token it was given.
"""

from __future__ import annotations

import argparse
import sys

from edge_runtime.cli.common import add_json_flag, format_ms, print_json, printable, read_hidden_line
from edge_runtime.cli.local_database import open_existing, open_or_create, open_read_only
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.panel_apps import AppScope


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
    password.set_defaults(run=run)
    app = commands.add_parser(
        "app", help="the apps whose tokens open the OpenAPI (/open/...) for other programs",
        description="Apps are the credentials QingLong's clients use (docs/qinglong.md).")
    actions = app.add_subparsers(dest="app_command", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="add an app and print its client_id and client_secret (shown once)")
    add.add_argument("name", metavar="NAME", help="the app's name (letters, digits, '_', '.', '-')")
    add.add_argument("--scopes", required=True, metavar="S,S",
                     help=f"what its tokens open, comma-separated: {', '.join(s.value for s in AppScope)}")
    add.add_argument("--token-ttl", metavar="D", help="how long a token it is given lives (1m..365d; default 30d)")
    add_json_flag(add)  # it prints its one JSON object either way; --json makes its errors JSON too
    add.set_defaults(run=run_app)
    listing = actions.add_parser("list", help="list the apps (never a secret)")
    add_json_flag(listing)
    listing.set_defaults(run=run_app)
    remove = actions.add_parser("remove", help="remove an app: its tokens open nothing from now on")
    remove.add_argument("name", metavar="NAME")
    add_json_flag(remove)
    remove.set_defaults(run=run_app)


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


def run_app(args: argparse.Namespace) -> int:
    from edge_runtime.contract.durations import format_duration, parse_duration_ms
    from edge_runtime.contract.panel_apps import (
        DEFAULT_TOKEN_TTL_MS, check_app_name, check_token_ttl_ms, parse_scopes,
    )
    from edge_runtime.local.panel_apps import LocalPanelApps

    if args.app_command == "add":
        # Checked whole before the database is touched.
        name = check_app_name(args.name)
        scopes = parse_scopes(args.scopes)
        ttl_ms = check_token_ttl_ms(DEFAULT_TOKEN_TTL_MS if args.token_ttl is None else parse_duration_ms(args.token_ttl))
        with open_or_create(args) as db:
            created = LocalPanelApps(db).add(name, scopes, ttl_ms)
        print_json(created)
        sys.stderr.write("The client_secret is shown this once: only its digest is kept.\n")
        return 0
    if args.app_command == "list":
        with open_read_only(args) as db:
            apps = LocalPanelApps(db).list()
        if args.json:
            print_json(apps)
            return 0
        for app in apps:
            sys.stdout.write(f"{printable(app.name)}  client_id={app.client_id}  scopes={','.join(app.scopes)}  "
                             f"token_ttl={format_duration(app.token_ttl_ms)}  live_tokens={app.live_tokens}  "
                             f"added={format_ms(app.created_at_ms)}\n")
        return 0
    with open_existing(args) as db:
        LocalPanelApps(db).remove(args.name)
    if args.json:
        print_json({"removed": args.name})
    else:
        sys.stdout.write(f"app {printable(args.name)} removed; its tokens open nothing from now on\n")
    return 0
