"""``edge-runtime env``: the env entries every Run's Attempts get, as QingLong keeps its envs
(docs/environment.md). ``add``, ``set``, ``list``, ``edit``, ``enable``, ``disable``, ``pin``,
``unpin``, ``move``, ``remove``; each through ``edge_runtime.operations``. A secret's value is
never printed.

An entry is named by its id (digits only); a variable by its name (never starting with a digit),
so ``env remove`` takes either. A value given as an argument is in the process list
(``/proc/PID/cmdline``) while the command runs, where every local user can read it:
:func:`read_value` takes it from stdin (``--stdin``) or asks for it on the terminal without echo
instead, and warns when a secret came as an argument.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from edge_runtime import operations
from edge_runtime.cli.common import (
    CREATE, LOCAL_STORES, READ, WRITE, add_json_flag, present, print_done, print_json, read_hidden_line,
)
from edge_runtime.contract.env_entries import MAX_ENV_STRING_BYTES, NewEnvEntry
from edge_runtime.contract.environment import InvalidVariableError, name_problem
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.redaction import MASK, MIN_SECRET_LENGTH, secret_parts
from edge_runtime.operations import printable


class ValueEntryError(EdgeRuntimeError, code="VALUE_ENTRY"):
    """The value could not be read from the terminal."""


#: What ``env set|add|edit --secret VALUE`` says on stderr (the value is stored all the same).
ARGV_SECRET_WARNING = ("Warning: a value given as an argument is visible to every local user in the process list "
                       "(/proc/PID/cmdline) while the command runs; use --stdin, or leave VALUE out to be asked "
                       "for it\n")
#: The most bytes ``--stdin`` reads: a value as long as one environment string may be, and a line end.
_MAX_STDIN_BYTES = MAX_ENV_STRING_BYTES + 2
_ID = re.compile(r"[0-9]{1,16}")
_ACCESS = {"add": CREATE, "set": CREATE, "list": READ}
#: The commands that set a flag of entries, and what they print of each.
_FLAGS = {"enable": "enabled", "disable": "disabled", "pin": "pinned", "unpin": "unpinned"}


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = subparsers.add_parser(
        "env", help=help_text,
        description="Env entries, as QingLong keeps its envs: several entries may share a name (one account each); "
        "a Run gets each name once, the values of its enabled entries joined with & in list order (pinned first, "
        "then position); a Run's own --env overrides them. A secret's value is stored in the database (mode 0600) "
        "and never shown. See docs/environment.md.",
    )
    commands = parser.add_subparsers(dest="env_command", metavar="COMMAND", required=True)
    secret_help = (f"never show its value and mask it wherever shown (at least {MIN_SECRET_LENGTH} characters)")

    adder = commands.add_parser(
        "add", help="add an entry at the end of the list and print its id",
        description="VALUE given here is visible to every local user in the process list while the command runs: "
        "for a secret, leave it out to be asked for it (no echo), or pipe it in with --stdin.")
    adder.add_argument("name", metavar="NAME")
    add_value_arguments(adder)
    adder.add_argument("--secret", action="store_true", help=secret_help)
    adder.add_argument("--remarks", metavar="R", default="", help="free text shown with the entry")
    adder.add_argument("--label", metavar="L", action="append", default=[], help="a label (repeatable)")
    adder.add_argument("--disabled", action="store_true", help="add it disabled (a Run does not get its value)")
    add_json_flag(adder)
    adder.set_defaults(usage_error=adder.error)

    setter = commands.add_parser(
        "set", help="give a variable exactly this one value (its other entries are removed)",
        description="The name's first entry keeps its id, remarks and labels and gets VALUE (enabled); its other "
        "entries are removed; a name without entries gets a new one. VALUE given here is visible to every local "
        "user in the process list while the command runs: for a secret, leave it out to be asked for it (no "
        "echo), or pipe it in with --stdin.")
    setter.add_argument("name", metavar="NAME")
    add_value_arguments(setter)
    setter.add_argument("--secret", action="store_true", help=secret_help)
    add_json_flag(setter)
    setter.set_defaults(usage_error=setter.error)

    listing = commands.add_parser("list", help="list the entries in list order (secrets without their value)")
    listing.add_argument("--name", metavar="N", help="only the entries of this name")
    listing.add_argument("--search", metavar="TEXT",
                         help="only entries whose name, value or remarks contain TEXT (case ignored; a secret's "
                         "value is searched, never shown)")
    add_json_flag(listing)

    editor = commands.add_parser(
        "edit", help="change an entry",
        description="Changes what is given; the value only with VALUE or --stdin (VALUE is visible to every local "
        "user in the process list while the command runs: give a secret with --stdin).")
    editor.add_argument("entry_id", metavar="ID")
    editor.add_argument("value", metavar="VALUE", nargs="?", help="the new value")
    editor.add_argument("--stdin", action="store_true",
                        help="read the new value from stdin, to its end (one final line end dropped)")
    editor.add_argument("--name", metavar="N", help="the new name")
    editor.add_argument("--remarks", metavar="R", help="the new remarks")
    editor.add_argument("--label", metavar="L", action="append", help="a label (repeatable): replaces the labels")
    editor.add_argument("--no-labels", action="store_true", help="remove every label")
    editor.add_argument("--secret", action=argparse.BooleanOptionalAction, default=None,
                        help="make it secret (--no-secret: plain, its value shown again)")
    add_json_flag(editor)
    editor.set_defaults(usage_error=editor.error)

    for action, text in (("enable", "enable entries (a Run gets their values)"),
                         ("disable", "disable entries (a Run does not get their values)"),
                         ("pin", "pin entries (first in the list and in the joined value)"), ("unpin", "unpin entries")):
        flagger = commands.add_parser(action, help=text)
        flagger.add_argument("entry_ids", metavar="ID", nargs="+")
        add_json_flag(flagger)
        flagger.set_defaults(usage_error=flagger.error)

    mover = commands.add_parser("move", help="move an entry in the list (and so in the joined value)")
    mover.add_argument("entry_id", metavar="ID")
    where = mover.add_mutually_exclusive_group(required=True)
    where.add_argument("--before", metavar="ID", help="just before this entry")
    where.add_argument("--end", action="store_true", help="to the end of the list")
    add_json_flag(mover)
    mover.set_defaults(usage_error=mover.error)

    remover = commands.add_parser("remove", help="remove entries by id, or every entry of a name")
    remover.add_argument("targets", metavar="NAME|ID", nargs="+")
    add_json_flag(remover)
    remover.set_defaults(usage_error=remover.error)
    parser.set_defaults(run=run, stores=stores)


def add_value_arguments(parser: argparse.ArgumentParser) -> None:
    """The optional ``VALUE`` and ``--stdin`` of a command that stores a variable's value."""
    parser.add_argument("value", metavar="VALUE", nargs="?",
                        help="the value (visible to every local user while the command runs: see --stdin)")
    parser.add_argument("--stdin", action="store_true",
                        help="read the value from stdin, to its end (one final line end dropped; may span lines)")


