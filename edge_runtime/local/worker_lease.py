"""Local Worker Session and Run Lease repository (spec §5, ADR-0057 Local Profile).

Each mutation is one ``BEGIN IMMEDIATE`` transaction that reads the injected clock once, after
the write lock is held. SQLite has one writer, so the write lock plays the part of ADR-0057's
Worker row lock: a claim's capacity count and its insert can never interleave with another
claim, in this process or any other. Rows are touched in the order Worker session -> Run ->
Attempt -> Run Lease.

Lease and session state is about *authority*, never about processes: an offline session or an
expired lease does not mean that a process stopped, and nothing here reports "not running".
Raw bearer tokens are digested in memory and never written, logged or put in an event.
"""

from __future__ import annotations

import hmac
from typing import Any

import msgspec

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
    NoCapacityOutcome,
    NotClaimableOutcome,
    NotClaimableReason,
    ReleaseRunLeaseCommand,
    RenewRunLeaseCommand,
    RunLeaseRecord,
    dedupe_key_for,
)
from edge_runtime.contract.worker_lease import (
    ATTEMPT_ID_MAX_LENGTH,
    MAX_VERSION,
    WORKER_ID_MAX_LENGTH,
    InvalidWorkerLeaseCommandError,
    RunNotStartableError,
    StartBarrierPassedError,
    WorkerLeaseFenceRejectedError,
    WorkerLeaseRepositoryError,
    WorkerSessionRejectedError,
    digest_run_lease_token,
    reject,
)
from edge_runtime.contract.run_events import RunEvent
from edge_runtime.contract.validation import identifier_problem
from edge_runtime.contract.worker_session import (
    DrainCommand,
    HeartbeatCommand,
    OfflineCommand,
    RegisteredOutcome,
    RegisterOutcome,
    RegisterWorkerCommand,
    ReplayedOutcome,
    SessionStatus,
    WorkerSessionRecord,
)
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.run_events import append_run_event
from edge_runtime.local.worker_lease_rows import (
    count_other_active,
    move_projection,
    read_active_leases,
    read_lease,
    read_session,
    repository_errors,
    store_lease,
    store_session,
)

#: Run statuses that may still execute (spec §4); the rest are terminal.
ACTIVE_RUN_STATUSES = frozenset(
    {"created", "queued", "dispatching", "running", "waiting_approval", "retry_wait", "lost"}
)

_UNSET = msgspec.UNSET
_replace = msgspec.structs.replace
_SELECT_RUN = "SELECT execution_owner, status, cancel_requested_at_ms, version, event_sequence FROM runs WHERE id = ?"
_SELECT_ATTEMPT = "SELECT run_id, status FROM run_attempts WHERE id = ?"


def _bump(version: int, what: str) -> int:
    if version >= MAX_VERSION:
        raise WorkerLeaseRepositoryError(f"{what} has reached the maximum version")
    return version + 1


def _expect(cmd: Any, kind: type, operation: str) -> None:
    if not isinstance(cmd, kind):
        raise InvalidWorkerLeaseCommandError(f"{operation} expects a {kind.__name__}, got {type(cmd).__name__}")


