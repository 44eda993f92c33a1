"""Helpers shared by the CLI commands: opening the store, printing, waking the service.

The user commands (submit, cancel, show, list, events, logs, dispatch) are written against the
service's ``Store`` port (edge_runtime/contract/ports.py) and get their store from ``args.stores``,
which their ``register`` sets: ``LOCAL_STORES`` (the SQLite file at ``--db``) here, a PostgreSQL
opener in ``edge-runtime-cluster``. One implementation of each command, two composition roots.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from edge_runtime.cli.db_path import ensure_parent
from edge_runtime.local.clock import SystemClock
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.errors import MigrationError
from edge_runtime.local.guarded_clock import GuardedClock, watermark_ms

_json_encoder = msgspec.json.Encoder()


def open_read_only(args: argparse.Namespace) -> LocalDatabase:
    """Open the database for a read command: never created, switched to WAL nor migrated.

    A database an older release wrote (migrations pending) is refused with what to run; a file
    that is not an edge-runtime database is refused and left byte-for-byte as it was.
    """
    db = open_database(args.db, create=False, read_only=True)
    if db.pending:
        db.close()
        raise MigrationError(
            f"database {args.db} needs migration {', '.join(db.pending)} (written by an older release); "
            f"run `edge-runtime migrate` first"
        )
    return db


def open_existing(args: argparse.Namespace) -> LocalDatabase:
    """Open (and migrate) the database for a write command that must not create one (cancel, rearm)."""
    return _open_guarded_with_clock(args.db, create=False)[0]


def open_or_create(args: argparse.Namespace) -> LocalDatabase:
    """Open the database, creating it (and its directory) if needed."""
    return _open_guarded_with_clock(args.db, create=True, make_parent=True)[0]


def _open_guarded_with_clock(path: str, *, create: bool, make_parent: bool = False) -> tuple[LocalDatabase, GuardedClock]:
    # A router's clock may sit at 1970 until NTP syncs: writes from the CLI never take a time
    # below the service's persisted watermark (the service itself guards against every stored
    # time; see edge_runtime/local/guarded_clock.py).
    if make_parent:
        ensure_parent(path)
    clock = GuardedClock(SystemClock())
    db = open_database(path, clock=clock, create=create)
    try:
        clock.raise_floor(watermark_ms(db))
    except BaseException:
        db.close()
        raise
    return db, clock


#: How a user command uses its store: READ never creates, switches to WAL nor migrates it; WRITE
#: needs an existing one (migrated on Local); CREATE may create it.
READ, WRITE, CREATE = "read", "write", "create"


class LocalStores:
    """The edge CLI's composition root of the user commands: the Local store at ``--db``."""

    @staticmethod
    def open(args: argparse.Namespace, access: str) -> contextlib.closing:
        """The ``LocalStore`` of ``args.db`` for ``access``, closed when the ``with`` block ends."""
        from edge_runtime.local.store import LocalStore

        if access == READ:
            db, clock = open_read_only(args), SystemClock()
        else:
            db, clock = _open_guarded_with_clock(args.db, create=access == CREATE, make_parent=access == CREATE)
        return contextlib.closing(LocalStore(db, args.db, clock))


LOCAL_STORES = LocalStores()


def add_run_argument(parser: argparse.ArgumentParser) -> None:
    """The positional Run id of the commands about one Run."""
    parser.add_argument("run_id", metavar="RUN", help="the Run id")


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (camelCase contract structs)")


def print_json(value: Any) -> None:
    sys.stdout.write(_json_encoder.encode(value).decode() + "\n")


def format_ms(value: Any) -> str:
    """A millisecond timestamp as UTC ISO-8601, or '-' when absent."""
    if not isinstance(value, int) or isinstance(value, bool):
        return "-"
    return dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: C0 controls, DEL and C1 controls: a stored name or reason could otherwise move the cursor,
#: rewrite the terminal's title or hide text when printed. Escaped as JSON escapes them.
_CONTROL_ESCAPES = {c: f"\\u{c:04x}" for c in (*range(0x20), *range(0x7F, 0xA0))} | {
    0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"
}


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\u001b``), for plain-text output."""
    return text.translate(_CONTROL_ESCAPES)


def present(value: Any, default: str = "-") -> str:
    return default if value is msgspec.UNSET or value is None else printable(str(value))


def wake_service(wake: Callable[[], None]) -> None:
    """Tell a running service that new work was committed, so it acts now instead of at its next poll.

    Best effort by design: when no service runs, the committed work simply waits for one. It runs
    after the commit, so a failure is at most a warning: the command has succeeded either way.
    """
    try:
        wake()
    except (OSError, EdgeRuntimeError) as exc:
        sys.stderr.write(f"Warning: committed, but could not wake the service ({exc}); it acts at its next poll\n")