def read_value(args: argparse.Namespace, *, usage_error: Callable[[str], NoReturn], ask: bool = True) -> str | None:
    """The value ``args`` (with :func:`add_value_arguments`' ``value`` and ``stdin``, ``name``,
    and ``secret``) gives: the argument, else stdin to its end with ``--stdin`` (one final line end
    dropped: ``echo "$V" |`` gives ``$V``), else one line asked on the terminal without echo (with
    ``ask``; without it, None: no new value). Without VALUE, ``--stdin`` or a terminal it is a
    usage error: an empty value read from a closed stdin is never stored by mistake. (A secret given
    as an argument is stored with a warning on stderr: :func:`_warn_secret`, once stored.)

    Raises:
        InvalidVariableError: stdin holds more than a value may, or not UTF-8.
        ValueEntryError: the terminal's echo cannot be turned off.
    """
    secret = getattr(args, "secret", False)
    if args.value is not None:
        if args.stdin:
            usage_error("give VALUE or --stdin, not both")
        return args.value
    if args.stdin:
        data = sys.stdin.buffer.read(_MAX_STDIN_BYTES + 1)
        if len(data) > _MAX_STDIN_BYTES:
            raise InvalidVariableError(f"stdin holds more than a value may (at most {MAX_ENV_STRING_BYTES} bytes); "
                                       f"nothing stored")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidVariableError("the value on stdin is not valid UTF-8; nothing stored") from None
        return text[:-1].removesuffix("\r") if text.endswith("\n") else text
    if not ask:
        return None
    if not sys.stdin.isatty():
        usage_error("VALUE missing: give --stdin to read it from stdin, or run on a terminal to be asked for it")
    return read_hidden_line(f"Value of {args.name}{' (secret)' if secret else ''}: ", MAX_ENV_STRING_BYTES,
                            ValueEntryError)


def _warn_secret(args: argparse.Namespace, name: str, value: str) -> None:
    """Once a secret value is stored: that it was visible in the process list when it came as an
    argument (after the store, so that a refusal is the only line on stderr), and how many of its
    parts are too short to be masked alone."""
    if args.value is not None:
        sys.stderr.write(ARGV_SECRET_WARNING)
    _warn_short_parts(name, value)


