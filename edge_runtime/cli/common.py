"""Helpers shared by the CLI commands: opening the store, printing, waking the service.

Nothing here imports the Local adapter at import time (the Local openers are in
``edge_runtime.cli.local_database``, imported when a Local store is opened): the user commands'
modules also serve ``edge-runtime-cluster``, which must never load it.

The user commands (submit, cancel, show, list, events, logs, dispatch, env) are written against the
service's ``Store`` port (edge_runtime/contract/ports.py) and get their store from ``args.stores``,
which their ``register`` sets: ``LOCAL_STORES`` (the SQLite file at ``--db``) here, a PostgreSQL
opener in ``edge-runtime-cluster``. One implementation of each command, two composition roots.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
# Shared with the web panel, so kept with the operations; imported here under their old names.
from edge_runtime.operations import NO_SERVICE_NOTE, printable, resolve_run_id, wake_service  # noqa: F401

if TYPE_CHECKING:
    from edge_runtime.contract.redaction import Redactor
    from edge_runtime.contract.time_zones import TimeZone

_json_encoder = msgspec.json.Encoder()


#: How a user command uses its store: READ never creates, switches to WAL nor migrates it; WRITE
#: needs an existing one (migrated on Local); CREATE may create it.
READ, WRITE, CREATE = "read", "write", "create"


class LocalStores:
    """The edge CLI's composition root of the user commands: the Local store at ``--db``."""

    #: The tasks of this store run on this host: a ``--user`` is checked against its users at once.
    users_here = True

    @staticmethod
    def open(args: argparse.Namespace, access: str) -> contextlib.closing:
        """The ``LocalStore`` of ``args.db`` for ``access``, closed when the ``with`` block ends."""
        from edge_runtime.cli.local_database import open_guarded_with_clock, open_read_only
        from edge_runtime.local.clock import SystemClock
        from edge_runtime.local.store import LocalStore

        if access == READ:
            db, clock = open_read_only(args), SystemClock()
        else:
            db, clock = open_guarded_with_clock(args.db, create=access == CREATE, make_parent=access == CREATE)
        return contextlib.closing(LocalStore(db, args.db, clock))

    @staticmethod
    def log_dir(args: argparse.Namespace) -> Path:
        """The Attempt logs' directory as ``serve`` resolves it (configuration, else beside ``--db``)."""
        from edge_runtime.service.config import load_config

        return load_config().resolved_log_dir(args.db)

    @staticmethod
    def scripts_dir(args: argparse.Namespace) -> Path:
        """The scripts directory as ``serve`` resolves it (configuration, else ``scripts`` beside ``--db``):
        where ``task`` commands find their scripts, ``import qinglong`` copies them and ``scripts scan``
        makes its commands relative to."""
        from edge_runtime.service.config import load_config

        return load_config().resolved_scripts_dir(args.db)


LOCAL_STORES = LocalStores()


def add_run_argument(parser: argparse.ArgumentParser) -> None:
    """The positional Run id of the commands about one Run."""
    parser.add_argument("run_id", metavar="RUN", help="the Run id, or a unique prefix or suffix of it (12 characters at most)")


def add_run_command(
    subparsers: argparse._SubParsersAction, name: str, run: Callable[[argparse.Namespace], int], stores: Any,
    **parser_options: Any,
) -> argparse.ArgumentParser:
    """The parser of a command about one Run: its positional ``RUN``, run by ``run`` on ``stores``.

    ``parser_options`` go to ``add_parser`` (``help``, ``description``); the caller adds the
    command's own options after ``RUN``.
    """
    parser = subparsers.add_parser(name, **parser_options)
    add_run_argument(parser)
    parser.set_defaults(run=run, stores=stores)
    return parser


@contextlib.contextmanager
def open_run(args: argparse.Namespace, access: str) -> Iterator[Any]:
    """The store of ``args`` opened for ``access``, with ``args.run_id`` made the full id of the
    Run it names (:func:`resolve_run_id`: a unique prefix or suffix is enough)."""
    with args.stores.open(args, access) as store:
        args.run_id = resolve_run_id(store, args.run_id)
        yield store


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (camelCase contract structs)")


def print_json(value: Any, redactor: Redactor | None = None) -> None:
    """``value`` as one line of JSON; with ``redactor``, its strings masked before they are encoded."""
    sys.stdout.write(json_line(value, redactor))


def print_done(args: Any, record: Any, text: str) -> int:
    """A change's answer: ``record`` as JSON with ``--json``, else the one line ``text``; exit 0."""
    if args.json:
        print_json(record)
    else:
        sys.stdout.write(text + "\n")
    return 0


