"""The start sequence as the PostgreSQL lease authority sees it: one fenced transaction to take a
queued Run, one to undo a start that made no process, and the sweep that finds Attempts stranded
by anyone (the Local rules of :mod:`edge_runtime.local.run_start`, in PostgreSQL):

- **Taking work is fenced.** :meth:`RunStarts.start_run` creates the Attempt, claims its Run Lease
  and crosses the start barrier in one transaction with one event, under the Worker and Run row
  locks, after checking the caller's session (id, generation, version; online and live).
- **A start that made no process is undone** by :meth:`RunStarts.abandon_start`, fenced by the
  grant as stored.
- **Orphans are found by any current session** (:meth:`RunStarts.sweep_orphans`), and so are the
  running Attempts of a worker that died (Cluster Profile only): they end ``lost``.

Lock order as everywhere: Worker -> Run -> Attempt -> Run Lease. Used through
:class:`cluster_postgres.worker_lease.PostgresWorkerLeaseRepository`.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import psycopg

from edge_runtime.contract.run_lease import (
    CANCEL_LOSS_GRACE_MS,
    EVENT_ATTEMPT_STARTING,
    EVENT_LEASE_COMPLETED,
    REASON_CANCEL_MET_BY_LOSS,
    REASON_ORPHAN_STARTING,
    REASON_ORPHAN_UNSTARTED,
    REASON_WORKER_GONE,
    ClaimedRunOutcome,
    LeaseStatus,
    NotClaimableOutcome,
    NotClaimableReason,
    RunLeaseRecord,
    StartRunCommand,
    StartRunOutcome,
    start_event_extra,
)
from edge_runtime.contract.runs import ACTIVE_RUN_STATUSES, AttemptStatus, RunStatus, attempt_event_key
from edge_runtime.contract.sql_vocabulary import ACTIVE_ATTEMPT_SQL, sql_literal
from edge_runtime.contract.transitions import capacity_refusal, grant_held, is_orphan_start, lease_mismatch, new_grant
from edge_runtime.contract.worker_lease import WorkerLeaseFenceRejectedError, digest_run_lease_token
from edge_runtime.contract.worker_session import SessionStatus
from cluster_postgres.errors import ClusterLeaseStorageError, Transaction, reading
from cluster_postgres.run_events import clamp, database_now
from cluster_postgres.run_lease import LOCK_RUN, lock_run_and_attempt, run_problem, run_version
from cluster_postgres.run_rows import RUN_COLUMNS, run_from_row
from cluster_postgres.runs import end_run, end_unstarted, insert_attempt
from cluster_postgres.worker_lease_rows import (
    COUNT_ACTIVE,
    LOCK_LEASE,
    LOCK_SESSION,
    NO_PROJECTION,
    close_grant,
    lease_event,
    lease_from_row,
    projection_of,
    write_grant,
)
from cluster_postgres.worker_session import WorkerSessions, expect

_replace = msgspec.structs.replace

# Attempts that recorded no process yet, with their grant and whether that grant's session is
# still its worker's current, non-offline, live session (the Local query, in PostgreSQL types).
_ORPHAN_CANDIDATES = f"""
SELECT a.id, a.status, a.created_at_ms, l.status, l.expires_at_ms,
       coalesce(s.session_id = l.session_id AND s.generation = l.session_generation
                AND s.status <> {sql_literal(SessionStatus.OFFLINE)} AND s.lease_expires_at_ms > t.now, false), t.now
