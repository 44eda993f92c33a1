"""The edge CLI's openers of the Local database (the SQLite file at ``--db``).

Kept apart from ``edge_runtime.cli.common`` and importing ``edge_runtime.local`` (and so apsw)
only inside each function: the user commands' modules are shared with ``edge-runtime-cluster``,
whose processes must never load the Local adapter (cluster-profile.md §1), and a command that
does not open the database (``--help``) does not pay for it on a router either.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from edge_runtime.cli.db_path import ensure_parent, require_trusted_database_directory

if TYPE_CHECKING:
    from edge_runtime.local.database import LocalDatabase
    from edge_runtime.local.guarded_clock import GuardedClock


def open_read_only(args: argparse.Namespace) -> LocalDatabase:
    """Open the database for a read command: never created, switched to WAL nor migrated.

    A database an older release wrote (migrations pending) is refused with what to run; a file
    that is not an edge-runtime database is refused and left byte-for-byte as it was.
    """
    from edge_runtime.local.database import open_database
    from edge_runtime.local.errors import MigrationError

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
    return open_guarded_with_clock(args.db, create=False)[0]


def open_or_create(args: argparse.Namespace) -> LocalDatabase:
    """Open the database, creating it (and its directory) if needed."""
    return open_guarded_with_clock(args.db, create=True, make_parent=True)[0]


def open_guarded_with_clock(path: str, *, create: bool,
                            make_parent: bool = False) -> tuple[LocalDatabase, GuardedClock]:
    """The database at ``path`` and the clock its writes use, floored at the stored watermark."""
    from edge_runtime.local.clock import SystemClock
    from edge_runtime.local.database import open_database
    from edge_runtime.local.guarded_clock import GuardedClock, watermark_ms

    # A router's clock may sit at 1970 until NTP syncs: writes from the CLI never take a time
    # below the service's persisted watermark (the service itself guards against every stored
    # time; see edge_runtime/local/guarded_clock.py).
    require_trusted_database_directory(path)  # a write goes where serve, maybe as root, reads
    if make_parent:
        ensure_parent(path)
        require_trusted_database_directory(path)
    clock = GuardedClock(SystemClock())
    if os.path.isdir(os.path.dirname(os.path.abspath(path))):  # (else the open says what is missing)
        from edge_runtime.service.trusted_paths import open_verified

        # apsw opens by name: what it opened must be what is in the directory just checked.
        db = open_verified(path, lambda: open_database(path, clock=clock, create=create), lambda db: db.close())
    else:
        db = open_database(path, clock=clock, create=create)
    try:
        clock.raise_floor(watermark_ms(db))
    except BaseException:
        db.close()
        raise
    return db, clock
