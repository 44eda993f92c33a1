"""Run Lease operations of the Local repository (spec §5): claim, renew, release, start, complete.

Each is one ``BEGIN IMMEDIATE`` transaction that reads the injected clock once, after the write
lock is held; rows are touched in the order Worker session -> Run -> Attempt -> Run Lease. The
write lock serializes every claim's capacity count with its insert, across processes. An expired
lease is never evidence that a process stopped, and nothing here reports "not running". Raw
bearer tokens are digested in memory and never written, logged or put in an event.
Used through :class:`edge_runtime.local.worker_lease.LocalWorkerLeaseRepository`.
"""

from __future__ import annotations

from typing import Any

import apsw
import msgspec

from edge_runtime.contract.run_events import RunEvent
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
    dedupe_key_for,
    lease_event_payload,
)
from edge_runtime.contract.worker_lease import (
    RunNotStartableError,
    StartBarrierPassedError,
    WorkerLeaseFenceRejectedError,
    WorkerLeaseRepositoryError,
    digest_run_lease_token,
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
from edge_runtime.contract.worker_session import SessionStatus
from edge_runtime.local.run_events import append_run_event
from edge_runtime.local.run_rows import RunFence, read_attempt_fence, read_run_fence
from edge_runtime.local.worker_lease_rows import count_other_active, read_lease, repository_errors, write_grant
from edge_runtime.local.worker_session import bump, expect


_UNSET = msgspec.UNSET
_replace = msgspec.structs.replace


def run_problem(run: RunFence | None) -> NotClaimableReason | None:
    """Why the Run may not be leased now (``transitions.not_claimable``), None when it may."""
    if run is None:
        return NotClaimableReason.RUN_MISSING
    return not_claimable(run.execution_owner, run.status, run.cancel_requested_at_ms)


def complete_with_attempt_end(connection: apsw.Connection, attempt_id: str, now: int) -> RunLeaseRecord | None:
    """Close the Attempt's grant inside the transaction that ends the Attempt; the completed grant,
    or None when none is held (never granted, or already completed or released).

    One commit where the port's ``finish_attempt`` + ``complete`` would take two (the PostgreSQL
    store does the same: ``cluster_postgres.worker_lease_rows.complete_held_grant``). Any
    holder's grant is closed: once its Attempt ended a grant can fence nothing, and the service
    always completes it next anyway (its ``complete`` then finds nothing left to do). The row and
    projection are those :meth:`LocalRunLeases.complete` writes; the caller records the completion
    in the Run's end event (:func:`completed_grant_extra`), or appends ``run.lease_completed`` with
    :func:`lease_event` when the Run had already ended.
    """
    current = read_lease(connection, attempt_id)
    if current is None or current.status is not LeaseStatus.LEASED:
        return None
    return close_grant(connection, current, now)


def close_grant(connection: apsw.Connection, lease: RunLeaseRecord, now: int) -> RunLeaseRecord:
    """Complete the held grant ``lease`` now (its Attempt ended, or never started): the completed
    grant, written with its Attempt's projection cleared."""
    completed = _replace(lease, status=LeaseStatus.COMPLETED, version=bump(lease.version, "lease"),
                         completed_at_ms=now, updated_at_ms=now)
    write_grant(connection, lease, completed, now_ms=now)
    return completed


def lease_event(
    connection: apsw.Connection,
    run: RunFence | None,
    lease: RunLeaseRecord,
    event_id: str,
    event_type: str,
    step: str,
    now: int,
    *,
    dedupe_key: str | None = None,
    **extra: Any,
) -> RunEvent:
    """Append a Run Lease event keyed by its grant's ``step`` (or by ``dedupe_key``: the composed
    start's one event is keyed by its Attempt's number)."""
    return append_run_event(
        connection,
        run_id=lease.run_id,
        event_id=event_id,
        event_type=event_type,
        dedupe_key=dedupe_key or dedupe_key_for(lease.attempt_id, lease.lease_generation, step),
        actor_type="worker",
        actor_id=lease.worker_id,
        attempt_id=lease.attempt_id,
        payload=lease_event_payload(lease, **extra),
        now_ms=now,
        run_version=None if run is None else (run.version, run.event_sequence),
    )


class RunLeases:
    """The Run Lease authority: claim, renew, release, begin_start, complete; every grant is fenced
    by the worker's current session, which it asks the session authority for.

    A part of :class:`~edge_runtime.local.worker_lease.LocalWorkerLeaseRepository`: the database
    (``_db``) and the session fence (``_current_session``) are the session authority's, its base."""

    __slots__ = ()

    # ================================================================= run leases

    def claim_run(self, cmd: ClaimRunCommand) -> ClaimRunOutcome:
        """Claim the Run Lease of a ``claimed`` Attempt for the caller's current session.

        Returns ``claimed`` (new grant, or ``replayed`` for the same digest, offer and fence),
        ``leased`` (someone else holds a live grant), ``not_claimable`` or ``no_capacity``.

        Raises:
            WorkerLeaseFenceRejectedError: the session is not the worker's current one, or the
                Attempt's projection does not match its lease.
            WorkerSessionRejectedError: the session is draining, offline or expired.
            WorkerLeaseRepositoryError: duplicate event id, broken row or database failure.
        """
        expect(cmd, ClaimRunCommand, "claim_run")
        digest = digest_run_lease_token(cmd.lease_token)
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            session = self._current_session(cmd, now, allowed=(SessionStatus.ONLINE,))
            run = read_run_fence(connection, cmd.run_id)
            reason = run_problem(run)
            if reason is not None:
                return NotClaimableOutcome(reason=reason)
            attempt = read_attempt_fence(connection, cmd.attempt_id)
            if attempt is None or attempt.run_id != cmd.run_id:
                return NotClaimableOutcome(reason=NotClaimableReason.ATTEMPT_MISSING)
            if attempt.status != AttemptStatus.CLAIMED:
                return NotClaimableOutcome(reason=NotClaimableReason.ATTEMPT_NOT_CLAIMED)

            existing = read_lease(connection, cmd.attempt_id)
            if existing is not None:
                if existing.status is LeaseStatus.COMPLETED:
                    return NotClaimableOutcome(reason=NotClaimableReason.LEASE_COMPLETED)
                if existing.started_at_ms is not _UNSET:
                    raise WorkerLeaseRepositoryError(
                        f"attempt {cmd.attempt_id!r} is claimed but its lease was started; it fails closed"
                    )
                if existing.is_live(now):
                    if claim_replayed(existing, cmd, digest):
                        return ClaimedRunOutcome(lease=existing, lease_token=cmd.lease_token, replayed=True)
                    return LeasedRunOutcome(lease=existing)
                # An expired grant that never started, or a released one: a new grant may follow.

            active = count_other_active(connection, cmd.worker_id, session.generation, cmd.attempt_id)
            refusal = capacity_refusal(session, active)
            if refusal is not None:
                return refusal

            lease = new_grant(cmd, digest, now) if existing is None else new_grant(
                cmd, digest, now, lease_generation=bump(existing.lease_generation, "lease generation"),
                version=bump(existing.version, "lease"))
            write_grant(connection, existing, lease, now_ms=now, require_status=AttemptStatus.CLAIMED)
            event = lease_event(self._db.connection, 
                run, lease, cmd.event_id, EVENT_LEASE_CLAIMED, "claimed", now, offer_id=cmd.offer_id
            )
            return ClaimedRunOutcome(lease=lease, lease_token=cmd.lease_token, replayed=False, event=event)

    def renew(self, cmd: RenewRunLeaseCommand) -> RunLeaseRecord:
        """Extend a held grant by ``lease_duration_ms`` from now.

        CAS on the lease version and on the Attempt projection. A grant that expired but was
        not taken over may still be renewed: its version and digest still fence it.

        Raises:
            WorkerLeaseFenceRejectedError: not the current session, or the lease or projection
                does not match the caller's fence.
            WorkerSessionRejectedError: the session is offline or expired.
        """
        expect(cmd, RenewRunLeaseCommand, "renew")
        digest = digest_run_lease_token(cmd.lease_token)
        with repository_errors(), self._db.write() as now:
            self._current_session(cmd, now, allowed=(SessionStatus.ONLINE, SessionStatus.DRAINING))
            current = self._fenced_lease(cmd, digest)
            lease = _replace(
                current,
                version=bump(current.version, "lease"),
                expires_at_ms=now + cmd.lease_duration_ms,
                renewed_at_ms=now,
                updated_at_ms=now,
            )
            write_grant(self._db.connection, current, lease, now_ms=now)
            return lease

    def release(self, cmd: ReleaseRunLeaseCommand) -> LeaseTransitionOutcome:
        """Give back a grant whose Attempt is still ``claimed``; clears the projection.

        The session need not be live (giving authority back is always safe) but must still be
        the worker's current one: a replaced session's fences are void.

        Raises:
            WorkerLeaseFenceRejectedError: not the current session, or a lease mismatch.
            StartBarrierPassedError: the Attempt is no longer ``claimed``.
        """
        expect(cmd, ReleaseRunLeaseCommand, "release")
        digest = digest_run_lease_token(cmd.lease_token)
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            self._current_session(cmd, now, allowed=tuple(SessionStatus), require_live=False)
            current = self._fenced_lease(cmd, digest)
            self._require_claimed(current, "released")
            lease = _replace(
                current,
                status=LeaseStatus.RELEASED,
                version=bump(current.version, "lease"),
                released_at_ms=now,
                release_reason=cmd.reason,
                updated_at_ms=now,
            )
            write_grant(connection, current, lease, now_ms=now, require_status=AttemptStatus.CLAIMED)
            run = read_run_fence(connection, current.run_id)
            event = lease_event(self._db.connection, run, lease, cmd.event_id, EVENT_LEASE_RELEASED, "released", now, reason=cmd.reason.value)
            return LeaseTransitionOutcome(lease=lease, event=event)

    def begin_start(self, cmd: BeginStartCommand) -> LeaseTransitionOutcome:
        """The start barrier: Attempt ``claimed`` -> ``starting`` under a live grant.

        After it the grant can no longer be released or taken over. The Run's own status is the
        device service's business and is not touched here.

        Raises:
            WorkerLeaseFenceRejectedError: not the current session, a lease mismatch, or the
                grant has expired (renew it first).
            WorkerSessionRejectedError: the session is offline or expired.
            StartBarrierPassedError: the Attempt is no longer ``claimed``.
            RunNotStartableError: the Run is cancel-requested, terminal or not runtime-owned.
        """
        expect(cmd, BeginStartCommand, "begin_start")
        digest = digest_run_lease_token(cmd.lease_token)
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            self._current_session(cmd, now, allowed=(SessionStatus.ONLINE, SessionStatus.DRAINING))
            current = self._fenced_lease(cmd, digest)
            if not current.is_live(now):
                raise WorkerLeaseFenceRejectedError(
                    f"the lease of attempt {cmd.attempt_id!r} has expired; renew it before starting"
                )
            run = read_run_fence(connection, current.run_id)
            reason = run_problem(run)
            if reason is not None:
                raise RunNotStartableError(f"run {current.run_id!r} may not start: {reason.value}")
            self._require_claimed(current, "started")
            lease = _replace(current, version=bump(current.version, "lease"), started_at_ms=now, updated_at_ms=now)
            write_grant(connection, current, lease, now_ms=now, set_status=AttemptStatus.STARTING,
                        require_status=AttemptStatus.CLAIMED)
            event = lease_event(self._db.connection, run, lease, cmd.event_id, EVENT_ATTEMPT_STARTING, "starting", now)
            return LeaseTransitionOutcome(lease=lease, event=event)

    def complete(self, cmd: CompleteRunLeaseCommand) -> LeaseTransitionOutcome:
        """Close a grant because its Attempt ended; clears the Attempt projection.

        Fenced by the grant (worker, its session generation, lease generation, version and token
        digest), not by the worker's current session, which may be a newer one that adopted the
        Attempt after a restart. No live session or lease is required: this records that a
        process ended, it grants nothing. The Attempt's status is not changed here.

        Raises:
            WorkerLeaseFenceRejectedError: no such active grant, or any fence field differs.
        """
        expect(cmd, CompleteRunLeaseCommand, "complete")
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            current = read_lease(connection, cmd.attempt_id)
            if not grant_held(current, cmd.token_digest, worker_id=cmd.worker_id,
                              session_generation=cmd.session_generation, lease_generation=cmd.lease_generation,
                              version=cmd.expected_version):
                raise WorkerLeaseFenceRejectedError(lease_mismatch(cmd.attempt_id, current))
            lease = close_grant(connection, current, now)
            attempt = read_attempt_fence(connection, cmd.attempt_id)
            run = read_run_fence(connection, current.run_id)
            event = lease_event(self._db.connection, run, lease, cmd.event_id, EVENT_LEASE_COMPLETED, "completed", now, attempt_status=attempt.status)
            return LeaseTransitionOutcome(lease=lease, event=event)

    # ----------------------------------------------------------------- helpers

    def _fenced_lease(self, cmd: Any, digest: str) -> RunLeaseRecord:
        current = read_lease(self._db.connection, cmd.attempt_id)
        if not grant_held(current, digest, worker_id=cmd.worker_id, session_id=cmd.session_id,
                          session_generation=cmd.session_generation, version=cmd.expected_version):
            raise WorkerLeaseFenceRejectedError(lease_mismatch(cmd.attempt_id, current))
        return current

    def _require_claimed(self, lease: RunLeaseRecord, action: str) -> None:
        attempt = read_attempt_fence(self._db.connection, lease.attempt_id)
        status = None if attempt is None else attempt.status
        if status != AttemptStatus.CLAIMED or lease.started_at_ms is not _UNSET:
            raise StartBarrierPassedError(
                f"attempt {lease.attempt_id!r} is {status}, not claimed; its lease cannot be {action}"
            )
