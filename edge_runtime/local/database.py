"""Opening the one SQLite file, and the single-writer transaction every durable change uses.

Open order matters on a device that may hand us a file from a newer release or a corrupt one:
first only read (is it a database, is it intact, do we know its migrations), and only then switch
it to WAL and migrate. A refused file is left exactly as it was.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import TracebackType

import apsw

from edge_runtime.local.clock import Clock, SystemClock, read_now_ms
from edge_runtime.local.errors import DatabaseClosedError, DatabaseUnusableError, MigrationError
from edge_runtime.local.migrations import apply_pending, known_migrations, verify_applied

__all__ = ["DEFAULT_BUSY_TIMEOUT_MS", "LocalDatabase", "MigrationError", "open_database"]

#: How long a writer waits for another process's write lock before the operation fails as busy.
DEFAULT_BUSY_TIMEOUT_MS = 5_000

#: Keep the WAL file from growing without bound on small flash after a burst of writes.
_JOURNAL_SIZE_LIMIT_BYTES = 4 * 1024 * 1024


def _set_busy_timeout(connection: apsw.Connection, timeout_ms: int) -> None:
    """Wait for other writers instead of failing at once: several processes share the file."""
    connection.set_busy_timeout(timeout_ms)


def _forbid_double_quoted_strings(connection: apsw.Connection) -> None:
    """A misspelt column in double quotes must be an error, not silently a string literal."""
    connection.config(apsw.SQLITE_DBCONFIG_DQS_DML, 0)
    connection.config(apsw.SQLITE_DBCONFIG_DQS_DDL, 0)


def _enable_foreign_keys(connection: apsw.Connection) -> None:
    """SQLite leaves foreign keys off per connection; the dispatch's Attempt binding relies on them."""
    connection.execute("PRAGMA foreign_keys = ON")


def _use_wal_with_full_sync(connection: apsw.Connection, busy_timeout_ms: int) -> None:
    """WAL lets readers (CLI, service) run beside the one writer; FULL syncs the WAL on every
    commit, so an acknowledged operation survives a power cut.

    Two processes switching the same fresh file at once both hold a shared lock and want an
    exclusive one; SQLite breaks that deadlock by failing one of them with SQLITE_BUSY at once,
    without calling the busy handler. The winner finishes in milliseconds, so retry until the
    busy timeout has passed (the second try usually finds the file already in WAL mode).
    """
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            break
        except apsw.BusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.002)
    if mode != "wal":
        raise DatabaseUnusableError(f"could not switch the database to WAL mode (got {mode!r})")
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute(f"PRAGMA journal_size_limit = {_JOURNAL_SIZE_LIMIT_BYTES}")


#: Every SQLite database file starts with a 100-byte header.
_SQLITE_HEADER_BYTES = 100


def _refuse_truncated_header(path: str) -> None:
    """SQLite takes a 1-byte file for an empty database and would write a new one over it; a file
    shorter than the header but not empty can only be a truncated database, so refuse it."""
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return
    if 0 < size < _SQLITE_HEADER_BYTES:
        raise DatabaseUnusableError(
            f"{path} is not a usable edge-runtime database: it is {size} bytes long, shorter than a "
            f"database header (truncated?); it was not modified"
        )