FROM ql3.run_attempts a
CROSS JOIN (SELECT ql3.now_ms() AS now) t
LEFT JOIN ql3.run_dispatch_leases l ON l.attempt_id = a.id
LEFT JOIN ql3.worker_sessions s ON s.worker_id = l.worker_id
WHERE a.status IN {ACTIVE_ATTEMPT_SQL} AND a.status <> {sql_literal(AttemptStatus.RUNNING)} AND a.pid IS NULL
"""
_ALL_ORPHAN_CANDIDATES = _ORPHAN_CANDIDATES + "ORDER BY a.created_at_ms, a.id"
_ONE_ORPHAN_CANDIDATE = _ORPHAN_CANDIDATES + "AND a.id = %s"
# Running Attempts of a dead worker (Cluster Profile): its Run Lease ran out by database time and
# the worker has no live session of any generation (a worker that came back recovers its own
# Attempts, re-adopting what still runs). Attempts with a cancel request are left alone: the
# cancel stays pending for that worker, the only one that can signal its host's processes.
_DEAD_WORKER_ATTEMPTS = f"""
SELECT a.id
FROM ql3.run_attempts a
JOIN ql3.runs r ON r.id = a.run_id
JOIN ql3.run_dispatch_leases l ON l.attempt_id = a.id
CROSS JOIN (SELECT ql3.now_ms() AS now) t
LEFT JOIN ql3.worker_sessions s ON s.worker_id = l.worker_id
WHERE a.status = {sql_literal(AttemptStatus.RUNNING)} AND l.status = {sql_literal(LeaseStatus.LEASED)}
  AND l.expires_at_ms <= t.now
  AND NOT coalesce(s.status <> {sql_literal(SessionStatus.OFFLINE)} AND s.lease_expires_at_ms > t.now, false)
  -- A cancel waits CANCEL_LOSS_GRACE_MS past the session's expiry for its worker to deliver it.
  AND (r.cancel_requested_at_ms IS NULL OR coalesce(s.lease_expires_at_ms, 0) + {CANCEL_LOSS_GRACE_MS} <= t.now)
