"""The start sequence as the lease authority sees it: one fenced transaction to take a queued Run,
one to undo a start that made no process, and the sweep that finds Attempts stranded by anyone.

The rules of the start sequence (every queued Run runs exactly once) live here:

- **Taking work is fenced.** :meth:`start_run` creates the Attempt, claims its Run Lease and
  crosses the start barrier in one ``BEGIN IMMEDIATE`` transaction with one event
  (``run.attempt_starting``, :func:`start_event_extra`), after checking the caller's
  session (id, generation, version; online and live). A refused or fenced-out caller writes
  nothing: no Attempt, no event. A busy database, an I/O error or a full disk roll all of it back.
- **Capacity comes from the authority**: the session's ``leased`` grants, counted under the write
  lock, against ``min(max_concurrent_runs, available_slots)``. Grants of earlier or other
  sessions never count against it.
- **A start that made no process is undone** by :meth:`abandon_start` (grant-fenced, so it works
  after the session was replaced): the Attempt ends ``lost``, the grant ``completed`` and the Run
  goes back to ``queued`` (``cancelled`` if a cancel arrived), in one transaction.
- **Orphans are found by any current session** (:meth:`sweep_orphans`): an Attempt before the
  barrier (``claimed``) whose grant is missing past a Run Lease, released, expired or held by a
  session that is no longer current and live is requeued; one that crossed the barrier without a
  recorded process (``starting``) is ended once its grant expired and its owner is gone, and its
  Run fails, because a process may have started (a command never runs twice).

Lock order as everywhere: Worker session -> Run -> Attempt -> Run Lease.
"""

from __future__ import annotations

from typing import Any

import msgspec

from edge_runtime.contract.run_lease import (
    EVENT_ATTEMPT_STARTING,
    EVENT_LEASE_COMPLETED,
    ClaimedRunOutcome,
    LeaseStatus,
    NotClaimableOutcome,
    NotClaimableReason,
    REASON_ORPHAN_STARTING,
    REASON_ORPHAN_UNSTARTED,
    RunLeaseRecord,
    StartRunCommand,
    StartRunOutcome,
    start_event_extra,
)
from edge_runtime.contract.ids import new_id
from edge_runtime.contract.runs import AttemptStatus, RunStatus, attempt_event_key
from edge_runtime.contract.sql_vocabulary import ACTIVE_ATTEMPT_SQL, sql_literal
from edge_runtime.contract.worker_lease import WorkerLeaseFenceRejectedError, digest_run_lease_token
from edge_runtime.contract.worker_session import SessionStatus
from edge_runtime.local.clock import read_now_ms
from edge_runtime.contract.transitions import capacity_refusal, grant_held, is_orphan_start, lease_mismatch, new_grant
from edge_runtime.local.run_lease import close_grant, lease_event, run_problem
from edge_runtime.local.run_rows import RUN_COLUMNS, read_run_fence, run_from_row
from edge_runtime.local.runs import end_unstarted
from edge_runtime.local.worker_lease_rows import count_other_active, read_lease, repository_errors, write_grant
from edge_runtime.local.worker_session import expect

_replace = msgspec.structs.replace

#: The executor every Local Attempt runs on.
EXECUTOR_LOCAL_PROCESS = "local_process"

# The reasons are the contract's (edge_runtime.contract.run_lease), shared with the Cluster Profile.

# Attempts that recorded no process yet, with their grant and whether that grant's session is
# still its worker's current, non-offline, live session. The IN list repeats the partial index's.
_ORPHAN_CANDIDATES = f"""
SELECT a.id, a.status, a.created_at_ms, l.status, l.expires_at_ms,
       coalesce(s.session_id = l.session_id AND s.generation = l.session_generation
                AND s.status <> {sql_literal(SessionStatus.OFFLINE)} AND s.lease_expires_at_ms > ?1, 0)
FROM run_attempts a
LEFT JOIN run_dispatch_leases l ON l.attempt_id = a.id
LEFT JOIN worker_sessions s ON s.worker_id = l.worker_id
WHERE a.status IN {ACTIVE_ATTEMPT_SQL} AND a.status <> {sql_literal(AttemptStatus.RUNNING)} AND a.pid IS NULL
"""
_ALL_ORPHAN_CANDIDATES = _ORPHAN_CANDIDATES + "ORDER BY a.created_at_ms"
_ONE_ORPHAN_CANDIDATE = _ORPHAN_CANDIDATES + "AND a.id = ?2"


