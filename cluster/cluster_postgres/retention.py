"""Retention on the cluster: the history bounded by database time, the policy set once in the database.

The policy is the one row of ``ql3.retention_settings`` (migration 0006; defaults the device's,
``edge_runtime/contract/retention.py``), so every worker prunes by the same rule. The runtime role
has no DELETE: each worker's retention step calls ``ql3.prune_history(batch)``, a SECURITY DEFINER
function owned by ``ql3_retention``, a NOLOGIN role that may delete only finished history (row
level security), which removes at most ``BATCH_RUNS`` whole finished Runs (events, Attempts, log
copies, leases, dispatch, fire records) in one short transaction and skips any Run another
transaction holds (``FOR UPDATE SKIP LOCKED``): a live Run is never locked. Workers pruning at
once take different Runs.

Each worker bounds its own log directory as a device does (:mod:`edge_runtime.contract.log_files`,
``log_total_max_bytes``), and removes at once the logs of the Attempts a batch it ran deleted.

``edge-runtime-cluster retention set [--runs N] [--days D]`` and ``retention show [--json]``
(:mod:`cluster_postgres.commands`) read and change the policy; ``check`` reports it with what is
kept.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import psycopg

from cluster_postgres.errors import ClusterRunStorageError, Transaction, reading
from cluster_postgres.run_events import database_now
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.ids import is_attempt_log_name
from edge_runtime.contract.log_files import LOG_MIN_AGE_MS, sweep_attempt_logs, unlink_regular
from edge_runtime.contract.retention import RetainDays, RetainRuns
from edge_runtime.contract.runs import TERMINAL_RUN_STATUSES, RunStatus
from edge_runtime.contract.sql_vocabulary import ACTIVE_ATTEMPT_SQL, sql_in
from edge_runtime.service.config import ConfigError

#: Runs one ``ql3.prune_history`` call deletes at most (the function refuses more than 256).
BATCH_RUNS = 16
_DAY_MS = 86_400_000
_FINISHED = f"status IN {sql_in(RunStatus, TERMINAL_RUN_STATUSES)} AND finished_at_ms IS NOT NULL"
_HISTORY_TABLES = ("runs", "run_events", "run_attempts", "attempt_logs")


class RetentionSettings(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """The policy and what the history holds now (``retention show``, ``check``)."""

    retain_runs: int
    retain_days: int
    updated_at_ms: int
    finished_runs: int
    active_runs: int
    runs_beyond_policy: int
    oldest_finished_at_ms: int | None
    #: Bytes on disk of each history table (with its indexes and TOAST).
    table_bytes: dict[str, int]


class _Policy(msgspec.Struct, frozen=True, kw_only=True):
    retain_runs: RetainRuns | msgspec.UnsetType = msgspec.UNSET
    retain_days: RetainDays | msgspec.UnsetType = msgspec.UNSET


class PostgresRetentionRepository:
    """The policy row and the prune function on a ``ql3_runtime`` connection."""

    __slots__ = ("_conn", "_cur")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._cur = conn.cursor()

    def settings(self) -> RetentionSettings:
        with Transaction(self._conn, ClusterRunStorageError):
            self._cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            row = self._cur.execute("SELECT retain_runs, retain_days, updated_at_ms, ql3.now_ms() "
                                    "FROM ql3.retention_settings WHERE id = 1").fetchone()
            if row is None:
                raise ClusterRunStorageError("ql3.retention_settings has no policy row (migration 0006)")
            runs, days, updated, now = row
            finished, oldest, expired = self._cur.execute(
                f"SELECT count(*), min(finished_at_ms), count(*) FILTER (WHERE finished_at_ms < %s) "
                f"FROM ql3.runs WHERE {_FINISHED}", (now - days * _DAY_MS,)).fetchone()
            active = self._cur.execute(
                f"SELECT count(*) FROM ql3.runs WHERE NOT ({_FINISHED})").fetchone()[0]
            sizes = dict(self._cur.execute(
                "SELECT t, pg_total_relation_size(('ql3.' || t)::regclass) FROM unnest(%s::text[]) AS t",
                (list(_HISTORY_TABLES),)).fetchall())
        return RetentionSettings(retain_runs=runs, retain_days=days, updated_at_ms=updated, finished_runs=finished,
                                 active_runs=active, runs_beyond_policy=max(finished - runs, expired, 0),
                                 oldest_finished_at_ms=oldest, table_bytes=sizes)

    def set_policy(self, *, retain_runs: int | None, retain_days: int | None) -> RetentionSettings:
        """Change the policy (only what is given); every worker prunes by it from its next step."""
        try:
            msgspec.convert({k: v for k, v in (("retain_runs", retain_runs), ("retain_days", retain_days))
                             if v is not None}, _Policy)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"retention: {exc}") from None
        if retain_runs is None and retain_days is None:
            raise ConfigError("retention set: give --runs N, --days D or both")
        with Transaction(self._conn, ClusterRunStorageError):
            self._cur.execute("SELECT 1 FROM ql3.retention_settings WHERE id = 1 FOR NO KEY UPDATE")
            now = database_now(self._cur)
            self._cur.execute("UPDATE ql3.retention_settings SET retain_runs = coalesce(%s, retain_runs), "
                              "retain_days = coalesce(%s, retain_days), updated_at_ms = %s WHERE id = 1",
                              (retain_runs, retain_days, now))
        return self.settings()

    def prune(self, batch: int = BATCH_RUNS) -> tuple[int, list[str], bool]:
        """One batch: (Runs deleted, their Attempt ids, whether more is due)."""
        with Transaction(self._conn, ClusterRunStorageError):
            deleted, attempts, more = self._cur.execute(
                "SELECT runs_deleted, attempt_ids, more FROM ql3.prune_history(%s)", (batch,)).fetchone()
        return deleted, list(attempts), more

    def classify(self, names: list[str]) -> tuple[set[str], set[str]]:
        """Of these log names, those the database knows an Attempt of, and those whose Attempt is active."""
        ids = [name[: -len(".log")] for name in names]
        with reading(ClusterRunStorageError):
            rows = self._cur.execute(
                f"SELECT id, status IN {ACTIVE_ATTEMPT_SQL} "
                "FROM ql3.run_attempts WHERE id = ANY(%s)", (ids,)).fetchall()
        return {f"{i}.log" for i, _ in rows}, {f"{i}.log" for i, active in rows if active}


class PostgresRetention:
    """The service's ``Retention`` port on a cluster worker: database history and this host's logs.

    ``log_dir_fd``: the service's held descriptor of ``log_dir`` (``hold_trusted_directory``): the
    sweep works relative to the directory that was checked, never to its name again."""

    __slots__ = ("_repository", "_log_dir", "_log_dir_fd", "_log_total_max_bytes", "_sweep_due")

    def __init__(self, repository: Any, log_dir: Path | None, *, log_total_max_bytes: int,
                 log_dir_fd: int | None = None) -> None:
        self._repository = repository
        self._log_dir = log_dir
        self._log_dir_fd = log_dir_fd
        self._log_total_max_bytes = log_total_max_bytes
        self._sweep_due = True

    def attempts_ended(self) -> None:
        self._sweep_due = True

    def prune_step(self) -> bool:
        try:
            deleted, attempts, more = self._repository.prune(BATCH_RUNS)
        except EdgeRuntimeError as exc:
            if exc.retryable:
                return True  # the database was busy or away: try again at the next idle moment
            raise
        if deleted:
            self._sweep_due = True
            try:
                self._remove_logs(attempts)
            except OSError as exc:  # the Runs are gone; the sweep removes their logs later
                raise ClusterRunStorageError(f"cannot remove logs of pruned runs: {exc.strerror or exc}") from exc
            return True
        if self._sweep_due:
            try:
                self.sweep_logs()
            except OSError as exc:
                raise ClusterRunStorageError(f"retention sweep of the log directory failed: {exc.strerror or exc}") \
                    from exc
            self._sweep_due = False
        return more

    def _open_log_dir(self) -> int | None:
        if self._log_dir_fd is not None:
            return os.dup(self._log_dir_fd)  # closed after use, like an opened one
        if self._log_dir is None:
            return None
        try:
            return os.open(self._log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None

    def _remove_logs(self, attempt_ids: list[str]) -> None:
        fd = self._open_log_dir()
        if fd is None:
            return
        try:
            for attempt_id in attempt_ids:
                if is_attempt_log_name(f"{attempt_id}.log"):
                    unlink_regular(fd, f"{attempt_id}.log")
        finally:
            os.close(fd)

    def sweep_logs(self) -> int:
        """Bound this host's log directory as a device does; the bytes of Attempt logs kept."""
        fd = self._open_log_dir()
        if fd is None:
            return 0
        try:
            return sweep_attempt_logs(fd, self._repository.classify, max_total_bytes=self._log_total_max_bytes,
                                      min_age_ms=LOG_MIN_AGE_MS)
        finally:
            os.close(fd)
