"""Retiring the legacy raw lease tokens at rest (ADR-0456 §10): an opt-in scrub, its backup and
its rollback gate (docs/storage.md: retiring legacy raw tokens).

:func:`scrub_legacy_tokens`: (1) under an exclusive lock (only while no other process has the file
open; a live ``serve`` session refuses it), an online backup to ``<db>.scrub-backup`` (0600),
verified on disk (``integrity_check``, every table's rows and digest equal to the database's)
before anything changes; (2) one transaction: the opt-in layout step ``9001_scrub_legacy_tokens``
(every raw ``lease_token`` to ``sha256:<digest>``), its marker row in ``schema_migrations`` and a
``legacy_tokens.scrubbed`` row of ``device_events`` holding the fingerprint of every table (the
rollback gate); (3) ``secure_delete``, ``wal_checkpoint(TRUNCATE)``, ``VACUUM``, then a
``legacy_tokens.cleaned`` row. A power cut leaves the old layout or the new one, never a mix.

:func:`rollback_scrub` restores the backup only while the fingerprint still matches (nothing was
written since); :func:`drop_scrub_backup` overwrites the backup with zeros, then unlinks it.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import apsw
import msgspec

from edge_runtime.contract.cancellation_dispatch import InvalidCommandError, digest_lease_token, is_lease_token_digest
from edge_runtime.contract.worker_session import SessionStatus
from edge_runtime.local.cancellation_dispatch import DIGEST_PREFIX
from edge_runtime.local.clock import SystemClock
from edge_runtime.local.content_fingerprint import fingerprint_tables, whole_fingerprint
from edge_runtime.local.database import DEFAULT_BUSY_TIMEOUT_MS, LocalDatabase, open_database
from edge_runtime.local.errors import LocalStorageError, ScrubRefusedError, ScrubRollbackRefusedError
from edge_runtime.local.guarded_clock import GuardedClock, watermark_ms
from edge_runtime.local.migrations import opt_in_migrations, record_applied

if TYPE_CHECKING:  # the port, for annotations only
    from edge_runtime.contract.ports import Clock

SCRUB_MIGRATION_ID = "9001_scrub_legacy_tokens"
BACKUP_SUFFIX = ".scrub-backup"
EVENT_SCRUBBED = "legacy_tokens.scrubbed"
EVENT_CLEANED = "legacy_tokens.cleaned"
SCRUB_COMMAND = "edge-runtime migrate --scrub-legacy-tokens"
ROLLBACK_COMMAND = "edge-runtime migrate --rollback-scrub"
DROP_COMMAND = "edge-runtime migrate --drop-scrub-backup"

#: Free space kept beyond the backup and VACUUM's copy of the database.
_SPACE_MARGIN_BYTES = 256 * 1024
_OVERWRITE_CHUNK = 64 * 1024

Progress = Callable[[str], None]


class ScrubStatus(msgspec.Struct, frozen=True):
    """What ``check`` reports: the layout and what still holds a raw token."""

    dispatches: int
    raw_tokens: int
    #: Raw values that are not valid tokens (their dispatch fails closed); the scrub refuses them.
    invalid_run_ids: list[str]
    scrubbed_at_ms: int | None
    cleaned: bool
    backup_path: str
    backup_present: bool


def backup_path_for(db_path: str) -> str:
    return db_path + BACKUP_SUFFIX


def _stored_form(value: str) -> str:
    """The digest form of a stored ``lease_token`` value (itself when it already is one).

    Raises:
        InvalidCommandError: a raw value that is not a valid lease token.
    """
    if value.startswith(DIGEST_PREFIX) and is_lease_token_digest(value[len(DIGEST_PREFIX) :]):
        return value
    return DIGEST_PREFIX + digest_lease_token(value)


def _token_census(connection: apsw.Connection) -> tuple[int, int, list[str]]:
    """(dispatch rows, rows holding a raw token, run ids of the raw values that are invalid)."""
    total = raw = 0
    invalid = []
    for run_id, value in connection.execute("SELECT run_id, lease_token FROM run_cancellation_dispatches"):
        total += 1
        if value is None:
            continue
        try:
            raw += _stored_form(value) != value
        except InvalidCommandError:
            raw += 1
            invalid.append(run_id)
    return total, raw, invalid


class ScrubRecord(msgspec.Struct, rename="camel", frozen=True):
    """The payload of the ``legacy_tokens.scrubbed`` event: the rollback gate."""

    backup: str
    backup_digest: str
    rewritten: int
    tables: dict[str, list]


def _latest_scrub_event(connection: apsw.Connection) -> tuple[int, str] | None:
    """(id, payload) of the newest ``legacy_tokens.scrubbed`` event."""
    return connection.execute(
        "SELECT id, payload FROM device_events WHERE type = ? ORDER BY id DESC LIMIT 1", (EVENT_SCRUBBED,)
    ).fetchone()


def scrub_status(connection: apsw.Connection, db_path: str) -> ScrubStatus:
    """Read-only: the layout of the open database and what of the legacy tokens is left."""
    total, raw, invalid = _token_census(connection)
    marker = connection.execute(
        "SELECT applied_at_ms FROM schema_migrations WHERE id = ?", (SCRUB_MIGRATION_ID,)
    ).fetchone()
    cleaned = False
    event = _latest_scrub_event(connection) if marker else None
    if event is not None:
        cleaned = connection.execute(
            "SELECT 1 FROM device_events WHERE type = ? AND id > ?", (EVENT_CLEANED, event[0])
        ).fetchone() is not None
    backup = backup_path_for(db_path)
    return ScrubStatus(
        dispatches=total,
        raw_tokens=raw,
        invalid_run_ids=invalid,
        scrubbed_at_ms=None if marker is None else marker[0],
        cleaned=cleaned,
        backup_path=backup,
        backup_present=os.path.lexists(backup),
    )


def table_fingerprints(connection: apsw.Connection) -> dict[str, list]:
    """Every table's fingerprint, leaving out the scrub's own ``device_events`` rows."""
    return fingerprint_tables(connection, ignored_device_events=(EVENT_SCRUBBED, EVENT_CLEANED))


def _row_counts(fingerprints: dict[str, list]) -> str:
    return ", ".join(f"{name} {rows}" for name, (rows, _) in fingerprints.items() if name != "sqlite_schema")


# --------------------------------------------------------------------------- shared steps


def _open(
    path: str, clock: Clock | None, vfs: str | None, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
) -> LocalDatabase:
    """Open like the CLI's writes: a router's clock may sit at 1970 until NTP syncs, so times
    (and the live-session check) never go below the service's persisted watermark."""
    guarded = clock is None
    db = open_database(path, clock=clock or GuardedClock(SystemClock()), vfs=vfs, busy_timeout_ms=busy_timeout_ms)
    if guarded:
        try:
            db.clock.raise_floor(watermark_ms(db))
        except BaseException:
            db.close()
            raise
    return db


