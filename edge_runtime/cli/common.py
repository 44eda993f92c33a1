"""Helpers shared by the CLI commands: opening the database, printing, waking the service."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Any

import msgspec

from edge_runtime.cli.db_path import ensure_parent
from edge_runtime.local.clock import SystemClock
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.guarded_clock import GuardedClock, watermark_ms

_json_encoder = msgspec.json.Encoder()


def open_existing(args: argparse.Namespace) -> LocalDatabase:
    """Open the database for a command that must not create one (reads, cancel, rearm)."""
    return _open_guarded(args.db, create=False)


def open_or_create(args: argparse.Namespace) -> LocalDatabase:
    """Open the database, creating it (and its directory) if needed."""
    ensure_parent(args.db)
    return _open_guarded(args.db, create=True)


def _open_guarded(path: str, *, create: bool) -> LocalDatabase:
    # A router's clock may sit at 1970 until NTP syncs: writes from the CLI never take a time
    # below the service's persisted watermark (the service itself guards against every stored
    # time; see edge_runtime/local/guarded_clock.py).
    clock = GuardedClock(SystemClock())
    db = open_database(path, clock=clock, create=create)
    try:
        clock.raise_floor(watermark_ms(db))
    except BaseException:
        db.close()
        raise
    return db


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (camelCase contract structs)")


def print_json(value: Any) -> None:
    sys.stdout.write(_json_encoder.encode(value).decode() + "\n")


def format_ms(value: Any) -> str:
    """A millisecond timestamp as UTC ISO-8601, or '-' when absent."""
    if not isinstance(value, int) or isinstance(value, bool):
        return "-"
    return dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def present(value: Any, default: str = "-") -> str:
    return default if value is msgspec.UNSET or value is None else str(value)


def wake_service(db_path: str) -> None:
    """Tell a running service that new work was committed, so it acts now instead of at its next poll.

    Best effort by design: when no service runs, the committed work simply waits for one.
    """
    from edge_runtime.service.wake import poke

    poke(db_path)
