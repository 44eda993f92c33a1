"""Run Lease operations of the PostgreSQL repository: claim, renew, release, begin_start, complete.

Each is one READ COMMITTED transaction locking its rows ``FOR NO KEY UPDATE`` in the order
Worker -> Run -> Attempt -> Run Lease and reading database time once, after the last lock. A
claim's capacity is decided under the Worker row lock, against
``min(max_concurrent_runs, available_slots)``, so concurrent dispatchers never oversell a slot.
Bearer tokens are digested in Python; only digests reach the server. An expired lease is never
evidence that a process stopped. Used through
:class:`cluster_postgres.worker_lease.PostgresWorkerLeaseRepository`.
"""

from __future__ import annotations

from typing import Any

import msgspec
import psycopg

from edge_runtime.contract.run_lease import (
    EVENT_ATTEMPT_STARTING,
    EVENT_LEASE_CLAIMED,
    EVENT_LEASE_COMPLETED,
    EVENT_LEASE_RELEASED,
    BeginStartCommand,
    ClaimedRunOutcome,
    ClaimRunCommand,
    ClaimRunOutcome,
    CompleteRunLeaseCommand,
    LeasedRunOutcome,
    LeaseStatus,
    LeaseTransitionOutcome,
    NotClaimableOutcome,
    NotClaimableReason,
    ReleaseRunLeaseCommand,
    RenewRunLeaseCommand,
    RunLeaseRecord,
)
from edge_runtime.contract.runs import AttemptStatus
from edge_runtime.contract.transitions import (
    capacity_refusal,
    claim_replayed,
    grant_held,
    lease_mismatch,
    new_grant,
    not_claimable,
)
from edge_runtime.contract.worker_lease import (
    RunNotStartableError,
    StartBarrierPassedError,
    WorkerLeaseFenceRejectedError,
    digest_run_lease_token,
)
from edge_runtime.contract.worker_session import SessionStatus
from cluster_postgres.errors import ClusterLeaseStorageError, Transaction
from cluster_postgres.run_events import clamp, database_now
from cluster_postgres.worker_lease_rows import (
    COUNT_ACTIVE,
    LOCK_ATTEMPT,
    LOCK_LEASE,
    LOCK_SESSION,
    bump,
    close_grant,
    lease_event,
    lease_from_row,
    write_grant,
)
from cluster_postgres.worker_session import WorkerSessions, expect

_UNSET = msgspec.UNSET
_replace = msgspec.structs.replace

LOCK_RUN = (
    "SELECT execution_owner, status, cancel_requested_at_ms, version, event_sequence FROM ql3.runs "
    "WHERE id = %s FOR NO KEY UPDATE"
)
ATTEMPT_RUN_ID = "SELECT run_id FROM ql3.run_attempts WHERE id = %s"  # immutable: read before locking the Run


def lock_run_and_attempt(cur: psycopg.Cursor[Any], attempt_id: str
                         ) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
    """Lock the Attempt's Run, then the Attempt (the Run id of an Attempt never changes)."""
    found = cur.execute(ATTEMPT_RUN_ID, (attempt_id,)).fetchone()
    run_row = None if found is None else cur.execute(LOCK_RUN, (found[0],)).fetchone()
    return run_row, cur.execute(LOCK_ATTEMPT, (attempt_id,)).fetchone()


def run_version(run_row: tuple[Any, ...] | None) -> list[int] | None:
    """The locked Run's ``[version, event_sequence]``, advanced by each event appended."""
    return None if run_row is None else [run_row[3], run_row[4]]


def run_problem(run: tuple[Any, ...] | None) -> NotClaimableReason | None:
    """Why the Run (owner, status, cancel request) may not be leased now, None when it may."""
    if run is None:
        return NotClaimableReason.RUN_MISSING
    return not_claimable(run[0], run[1], run[2])


