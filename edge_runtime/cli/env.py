"""``edge-runtime env set NAME [VALUE] [--secret] [--stdin] | list [--json] | remove NAME``: the
shared variables every Run's Attempts get (docs/environment.md). A secret's value is never printed.

A value given as an argument is in the process list (``/proc/PID/cmdline``) while the command
runs, where every local user can read it: :func:`read_value` takes it from stdin (``--stdin``) or
asks for it on the terminal without echo instead, and warns when a secret came as an argument.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from edge_runtime.cli.common import (
    CREATE, LOCAL_STORES, READ, WRITE, add_json_flag, present, print_json, read_hidden_line,
)
from edge_runtime.contract.environment import MAX_VALUE_LENGTH, InvalidVariableError, VariableError, variable_problem
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.redaction import MASK, MIN_SECRET_LENGTH, secret_parts


class ValueEntryError(EdgeRuntimeError, code="VALUE_ENTRY"):
    """The value could not be read from the terminal."""


#: What ``env set --secret VALUE`` says on stderr (the value is stored all the same).
ARGV_SECRET_WARNING = ("Warning: a value given as an argument is visible to every local user in the process list "
                       "(/proc/PID/cmdline) while the command runs; use --stdin, or leave VALUE out to be asked "
                       "for it\n")
#: The most bytes ``--stdin`` reads: MAX_VALUE_LENGTH characters of 4 bytes, and a line end.
_MAX_STDIN_BYTES = MAX_VALUE_LENGTH * 4 + 2


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = subparsers.add_parser(
        "env", help=help_text,
        description="Shared variables, passed to every Run; a Run's own --env overrides them. A secret's value "
        "is stored in the database (mode 0600) and never shown. See docs/environment.md.",
    )
    commands = parser.add_subparsers(dest="env_command", metavar="COMMAND", required=True)
    setter = commands.add_parser(
        "set", help="create or replace a variable",
        description="VALUE given here is visible to every local user in the process list while the command runs: "
        "for a secret, leave it out to be asked for it (no echo), or pipe it in with --stdin.")
    setter.add_argument("name", metavar="NAME")
    add_value_arguments(setter)
    setter.add_argument("--secret", action="store_true",
                        help=f"never show its value and mask it wherever shown (at least {MIN_SECRET_LENGTH} "
                        f"characters)")
    add_json_flag(setter)
    setter.set_defaults(usage_error=setter.error)
    listing = commands.add_parser("list", help="list the variables (secrets without their value)")
    add_json_flag(listing)
    remover = commands.add_parser("remove", help="remove a variable")
    remover.add_argument("name", metavar="NAME")
    add_json_flag(remover)
    parser.set_defaults(run=run, stores=stores)


def add_value_arguments(parser: argparse.ArgumentParser) -> None:
    """The optional ``VALUE`` and ``--stdin`` of a command that stores a variable's value."""
    parser.add_argument("value", metavar="VALUE", nargs="?",
                        help="the value (visible to every local user while the command runs: see --stdin)")
    parser.add_argument("--stdin", action="store_true",
                        help="read the value from stdin, to its end (one final line end dropped; may span lines)")


def read_value(args: argparse.Namespace, *, usage_error: Callable[[str], NoReturn]) -> str:
    """The value ``args`` (with :func:`add_value_arguments`' ``value`` and ``stdin``, ``name``,
    and ``secret``) gives: the argument, else stdin to its end with ``--stdin`` (one final line end
    dropped: ``echo "$V" |`` gives ``$V``), else one line asked on the terminal without echo. Without
    VALUE, ``--stdin`` or a terminal it is a usage error: an empty value read from a closed stdin is
    never stored by mistake. A secret given as an argument is stored with a warning on stderr.

    Raises:
        InvalidVariableError: stdin holds more than a value may, or not UTF-8.
        ValueEntryError: the terminal's echo cannot be turned off.
    """
    secret = getattr(args, "secret", False)
    if args.value is not None:
        if args.stdin:
            usage_error("give VALUE or --stdin, not both")
        if secret:
            sys.stderr.write(ARGV_SECRET_WARNING)
        return args.value
    if args.stdin:
        data = sys.stdin.buffer.read(_MAX_STDIN_BYTES + 1)
        if len(data) > _MAX_STDIN_BYTES:
            raise InvalidVariableError(f"stdin holds more than a value may (at most {MAX_VALUE_LENGTH} characters); "
                                       f"nothing stored")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidVariableError("the value on stdin is not valid UTF-8; nothing stored") from None
        return text[:-1].removesuffix("\r") if text.endswith("\n") else text
    if not sys.stdin.isatty():
        usage_error("VALUE missing: give --stdin to read it from stdin, or run on a terminal to be asked for it")
    return read_hidden_line(f"Value of {args.name}{' (secret)' if secret else ''}: ", MAX_VALUE_LENGTH, ValueEntryError)


def _warn_short_parts(name: str, value: str) -> None:
    """A secret's parts shorter than the minimum are not masked on their own: say how many."""
    parts = secret_parts(value)
    short = sum(len(part) < MIN_SECRET_LENGTH for part in parts)
    if short:
        sys.stderr.write(f"Warning: {short} of the {len(parts)} parts of {name} (separated by & or line ends) "
                         f"{'is' if short == 1 else 'are'} shorter than {MIN_SECRET_LENGTH} characters: such a part "
                         f"is masked within the whole value, not where a task prints it alone\n")


def run(args: argparse.Namespace) -> int:
    if args.env_command == "set":
        problem = variable_problem(args.name, "")
        if problem is not None:  # before a value is asked for
            raise InvalidVariableError(problem)
        value = read_value(args, usage_error=args.usage_error)
    access = {"set": CREATE, "list": READ, "remove": WRITE}[args.env_command]
    with args.stores.open(args, access) as store:
        environment = store.environment
        if environment is None:
            raise VariableError("this store keeps no shared variables")
        if args.env_command == "set":
            record = environment.set(args.name, value, secret=args.secret)
            if args.secret:
                _warn_short_parts(record.name, value)
            if args.json:
                print_json(record)
            else:
                sys.stdout.write(f"{record.name} set{' (secret)' if record.secret else ''}\n")
        elif args.env_command == "remove":
            environment.remove(args.name)
            if args.json:
                print_json({"removed": args.name})
            else:
                sys.stdout.write(f"{args.name} removed\n")
        else:
            records = environment.list()
            if args.json:
                print_json(records)
            else:
                for record in records:
                    sys.stdout.write(f"{record.name}={_shown(record)}\n")
    return 0


def _shown(record: Any) -> str:
    if not record.secret:
        return present(record.value)
    if record.too_short is True:
        return (f"{MASK} (secret; shorter than {MIN_SECRET_LENGTH} characters, so masked wherever those characters "
                f"appear: set it again with a longer value)")
    return f"{MASK} (secret)"