def _warn_short_parts(name: str, value: str) -> None:
    """A secret's parts shorter than the minimum are not masked on their own: say how many."""
    parts = secret_parts(value)
    short = sum(len(part) < MIN_SECRET_LENGTH for part in parts)
    if short:
        sys.stderr.write(f"Warning: {short} of the {len(parts)} parts of {name} (separated by & or line ends) "
                         f"{'is' if short == 1 else 'are'} shorter than {MIN_SECRET_LENGTH} characters: such a part "
                         f"is masked within the whole value, not where a task prints it alone\n")


def _entry_id(text: str, usage_error: Callable[[str], NoReturn]) -> int:
    if not _ID.fullmatch(text) or int(text) < 1:
        usage_error(f"{text!r} is not an entry id (digits, 1 or more: `env list` shows them)")
    return int(text)


def run(args: argparse.Namespace) -> int:
    command = args.env_command
    value = None
    usage_error = getattr(args, "usage_error", None)
    if command in ("add", "set"):
        problem = name_problem(args.name)
        if problem is not None:  # before a value is asked for
            raise InvalidVariableError(problem)
        value = read_value(args, usage_error=usage_error)
    elif command == "edit":
        if args.label is not None and args.no_labels:
            usage_error("give --label or --no-labels, not both")
        value = read_value(args, usage_error=usage_error, ask=False)
    # Every id is read before the store is opened: a malformed one is a usage error, nothing opened.
    entry_id = _entry_id(args.entry_id, usage_error) if command in ("edit", "move") else None
    ids = [_entry_id(text, usage_error) for text in args.entry_ids] if command in _FLAGS else []
    removed_name = None
    if command == "remove":
        # One name (a name never starts with a digit), or ids (digits only).
        if len(args.targets) == 1 and not args.targets[0][:1].isdigit():
            removed_name = args.targets[0]
        else:
            ids = [_entry_id(text, usage_error) for text in args.targets]
    before = _entry_id(args.before, usage_error) if command == "move" and not args.end else None
    with args.stores.open(args, _ACCESS.get(command, WRITE)) as store:
        if command == "add":
            (entry,) = operations.env_add(store, [NewEnvEntry(
                name=args.name, value=value, secret=args.secret, remarks=args.remarks, enabled=not args.disabled,
                labels=tuple(args.label))])
            if args.secret:
                _warn_secret(args, entry.name, value)  # type: ignore[arg-type]
            return print_done(args, entry, f"{entry.id}")
        if command == "set":
            entry = operations.env_set(store, args.name, value, secret=args.secret)  # type: ignore[arg-type]
            if args.secret:
                _warn_secret(args, entry.name, value)  # type: ignore[arg-type]
            return print_done(args, entry, f"{entry.name} set{' (secret)' if entry.secret else ''}")
        if command == "edit":
            entry = operations.env_update(store, entry_id, name=args.name, value=value, secret=args.secret,  # type: ignore[arg-type]
                                          remarks=args.remarks, labels=[] if args.no_labels else args.label)
            if entry.secret and value is not None:
                _warn_secret(args, entry.name, value)
            return print_done(args, entry, f"entry {entry.id} changed")
        if command in _FLAGS:
            entries = (operations.env_enable(store, ids, command == "enable") if command in ("enable", "disable")
                       else operations.env_pin(store, ids, command == "pin"))
            return print_done(args, entries, "\n".join(f"entry {e.id} {_FLAGS[command]}" for e in entries))
        if command == "move":
            entry = operations.env_move(store, entry_id, before=before)  # type: ignore[arg-type]
            where = 'to the end' if before is None else f'before {before}'
            return print_done(args, entry, f"entry {entry.id} moved {where}")
        if command == "remove" and removed_name is not None:
            removed = operations.env_remove_name(store, removed_name)
            return print_done(args, {"name": removed_name, "removed": removed}, f"{removed_name} removed")
        if command == "remove":
            removed = operations.env_remove(store, ids)
            return print_done(args, {"removed": removed}, "\n".join(f"entry {i} removed" for i in removed))
        records = operations.env_list(store, name=args.name, search=args.search)
        if args.json:
            print_json(records)
        else:
            for record in records:
                sys.stdout.write(_line(record) + "\n")
    return 0


def _line(record: Any) -> str:
    """One entry of ``env list``: id, name, enabled, pinned, labels, remarks, then the value (the
    longest, last) or that it is a secret."""
    labels = ",".join(printable(label) for label in record.labels) or "-"
    return (f"{record.id}  {record.name}  {'enabled' if record.enabled else 'disabled'}  "
            f"{'pinned' if record.pinned else '-'}  labels={labels}  remarks={printable(record.remarks)!r}  "
            f"value={_shown(record)}")


def _shown(record: Any) -> str:
    if not record.secret:
        return repr(present(record.value, ""))
    if record.too_short is True:
        return (f"{MASK} (secret; shorter than {MIN_SECRET_LENGTH} characters, so masked wherever those characters "
                f"appear: give it a longer value)")
    return f"{MASK} (secret)"