def _new_event_id() -> str:
    return new_id()


def _insert_attempt(connection: Any, run_id: str, attempt_id: str, *, now: int) -> int:
    """Insert the Run's next Attempt as ``claimed``; its number.

    Private to :meth:`RunStarts.start_run`, inside its write transaction, after the session fence
    was checked and the Run moved to ``dispatching``: no other path creates an Attempt ("taking work
    is fenced"; ``tests/unit/test_run_start.py`` keeps it that way). The start's one
    event records it (:data:`EVENT_ATTEMPT_STARTING` with the Attempt's number).
    """
    number = connection.execute(
        "SELECT coalesce(max(attempt), 0) + 1 FROM run_attempts WHERE run_id = ?", (run_id,)
    ).fetchone()[0]
    connection.execute(
        "INSERT INTO run_attempts (id, run_id, attempt, status, executor_type, created_at_ms, updated_at_ms) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (attempt_id, run_id, number, AttemptStatus.CLAIMED.value, EXECUTOR_LOCAL_PROCESS, now, now),
    )
    return number


def _is_orphan(row: tuple[Any, ...], now: int, abandon_after_ms: int) -> bool:
    """``transitions.is_orphan_start`` on a row of ``_ALL_ORPHAN_CANDIDATES``."""
    _, status, created_at_ms, lease_status, expires_at_ms, owner_live = row
    return is_orphan_start(attempt_status=status, created_at_ms=created_at_ms, lease_status=lease_status,
                           lease_expires_at_ms=expires_at_ms, owner_live=bool(owner_live), now_ms=now,
                           abandon_after_ms=abandon_after_ms)