def _close_leaving_files_as_found(connection: apsw.Connection) -> None:
    """Close a refused database without the checkpoint SQLite runs when its last connection
    closes if a non-empty ``-wal`` is there (left by a crash or a newer release): the checkpoint
    would copy it into the main file and delete it. Both stay byte-for-byte as found, with at most
    a ``-shm`` index beside them. An empty WAL (created by our read) is removed as usual."""
    wal = Path(f"{connection.filename}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        connection.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    connection.close()


def _check_readable(connection: apsw.Connection, path: str) -> None:
    """Refuse a file that is not an intact SQLite database, before anything is written to it."""
    try:
        rows = connection.execute("PRAGMA quick_check").fetchall()
    except apsw.Error as exc:
        raise DatabaseUnusableError(f"{path} is not a usable edge-runtime database: {exc}") from exc
    problems = [row[0] for row in rows if row[0] != "ok"]
    if problems:
        raise DatabaseUnusableError(f"{path} is corrupt ({problems[0]}); it was not modified")


class LocalDatabase:
    """One apsw connection to the runtime's database, its path and its injected clock.

    Not thread-safe: one connection per thread. Close it when done.
    """

    __slots__ = ("_connection", "path", "clock")

    def __init__(self, connection: apsw.Connection, path: str, clock: Clock) -> None:
        self._connection: apsw.Connection | None = connection
        self.path = path
        self.clock = clock

    @property
    def connection(self) -> apsw.Connection:
        connection = self._connection
        if connection is None:
            raise DatabaseClosedError(f"database {self.path} is closed")
        return connection

    def write(self) -> "WriteTransaction":
        """A ``BEGIN IMMEDIATE`` transaction; ``as`` gives ``now_ms`` read after the lock is held."""
        return WriteTransaction(self.connection, self.clock)

    def snapshot(self) -> "ReadSnapshot":
        """A read transaction: several reads see one committed state of the database (WAL)."""
        return ReadSnapshot(self.connection)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> "LocalDatabase":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class WriteTransaction:
    """The single-writer transaction: ``BEGIN IMMEDIATE``, then the clock, then the work, then ``COMMIT``.

    The clock is read after the write lock is taken, so a wait for the lock can never make a
    lease look younger than it is. Any exception (including a failed ``COMMIT``) rolls the whole
    transaction back and propagates. Never hold one across a sleep, a signal or process I/O.
    """

    __slots__ = ("_connection", "_clock")

    def __init__(self, connection: apsw.Connection, clock: Clock) -> None:
        self._connection = connection
        self._clock = clock

    def __enter__(self) -> int:
        self._connection.execute("BEGIN IMMEDIATE")
        try:
            return read_now_ms(self._clock)
        except BaseException:
            self._rollback()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self._rollback()
            return
        try:
            self._connection.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        if self._connection.in_transaction:
            self._connection.execute("ROLLBACK")


class ReadSnapshot:
    """``BEGIN`` (deferred, so it takes no write lock) ... ``COMMIT``: a consistent view for a
    group of reads. It writes nothing; do not write inside it (use :meth:`LocalDatabase.write`)."""

    __slots__ = ("_connection",)

    def __init__(self, connection: apsw.Connection) -> None:
        self._connection = connection

    def __enter__(self) -> None:
        self._connection.execute("BEGIN")

    def __exit__(self, *exc_info: object) -> None:
        if self._connection.in_transaction:
            self._connection.execute("COMMIT")


def open_database(
    path: str | os.PathLike[str],
    *,
    clock: Clock | None = None,
    create: bool = True,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    vfs: str | None = None,
) -> LocalDatabase:
    """Open (creating if allowed) and migrate the runtime database at ``path``.

    Args:
        path: the database file; ``-wal`` and ``-shm`` files live beside it.
        clock: the injected clock; the system clock by default.
        create: create the file when it does not exist.
        busy_timeout_ms: how long to wait for another writer.
        vfs: a registered SQLite VFS name; None is the default VFS. The fault campaigns pass a
            recording shim here to simulate power cuts and full disks.

    Raises:
        DatabaseUnusableError: missing (with ``create=False``), unreadable, not a database, or corrupt.
        MigrationError: an applied migration was edited, or the database is from a newer release.
            Nothing is written to a refused database.
    """
    path = os.fspath(path)
    clock = clock or SystemClock()
    if not create and not Path(path).exists():
        raise DatabaseUnusableError(
            f"database {path} does not exist (submit a run or run `edge-runtime migrate` to create it)"
        )
    _refuse_truncated_header(path)
    flags = apsw.SQLITE_OPEN_READWRITE | (apsw.SQLITE_OPEN_CREATE if create else 0)
    try:
        connection = apsw.Connection(path, flags=flags, vfs=vfs)
    except apsw.Error as exc:
        raise DatabaseUnusableError(f"cannot open database {path}: {exc}") from exc
    try:
        _set_busy_timeout(connection, busy_timeout_ms)
        _forbid_double_quoted_strings(connection)
        _check_readable(connection, path)
        pending = verify_applied(connection, path, known_migrations())
        _use_wal_with_full_sync(connection, busy_timeout_ms)
        _enable_foreign_keys(connection)
        if pending:
            apply_pending(connection, path, pending, clock)
    except BaseException as exc:
        _close_leaving_files_as_found(connection)
        if isinstance(exc, apsw.Error):
            raise DatabaseUnusableError(f"cannot use database {path}: {exc}") from exc
        raise
    return LocalDatabase(connection, path, clock)