def _take_exclusive_lock(db: LocalDatabase, error: type[ScrubRefusedError]) -> None:
    """Keep every other process out (readers too) until this connection closes: nothing may be
    written between the backup and the scrub, or between the gate's check and the restore.

    In WAL mode SQLite grants it only while no other connection has the file open; it waits for
    them up to the busy timeout, then refuses.
    """
    connection = db.connection
    connection.execute("PRAGMA locking_mode = EXCLUSIVE")
    try:
        with db.write():
            connection.execute("SELECT count(*) FROM sqlite_schema").fetchone()
    except apsw.BusyError:
        connection.execute("PRAGMA locking_mode = NORMAL")
        raise error(
            f"another process has {db.path} open (an edge-runtime command, or a service starting); this needs "
            f"the database alone: run it again when that is done; nothing was changed"
        ) from None


def _refuse_live_service(db: LocalDatabase, now_ms: int, error: type[ScrubRefusedError]) -> None:
    row = db.connection.execute(
        "SELECT worker_id, generation, lease_expires_at_ms FROM worker_sessions "
        "WHERE status = ? AND lease_expires_at_ms > ? ORDER BY lease_expires_at_ms DESC LIMIT 1",
        (SessionStatus.ONLINE.value, now_ms),
    ).fetchone()
    if row is not None:
        worker, generation, expires = row
        raise error(
            f"a service (worker {worker}, session generation {generation}) holds a live session on {db.path} "
            f"for another {(expires - now_ms + 999) // 1000} s: stop `serve` first (a killed service's "
            f"session expires by itself); nothing was changed"
        )


def _is_private_regular_file(info: os.stat_result) -> bool:
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_nlink == 1


