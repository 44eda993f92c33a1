"""Opening the one SQLite file, and the single-writer transaction every durable change uses.

Open order matters on a device that may hand us a file from a newer release, a corrupt one or a
hostile one: first only read (is it a regular file, are its header and size intact, do we know its
migrations, is its schema exactly what they produce), and only then switch it to WAL and migrate.
A refused file is left exactly as it was. Read-only opens (the CLI's read commands, ``check``)
never write at all: they neither create, switch to WAL nor migrate.

Every connection runs with ``trusted_schema=OFF`` and ``SQLITE_DBCONFIG_DEFENSIVE``: the schema
comparison refuses objects the migrations did not create, and these two keep SQL stored in the
file from calling functions with side effects or corrupting the file on purpose.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import apsw

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.local.clock import SystemClock, read_now_ms
from edge_runtime.local.errors import (
    DatabaseClosedError, DatabaseUnusableError, MigrationError, damaged_database_message,
)
from edge_runtime.local.migrations import apply_pending, known_migrations, verify_applied, verify_schema

if TYPE_CHECKING:  # the port, for annotations only
    from edge_runtime.contract.ports import Clock

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


def _distrust_the_schema(connection: apsw.Connection) -> None:
    """SQL stored in the file (views, triggers, defaults) may call no function with side effects,
    and no statement may corrupt the file on purpose (writable_schema and the like)."""
    connection.config(apsw.SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0)
    connection.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, 1)


def _connect(path: str, flags: int, vfs: str | None = None) -> apsw.Connection:
    """SQLite's connection to ``path`` (``flags``: read-only or read-write; ``vfs`` None is the
    default VFS).

    Raises:
        DatabaseUnusableError: SQLite cannot open it.
    """
    try:
        return apsw.Connection(path, flags=flags, vfs=vfs)
    except apsw.Error as exc:
        raise DatabaseUnusableError(f"cannot open database {path}: {exc}") from exc


def _take_connection_settings(connection: apsw.Connection, busy_timeout_ms: int) -> None:
    """What every connection of ours sets before its first statement, whatever it opens for."""
    _set_busy_timeout(connection, busy_timeout_ms)
    _forbid_double_quoted_strings(connection)
    _distrust_the_schema(connection)


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


def ensure_incremental_vacuum(connection: apsw.Connection) -> bool:
    """Switch the file to ``auto_vacuum = INCREMENTAL``; returns True when it changed anything.

    A file without tables takes the setting at once; an existing file needs one ``VACUUM`` (it
    rewrites the file, needing about its size in free space; after retention that is small).
    """
    if connection.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
        return False
    connection.execute("PRAGMA auto_vacuum = INCREMENTAL")
    if connection.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
        connection.execute("VACUUM")
    return True


#: Page size of a new database file. Each commit writes every page it touched to the WAL (and a
#: checkpoint writes them again): a Run's four commits touch about fifteen pages each (table and
#: index leaves, pointer-map pages), so the bytes a Run writes follow the page size (docs/storage.md: flash
#: writes; `make bench`, footprint: 512 B pages write 46 KB per Run, 1 KiB 69 KB, 4 KiB about four
#: times that). The price is about 8% more stored per Run (fuller pages of smaller records fit
#: worse) and a lower overflow limit: 477 bytes for a row, 102 for an index key. Every record of a
#: Run's usual path stays below them; a Run Lease step's own event key (the port's separate
#: claim, release and complete, with the Attempt's id in it) spills one overflow page, which only
#: costs that rare event a page. An existing file keeps its page size (changing it needs the file
#: out of WAL mode and a full rewrite).
NEW_FILE_PAGE_SIZE = 512

#: Every SQLite database file starts with a 100-byte header.
_SQLITE_HEADER_BYTES = 100


def _create_private(path: str) -> None:
    """Create the file 0600 whatever the umask: SQLite gives ``-wal``, ``-shm`` and ``-journal``
    the mode of the database file, and commands, output and events are often secrets."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return  # created meanwhile by another process: open it as found
    except OSError as exc:
        raise DatabaseUnusableError(f"cannot create database {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _refuse_unusable_file(path: str, *, create: bool) -> None:
    """Refuse what SQLite would misuse before it opens anything: a missing file (unless we may
    create it), something that is not a regular file (``/dev/null`` would leave a
    ``/dev/null-journal``; a FIFO would hang), and a truncated database (SQLite takes a 1-byte file
    for an empty database and would write a new one over it)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if not create:
            raise DatabaseUnusableError(
                f"database {path} does not exist (submit a run or run `edge-runtime migrate` to create it)"
            ) from None
        _create_private(path)
        return
    except OSError as exc:
        raise DatabaseUnusableError(f"cannot open database {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise DatabaseUnusableError(f"{path} is not a regular file; it was not modified")
    if 0 < info.st_size < _SQLITE_HEADER_BYTES:
        raise DatabaseUnusableError(
            f"{path} is not a usable edge-runtime database: it is {info.st_size} bytes long, shorter than a "
            f"database header (truncated?); it was not modified"
        )


#: WAL header: magic (either byte order of the checksums), then the page size at offset 8.
_WAL_MAGICS = (0x377F0682, 0x377F0683)


def _page_size(header: bytes) -> int:
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


#: The files SQLite keeps beside a database: anyone able to write the directory may plant them.
_SIDE_FILE_SUFFIXES = ("-wal", "-shm", "-journal")


def _open_regular(path: str) -> int:
    """A read descriptor of ``path`` only once it is known to be a regular file: opened without
    following a symlink and without blocking (a FIFO would hang a blocking open and read),
    its type checked on the open descriptor.

    Raises:
        FileNotFoundError: no such file.
        DatabaseUnusableError: a symlink, FIFO, device or directory; or it cannot be opened.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DatabaseUnusableError(f"{path} is a symlink; refused, nothing was modified") from None
        raise DatabaseUnusableError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DatabaseUnusableError(f"{path} is not a regular file (a FIFO, device or directory); refused, "
                                    f"nothing was modified: move it away")
    return fd


def _refuse_irregular_side_files(path: str) -> None:
    """SQLite opens ``-wal``, ``-shm`` and ``-journal`` by name: a FIFO planted as one of them
    would hang every command, a symlink would send its writes elsewhere."""
    for suffix in _SIDE_FILE_SUFFIXES:
        try:
            os.close(_open_regular(f"{path}{suffix}"))
        except FileNotFoundError:
            continue


def _refuse_foreign_wal(path: str) -> None:
    """A ``-wal`` left beside a restored backup belongs to another database; SQLite would merge
    its pages in. Its header does not name its database, so only a page-size mismatch is
    detectable here at no cost; the README says how to restore a backup safely."""
    try:
        wal_fd = _open_regular(f"{path}-wal")
    except FileNotFoundError:
        return
    try:
        with open(wal_fd, "rb") as wal, open(_open_regular(path), "rb") as db:
            wal_header, db_header = wal.read(32), db.read(_SQLITE_HEADER_BYTES)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DatabaseUnusableError(f"cannot read database {path} or its -wal: {exc.strerror or exc}") from None
    if len(wal_header) < 32 or len(db_header) < _SQLITE_HEADER_BYTES:
        return
    if int.from_bytes(wal_header[:4], "big") not in _WAL_MAGICS:
        return  # not a valid WAL: SQLite ignores it
    wal_page = int.from_bytes(wal_header[8:12], "big")
    if wal_page != _page_size(db_header):
        raise DatabaseUnusableError(
            f"{path}-wal belongs to another database (page size {wal_page}, the database's is "
            f"{_page_size(db_header)}); nothing was modified. Move the -wal and -shm away, or restore "
            f"the database together with its own -wal."
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


#: The first 16 bytes of every SQLite database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: A WAL holding at least one frame: its 32-byte header plus one frame header.
_WAL_WITH_FRAMES_BYTES = 32 + 24


def _check_readable(connection: apsw.Connection, path: str) -> None:
    """Refuse a file that is not an intact SQLite database, before anything is written to it.

    Only what costs the same at any size: the header (magic, page size), and the page count
    against the file's size (a file cut short, by a copy or a full disk, loses its last pages;
    SQLite would read zeros there much later). A damaged page inside the file is found by the
    query that meets it (SQLITE_CORRUPT, mapped to a clear error) and by ``check``, which reads
    every page: a full ``quick_check`` here read the whole file on each CLI call.
    """
    try:
        # The first read: SQLite validates the header and rolls back a hot journal here.
        connection.execute("PRAGMA page_count").fetchone()
    except apsw.ReadOnlyError as exc:
        if os.path.exists(f"{path}-journal"):  # SQLite must roll a hot journal back before any read
            raise DatabaseUnusableError(
                f"{path} has an interrupted transaction in {path}-journal, which a read-only command may "
                f"not roll back; it was not modified (a write command such as `edge-runtime migrate` rolls "
                f"it back first, then checks the file)"
            ) from exc
        raise DatabaseUnusableError(f"{path} is not a usable edge-runtime database: {exc}") from exc
    except apsw.CorruptError as exc:  # SQLite's own header checks: e.g. fewer pages than it says
        raise DatabaseUnusableError(_corrupt(path, str(exc))) from exc
    except apsw.Error as exc:
        raise DatabaseUnusableError(f"{path} is not a usable edge-runtime database: {exc}") from exc
    # Inside one read transaction: SQLite's read lock keeps a checkpoint from moving pages of
    # this snapshot between the WAL and the file while both are measured, and keeps another
    # process that is creating the file right now (its first transaction) from writing it under
    # us: the page size and count are this snapshot's, not those of a file seen empty earlier.
    connection.execute("BEGIN")
    try:
        page_count = connection.execute("PRAGMA page_count").fetchone()[0]
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        try:
            with open(path, "rb") as file:
                header = file.read(_SQLITE_HEADER_BYTES)
                size = os.fstat(file.fileno()).st_size
            try:
                wal_size = os.stat(f"{path}-wal").st_size
            except FileNotFoundError:
                wal_size = 0
        except OSError as exc:
            raise DatabaseUnusableError(f"cannot read database {path}: {exc.strerror or exc}") from None
    finally:
        connection.execute("COMMIT")
    if size == 0 or page_count == 0:
        return  # a new, empty database (or one created after our snapshot began: not ours to judge)
    if header[:16] != _SQLITE_MAGIC or _page_size(header) != page_size:
        raise DatabaseUnusableError(f"{path} is not a usable edge-runtime database: its header is damaged")
    if wal_size >= _WAL_WITH_FRAMES_BYTES:
        # Pages the WAL holds may lie past the file's end, or half-written there by a checkpoint
        # a power cut stopped, until the next checkpoint: the file cannot be held to a size then.
        return
    damage = None
    if size % page_size:
        damage = f"it is {size} bytes long, not a whole number of {page_size}-byte pages"
    elif page_count * page_size > size:
        damage = f"it holds {size // page_size} pages of the {page_count} it should"
    if damage:
        raise DatabaseUnusableError(_corrupt(path, f"{damage}: truncated?"))


def _corrupt(path: str, damage: str) -> str:
    return (f"{path} is corrupt ({damage}); it was not modified. Run `edge-runtime check` for a full report, "
            f"and restore a backup")


#: ``PRAGMA synchronous`` levels (SQLite numbers them OFF=0, NORMAL=1, FULL=2, EXTRA=3).
_SYNC_NORMAL = 1


class LocalDatabase:
    """One apsw connection to the runtime's database, its path and its injected clock.

    Not thread-safe: one connection per thread. Close it when done.
    """

    __slots__ = ("_connection", "path", "clock", "pending")

    def __init__(self, connection: apsw.Connection, path: str, clock: Clock, pending: tuple[str, ...] = ()) -> None:
        self._connection: apsw.Connection | None = connection
        self.path = path
        self.clock = clock
        #: Migrations not applied (only a read-only open leaves any).
        self.pending = pending

    @property
    def connection(self) -> apsw.Connection:
        connection = self._connection
        if connection is None:
            raise DatabaseClosedError(f"database {self.path} is closed")
        return connection

    def write(self, *, synced: bool = True) -> "WriteTransaction":
        """A ``BEGIN IMMEDIATE`` transaction; ``as`` gives ``now_ms`` read after the lock is held.

        ``synced=False`` commits without syncing the WAL (``synchronous = NORMAL`` for this one
        transaction): the commit survives the process (it is in the OS's page cache, visible to
        every later open), and is made durable by the next synced commit or checkpoint, since WAL
        frames are replayed in order. Only for a record that a power cut makes worthless anyway
        (see ``LocalRunRepository.record_running``); everything else stays synced.
        """
        return WriteTransaction(self.connection, self.clock, synced=synced)

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

    __slots__ = ("_connection", "_clock", "_synced", "_restore_sync")

    def __init__(self, connection: apsw.Connection, clock: Clock, *, synced: bool = True) -> None:
        self._connection = connection
        self._clock = clock
        self._synced = synced
        #: The connection's ``synchronous`` level to put back after an unsynced commit, or None.
        self._restore_sync: int | None = None

    def __enter__(self) -> int:
        if not self._synced:
            level = self._connection.execute("PRAGMA synchronous").fetchone()[0]
            if level > _SYNC_NORMAL:  # never raise it: a weaker setting (tests) stays as it is
                self._connection.execute(f"PRAGMA synchronous = {_SYNC_NORMAL}")
                self._restore_sync = level
        try:
            self._connection.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._put_back_sync()
            raise
        try:
            return read_now_ms(self._clock)
        except BaseException:
            self._rollback()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is not None:
                self._rollback()
                return
            try:
                self._connection.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        finally:
            self._put_back_sync()

    def _rollback(self) -> None:
        if self._connection.in_transaction:
            self._connection.execute("ROLLBACK")

    def _put_back_sync(self) -> None:
        if self._restore_sync is not None:
            self._connection.execute(f"PRAGMA synchronous = {self._restore_sync}")
            self._restore_sync = None


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
    read_only: bool = False,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    vfs: str | None = None,
) -> LocalDatabase:
    """Open (creating if allowed) and migrate the runtime database at ``path``.

    Args:
        path: the database file; ``-wal`` and ``-shm`` files live beside it.
        clock: the injected clock; the system clock by default.
        create: create the file (0600) when it does not exist.
        read_only: open without write access: never create, switch to WAL or migrate. Pending
            migrations are reported in :attr:`LocalDatabase.pending`, not applied.
        busy_timeout_ms: how long to wait for another writer.
        vfs: a registered SQLite VFS name; None is the default VFS. The fault campaigns pass a
            recording shim here to simulate power cuts and full disks.

    Raises:
        DatabaseUnusableError: missing (with ``create=False``), not a regular file, unreadable, not
            a database, corrupt, or beside a ``-wal`` of another database.
        MigrationError: an applied migration was edited, the database is from a newer release, its
            schema is not what its migrations produce (not an edge-runtime database, or edited),
            or (read-only) it has no edge-runtime schema at all. Nothing is written to a refused
            database.
    """
    path = os.fspath(path)
    clock = clock or SystemClock()
    _refuse_unusable_file(path, create=create and not read_only)
    _refuse_irregular_side_files(path)
    _refuse_foreign_wal(path)
    journal = Path(f"{path}-journal")
    hot_journal = not read_only and journal.exists()
    flags = apsw.SQLITE_OPEN_READONLY if read_only else apsw.SQLITE_OPEN_READWRITE
    connection = _connect(path, flags, vfs)
    try:
        _take_connection_settings(connection, busy_timeout_ms)
        _check_readable(connection, path)
        known = known_migrations()
        with ReadSnapshot(connection):  # another process may be migrating the file right now
            pending = verify_applied(connection, path, known)
            applied = tuple(m for m in known if m not in pending)
            verify_schema(connection, path, applied)
        if read_only:
            if not applied:
                raise MigrationError(
                    f"database {path} holds no edge-runtime data yet (run `edge-runtime migrate` to create it)"
                )
            connection.execute("PRAGMA synchronous = FULL")  # per connection: reported by check
        else:
            if not applied:  # a new file: the page size must be set before WAL mode fixes it
                connection.execute(f"PRAGMA page_size = {NEW_FILE_PAGE_SIZE}")
            _use_wal_with_full_sync(connection, busy_timeout_ms)
        _enable_foreign_keys(connection)
        if not read_only and not applied:  # a new file takes auto_vacuum at once, before its first table
            ensure_incremental_vacuum(connection)
        if pending and not read_only:
            apply_pending(connection, path, pending, clock)
            pending = []
    except BaseException as exc:
        _close_leaving_files_as_found(connection)
        if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
            raise DatabaseUnusableError(f"cannot use database {path}: {damaged_database_message(exc)}") from exc
        if isinstance(exc, apsw.Error):
            raise DatabaseUnusableError(f"cannot use database {path}: {exc}") from exc
        if hot_journal and isinstance(exc, EdgeRuntimeError) and not journal.exists():
            # SQLite rolls a hot journal back at the first read, before any check of ours can run.
            raise type(exc)(f"{exc} (SQLite first rolled back the interrupted transaction left in {journal})") from exc
        raise
    return LocalDatabase(connection, path, clock, pending=tuple(m.id for m in pending))


def open_peer(db: LocalDatabase, *, clock: Clock, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> LocalDatabase:
    """A second connection, in this same process, to ``db`` (already opened, checked and migrated
    by :func:`open_database`), for a thread of its own (the web panel beside the service).

    Never through :func:`open_database`: its checks open the database, ``-wal`` and ``-shm`` by
    descriptor, and closing any descriptor of a file drops every POSIX lock this process holds on
    it, the first connection's included. Another process then takes that connection's WAL for
    unused and deletes it when it closes, and every later commit goes to a deleted file (found by
    the panel's end-to-end tests). SQLite's own opens share one lock state per file in a process.

    Raises:
        DatabaseUnusableError: SQLite cannot open it.
    """
    connection = _connect(db.path, apsw.SQLITE_OPEN_READWRITE)
    try:
        _take_connection_settings(connection, busy_timeout_ms)
        _use_wal_with_full_sync(connection, busy_timeout_ms)
        _enable_foreign_keys(connection)
    except apsw.Error as exc:
        connection.close()
        raise DatabaseUnusableError(f"cannot use database {db.path}: {exc}") from exc
    return LocalDatabase(connection, db.path, clock, pending=())