class RunStarts:
    """The composed start and its compensations, on the Run Lease authority's rows; see the module
    docstring. Fenced by the worker's current session, which it asks the session authority for.

    A part of :class:`~edge_runtime.local.worker_lease.LocalWorkerLeaseRepository`, like
    :class:`~edge_runtime.local.run_lease.RunLeases`."""

    __slots__ = ()

    def start_run(self, cmd: StartRunCommand) -> StartRunOutcome:
        """Take a queued Run: its next Attempt, its Run Lease and the start barrier, in one step.

        Returns ``claimed`` (the Attempt is ``starting``; the lease carries ``started_at_ms``),
        ``not_claimable`` (the Run is not queued, cancel-requested, terminal or not
        runtime-owned) or ``no_capacity``. Only ``claimed`` writes anything.

        Raises:
            WorkerLeaseFenceRejectedError: the session is not the worker's current one, or its
                version moved (a heartbeat the caller has not seen).
            WorkerSessionRejectedError: the session is draining, offline or expired.
            WorkerLeaseRepositoryError: database failure (retryable when busy); nothing written.
        """
        expect(cmd, StartRunCommand, "start_run")
        digest = digest_run_lease_token(cmd.lease_token)
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            session = self._current_session(cmd, now, allowed=(SessionStatus.ONLINE,))
            if session.version != cmd.session_version:
                raise WorkerLeaseFenceRejectedError(
                    f"session {cmd.session_id!r} of worker {cmd.worker_id!r} is at version {session.version}, "
                    f"not {cmd.session_version}; it takes no work on a stale fence"
                )
            run = read_run_fence(connection, cmd.run_id)
            reason = run_problem(run)
            if reason is None and run.status != RunStatus.QUEUED.value:
                reason = NotClaimableReason.RUN_NOT_QUEUED
            if reason is not None:
                return NotClaimableOutcome(reason=reason)
            active = count_other_active(connection, cmd.worker_id, session.generation, "")
            refusal = capacity_refusal(session, active)
            if refusal is not None:
                return refusal
            connection.execute("UPDATE runs SET status = ? WHERE id = ? AND status = ?",
                               (RunStatus.DISPATCHING.value, cmd.run_id, RunStatus.QUEUED.value))
            number = _insert_attempt(connection, cmd.run_id, cmd.attempt_id, now=now)
            claimed = new_grant(cmd, digest, now)
            write_grant(connection, None, claimed, now_ms=now, require_status=AttemptStatus.CLAIMED)
            started = _replace(claimed, version=2, started_at_ms=now)
            write_grant(connection, claimed, started, now_ms=now, set_status=AttemptStatus.STARTING,
                        require_status=AttemptStatus.CLAIMED)
            event = lease_event(connection, None, started, _new_event_id(), EVENT_ATTEMPT_STARTING, "starting", now,
                                dedupe_key=attempt_event_key(number, "start"),
                                **start_event_extra(number, cmd.offer_id))
            return ClaimedRunOutcome(lease=started, lease_token=cmd.lease_token, replayed=False, event=event)

    def abandon_start(self, lease: RunLeaseRecord, *, reason: str, actor_id: str) -> RunStatus:
        """Undo a start whose process was never spawned; the Run's status afterwards.

        Fenced by the grant as stored (worker, session generation, lease generation, version,
        digest), not by the current session: a service that was replaced meanwhile still knows
        for certain that it spawned nothing. The Attempt must still be ``claimed`` or ``starting``
        with no recorded process. Idempotent: an Attempt that already ended is left as it is.

        Raises:
            WorkerLeaseFenceRejectedError: the grant moved (someone else settled this Attempt).
            WorkerLeaseRepositoryError: database failure; the caller retries.
        """
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            current = read_lease(connection, lease.attempt_id)
            if current is not None and current.status is LeaseStatus.COMPLETED and current.version == lease.version + 1:
                return self._run_status(lease.run_id)  # our own earlier attempt at this committed
            if not grant_held(current, lease.token_digest, worker_id=lease.worker_id,
                              session_generation=lease.session_generation,
                              lease_generation=lease.lease_generation, version=lease.version):
                raise WorkerLeaseFenceRejectedError(lease_mismatch(lease.attempt_id, current))
            return self._settle(current, reason=reason, now=now, actor_id=actor_id, may_have_started=False)

    def sweep_orphans(self, cmd: Any, *, abandon_after_ms: int) -> list[tuple[str, RunStatus]]:
        """End the Attempts stranded before a process was recorded, by any session; what was done.

        ``cmd`` is the caller's session fence (``worker_id``, ``session_id``,
        ``session_generation``): only a current, online, live session sweeps. Reads first, then
        one short transaction per orphan that re-checks it under the write lock.

        Raises:
            WorkerLeaseFenceRejectedError, WorkerSessionRejectedError: the caller's session is
                not current (a fenced-out service changes nothing).
        """
        with repository_errors():
            now = read_now_ms(self._db.clock)
            rows = self._db.connection.execute(_ALL_ORPHAN_CANDIDATES, (now,)).fetchall()
        done = []
        for row in rows:
            if not _is_orphan(row, now, abandon_after_ms):
                continue
            with repository_errors(), self._db.write() as now:
                self._current_session(cmd, now, allowed=(SessionStatus.ONLINE,))
                fresh = self._db.connection.execute(_ONE_ORPHAN_CANDIDATE, (now, row[0])).fetchone()
                if fresh is None or not _is_orphan(fresh, now, abandon_after_ms):
                    continue
                lease = read_lease(self._db.connection, row[0])
                started = fresh[1] == AttemptStatus.STARTING
                done.append((row[0], self._settle_attempt(
                    row[0], lease, reason=REASON_ORPHAN_STARTING if started else REASON_ORPHAN_UNSTARTED,
                    now=now, actor_id=cmd.worker_id, may_have_started=started,
                )))
        return done

    # ----------------------------------------------------------------- helpers

    def _settle(self, lease: RunLeaseRecord, **kwargs: Any) -> RunStatus:
        return self._settle_attempt(lease.attempt_id, lease, **kwargs)

    def _settle_attempt(
        self, attempt_id: str, lease: RunLeaseRecord | None, *, reason: str, now: int, actor_id: str,
        may_have_started: bool,
    ) -> RunStatus:
        """Close the grant (if still held) and end the Attempt by :func:`end_unstarted`'s rule."""
        connection = self._db.connection
        if lease is not None and lease.status is LeaseStatus.LEASED:
            completed = close_grant(connection, lease, now)
            lease_event(self._db.connection, None, completed, _new_event_id(), EVENT_LEASE_COMPLETED, "completed", now)
        row = connection.execute(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE id = (SELECT run_id FROM run_attempts WHERE id = ?)", (attempt_id,)
        ).fetchone()
        return end_unstarted(connection, attempt_id, run_from_row(row), reason=reason, now=now, actor_id=actor_id,
                             may_have_started=may_have_started)

    def _run_status(self, run_id: str) -> RunStatus:
        return RunStatus(self._db.connection.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()[0])
