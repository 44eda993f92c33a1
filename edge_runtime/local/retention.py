"""Retention: the stored history stays bounded on a device that runs for years on a few MB of flash.

Policy (``serve`` configuration): keep at most ``retain_runs`` finished Runs and none finished more
than ``retain_days`` ago; keep the Attempt logs in the log directory under ``log_total_max_bytes``
in total (oldest deleted first); keep no empty log. A Run that is not finished is never touched.

Each :meth:`LocalRetention.prune_step` deletes at most :data:`BATCH_RUNS` whole Runs (the Run row
first, with deferred foreign keys, then its events, Attempts, dispatch row and Run Leases) in one
short ``BEGIN IMMEDIATE`` transaction: migration 0006's triggers refuse the delete of a Run that is
not finished and of any event whose Run still exists, and the deferred foreign keys refuse a
COMMIT that would leave any row of a deleted Run behind. A crash at any point leaves whole Runs.

Log files are removed after the commit, by name inside the log directory (``unlink`` with a
directory descriptor never follows a symlink; only regular files are counted or removed). Only
files named as this service names Attempt logs (``<attempt id>.log``) are ever counted or removed:
the log directory may be shared with other programs (``/var/log``); ``check`` lists what else is
there. A crash between the commit and the unlink leaves an orphan log, which the next sweep removes.

Space: the file uses ``auto_vacuum = INCREMENTAL`` (set on a new file; an existing file is
converted once by a ``VACUUM``, see :func:`ensure_incremental_vacuum`). Freed pages are reused by
later inserts; beyond a reserve, they are returned to the file system a few at a time. The WAL
is truncated by a ``wal_checkpoint(TRUNCATE)`` that waits for readers only briefly (README:
"Storage bounds").
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from edge_runtime.contract.ids import is_attempt_log_name
from edge_runtime.contract.log_files import LOG_MIN_AGE_MS, sweep_attempt_logs, unlink_regular
from edge_runtime.contract.run_lease import LeaseStatus
from edge_runtime.contract.runs import TERMINAL_RUN_STATUSES, RunStatus
from edge_runtime.contract.sql_vocabulary import ACTIVE_ATTEMPT_SQL, OPEN_DISPATCH_SQL, sql_in, sql_literal
from edge_runtime.local.database import DEFAULT_BUSY_TIMEOUT_MS, LocalDatabase, ensure_incremental_vacuum
from edge_runtime.local.errors import LocalStorageError, StorageErrors

#: Runs deleted per transaction: a few hundred rows, a few ms of write lock.
BATCH_RUNS = 16
#: Free space kept for reuse before any is returned to the file system, and the most returned per
#: step; in bytes, so a file's page size (4 KiB at first, then 1 KiB, 512 B since) does not change them.
FREE_BYTES_RESERVE = 1 << 20
VACUUM_BYTES_PER_STEP = 1 << 20
#: A WAL larger than this is truncated when the service is idle.
WAL_TRUNCATE_BYTES = 1 << 20
#: How long the WAL truncation waits for readers that still use it (it blocks writers meanwhile).
WAL_TRUNCATE_WAIT_MS = 100

_DAY_MS = 86_400_000
_FINISHED = f"status IN {sql_in(RunStatus, TERMINAL_RUN_STATUSES)} AND finished_at_ms IS NOT NULL"
# A finished Run whose cancellation dispatch or Run Lease is still live is kept until they settle.
_SETTLED = (
    f"NOT EXISTS (SELECT 1 FROM run_attempts a WHERE a.run_id = runs.id AND a.status IN {ACTIVE_ATTEMPT_SQL})"
    " AND NOT EXISTS (SELECT 1 FROM run_cancellation_dispatches d WHERE d.run_id = runs.id"
    f" AND d.status IN {OPEN_DISPATCH_SQL})"
    " AND NOT EXISTS (SELECT 1 FROM run_dispatch_leases l WHERE l.run_id = runs.id"
    f" AND l.status = {sql_literal(LeaseStatus.LEASED)})"
)


class RetentionPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The limits (declared with their defaults in the service configuration)."""

    retain_runs: int
    retain_days: int
    log_total_max_bytes: int