class LocalWorkerLeaseRepository:
    """Fenced Worker Sessions and Run Leases on a :class:`LocalDatabase`."""

    __slots__ = ("_db",)

    def __init__(self, db: LocalDatabase) -> None:
        self._db = db

    # ================================================================= reads

    def find_session(self, worker_id: str) -> WorkerSessionRecord | None:
        """The worker's current session, or None.

        Raises:
            InvalidWorkerLeaseCommandError: ``worker_id`` is not a valid identifier.
            WorkerLeaseRepositoryError: a broken stored row, or the database failed.
        """
        reject(identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH))
        with repository_errors():
            return read_session(self._db.connection, worker_id)

    def find_lease(self, attempt_id: str) -> RunLeaseRecord | None:
        """The Attempt's Run Lease (any status), or None. See :meth:`find_session` for errors."""
        reject(identifier_problem("attempt_id", attempt_id, ATTEMPT_ID_MAX_LENGTH))
        with repository_errors():
            return read_lease(self._db.connection, attempt_id)

    def count_active_leases(self, worker_id: str) -> int:
        """``leased`` grants (expired or not) of the worker's *current* session; 0 without one.

        This is the count a claim compares with the session's capacity.
        """
        reject(identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH))
        with repository_errors():
            session = read_session(self._db.connection, worker_id)
            if session is None:
                return 0
            return count_other_active(self._db.connection, worker_id, session.generation, "")

    def list_active_leases(self, worker_id: str) -> list[RunLeaseRecord]:
        """Every ``leased`` grant of the worker, of any session generation (for restart recovery).

        An expired grant is listed too: expiry says nothing about the process.
        """
        reject(identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH))
        with repository_errors():
            return read_active_leases(self._db.connection, worker_id)

    # ================================================================= sessions

    def register(self, cmd: RegisterWorkerCommand) -> RegisterOutcome:
        """Register a session: first, idempotent replay, or replacement of the current one.

        Raises:
            WorkerSessionRejectedError: same session id, but conflicting capabilities or capacity,
                or the session is draining, offline or expired.
            WorkerLeaseRepositoryError: broken stored row, version overflow or database failure.
        """
        _expect(cmd, RegisterWorkerCommand, "register")
        caps_hash = cmd.capabilities_hash
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            current = read_session(connection, cmd.worker_id)
            fresh = dict(
                session_id=cmd.session_id,
                status=SessionStatus.ONLINE,
                capabilities=cmd.capabilities,
                capabilities_hash=caps_hash,
                max_concurrent_runs=cmd.max_concurrent_runs,
                available_slots=cmd.max_concurrent_runs,
                heartbeat_at_ms=now,
                lease_expires_at_ms=now + cmd.lease_duration_ms,
                updated_at_ms=now,
            )
            if current is None:
                session = WorkerSessionRecord(
                    worker_id=cmd.worker_id, generation=1, version=0, created_at_ms=now, **fresh
                )
                store_session(connection, session, None)
                return RegisteredOutcome(session=session, replaced_session=False)
            if current.session_id == cmd.session_id:
                problem = self._replay_problem(current, cmd, caps_hash, now)
                if problem is not None:
                    raise WorkerSessionRejectedError(
                        f"session {cmd.session_id!r} of worker {cmd.worker_id!r} cannot be registered again: {problem}"
                    )
                return ReplayedOutcome(session=current)
            # A new session id replaces the old session; every fence of the old one is now stale.
            session = _replace(
                current,
                generation=_bump(current.generation, "session generation"),
                version=_bump(current.version, "session"),
                **fresh,
            )
            store_session(connection, session, current.version)
            return RegisteredOutcome(session=session, replaced_session=True)

    @staticmethod
    def _replay_problem(current: WorkerSessionRecord, cmd: RegisterWorkerCommand, caps_hash: str, now: int) -> str | None:
        if current.status is not SessionStatus.ONLINE:
            return f"it is {current.status.value}"
        if not current.is_live(now):
            return "its session lease has expired"
        if current.capabilities_hash != caps_hash:
            return "its capabilities differ"
        if current.max_concurrent_runs != cmd.max_concurrent_runs:
            return "its max_concurrent_runs differs"
        return None

    def heartbeat(self, cmd: HeartbeatCommand) -> WorkerSessionRecord:
        """Extend a live online or draining session's lease and record its free slots.

        Raises:
            InvalidWorkerLeaseCommandError: ``available_slots`` exceeds ``max_concurrent_runs``.
            WorkerLeaseFenceRejectedError: worker, session, generation or version do not match.
            WorkerSessionRejectedError: the session is offline or its lease has expired.
        """
        _expect(cmd, HeartbeatCommand, "heartbeat")
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            current = self._fenced_session(cmd, now, allowed=(SessionStatus.ONLINE, SessionStatus.DRAINING))
            if cmd.available_slots > current.max_concurrent_runs:
                raise InvalidWorkerLeaseCommandError(
                    f"available_slots {cmd.available_slots} exceeds max_concurrent_runs {current.max_concurrent_runs}"
                )
            online = current.status is SessionStatus.ONLINE
            session = _replace(
                current,
                version=_bump(current.version, "session"),
                available_slots=cmd.available_slots if online else 0,
                heartbeat_at_ms=now,
                lease_expires_at_ms=now + cmd.lease_duration_ms,
                updated_at_ms=now,
            )
            store_session(connection, session, current.version)
            return session

    def drain(self, cmd: DrainCommand) -> WorkerSessionRecord:
        """Move a live online session to ``draining``: no new claims, zero reported slots.

        Raises: as :meth:`heartbeat` (``WorkerSessionRejectedError`` also when not online).
        """
        _expect(cmd, DrainCommand, "drain")
        with repository_errors(), self._db.write() as now:
            current = self._fenced_session(cmd, now, allowed=(SessionStatus.ONLINE,))
            session = _replace(
                current,
                status=SessionStatus.DRAINING,
                version=_bump(current.version, "session"),
                available_slots=0,
                updated_at_ms=now,
            )
            store_session(self._db.connection, session, current.version)
            return session

    def offline(self, cmd: OfflineCommand) -> WorkerSessionRecord:
        """End the session's authority now (also when its lease already expired).

        Its Run Leases are untouched: whether their processes still run is not known here.

        Raises:
            WorkerLeaseFenceRejectedError: worker, session, generation or version do not match.
            WorkerSessionRejectedError: the session is already offline.
        """
        _expect(cmd, OfflineCommand, "offline")
        with repository_errors(), self._db.write() as now:
            current = self._fenced_session(
                cmd, now, allowed=(SessionStatus.ONLINE, SessionStatus.DRAINING), require_live=False
            )
            session = _replace(
                current,
                status=SessionStatus.OFFLINE,
                version=_bump(current.version, "session"),
                available_slots=0,
                # Authority ends now, never later; never before the last heartbeat (shape CHECK).
                lease_expires_at_ms=max(current.heartbeat_at_ms, min(current.lease_expires_at_ms, now)),
                updated_at_ms=now,
            )
            store_session(self._db.connection, session, current.version)
            return session

    def _fenced_session(
        self, cmd: Any, now: int, *, allowed: tuple[SessionStatus, ...], require_live: bool = True
    ) -> WorkerSessionRecord:
        current = read_session(self._db.connection, cmd.worker_id)
        if (
            current is None
            or current.session_id != cmd.session_id
            or current.generation != cmd.generation
            or current.version != cmd.expected_version
        ):
            found = "no session" if current is None else f"generation {current.generation} version {current.version}"
            raise WorkerLeaseFenceRejectedError(
                f"session {cmd.session_id!r} generation {cmd.generation} version {cmd.expected_version} "
                f"no longer fences worker {cmd.worker_id!r} (found {found})"
            )
        self._check_session_state(current, now, allowed, require_live)
        return current

    @staticmethod
    def _check_session_state(
        session: WorkerSessionRecord, now: int, allowed: tuple[SessionStatus, ...], require_live: bool
    ) -> None:
        if session.status not in allowed:
            raise WorkerSessionRejectedError(
                f"session {session.session_id!r} of worker {session.worker_id!r} is {session.status.value}"
            )
        if require_live and not session.is_live(now):
            raise WorkerSessionRejectedError(
                f"session {session.session_id!r} of worker {session.worker_id!r} has an expired session lease"
            )

    def _current_session(
        self, cmd: Any, now: int, *, allowed: tuple[SessionStatus, ...], require_live: bool = True
    ) -> WorkerSessionRecord:
        """The caller's session, fenced by worker, session id and generation (not version)."""
        session = read_session(self._db.connection, cmd.worker_id)
        if session is None or session.session_id != cmd.session_id or session.generation != cmd.session_generation:
            raise WorkerLeaseFenceRejectedError(
                f"session {cmd.session_id!r} generation {cmd.session_generation} is not the current session "
                f"of worker {cmd.worker_id!r}"
            )
        self._check_session_state(session, now, allowed, require_live)
        return session

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
        _expect(cmd, ClaimRunCommand, "claim_run")
        digest = digest_run_lease_token(cmd.lease_token)
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            session = self._current_session(cmd, now, allowed=(SessionStatus.ONLINE,))
            run = connection.execute(_SELECT_RUN, (cmd.run_id,)).fetchone()
            reason = self._run_problem(run)
            if reason is not None:
                return NotClaimableOutcome(reason=reason)
            attempt = connection.execute(_SELECT_ATTEMPT, (cmd.attempt_id,)).fetchone()
            if attempt is None or attempt[0] != cmd.run_id:
                return NotClaimableOutcome(reason=NotClaimableReason.ATTEMPT_MISSING)
            if attempt[1] != "claimed":
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
                    if (
                        existing.worker_id == cmd.worker_id
                        and existing.session_id == cmd.session_id
                        and existing.session_generation == cmd.session_generation
                        and existing.offer_id == cmd.offer_id
                        and hmac.compare_digest(existing.token_digest, digest)
                    ):
                        return ClaimedRunOutcome(lease=existing, lease_token=cmd.lease_token, replayed=True)
                    return LeasedRunOutcome(lease=existing)
                # An expired grant that never started, or a released one: a new grant may follow.

            active = count_other_active(connection, cmd.worker_id, session.generation, cmd.attempt_id)
            if active >= session.max_concurrent_runs or active >= session.available_slots:
                return NoCapacityOutcome(
                    active_leases=active,
                    max_concurrent_runs=session.max_concurrent_runs,
                    available_slots=session.available_slots,
                )

            lease = RunLeaseRecord(
                attempt_id=cmd.attempt_id,
                run_id=cmd.run_id,
                worker_id=cmd.worker_id,
                session_id=cmd.session_id,
                session_generation=cmd.session_generation,
                lease_generation=1 if existing is None else _bump(existing.lease_generation, "lease generation"),
                version=1 if existing is None else _bump(existing.version, "lease"),
                token_digest=digest,
                offer_id=cmd.offer_id,
                status=LeaseStatus.LEASED,
                expires_at_ms=now + cmd.lease_duration_ms,
                acquired_at_ms=now,
                updated_at_ms=now,
            )
            store_lease(connection, lease, None if existing is None else existing.version)
            move_projection(connection, cmd.attempt_id, existing, lease, now_ms=now, require_status="claimed")
            event = self._event(
                run, lease, cmd.event_id, EVENT_LEASE_CLAIMED, "claimed", now, offer_id=cmd.offer_id
            )
            return ClaimedRunOutcome(lease=lease, lease_token=cmd.lease_token, replayed=False, event=event)

    @staticmethod
    def _run_problem(run: tuple[Any, ...] | None) -> NotClaimableReason | None:
        if run is None:
            return NotClaimableReason.RUN_MISSING
        owner, status, cancel_requested_at_ms = run[0], run[1], run[2]
        if owner != "runtime":
            return NotClaimableReason.RUN_NOT_RUNTIME_OWNED
        if status not in ACTIVE_RUN_STATUSES:
            return NotClaimableReason.RUN_TERMINAL
        if cancel_requested_at_ms is not None:
            return NotClaimableReason.CANCEL_REQUESTED
        return None

    def renew(self, cmd: RenewRunLeaseCommand) -> RunLeaseRecord:
        """Extend a held grant by ``lease_duration_ms`` from now.

        CAS on the lease version and on the Attempt projection. A grant that expired but was
        not taken over may still be renewed: its version and digest still fence it.

        Raises:
            WorkerLeaseFenceRejectedError: not the current session, or the lease or projection
                does not match the caller's fence.
            WorkerSessionRejectedError: the session is offline or expired.
        """
        _expect(cmd, RenewRunLeaseCommand, "renew")
        digest = digest_run_lease_token(cmd.lease_token)
        with repository_errors(), self._db.write() as now:
            self._current_session(cmd, now, allowed=(SessionStatus.ONLINE, SessionStatus.DRAINING))
            current = self._fenced_lease(cmd, digest)
            lease = _replace(
                current,
                version=_bump(current.version, "lease"),
                expires_at_ms=now + cmd.lease_duration_ms,
                renewed_at_ms=now,
                updated_at_ms=now,
            )
            store_lease(self._db.connection, lease, current.version)
            move_projection(self._db.connection, cmd.attempt_id, current, lease, now_ms=now)
            return lease

    def release(self, cmd: ReleaseRunLeaseCommand) -> LeaseTransitionOutcome:
        """Give back a grant whose Attempt is still ``claimed``; clears the projection.

        The session need not be live (giving authority back is always safe) but must still be
        the worker's current one: a replaced session's fences are void.

        Raises:
            WorkerLeaseFenceRejectedError: not the current session, or a lease mismatch.
            StartBarrierPassedError: the Attempt is no longer ``claimed``.
        """
        _expect(cmd, ReleaseRunLeaseCommand, "release")
        digest = digest_run_lease_token(cmd.lease_token)
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            self._current_session(cmd, now, allowed=tuple(SessionStatus), require_live=False)
            current = self._fenced_lease(cmd, digest)
            self._require_claimed(current, "released")
            lease = _replace(
                current,
                status=LeaseStatus.RELEASED,
                version=_bump(current.version, "lease"),
                released_at_ms=now,
                release_reason=cmd.reason,
                updated_at_ms=now,
            )
            store_lease(connection, lease, current.version)
            move_projection(connection, cmd.attempt_id, current, lease, now_ms=now, require_status="claimed")
            run = connection.execute(_SELECT_RUN, (current.run_id,)).fetchone()
            event = self._event(run, lease, cmd.event_id, EVENT_LEASE_RELEASED, "released", now, reason=cmd.reason.value)
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
        _expect(cmd, BeginStartCommand, "begin_start")
        digest = digest_run_lease_token(cmd.lease_token)
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            self._current_session(cmd, now, allowed=(SessionStatus.ONLINE, SessionStatus.DRAINING))
            current = self._fenced_lease(cmd, digest)
            if not current.is_live(now):
                raise WorkerLeaseFenceRejectedError(
                    f"the lease of attempt {cmd.attempt_id!r} has expired; renew it before starting"
                )
            run = connection.execute(_SELECT_RUN, (current.run_id,)).fetchone()
            reason = self._run_problem(run)
            if reason is not None:
                raise RunNotStartableError(f"run {current.run_id!r} may not start: {reason.value}")
            self._require_claimed(current, "started")
            lease = _replace(current, version=_bump(current.version, "lease"), started_at_ms=now, updated_at_ms=now)
            store_lease(connection, lease, current.version)
            move_projection(
                connection, cmd.attempt_id, current, lease, now_ms=now, set_status="starting", require_status="claimed"
            )
            event = self._event(run, lease, cmd.event_id, EVENT_ATTEMPT_STARTING, "starting", now)
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
        _expect(cmd, CompleteRunLeaseCommand, "complete")
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            current = read_lease(connection, cmd.attempt_id)
            if (
                current is None
                or current.status is not LeaseStatus.LEASED
                or current.worker_id != cmd.worker_id
                or current.session_generation != cmd.session_generation
                or current.lease_generation != cmd.lease_generation
                or current.version != cmd.expected_version
                or not hmac.compare_digest(current.token_digest, cmd.token_digest)
            ):
                raise WorkerLeaseFenceRejectedError(self._lease_mismatch(cmd.attempt_id, current))
            lease = _replace(
                current,
                status=LeaseStatus.COMPLETED,
                version=_bump(current.version, "lease"),
                completed_at_ms=now,
                updated_at_ms=now,
            )
            store_lease(connection, lease, current.version)
            move_projection(connection, cmd.attempt_id, current, lease, now_ms=now)
            attempt = connection.execute(_SELECT_ATTEMPT, (cmd.attempt_id,)).fetchone()
            run = connection.execute(_SELECT_RUN, (current.run_id,)).fetchone()
            event = self._event(run, lease, cmd.event_id, EVENT_LEASE_COMPLETED, "completed", now, attempt_status=attempt[1])
            return LeaseTransitionOutcome(lease=lease, event=event)

    # ----------------------------------------------------------------- helpers

    def _fenced_lease(self, cmd: Any, digest: str) -> RunLeaseRecord:
        current = read_lease(self._db.connection, cmd.attempt_id)
        if (
            current is None
            or current.status is not LeaseStatus.LEASED
            or current.worker_id != cmd.worker_id
            or current.session_id != cmd.session_id
            or current.session_generation != cmd.session_generation
            or current.version != cmd.expected_version
            or not hmac.compare_digest(current.token_digest, digest)
        ):
            raise WorkerLeaseFenceRejectedError(self._lease_mismatch(cmd.attempt_id, current))
        return current

    @staticmethod
    def _lease_mismatch(attempt_id: str, current: RunLeaseRecord | None) -> str:
        # Names versions and statuses only; never a token or digest.
        if current is None:
            return f"attempt {attempt_id!r} has no Run Lease"
        return (
            f"the caller's fence no longer holds the lease of attempt {attempt_id!r} "
            f"(now {current.status.value} at version {current.version}, session generation "
            f"{current.session_generation})"
        )

    def _require_claimed(self, lease: RunLeaseRecord, action: str) -> None:
        attempt = self._db.connection.execute(_SELECT_ATTEMPT, (lease.attempt_id,)).fetchone()
        status = None if attempt is None else attempt[1]
        if status != "claimed" or lease.started_at_ms is not _UNSET:
            raise StartBarrierPassedError(
                f"attempt {lease.attempt_id!r} is {status}, not claimed; its lease cannot be {action}"
            )

    def _event(
        self,
        run: tuple[Any, ...],
        lease: RunLeaseRecord,
        event_id: str,
        event_type: str,
        step: str,
        now: int,
        **extra: Any,
    ) -> RunEvent:
        # Low-sensitivity payload: identities and counters, never a token or digest.
        payload = {
            "attempt_id": lease.attempt_id,
            "worker_id": lease.worker_id,
            "session_generation": lease.session_generation,
            "lease_generation": lease.lease_generation,
            "lease_version": lease.version,
            **extra,
        }
        return append_run_event(
            self._db.connection,
            run_id=lease.run_id,
            event_id=event_id,
            event_type=event_type,
            dedupe_key=dedupe_key_for(lease.attempt_id, lease.lease_generation, step),
            actor_type="worker",
            actor_id=lease.worker_id,
            attempt_id=lease.attempt_id,
            payload=payload,
            now_ms=now,
            run_version=None if run is None else (run[3], run[4]),
        )