def json_line(value: Any, redactor: Redactor | None = None) -> str:
    """What :func:`print_json` prints."""
    if redactor:
        value = redactor.value(msgspec.to_builtins(value))
    return _json_encoder.encode(value).decode() + "\n"


def read_hidden_line(prompt: str, max_chars: int, error: type[EdgeRuntimeError]) -> str:
    """One line from the terminal on stdin without echo, its line end dropped. Through ``stty``
    (busybox has it on a router), not getpass: that needs termios, an extension module more in the
    artifact for a prompt.

    Raises:
        ``error``: the echo cannot be turned off, or the line is longer than ``max_chars``.
    """
    import subprocess

    try:  # echo off before the prompt shows: what is typed after it is never shown
        subprocess.run(["stty", "-echo"], stdin=sys.stdin, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise error(f"cannot turn the terminal's echo off ({exc}); pipe it in with --stdin") from None
    sys.stderr.write(prompt)
    sys.stderr.flush()
    try:
        line = sys.stdin.readline(max_chars + 1)
    finally:
        subprocess.run(["stty", "echo"], stdin=sys.stdin, check=False)
        sys.stderr.write("\n")
    if len(line.rstrip("\r\n")) > max_chars:
        raise error(f"the line is longer than {max_chars} characters; nothing changed")
    return line.removesuffix("\n").removesuffix("\r")


def format_ms(value: Any, zone: TimeZone | None = None) -> str:
    """A millisecond timestamp as the clock of ``zone`` shows it, with its offset
    (``2026-12-03 08:00:00 +08:00``), or '-' when absent; ``--json`` keeps the milliseconds.

    The one rule of shown times: a schedule's times (its next and last fire, a waiting slot, the
    slot of a Run it fired) in the schedule's zone (``zone``); every other time in the device's
    zone (the default), read as ``serve`` and ``schedule add`` read it (``TZ``, ``/etc/TZ``,
    ``/etc/localtime``), so the CLI shows the zone the device's tasks print.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        return "-"
    offset = (zone or _device_zone(os.environ.get("TZ"))).utc_offset(value // 1000)
    local = dt.datetime.fromtimestamp(value / 1000, dt.timezone(dt.timedelta(seconds=offset)))
    sign, minutes = "-" if offset < 0 else "+", abs(offset) // 60
    return f"{local:%Y-%m-%d %H:%M:%S} {sign}{minutes // 60:02d}:{minutes % 60:02d}"


def schedule_zone(repository: Any, record: Any) -> TimeZone | None:
    """The zone a schedule's times are shown in: its own, or None (the device's) where this system
    cannot load it (an IANA zone whose zoneinfo was removed since); shown with its offset either
    way, so the instant is never in doubt."""
    from edge_runtime.contract.time_zones import InvalidTimeZoneError

    try:
        return repository.zone_of(record)
    except InvalidTimeZoneError:
        return None


def run_slot_zone(store: Any, schedule_id: str) -> TimeZone | None:
    """The zone a Run's slot is shown in: its schedule's, or None (the device's) once the
    schedule was removed."""
    from edge_runtime.contract.schedules import ScheduleNotFoundError

    try:
        return schedule_zone(store.schedules, store.schedules.get(schedule_id))
    except ScheduleNotFoundError:
        return None


@functools.cache
def _device_zone(tz: str | None) -> TimeZone:
    """The device's zone (one per ``$TZ``: the files it falls back to do not change while a command
    runs); where it cannot be read, the C library's local time, which is what a user's shell shows."""
    from edge_runtime.contract.device import device_time_zone
    from edge_runtime.contract.time_zones import InvalidTimeZoneError, ProcessLocalTime, time_zone

    try:
        return time_zone(device_time_zone())
    except InvalidTimeZoneError:
        return ProcessLocalTime()


def present(value: Any, default: str = "-") -> str:
    return default if value is msgspec.UNSET or value is None else printable(str(value))


def write_cwd_and_env(out: Any, record: Any) -> None:
    """The ``cwd``, ``user`` and ``env`` lines of ``show`` and ``schedule show``: the run options
    a Run and a schedule both keep (none for what was not given)."""
    if record.cwd is not msgspec.UNSET:
        out.write(f"cwd        {printable(record.cwd)}\n")
    if record.task_user is not msgspec.UNSET:
        out.write(f"user       {printable(record.task_user)}\n")
    for name, value in ({} if record.env is msgspec.UNSET else record.env).items():
        out.write(f"env        {name}={printable(value)}\n")