"""
_ALL_DEAD_WORKER_ATTEMPTS = _DEAD_WORKER_ATTEMPTS + "ORDER BY a.created_at_ms, a.id"
_ONE_DEAD_WORKER_ATTEMPT = _DEAD_WORKER_ATTEMPTS + "AND a.id = %s"


def _is_orphan(row: tuple[Any, ...], abandon_after_ms: int) -> bool:
    """``transitions.is_orphan_start`` on a row of ``_ALL_ORPHAN_CANDIDATES`` (database time)."""
    _, status, created_at_ms, lease_status, expires_at_ms, owner_live, now = row
    return is_orphan_start(attempt_status=status, created_at_ms=created_at_ms, lease_status=lease_status,
                           lease_expires_at_ms=expires_at_ms, owner_live=bool(owner_live), now_ms=now,
                           abandon_after_ms=abandon_after_ms)


class RunStarts:
    """The composed, fenced start: ``start_run``, ``abandon_start``, ``sweep_orphans``, each
    fenced through the Worker Session authority (:meth:`WorkerSessions.current`) or the grant.
    Shares the repository's connection and cursor."""

    __slots__ = ("_conn", "_cur", "_sessions")

    def __init__(self, conn: psycopg.Connection[Any], cur: psycopg.Cursor[Any], sessions: WorkerSessions) -> None:
        self._conn = conn
        self._cur = cur
        self._sessions = sessions

    def start_run(self, cmd: StartRunCommand) -> StartRunOutcome:
        """Take a queued Run: its next Attempt, its Run Lease and the start barrier, in one
        transaction under the Worker and Run row locks (the Local semantics; only ``claimed``
        writes anything).

        Raises:
            WorkerLeaseFenceRejectedError: the session is not the worker's current one, or its
                version moved (a heartbeat the caller has not seen).
            WorkerSessionRejectedError: the session is draining, offline or expired.
            WorkerLeaseRepositoryError: database failure; nothing written.
        """
        expect(cmd, StartRunCommand, "start_run")
        digest = digest_run_lease_token(cmd.lease_token)
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            session_row = cur.execute(LOCK_SESSION, (cmd.worker_id,)).fetchone()
            run_row = cur.execute(LOCK_RUN, (cmd.run_id,)).fetchone()
            now = clamp(cur, database_now(cur), None if session_row is None else session_row[12], None, "", "")
            session = self._sessions.current(session_row, cmd, now, (SessionStatus.ONLINE,))
            if session.version != cmd.session_version:
                raise WorkerLeaseFenceRejectedError(
                    f"session {cmd.session_id!r} of worker {cmd.worker_id!r} is at version {session.version}, "
                    f"not {cmd.session_version}; it takes no work on a stale fence"
                )
            reason = run_problem(run_row)
            if reason is None and run_row[1] != RunStatus.QUEUED.value:
                reason = NotClaimableReason.RUN_NOT_QUEUED
            if reason is not None:
                return NotClaimableOutcome(reason=reason)
            active = cur.execute(COUNT_ACTIVE, (cmd.worker_id, session.generation, "")).fetchone()[0]
            refusal = capacity_refusal(session, active)
            if refusal is not None:
                return refusal
            run = run_version(run_row)
            cur.execute("UPDATE ql3.runs SET status = %s WHERE id = %s", (RunStatus.DISPATCHING.value, cmd.run_id))
            number = insert_attempt(cur, cmd.run_id, cmd.attempt_id, now=now)
            claimed = new_grant(cmd, digest, now)
            write_grant(self._cur, (cmd.run_id, AttemptStatus.CLAIMED, *NO_PROJECTION), None, claimed, now)
            started = _replace(claimed, version=2, started_at_ms=now)
            write_grant(self._cur, (cmd.run_id, AttemptStatus.CLAIMED, *projection_of(claimed)), claimed, started, now,
                        set_status=AttemptStatus.STARTING)
            event = lease_event(self._cur, run, started, str(uuid.uuid4()), EVENT_ATTEMPT_STARTING, "starting", now,
                                dedupe_key=attempt_event_key(number, "start"),
                                **start_event_extra(number, cmd.offer_id))
            return ClaimedRunOutcome(lease=started, lease_token=cmd.lease_token, replayed=False, event=event)

    def abandon_start(self, lease: RunLeaseRecord, *, reason: str, actor_id: str) -> RunStatus:
        """Undo a start whose process was never spawned; the Run's status afterwards.

        Fenced by the grant as stored, not by the current session (a replaced service still knows
        it spawned nothing). Idempotent: a retry after our own committed abandon returns the status.

        Raises:
            WorkerLeaseFenceRejectedError: the grant moved (someone else settled this Attempt).
            WorkerLeaseRepositoryError: database failure; the caller retries.
        """
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            run_row, attempt = lock_run_and_attempt(cur, lease.attempt_id)
            row = cur.execute(LOCK_LEASE, (lease.attempt_id,)).fetchone()
            current = None if row is None else lease_from_row(row)
            now = database_now(cur)
            if current is not None and current.status is LeaseStatus.COMPLETED and current.version == lease.version + 1:
                return RunStatus(run_row[1])  # our own earlier attempt at this committed
            if not grant_held(current, lease.token_digest, worker_id=lease.worker_id,
                              session_generation=lease.session_generation,
                              lease_generation=lease.lease_generation, version=lease.version):
                raise WorkerLeaseFenceRejectedError(lease_mismatch(lease.attempt_id, current))
            run = run_version(run_row)
            now = clamp(cur, now, current.updated_at_ms, run, current.run_id, actor_id)
            return self._settle(lease.attempt_id, run, attempt, current, reason=reason, now=now,
                                actor_id=actor_id, may_have_started=False)

    def sweep_orphans(self, cmd: Any, *, abandon_after_ms: int) -> list[tuple[str, RunStatus]]:
        """End the Attempts stranded before a process was recorded, by any current session.

        ``cmd`` is the caller's session fence (``worker_id``, ``session_id``,
        ``session_generation``): only a current, online, live session sweeps. Reads first, then one
        short transaction per orphan that re-checks it under the row locks.

        Raises:
            WorkerLeaseFenceRejectedError, WorkerSessionRejectedError: the caller's session is not
                current (a fenced-out service changes nothing).
        """
        cur = self._cur
        with reading(ClusterLeaseStorageError):
            rows = cur.execute(_ALL_ORPHAN_CANDIDATES).fetchall()
        done = []
        for row in rows:
            if not _is_orphan(row, abandon_after_ms):
                continue
            with Transaction(self._conn, ClusterLeaseStorageError):
                session_row = cur.execute(LOCK_SESSION, (cmd.worker_id,)).fetchone()
                run_row, attempt = lock_run_and_attempt(cur, row[0])
                lease_row = cur.execute(LOCK_LEASE, (row[0],)).fetchone()
                now = database_now(cur)
                self._sessions.current(session_row, cmd, now, (SessionStatus.ONLINE,))
                fresh = cur.execute(_ONE_ORPHAN_CANDIDATE, (row[0],)).fetchone()
                if fresh is None or not _is_orphan(fresh, abandon_after_ms):
                    continue
                started = fresh[1] == AttemptStatus.STARTING
                lease = None if lease_row is None else lease_from_row(lease_row)
                run = run_version(run_row)
                if run is not None:
                    now = clamp(cur, now, None if lease is None else lease.updated_at_ms, run, attempt[0], cmd.worker_id)
                done.append((row[0], self._settle(
                    row[0], run, attempt, lease,
                    reason=REASON_ORPHAN_STARTING if started else REASON_ORPHAN_UNSTARTED, now=now,
                    actor_id=cmd.worker_id, may_have_started=started,
                )))
        done.extend(self._sweep_dead_workers(cmd))
        return done

    def _sweep_dead_workers(self, cmd: Any) -> list[tuple[str, RunStatus]]:
        """End ``lost`` the running Attempts of workers that died (``_DEAD_WORKER_ATTEMPTS``); their
        Runs fail, never requeued: the process may still run on the dead worker's host. A Run with
        a cancel request waits ``CANCEL_LOSS_GRACE_MS`` more for its worker, then ends ``cancelled``:
        the cancel is met by the loss (``REASON_CANCEL_MET_BY_LOSS``)."""
        cur = self._cur
        with reading(ClusterLeaseStorageError):
            ids = [row[0] for row in cur.execute(_ALL_DEAD_WORKER_ATTEMPTS).fetchall()]
        done = []
        for attempt_id in ids:
            with Transaction(self._conn, ClusterLeaseStorageError):
                session_row = cur.execute(LOCK_SESSION, (cmd.worker_id,)).fetchone()
                run_row, attempt = lock_run_and_attempt(cur, attempt_id)
                lease_row = cur.execute(LOCK_LEASE, (attempt_id,)).fetchone()
                now = database_now(cur)
                self._sessions.current(session_row, cmd, now, (SessionStatus.ONLINE,))
                if cur.execute(_ONE_DEAD_WORKER_ATTEMPT, (attempt_id,)).fetchone() is None:
                    continue  # its worker came back, or it ended, since the read
                lease = None if lease_row is None else lease_from_row(lease_row)
                run = run_version(run_row)
                if run is not None:
                    now = clamp(cur, now, None if lease is None else lease.updated_at_ms, run, attempt[0],
                                cmd.worker_id)
                done.append((attempt_id, self._settle(attempt_id, run, attempt, lease, reason=REASON_WORKER_GONE,
                                                      now=now, actor_id=cmd.worker_id, may_have_started=True,
                                                      lost_while_cancelling=True)))
        return done

    def _settle(self, attempt_id: str, run: list[int] | None, attempt: tuple[Any, ...] | None,
                lease: RunLeaseRecord | None, *, reason: str, now: int, actor_id: str,
                may_have_started: bool, lost_while_cancelling: bool = False) -> RunStatus:
        """Close the grant (if still held) and end the Attempt by ``end_unstarted``'s rule; the
        Run (``run``: its locked ``[version, event_sequence]``), the Attempt and the grant are
        locked by the caller. With ``lost_while_cancelling``, a Run with a cancel request ends
        ``cancelled`` and its Attempt ``lost``, the cancel met by the loss."""
        if run is None or attempt is None:
            raise ClusterLeaseStorageError(f"attempt {attempt_id!r} has no run")
        if lease is not None and lease.status is LeaseStatus.LEASED:
            completed = close_grant(self._cur, attempt, lease, now)
            lease_event(self._cur, run, completed, str(uuid.uuid4()), EVENT_LEASE_COMPLETED, "completed", now)
        record = run_from_row(self._cur.execute(f"SELECT {RUN_COLUMNS} FROM ql3.runs WHERE id = %s",
                                                (attempt[0],)).fetchone())
        if lost_while_cancelling and record.cancel_requested_at_ms is not msgspec.UNSET \
                and record.status in ACTIVE_RUN_STATUSES:
            self._cur.execute(
                "UPDATE ql3.run_attempts SET status = %s, end_reason = %s, finished_at_ms = %s, updated_at_ms = %s "
                "WHERE id = %s", (AttemptStatus.LOST.value, REASON_CANCEL_MET_BY_LOSS, now, now, attempt_id))
            end_run(self._cur, run, record.id, RunStatus.CANCELLED, now, actor_id, attempt_id=attempt_id,
                    extra={"attempt_status": AttemptStatus.LOST.value, "reason": REASON_CANCEL_MET_BY_LOSS})
            return RunStatus.CANCELLED
        return end_unstarted(self._cur, attempt_id, record, reason=reason, now=now, actor_id=actor_id,
                             may_have_started=may_have_started, fence=run)