class RetentionError(LocalStorageError, code="LOCAL_RETENTION_FAILED"):
    """A retention step failed; it was rolled back whole and is retried later."""


#: Database failures (and a bad clock value) become :class:`RetentionError`, retryable when the
#: database was busy: the one mapper of every Local repository.
retention_errors = StorageErrors(RetentionError)


class RetentionPlan(msgspec.Struct, frozen=True):
    """What retention would remove next (``check``)."""

    finished_runs: int
    runs_to_remove: int
    oldest_finished_at_ms: int | None


def plan(db: LocalDatabase, policy: RetentionPolicy, now_ms: int) -> RetentionPlan:
    """Read only: how many finished Runs are stored and how many the policy removes now."""
    connection = db.connection
    cutoff = now_ms - policy.retain_days * _DAY_MS
    finished, oldest, expired = connection.execute(
        f"SELECT count(*), min(finished_at_ms), count(*) FILTER (WHERE finished_at_ms < ?) FROM runs WHERE {_FINISHED}",
        (cutoff,),
    ).fetchone()
    return RetentionPlan(finished, max(finished - policy.retain_runs, expired, 0), oldest)


class LocalRetention:
    """The retention port on the local database; ``log_dir`` None leaves log files alone.
    ``log_dir_fd``: the service's held descriptor of ``log_dir`` (``hold_trusted_directory``):
    logs are listed and removed relative to it, never through ``log_dir``'s path again."""

    __slots__ = ("_db", "_policy", "_log_dir", "_log_dir_fd", "_sweep_due")

    def __init__(self, db: LocalDatabase, policy: RetentionPolicy, log_dir: Path | None, *,
                 log_dir_fd: int | None = None) -> None:
        self._db = db
        self._policy = policy
        self._log_dir = log_dir
        self._log_dir_fd = log_dir_fd
        self._sweep_due = True

    def attempts_ended(self) -> None:
        self._sweep_due = True

    def prune_step(self) -> bool:
        try:
            with retention_errors():
                deleted_logs = self._delete_batch()
        except RetentionError as exc:
            if exc.retryable:
                return True  # another writer holds the lock: try again at the next idle moment
            raise
        if deleted_logs is not None:
            self._sweep_due = True
            try:
                self._unlink_logs(deleted_logs)
            except OSError as exc:  # the Runs are gone; the sweep removes their logs later
                raise RetentionError(f"cannot remove logs of pruned runs: {exc.strerror or exc}") from exc
            return True
        if self._sweep_due:  # once after each round of deletions (and at start): logs, pages, WAL
            try:
                with retention_errors():
                    self.sweep_logs()
                    if ensure_incremental_vacuum(self._db.connection):  # once, on a file from before 0006
                        return True
                    self._return_free_pages()
            except RetentionError as exc:
                if exc.retryable:
                    return False  # another writer: the sweep stays due and runs at the next check
                raise
            except OSError as exc:
                raise RetentionError(f"retention sweep of the log directory failed: {exc.strerror or exc}") from exc
            self._sweep_due = False
        # At every idle check, pruned or not: readers that follow one another must not grow it.
        with retention_errors():
            self._truncate_wal()
        return False

    # ------------------------------------------------------------------ Runs

    def _delete_batch(self) -> list[str] | None:
        """Delete up to BATCH_RUNS whole finished Runs; their log paths, or None if none was due."""
        connection = self._db.connection
        with self._db.write() as now_ms:
            due = plan(self._db, self._policy, now_ms).runs_to_remove
            if due <= 0:
                return None
            # The `due` oldest finished Runs are beyond the policy; one not settled yet is skipped
            # (kept for now), never replaced by a newer one.
            ids = [row[0] for row in connection.execute(
                f"SELECT id FROM (SELECT id, finished_at_ms FROM runs WHERE {_FINISHED} ORDER BY finished_at_ms, id"
                f" LIMIT ?) AS runs WHERE {_SETTLED} ORDER BY finished_at_ms, id LIMIT ?",
                (due, BATCH_RUNS),
            )]
            if not ids:
                return None
            marks = ", ".join("?" * len(ids))
            logs = [row[0] for row in connection.execute(
                f"SELECT log_path FROM run_attempts WHERE run_id IN ({marks}) AND log_path IS NOT NULL", ids)]
            connection.execute("PRAGMA defer_foreign_keys = ON")  # checked at COMMIT: whole Runs only
            connection.execute(f"DELETE FROM runs WHERE id IN ({marks})", ids)
            for table in ("run_events", "run_dispatch_leases", "run_cancellation_dispatches", "run_attempts"):
                connection.execute(f"DELETE FROM {table} WHERE run_id IN ({marks})", ids)
        return logs

    # ------------------------------------------------------------------ logs

    def _open_log_dir(self) -> int | None:
        if self._log_dir is None:
            return None
        if self._log_dir_fd is not None:
            return os.dup(self._log_dir_fd)  # closed after use, like an opened one
        try:
            return os.open(self._log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None

    def _unlink_logs(self, log_paths: list[str]) -> None:
        """Remove the logs of deleted Attempts that lie in the log directory (by name: a stored path
        elsewhere is never followed)."""
        fd = self._open_log_dir()
        if fd is None:
            return
        try:
            for log_path in log_paths:
                if os.path.dirname(log_path) == os.fspath(self._log_dir) \
                        and is_attempt_log_name(os.path.basename(log_path)):
                    unlink_regular(fd, os.path.basename(log_path))
        finally:
            os.close(fd)

    def sweep_logs(self) -> int:
        """Remove empty and orphan logs (older than LOG_MIN_AGE_MS), then the oldest logs until the
        total is under ``log_total_max_bytes``; logs of active Attempts are never removed.
        Returns the bytes of regular ``.log`` files kept."""
        fd = self._open_log_dir()
        if fd is None:
            return 0
        try:
            return self._sweep(fd)
        finally:
            os.close(fd)

    def _sweep(self, fd: int) -> int:
        connection = self._db.connection

        def classify(names: list[str]) -> tuple[set[str], set[str]]:
            with self._db.snapshot():
                known = {os.path.basename(p) for (p,) in connection.execute(
                    "SELECT log_path FROM run_attempts WHERE log_path IS NOT NULL")}
                active = {os.path.basename(p) for (p,) in connection.execute(
                    f"SELECT log_path FROM run_attempts WHERE status IN {ACTIVE_ATTEMPT_SQL} AND log_path IS NOT NULL")}
            return known, active

        return sweep_attempt_logs(fd, classify, max_total_bytes=self._policy.log_total_max_bytes,
                                  min_age_ms=LOG_MIN_AGE_MS)

    # ------------------------------------------------------------------ space

    def _return_free_pages(self) -> None:
        connection = self._db.connection
        free = connection.execute("PRAGMA freelist_count").fetchone()[0]
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        spare = free - max(FREE_BYTES_RESERVE // page_size, pages // 4)
        if spare > 0 and connection.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
            step = min(spare, VACUUM_BYTES_PER_STEP // page_size)
            with self._db.write():
                for _ in connection.execute(f"PRAGMA incremental_vacuum({step})"):
                    pass

    def _truncate_wal(self) -> None:
        """Checkpoint and truncate a large WAL; readers of an older snapshot delay it only briefly
        (busy: the next sweep tries again)."""
        try:
            size = os.stat(f"{self._db.path}-wal").st_size
        except FileNotFoundError:
            return
        if size <= WAL_TRUNCATE_BYTES:
            return
        connection = self._db.connection
        connection.set_busy_timeout(WAL_TRUNCATE_WAIT_MS)
        try:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            connection.set_busy_timeout(DEFAULT_BUSY_TIMEOUT_MS)


def log_dir_contents(log_dir: Path) -> tuple[int, list[str]] | None:
    """Total bytes of the Attempt logs in ``log_dir`` (regular files named as Attempt logs;
    symlinks not followed) and the sorted names of the other entries, which retention leaves
    alone; None if the directory is absent."""
    total, others = 0, []
    try:
        with os.scandir(log_dir) as entries:
            for entry in entries:
                if is_attempt_log_name(entry.name) and entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
                elif not entry.name.endswith(".fifo"):  # a running Attempt's output pipe
                    others.append(entry.name)
    except FileNotFoundError:
        return None
    return total, sorted(others)