class RunLeases:
    """The Run Lease authority: claim, renew, release, begin_start, complete; every grant is fenced
    by the caller's current session (:meth:`WorkerSessions.current`), except ``complete``, which
    the grant itself fences. Shares the repository's connection and cursor."""

    __slots__ = ("_conn", "_cur", "_sessions")

    def __init__(self, conn: psycopg.Connection[Any], cur: psycopg.Cursor[Any], sessions: WorkerSessions) -> None:
        self._conn = conn
        self._cur = cur
        self._sessions = sessions

    def claim_run(self, cmd: ClaimRunCommand) -> ClaimRunOutcome:
        """Claim the Run Lease of a ``claimed`` Attempt for the caller's current session.

        Capacity is counted under the Worker row lock, so no two dispatchers can both take the
        last slot.
        """
        expect(cmd, ClaimRunCommand, "claim_run")
        digest = digest_run_lease_token(cmd.lease_token)
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            session_row = cur.execute(LOCK_SESSION, (cmd.worker_id,)).fetchone()
            run_row = cur.execute(LOCK_RUN, (cmd.run_id,)).fetchone()
            attempt = cur.execute(LOCK_ATTEMPT, (cmd.attempt_id,)).fetchone()
            lease_row = cur.execute(LOCK_LEASE, (cmd.attempt_id,)).fetchone()
            existing = None if lease_row is None else lease_from_row(lease_row)
            run = run_version(run_row)
            now = clamp(cur, database_now(cur), None if existing is None else existing.updated_at_ms, run,
                        cmd.run_id, cmd.worker_id)
            session = self._sessions.current(session_row, cmd, now, (SessionStatus.ONLINE,))
            reason = run_problem(run_row)
            if reason is not None:
                return NotClaimableOutcome(reason=reason)
            if attempt is None or attempt[0] != cmd.run_id:
                return NotClaimableOutcome(reason=NotClaimableReason.ATTEMPT_MISSING)
            if attempt[1] != AttemptStatus.CLAIMED:
                return NotClaimableOutcome(reason=NotClaimableReason.ATTEMPT_NOT_CLAIMED)
            if existing is not None:
                if existing.status is LeaseStatus.COMPLETED:
                    return NotClaimableOutcome(reason=NotClaimableReason.LEASE_COMPLETED)
                if existing.started_at_ms is not _UNSET:
                    raise ClusterLeaseStorageError(
                        f"attempt {cmd.attempt_id!r} is claimed but its lease was started; it fails closed"
                    )
                if existing.is_live(now):
                    if claim_replayed(existing, cmd, digest):
                        return ClaimedRunOutcome(lease=existing, lease_token=cmd.lease_token, replayed=True)
                    return LeasedRunOutcome(lease=existing)
            active = cur.execute(COUNT_ACTIVE, (cmd.worker_id, session.generation, cmd.attempt_id)).fetchone()[0]
            refusal = capacity_refusal(session, active)
            if refusal is not None:
                return refusal
            lease = new_grant(cmd, digest, now) if existing is None else new_grant(
                cmd, digest, now, lease_generation=bump(existing.lease_generation, "lease generation"),
                version=bump(existing.version, "lease"))
            write_grant(self._cur, attempt, existing, lease, now)
            event = lease_event(self._cur, run, lease, cmd.event_id, EVENT_LEASE_CLAIMED, "claimed", now, offer_id=cmd.offer_id)
            return ClaimedRunOutcome(lease=lease, lease_token=cmd.lease_token, replayed=False, event=event)

    def renew(self, cmd: RenewRunLeaseCommand) -> RunLeaseRecord:
        expect(cmd, RenewRunLeaseCommand, "renew")
        digest = digest_run_lease_token(cmd.lease_token)
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            session_row = cur.execute(LOCK_SESSION, (cmd.worker_id,)).fetchone()
            attempt = cur.execute(LOCK_ATTEMPT, (cmd.attempt_id,)).fetchone()
            current, now = self._locked_lease(cmd, digest, session_row, (SessionStatus.ONLINE, SessionStatus.DRAINING))
            lease = _replace(current, version=bump(current.version, "lease"), expires_at_ms=now + cmd.lease_duration_ms,
                             renewed_at_ms=now, updated_at_ms=now)
            write_grant(self._cur, attempt, current, lease, now)
            return lease

    def release(self, cmd: ReleaseRunLeaseCommand) -> LeaseTransitionOutcome:
        expect(cmd, ReleaseRunLeaseCommand, "release")
        digest = digest_run_lease_token(cmd.lease_token)
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            session_row = cur.execute(LOCK_SESSION, (cmd.worker_id,)).fetchone()
            run_row, attempt = lock_run_and_attempt(cur, cmd.attempt_id)
            run = run_version(run_row)
            current, now = self._locked_lease(cmd, digest, session_row, tuple(SessionStatus), require_live=False, run=run)
            self._require_claimed(attempt, current, "released")
            lease = _replace(current, status=LeaseStatus.RELEASED, version=bump(current.version, "lease"),
                             released_at_ms=now, release_reason=cmd.reason, updated_at_ms=now)
            write_grant(self._cur, attempt, current, lease, now)
            event = lease_event(self._cur, run, lease, cmd.event_id, EVENT_LEASE_RELEASED, "released", now, reason=cmd.reason.value)
            return LeaseTransitionOutcome(lease=lease, event=event)

    def begin_start(self, cmd: BeginStartCommand) -> LeaseTransitionOutcome:
        expect(cmd, BeginStartCommand, "begin_start")
        digest = digest_run_lease_token(cmd.lease_token)
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            session_row = cur.execute(LOCK_SESSION, (cmd.worker_id,)).fetchone()
            run_row, attempt = lock_run_and_attempt(cur, cmd.attempt_id)
            run = run_version(run_row)
            current, now = self._locked_lease(cmd, digest, session_row, (SessionStatus.ONLINE, SessionStatus.DRAINING),
                                              run=run)
            if not current.is_live(now):
                raise WorkerLeaseFenceRejectedError(
                    f"the lease of attempt {cmd.attempt_id!r} has expired; renew it before starting"
                )
            reason = run_problem(run_row)
            if reason is not None:
                raise RunNotStartableError(f"run {current.run_id!r} may not start: {reason.value}")
            self._require_claimed(attempt, current, "started")
            lease = _replace(current, version=bump(current.version, "lease"), started_at_ms=now, updated_at_ms=now)
            write_grant(self._cur, attempt, current, lease, now, set_status=AttemptStatus.STARTING)
            event = lease_event(self._cur, run, lease, cmd.event_id, EVENT_ATTEMPT_STARTING, "starting", now)
            return LeaseTransitionOutcome(lease=lease, event=event)

    def complete(self, cmd: CompleteRunLeaseCommand) -> LeaseTransitionOutcome:
        """Close a grant because its Attempt ended, fenced by the grant itself (not the current session)."""
        expect(cmd, CompleteRunLeaseCommand, "complete")
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            run_row, attempt = lock_run_and_attempt(cur, cmd.attempt_id)
            run = run_version(run_row)
            row = cur.execute(LOCK_LEASE, (cmd.attempt_id,)).fetchone()
            current = None if row is None else lease_from_row(row)
            if not grant_held(current, cmd.token_digest, worker_id=cmd.worker_id,
                              session_generation=cmd.session_generation, lease_generation=cmd.lease_generation,
                              version=cmd.expected_version):
                raise WorkerLeaseFenceRejectedError(lease_mismatch(cmd.attempt_id, current))
            now = clamp(cur, database_now(cur), current.updated_at_ms, run, current.run_id, cmd.worker_id)
            lease = close_grant(self._cur, attempt, current, now)
            event = lease_event(self._cur, run, lease, cmd.event_id, EVENT_LEASE_COMPLETED, "completed", now,
                                attempt_status=attempt[1])
            return LeaseTransitionOutcome(lease=lease, event=event)

    def _locked_lease(self, cmd: Any, digest: str, session_row: tuple[Any, ...] | None,
                      allowed: tuple[SessionStatus, ...], *, require_live: bool = True, run: list[int] | None = None
                      ) -> tuple[RunLeaseRecord, int]:
        cur = self._cur
        row = cur.execute(LOCK_LEASE, (cmd.attempt_id,)).fetchone()
        current = None if row is None else lease_from_row(row)
        now = clamp(cur, database_now(cur), None if current is None else current.updated_at_ms, run,
                    "" if current is None else current.run_id, cmd.worker_id)
        self._sessions.current(session_row, cmd, now, allowed, require_live)
        if not grant_held(current, digest, worker_id=cmd.worker_id, session_id=cmd.session_id,
                          session_generation=cmd.session_generation, version=cmd.expected_version):
            raise WorkerLeaseFenceRejectedError(lease_mismatch(cmd.attempt_id, current))
        return current, now

    @staticmethod
    def _require_claimed(attempt: tuple[Any, ...] | None, lease: RunLeaseRecord, action: str) -> None:
        status = None if attempt is None else attempt[1]
        if status != AttemptStatus.CLAIMED or lease.started_at_ms is not _UNSET:
            raise StartBarrierPassedError(
                f"attempt {lease.attempt_id!r} is {status}, not claimed; its lease cannot be {action}"
            )
