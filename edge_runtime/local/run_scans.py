"""The device service's scans of Runs and Attempts: what to start, watch, cancel and kill, and when.

Read-only queries over partial indexes (migration 0003), so an idle service costs almost nothing.
They read the injected clock for "due" and never decide anything under the write lock: the
claim or transition that follows re-checks under ``BEGIN IMMEDIATE``.
:class:`edge_runtime.local.runs.LocalRunRepository` inherits them.
"""

from __future__ import annotations

from edge_runtime.contract.runs import AttemptRecord, CancellationCandidate, KillCandidate
from edge_runtime.local.clock import read_now_ms
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.run_rows import (
    ACTIVE_ATTEMPT_SQL,
    ACTIVE_RUN_SQL,
    ATTEMPT_COLUMNS,
    attempt_from_row,
    run_repository_errors,
)


class RunScans:
    """Scans for the service; a subclass provides ``self._db``."""

    __slots__ = ()
    _db: LocalDatabase

    def queued_run_ids(self, limit: int) -> list[str]:
        """Oldest queued Runs without a cancel request, to start."""
        with run_repository_errors():
            rows = self._db.connection.execute(
                "SELECT id FROM runs WHERE status = 'queued' AND cancel_requested_at_ms IS NULL "
                "AND execution_owner = 'runtime' ORDER BY created_at_ms, rowid LIMIT ?",
                (limit,),
            ).fetchall()
            return [row[0] for row in rows]


    def active_attempts(self) -> list[AttemptRecord]:
        """Every Attempt that may still own a process (for watching and restart recovery)."""
        with run_repository_errors():
            rows = self._db.connection.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM run_attempts WHERE status IN {ACTIVE_ATTEMPT_SQL} ORDER BY created_at_ms"
            ).fetchall()
            return [attempt_from_row(row) for row in rows]

    def cancellation_candidates(self, limit: int = 32) -> list[CancellationCandidate]:
        """Cancel-requested active Runs whose active Attempt has no dispatch yet, or a due one.

        Due means: pending/retry_wait with ``next_attempt_at_ms <= now``, or a lease that expired.
        A read; the claim decides for real under the write lock.
        """
        now = read_now_ms(self._db.clock)
        with run_repository_errors():
            rows = self._db.connection.execute(
                f"""
                SELECT r.id, a.id, r.cancel_requested_at_ms
                FROM runs r
                JOIN run_attempts a ON a.run_id = r.id AND a.status IN {ACTIVE_ATTEMPT_SQL}
                LEFT JOIN run_cancellation_dispatches d ON d.run_id = r.id
                WHERE r.cancel_requested_at_ms IS NOT NULL AND r.status IN {ACTIVE_RUN_SQL}
                  AND r.execution_owner = 'runtime'
                  AND (d.run_id IS NULL
                       OR (d.attempt_id = a.id AND d.status IN ('pending', 'retry_wait') AND d.next_attempt_at_ms <= ?1)
                       OR (d.attempt_id = a.id AND d.status = 'leased' AND d.lease_expires_at_ms <= ?1))
                ORDER BY r.cancel_requested_at_ms
                LIMIT ?2
                """,
                (now, limit),
            ).fetchall()
            return [CancellationCandidate(*row) for row in rows]

    def kill_candidates(self) -> list[KillCandidate]:
        """Active Attempts whose SIGKILL deadline has passed and that were not killed yet."""
        now = read_now_ms(self._db.clock)
        with run_repository_errors():
            rows = self._db.connection.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM run_attempts WHERE kill_deadline_at_ms IS NOT NULL "
                f"AND killed_at_ms IS NULL AND status IN {ACTIVE_ATTEMPT_SQL} AND kill_deadline_at_ms <= ?",
                (now,),
            ).fetchall()
        candidates = []
        for row in rows:
            attempt = attempt_from_row(row)
            identity = attempt.identity
            if identity is not None:
                candidates.append(KillCandidate(attempt.id, attempt.run_id, identity, attempt.kill_deadline_at_ms))
        return candidates

    def next_due_at_ms(self) -> int | None:
        """The earliest future time at which cancellation or kill work becomes due, or None.

        Lets the service sleep exactly until then instead of polling.
        """
        with run_repository_errors():
            row = self._db.connection.execute(
                f"""
                SELECT min(t) FROM (
                    SELECT min(d.next_attempt_at_ms) AS t FROM run_cancellation_dispatches d
                      JOIN runs r ON r.id = d.run_id AND r.status IN {ACTIVE_RUN_SQL}
                      WHERE d.status IN ('pending', 'retry_wait')
                    UNION ALL
                    SELECT min(d.lease_expires_at_ms) FROM run_cancellation_dispatches d
                      JOIN runs r ON r.id = d.run_id AND r.status IN {ACTIVE_RUN_SQL}
                      WHERE d.status = 'leased'
                    UNION ALL
                    SELECT min(kill_deadline_at_ms) FROM run_attempts
                      WHERE kill_deadline_at_ms IS NOT NULL AND killed_at_ms IS NULL
                        AND status IN {ACTIVE_ATTEMPT_SQL}
                )
                """
            ).fetchone()
            return row[0]