def _overwrite_and_unlink(path: str) -> int:
    """Overwrite a regular file of ours with zeros, sync it, unlink it; its former size.

    Refuses a symlink, a hard-linked file or one owned by someone else: overwriting those would
    destroy a file that is not the backup.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return 0
    if not _is_private_regular_file(info):
        raise ScrubRefusedError(
            f"{path} is not a regular, singly linked file owned by this user; it was left alone (remove it by hand)"
        )
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            raise ScrubRefusedError(f"{path} was replaced while it was being overwritten; it was left alone")
        zeros = bytes(_OVERWRITE_CHUNK)
        for offset in range(0, opened.st_size, _OVERWRITE_CHUNK):
            os.pwrite(fd, zeros[: opened.st_size - offset], offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.unlink(path)
    return opened.st_size


def _sync_directory(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_backup_read_only(backup: str, vfs: str | None) -> apsw.Connection:
    connection = apsw.Connection(backup, flags=apsw.SQLITE_OPEN_READONLY, vfs=vfs)
    rows = [row[0] for row in connection.execute("PRAGMA integrity_check")]
    if rows != ["ok"]:
        connection.close()
        raise ScrubRefusedError(f"backup {backup} failed its integrity check ({rows[0]})")
    return connection


# --------------------------------------------------------------------------- scrub


def _check_free_space(db: LocalDatabase) -> int:
    page_size = db.connection.execute("PRAGMA page_size").fetchone()[0]
    size = db.connection.execute("PRAGMA page_count").fetchone()[0] * page_size
    info = os.statvfs(os.path.dirname(os.path.abspath(db.path)))
    available = info.f_bavail * info.f_frsize
    # The backup is a copy of the database; VACUUM writes another whole copy into the WAL.
    needed = 2 * size + _SPACE_MARGIN_BYTES
    if available < needed:
        raise ScrubRefusedError(
            f"not enough free space beside {db.path}: the scrub needs about {needed:,} bytes (a {size:,}-byte "
            f"backup and VACUUM's copy of the database), {available:,} are available; nothing was changed"
        )
    return size


def _replace_stale_backup(backup: str, progress: Progress) -> None:
    """A backup without a marker was left by an unfinished or rolled-back scrub: the database
    itself is at least as new, so it is superseded. It still holds raw tokens: overwrite it."""
    for path in (backup, backup + "-journal", backup + "-wal"):
        if os.path.lexists(path):
            size = _overwrite_and_unlink(path)
            progress(
                f"overwrote and removed {path} ({size:,} bytes) left by an earlier, unfinished or rolled-back scrub"
            )


def _write_backup(db: LocalDatabase, backup: str, vfs: str | None) -> None:
    fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    os.close(fd)
    target = apsw.Connection(backup, flags=apsw.SQLITE_OPEN_READWRITE, vfs=vfs)
    try:
        target.execute("PRAGMA synchronous = FULL")
        with target.backup("main", db.connection, "main") as copy:
            copy.step(-1)
        # One self-contained file (rollback journal, not WAL): nothing beside it to lose or leak.
        target.execute("PRAGMA journal_mode = DELETE")
    finally:
        target.close()
    _sync_directory(backup)


def scrub_legacy_tokens(
    path: str,
    *,
    clock: Clock | None = None,
    vfs: str | None = None,
    progress: Progress | None = None,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
) -> ScrubStatus:
    """Run the scrub (idempotent: a scrubbed database only finishes an interrupted cleanup).

    Raises:
        ScrubRefusedError: a live service, short free space, an invalid stored token, or a backup
            that does not verify; nothing was changed.
        LocalStorageError: the scrub stopped on an I/O error (a full disk); the database is in the
            old layout or the new one, as ``check`` says, and running the scrub again finishes it.
    """
    try:
        return _scrub(path, clock, vfs, progress or (lambda line: None), busy_timeout_ms)
    except (apsw.Error, OSError) as exc:
        raise LocalStorageError(
            f"the scrub of {path} stopped: {exc}. The database is in the old layout or the new one (never a mix; "
            f"`edge-runtime check` says which); run `{SCRUB_COMMAND}` again to finish"
        ) from exc


def _scrub(path: str, clock: Clock | None, vfs: str | None, say: Progress, busy_timeout_ms: int) -> ScrubStatus:
    with _open(path, clock, vfs, busy_timeout_ms) as db:
        status = scrub_status(db.connection, db.path)
        if status.scrubbed_at_ms is not None and status.cleaned:
            say(f"{db.path}: already scrubbed ({SCRUB_MIGRATION_ID}); nothing to do")
            return status
        with db.write() as now_ms:
            _refuse_live_service(db, now_ms, ScrubRefusedError)
        _take_exclusive_lock(db, ScrubRefusedError)
        db.connection.execute("PRAGMA secure_delete = ON")
        with db.write() as now_ms:  # the lock is ours now: read the state it protects
            status = scrub_status(db.connection, db.path)
            _refuse_live_service(db, now_ms, ScrubRefusedError)
            if status.scrubbed_at_ms is None and status.invalid_run_ids:
                raise ScrubRefusedError(
                    f"{len(status.invalid_run_ids)} dispatch(es) store a lease token that is not a valid token "
                    f"(they fail closed), e.g. run {status.invalid_run_ids[0]}; it has no digest form, so the "
                    f"scrub cannot rewrite it: resolve those dispatches first; nothing was changed"
                )
            before = table_fingerprints(db.connection)
        if status.scrubbed_at_ms is not None:
            say(f"{db.path}: scrubbed, but its cleanup did not finish; finishing it")
            _clean(db, say)
            return scrub_status(db.connection, db.path)
        size = _check_free_space(db)
        backup = backup_path_for(db.path)
        _replace_stale_backup(backup, say)
        _write_backup(db, backup, vfs)
        copy = _open_backup_read_only(backup, vfs)
        try:
            copied = table_fingerprints(copy)
        finally:
            copy.close()
        if copied != before:
            raise ScrubRefusedError(f"backup {backup} does not match {db.path}; nothing was changed (it is kept)")
        say(
            f"backup {backup} written ({os.path.getsize(backup):,} bytes of a {size:,}-byte database, mode 0600) "
            f"and verified: integrity ok; rows {_row_counts(copied)}"
        )
        _rewrite(db, backup, copied, status.raw_tokens)
        say(
            f"{status.raw_tokens} raw lease token(s) rewritten to their digests; "
            f"layout marker {SCRUB_MIGRATION_ID} recorded"
        )
        _clean(db, say)
        say(
            f"the backup {backup} is now the only place the old raw tokens remain: undo with `{ROLLBACK_COMMAND}` "
            f"(only while nothing is written to the database), delete it for good with `{DROP_COMMAND}`"
        )
        return scrub_status(db.connection, db.path)


def _rewrite(db: LocalDatabase, backup: str, copied: dict[str, list], raw_tokens: int) -> None:
    """Step 2: one transaction, so a power cut leaves the old layout or the new one, never a mix."""
    (step,) = [m for m in opt_in_migrations() if m.id == SCRUB_MIGRATION_ID]
    connection = db.connection
    connection.create_scalar_function(
        "legacy_lease_token_digest", lambda value: None if value is None else _stored_form(value), 1, deterministic=True
    )
    with db.write() as now_ms:
        for _ in connection.execute(step.sql):
            pass
        if _token_census(connection)[1]:
            raise LocalStorageError(f"{SCRUB_MIGRATION_ID} left raw tokens in {db.path}; rolled back")
        record_applied(connection, step, now_ms)
        record = ScrubRecord(
            os.path.basename(backup), whole_fingerprint(copied), raw_tokens, table_fingerprints(connection)
        )
        connection.execute(
            "INSERT INTO device_events (type, payload, created_at_ms) VALUES (?, ?, ?)",
            (EVENT_SCRUBBED, msgspec.json.encode(record).decode(), now_ms),
        )


def _checkpoint_truncate(db: LocalDatabase) -> None:
    busy, _, _ = db.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        raise LocalStorageError(
            f"the WAL of {db.path} could not be checkpointed (busy); run `{SCRUB_COMMAND}` again to finish"
        )


def _clean(db: LocalDatabase, say: Progress) -> None:
    """Step 3: no raw byte left in free pages, the WAL or a journal (the marker is already durable)."""
    connection = db.connection
    connection.execute("PRAGMA secure_delete = ON")
    _checkpoint_truncate(db)
    connection.execute("VACUUM")
    with db.write() as now_ms:
        connection.execute(
            "INSERT INTO device_events (type, payload, created_at_ms) VALUES (?, '{}', ?)", (EVENT_CLEANED, now_ms)
        )
    _checkpoint_truncate(db)
    say("secure_delete on, WAL checkpointed and truncated, VACUUM done: no free page, WAL or journal of the "
        "database holds a raw token")


# --------------------------------------------------------------------------- rollback and drop


def rollback_scrub(path: str, *, clock: Clock | None = None, vfs: str | None = None) -> str:
    """Restore the backup over a scrubbed database that nothing has written to since; the backup's path.

    Raises:
        ScrubRollbackRefusedError: not scrubbed, a live service, written since the scrub (the
            tables are named), or the backup is missing or not the one the scrub wrote.
        LocalStorageError: an I/O error; the restore is one transaction, so the database is still
            the scrubbed one or already the restored one.
    """
    try:
        return _rollback(path, clock, vfs)
    except (apsw.Error, OSError) as exc:
        raise LocalStorageError(f"the rollback of the scrub of {path} stopped: {exc}") from exc


def _rollback(path: str, clock: Clock | None, vfs: str | None) -> str:
    with _open(path, clock, vfs) as db:
        marker = db.connection.execute("SELECT 1 FROM schema_migrations WHERE id = ?", (SCRUB_MIGRATION_ID,)).fetchone()
        event = _latest_scrub_event(db.connection)
        if marker is None or event is None:
            raise ScrubRollbackRefusedError(f"{db.path} is not scrubbed; there is nothing to roll back")
        try:
            record = msgspec.json.decode(event[1], type=ScrubRecord)
        except msgspec.DecodeError as exc:
            raise ScrubRollbackRefusedError(f"the scrub's record in {db.path} is unreadable ({exc}); not restored") from None
        backup = backup_path_for(db.path)  # never a path read from the database
        try:
            info = os.lstat(backup)
        except FileNotFoundError:
            raise ScrubRollbackRefusedError(
                f"the scrub's backup {backup} is gone (dropped?); it cannot be restored"
            ) from None
        if not _is_private_regular_file(info):
            raise ScrubRollbackRefusedError(f"{backup} is not a regular file owned by this user; it was not restored")
        source = _open_backup_read_only(backup, vfs)
        try:
            if whole_fingerprint(table_fingerprints(source)) != record.backup_digest:
                raise ScrubRollbackRefusedError(
                    f"{backup} is not the backup the scrub wrote (it changed since); not restored"
                )
            with db.write() as now_ms:
                _refuse_live_service(db, now_ms, ScrubRollbackRefusedError)
            _take_exclusive_lock(db, ScrubRollbackRefusedError)
            with db.write():
                now = table_fingerprints(db.connection)
            changed = sorted(set(now) ^ set(record.tables) | {t for t in now if now[t] != record.tables.get(t)})
            if changed:
                raise ScrubRollbackRefusedError(
                    f"{db.path} was written after the scrub ({', '.join(changed)} changed); restoring the backup "
                    f"would lose those writes, so it was not restored. The database stays scrubbed"
                )
            with db.connection.backup("main", source, "main") as restore:
                restore.step(-1)
        finally:
            source.close()
        _checkpoint_truncate(db)
    return backup


def drop_scrub_backup(path: str) -> tuple[str, int]:
    """Overwrite the scrub's backup (and any journal beside it) with zeros, then unlink it.

    Returns the backup's path and its size (0: there was none).
    """
    backup = backup_path_for(os.fspath(path))
    try:
        size = _overwrite_and_unlink(backup)
        for sidecar in (backup + "-journal", backup + "-wal"):
            _overwrite_and_unlink(sidecar)
        if size:
            _sync_directory(backup)
    except OSError as exc:
        raise LocalStorageError(f"could not drop the scrub backup {backup}: {exc.strerror or exc}") from exc
    return backup, size


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms // 1000))


def describe(status: ScrubStatus) -> tuple[bool, str]:
    """The ``check`` line: (ok, detail)."""
    backup = (
        f"; the backup {status.backup_path} still holds the old raw tokens (`{DROP_COMMAND}` deletes it)"
        if status.backup_present else ""
    )
    if status.scrubbed_at_ms is None:
        if status.raw_tokens:
            return True, (
                f"legacy layout: {status.raw_tokens} of {status.dispatches} dispatch(es) store a raw lease token; "
                f"scrub them with `{SCRUB_COMMAND}`{backup}"
            )
        # Nothing to scrub: this runtime never writes one (a database it created has none), so no
        # command is suggested; docs/storage.md says when an old file still gains from the scrub.
        return True, f"no dispatch stores a raw lease token: nothing to scrub{backup}"
    where = f"scrubbed ({SCRUB_MIGRATION_ID}) at {_utc(status.scrubbed_at_ms)}"
    if status.raw_tokens:
        return False, (
            f"{where}, yet {status.raw_tokens} dispatch(es) store a raw lease token (written by another program?)"
        )
    if not status.cleaned:
        return False, f"{where}, but its cleanup (VACUUM) did not finish: run `{SCRUB_COMMAND}` again{backup}"
    return True, f"{where}: no raw lease token stored{backup or '; its backup was dropped'}"
