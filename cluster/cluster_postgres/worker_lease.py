"""PostgreSQL Worker Session and Run Lease repository (ADR-0057 as cluster-profile.md §4 states it).

The same operations and results as the Local worker lease repository. Rows are locked
``FOR NO KEY UPDATE`` in the one global order (advisory lock by worker id on registration) ->
Worker -> Run -> Attempt -> Run Lease, and database time is read once, after the last blocking
lock. A claim's capacity is decided under the Worker row lock, against
``min(max_concurrent_runs, available_slots)``, so concurrent dispatchers never oversell a slot.
Bearer tokens are digested in Python; only digests reach the server. Neither an expired lease nor
an offline session is ever reported as "not running".
"""

from __future__ import annotations

import hmac
import uuid
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
    NoCapacityOutcome,
    NotClaimableOutcome,
    NotClaimableReason,
    REASON_ORPHAN_STARTING,
    REASON_ORPHAN_UNSTARTED,
    REASON_WORKER_GONE,
    CANCEL_LOSS_GRACE_MS,
    REASON_CANCEL_MET_BY_LOSS,
    ReleaseRunLeaseCommand,
    RenewRunLeaseCommand,
    RunLeaseRecord,
    StartRunCommand,
    StartRunOutcome,
    start_event_extra,
)
from edge_runtime.contract.runs import ACTIVE_RUN_STATUSES, AttemptStatus, RunStatus, attempt_event_key
from edge_runtime.contract.sql_vocabulary import ACTIVE_ATTEMPT_SQL, sql_literal
from edge_runtime.contract.validation import identifier_problem
from edge_runtime.contract.transitions import is_orphan_start, lease_mismatch, not_claimable
from edge_runtime.contract.worker_lease import (
    ATTEMPT_ID_MAX_LENGTH,
    WORKER_ID_MAX_LENGTH,
    InvalidWorkerLeaseCommandError,
    RunNotStartableError,
    StartBarrierPassedError,
    WorkerLeaseFenceRejectedError,
    WorkerSessionRejectedError,
    canonical_capabilities_unchecked,
    digest_run_lease_token,
    reject,
)
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
    session_record_problem,
)
from cluster_postgres.errors import ClusterLeaseStorageError, Transaction, reading
from cluster_postgres.worker_lease_rows import (
    LEASE_COLUMNS,
    LOCK_ATTEMPT,
    LOCK_LEASE,
    NO_PROJECTION,
    SELECT_LEASE,
    bump,
    lease_event,
    lease_from_row,
    move_projection,
    projection_of,
    store_lease,
)
from cluster_postgres.run_events import clamp, database_now
from cluster_postgres.run_rows import RUN_COLUMNS, run_from_row
from cluster_postgres.runs import end_run, end_unstarted, insert_attempt


_UNSET = msgspec.UNSET
_replace = msgspec.structs.replace
_SESSION_STATUS = {s.value: s for s in SessionStatus}
_decode_capabilities = msgspec.json.Decoder(dict[str, Any]).decode

_SESSION_COLUMNS = (
    "worker_id, session_id, generation, status, version, capabilities, capabilities_hash, max_concurrent_runs, "
    "available_slots, heartbeat_at_ms, lease_expires_at_ms, created_at_ms, updated_at_ms"
)
_SELECT_SESSION = f"SELECT {_SESSION_COLUMNS} FROM ql3.worker_sessions WHERE worker_id = %s"
_LOCK_SESSION = _SELECT_SESSION + " FOR NO KEY UPDATE"
_INSERT_SESSION = f"INSERT INTO ql3.worker_sessions ({_SESSION_COLUMNS}) VALUES ({', '.join(['%s'] * 13)})"
_UPDATE_SESSION = (
    "UPDATE ql3.worker_sessions SET session_id = %s, generation = %s, status = %s, version = %s, capabilities = %s, "
    "capabilities_hash = %s, max_concurrent_runs = %s, available_slots = %s, heartbeat_at_ms = %s, "
    "lease_expires_at_ms = %s, created_at_ms = %s, updated_at_ms = %s WHERE worker_id = %s AND version = %s"
)
_REGISTRATION_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('ql3.worker:' || %s, 0))"

_COUNT_ACTIVE = (
    "SELECT count(*) FROM ql3.run_dispatch_leases "
    f"WHERE worker_id = %s AND session_generation = %s AND status = {sql_literal(LeaseStatus.LEASED)} "
    "AND attempt_id <> %s"
)
_SELECT_ACTIVE = (
    f"SELECT {LEASE_COLUMNS} FROM ql3.run_dispatch_leases WHERE worker_id = %s "
    f"AND status = {sql_literal(LeaseStatus.LEASED)} "
    "ORDER BY session_generation, attempt_id"
)
_LOCK_RUN = (
    "SELECT execution_owner, status, cancel_requested_at_ms, version, event_sequence FROM ql3.runs "
    "WHERE id = %s FOR NO KEY UPDATE"
)
_ATTEMPT_RUN_ID = "SELECT run_id FROM ql3.run_attempts WHERE id = %s"  # immutable: read before locking the Run

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


def _expect(cmd: Any, kind: type, operation: str) -> None:
    if not isinstance(cmd, kind):
        raise InvalidWorkerLeaseCommandError(f"{operation} expects a {kind.__name__}, got {type(cmd).__name__}")


def _session(row: tuple[Any, ...]) -> WorkerSessionRecord:
    worker_id = row[0]
    try:
        record = WorkerSessionRecord(
            worker_id=worker_id, session_id=row[1], generation=row[2], status=_SESSION_STATUS[row[3]],
            version=row[4], capabilities=_decode_capabilities(row[5]), capabilities_hash=row[6],
            max_concurrent_runs=row[7], available_slots=row[8], heartbeat_at_ms=row[9],
            lease_expires_at_ms=row[10], created_at_ms=row[11], updated_at_ms=row[12],
        )
    except (KeyError, ValueError, TypeError, msgspec.DecodeError) as exc:
        raise ClusterLeaseStorageError(f"stored session of worker {worker_id!r} is malformed: {exc!r}") from None
    problem = session_record_problem(record)
    if problem is None and canonical_capabilities_unchecked(record.capabilities).decode() != row[5]:
        problem = "capabilities are not stored in canonical form"
    if problem is not None:
        raise ClusterLeaseStorageError(f"stored session of worker {worker_id!r} breaks an invariant: {problem}")
    return record


class PostgresWorkerLeaseRepository:
    """Fenced Worker Sessions and Run Leases in ``ql3``. One connection, not thread-safe.

    Mutations: ``register``, ``heartbeat``, ``drain``, ``offline``, ``claim_run``, ``renew``,
    ``release``, ``begin_start``, ``complete``, and the composed, fenced start: ``start_run``,
    ``abandon_start``, ``sweep_orphans``; reads: ``find_session``, ``find_lease``,
    ``count_active_leases``, ``free_slots``, ``list_active_leases``.
    """

    __slots__ = ("_conn", "_cur")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._cur = conn.cursor()

    # ================================================================= reads

    def find_session(self, worker_id: str) -> WorkerSessionRecord | None:
        reject(identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH))
        with reading(ClusterLeaseStorageError):
            row = self._cur.execute(_SELECT_SESSION, (worker_id,)).fetchone()
        return None if row is None else _session(row)

    def find_lease(self, attempt_id: str) -> RunLeaseRecord | None:
        reject(identifier_problem("attempt_id", attempt_id, ATTEMPT_ID_MAX_LENGTH))
        with reading(ClusterLeaseStorageError):
            row = self._cur.execute(SELECT_LEASE, (attempt_id,)).fetchone()
        return None if row is None else lease_from_row(row)

    def count_active_leases(self, worker_id: str) -> int:
        """``leased`` grants (expired or not) of the worker's current session; 0 without one."""
        reject(identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH))
        with Transaction(self._conn, ClusterLeaseStorageError):
            row = self._cur.execute(_SELECT_SESSION, (worker_id,)).fetchone()
            if row is None:
                return 0
            return self._cur.execute(_COUNT_ACTIVE, (worker_id, _session(row).generation, "")).fetchone()[0]

    def free_slots(self, worker_id: str, session_generation: int) -> int:
        """What a start by that session may still take: ``min(max_concurrent_runs, available_slots)``
        minus its own ``leased`` grants; 0 unless it is the worker's current online session. A read
        for planning; :meth:`start_run` decides again under the Worker row lock."""
        reject(identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH))
        with Transaction(self._conn, ClusterLeaseStorageError):
            row = self._cur.execute(_SELECT_SESSION, (worker_id,)).fetchone()
            session = None if row is None else _session(row)
            if session is None or session.generation != session_generation or session.status is not SessionStatus.ONLINE:
                return 0
            active = self._cur.execute(_COUNT_ACTIVE, (worker_id, session_generation, "")).fetchone()[0]
        return max(0, min(session.max_concurrent_runs, session.available_slots) - active)

    def list_active_leases(self, worker_id: str) -> list[RunLeaseRecord]:
        """Every ``leased`` grant of the worker, of any session generation (restart recovery)."""
        reject(identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH))
        with reading(ClusterLeaseStorageError):
            rows = self._cur.execute(_SELECT_ACTIVE, (worker_id,)).fetchall()
        return [lease_from_row(row) for row in rows]

    # ================================================================= sessions

    def register(self, cmd: RegisterWorkerCommand) -> RegisterOutcome:
        """First registration, idempotent replay, or replacement (generation + 1), under an
        advisory lock by worker id and the Worker row lock."""
        _expect(cmd, RegisterWorkerCommand, "register")
        caps_hash = cmd.capabilities_hash
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            cur.execute(_REGISTRATION_LOCK, (cmd.worker_id,))
            row = cur.execute(_LOCK_SESSION, (cmd.worker_id,)).fetchone()
            current = None if row is None else _session(row)
            now = clamp(cur, database_now(cur), None if current is None else current.updated_at_ms, None, "", "")
            fresh = dict(
                session_id=cmd.session_id, status=SessionStatus.ONLINE, capabilities=cmd.capabilities,
                capabilities_hash=caps_hash, max_concurrent_runs=cmd.max_concurrent_runs,
                available_slots=cmd.max_concurrent_runs, heartbeat_at_ms=now,
                lease_expires_at_ms=now + cmd.lease_duration_ms, updated_at_ms=now,
            )
            if current is None:
                session = WorkerSessionRecord(worker_id=cmd.worker_id, generation=1, version=0, created_at_ms=now, **fresh)
                self._store_session(session, None)
                return RegisteredOutcome(session=session, replaced_session=False)
            if current.session_id == cmd.session_id:
                problem = (
                    f"it is {current.status.value}" if current.status is not SessionStatus.ONLINE
                    else "its session lease has expired" if not current.is_live(now)
                    else "its capabilities differ" if current.capabilities_hash != caps_hash
                    else "its max_concurrent_runs differs" if current.max_concurrent_runs != cmd.max_concurrent_runs
                    else None
                )
                if problem is not None:
                    raise WorkerSessionRejectedError(
                        f"session {cmd.session_id!r} of worker {cmd.worker_id!r} cannot be registered again: {problem}"
                    )
                return ReplayedOutcome(session=current)
            session = _replace(current, generation=bump(current.generation, "session generation"),
                               version=bump(current.version, "session"), **fresh)
            self._store_session(session, current.version)
            return RegisteredOutcome(session=session, replaced_session=True)

    def heartbeat(self, cmd: HeartbeatCommand) -> WorkerSessionRecord:
        _expect(cmd, HeartbeatCommand, "heartbeat")
        with Transaction(self._conn, ClusterLeaseStorageError):
            current, now = self._fenced_session(cmd, (SessionStatus.ONLINE, SessionStatus.DRAINING))
            if cmd.available_slots > current.max_concurrent_runs:
                raise InvalidWorkerLeaseCommandError(
                    f"available_slots {cmd.available_slots} exceeds max_concurrent_runs {current.max_concurrent_runs}"
                )
            online = current.status is SessionStatus.ONLINE
            session = _replace(current, version=bump(current.version, "session"),
                               available_slots=cmd.available_slots if online else 0, heartbeat_at_ms=now,
                               lease_expires_at_ms=now + cmd.lease_duration_ms, updated_at_ms=now)
            self._store_session(session, current.version)
            return session

    def drain(self, cmd: DrainCommand) -> WorkerSessionRecord:
        _expect(cmd, DrainCommand, "drain")
        with Transaction(self._conn, ClusterLeaseStorageError):
            current, now = self._fenced_session(cmd, (SessionStatus.ONLINE,))
            session = _replace(current, status=SessionStatus.DRAINING, version=bump(current.version, "session"),
                               available_slots=0, updated_at_ms=now)
            self._store_session(session, current.version)
            return session

    def offline(self, cmd: OfflineCommand) -> WorkerSessionRecord:
        _expect(cmd, OfflineCommand, "offline")
        with Transaction(self._conn, ClusterLeaseStorageError):
            current, now = self._fenced_session(cmd, (SessionStatus.ONLINE, SessionStatus.DRAINING), require_live=False)
            session = _replace(
                current, status=SessionStatus.OFFLINE, version=bump(current.version, "session"), available_slots=0,
                lease_expires_at_ms=max(current.heartbeat_at_ms, min(current.lease_expires_at_ms, now)),
                updated_at_ms=now,
            )
            self._store_session(session, current.version)
            return session

    # ================================================================= run leases

    def claim_run(self, cmd: ClaimRunCommand) -> ClaimRunOutcome:
        """Claim the Run Lease of a ``claimed`` Attempt for the caller's current session.

        Capacity is counted under the Worker row lock, so no two dispatchers can both take the
        last slot.
        """
        _expect(cmd, ClaimRunCommand, "claim_run")
        digest = digest_run_lease_token(cmd.lease_token)
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            session_row = cur.execute(_LOCK_SESSION, (cmd.worker_id,)).fetchone()
            run_row = cur.execute(_LOCK_RUN, (cmd.run_id,)).fetchone()
            attempt = cur.execute(LOCK_ATTEMPT, (cmd.attempt_id,)).fetchone()
            lease_row = cur.execute(LOCK_LEASE, (cmd.attempt_id,)).fetchone()
            existing = None if lease_row is None else lease_from_row(lease_row)
            run = self._run_version(run_row)
            now = clamp(cur, database_now(cur), None if existing is None else existing.updated_at_ms, run,
                        cmd.run_id, cmd.worker_id)
            session = self._current_session(session_row, cmd, now, (SessionStatus.ONLINE,))
            reason = self._run_problem(run_row)
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
                    if (
                        existing.worker_id == cmd.worker_id and existing.session_id == cmd.session_id
                        and existing.session_generation == cmd.session_generation
                        and existing.offer_id == cmd.offer_id and hmac.compare_digest(existing.token_digest, digest)
                    ):
                        return ClaimedRunOutcome(lease=existing, lease_token=cmd.lease_token, replayed=True)
                    return LeasedRunOutcome(lease=existing)
            active = cur.execute(_COUNT_ACTIVE, (cmd.worker_id, session.generation, cmd.attempt_id)).fetchone()[0]
            if active >= session.max_concurrent_runs or active >= session.available_slots:
                return NoCapacityOutcome(active_leases=active, max_concurrent_runs=session.max_concurrent_runs,
                                         available_slots=session.available_slots)
            lease = RunLeaseRecord(
                attempt_id=cmd.attempt_id, run_id=cmd.run_id, worker_id=cmd.worker_id, session_id=cmd.session_id,
                session_generation=cmd.session_generation,
                lease_generation=1 if existing is None else bump(existing.lease_generation, "lease generation"),
                version=1 if existing is None else bump(existing.version, "lease"), token_digest=digest,
                offer_id=cmd.offer_id, status=LeaseStatus.LEASED, expires_at_ms=now + cmd.lease_duration_ms,
                acquired_at_ms=now, updated_at_ms=now,
            )
            store_lease(self._cur, lease, None if existing is None else existing.version)
            move_projection(self._cur, attempt, existing, lease, now)
            event = lease_event(self._cur, run, lease, cmd.event_id, EVENT_LEASE_CLAIMED, "claimed", now, offer_id=cmd.offer_id)
            return ClaimedRunOutcome(lease=lease, lease_token=cmd.lease_token, replayed=False, event=event)

    def renew(self, cmd: RenewRunLeaseCommand) -> RunLeaseRecord:
        _expect(cmd, RenewRunLeaseCommand, "renew")
        digest = digest_run_lease_token(cmd.lease_token)
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            session_row = cur.execute(_LOCK_SESSION, (cmd.worker_id,)).fetchone()
            attempt = cur.execute(LOCK_ATTEMPT, (cmd.attempt_id,)).fetchone()
            current, now = self._locked_lease(cmd, digest, session_row, (SessionStatus.ONLINE, SessionStatus.DRAINING))
            lease = _replace(current, version=bump(current.version, "lease"), expires_at_ms=now + cmd.lease_duration_ms,
                             renewed_at_ms=now, updated_at_ms=now)
            store_lease(self._cur, lease, current.version)
            move_projection(self._cur, attempt, current, lease, now)
            return lease

    def release(self, cmd: ReleaseRunLeaseCommand) -> LeaseTransitionOutcome:
        _expect(cmd, ReleaseRunLeaseCommand, "release")
        digest = digest_run_lease_token(cmd.lease_token)
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            session_row = cur.execute(_LOCK_SESSION, (cmd.worker_id,)).fetchone()
            run_row, attempt = self._lock_run_and_attempt(cmd.attempt_id)
            run = self._run_version(run_row)
            current, now = self._locked_lease(cmd, digest, session_row, tuple(SessionStatus), require_live=False, run=run)
            self._require_claimed(attempt, current, "released")
            lease = _replace(current, status=LeaseStatus.RELEASED, version=bump(current.version, "lease"),
                             released_at_ms=now, release_reason=cmd.reason, updated_at_ms=now)
            store_lease(self._cur, lease, current.version)
            move_projection(self._cur, attempt, current, lease, now)
            event = lease_event(self._cur, run, lease, cmd.event_id, EVENT_LEASE_RELEASED, "released", now, reason=cmd.reason.value)
            return LeaseTransitionOutcome(lease=lease, event=event)

    def begin_start(self, cmd: BeginStartCommand) -> LeaseTransitionOutcome:
        _expect(cmd, BeginStartCommand, "begin_start")
        digest = digest_run_lease_token(cmd.lease_token)
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            session_row = cur.execute(_LOCK_SESSION, (cmd.worker_id,)).fetchone()
            run_row, attempt = self._lock_run_and_attempt(cmd.attempt_id)
            run = self._run_version(run_row)
            current, now = self._locked_lease(cmd, digest, session_row, (SessionStatus.ONLINE, SessionStatus.DRAINING),
                                              run=run)
            if not current.is_live(now):
                raise WorkerLeaseFenceRejectedError(
                    f"the lease of attempt {cmd.attempt_id!r} has expired; renew it before starting"
                )
            reason = self._run_problem(run_row)
            if reason is not None:
                raise RunNotStartableError(f"run {current.run_id!r} may not start: {reason.value}")
            self._require_claimed(attempt, current, "started")
            lease = _replace(current, version=bump(current.version, "lease"), started_at_ms=now, updated_at_ms=now)
            store_lease(self._cur, lease, current.version)
            move_projection(self._cur, attempt, current, lease, now, set_status=AttemptStatus.STARTING)
            event = lease_event(self._cur, run, lease, cmd.event_id, EVENT_ATTEMPT_STARTING, "starting", now)
            return LeaseTransitionOutcome(lease=lease, event=event)

    def complete(self, cmd: CompleteRunLeaseCommand) -> LeaseTransitionOutcome:
        """Close a grant because its Attempt ended, fenced by the grant itself (not the current session)."""
        _expect(cmd, CompleteRunLeaseCommand, "complete")
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            run_row, attempt = self._lock_run_and_attempt(cmd.attempt_id)
            run = self._run_version(run_row)
            row = cur.execute(LOCK_LEASE, (cmd.attempt_id,)).fetchone()
            current = None if row is None else lease_from_row(row)
            if (
                current is None or current.status is not LeaseStatus.LEASED or current.worker_id != cmd.worker_id
                or current.session_generation != cmd.session_generation
                or current.lease_generation != cmd.lease_generation or current.version != cmd.expected_version
                or not hmac.compare_digest(current.token_digest, cmd.token_digest)
            ):
                raise WorkerLeaseFenceRejectedError(lease_mismatch(cmd.attempt_id, current))
            now = clamp(cur, database_now(cur), current.updated_at_ms, run, current.run_id, cmd.worker_id)
            lease = _replace(current, status=LeaseStatus.COMPLETED, version=bump(current.version, "lease"),
                             completed_at_ms=now, updated_at_ms=now)
            store_lease(self._cur, lease, current.version)
            move_projection(self._cur, attempt, current, lease, now)
            event = lease_event(self._cur, run, lease, cmd.event_id, EVENT_LEASE_COMPLETED, "completed", now,
                                attempt_status=attempt[1])
            return LeaseTransitionOutcome(lease=lease, event=event)

    # ========================================================== the composed start (taking work is fenced)

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
        _expect(cmd, StartRunCommand, "start_run")
        digest = digest_run_lease_token(cmd.lease_token)
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            session_row = cur.execute(_LOCK_SESSION, (cmd.worker_id,)).fetchone()
            run_row = cur.execute(_LOCK_RUN, (cmd.run_id,)).fetchone()
            now = clamp(cur, database_now(cur), None if session_row is None else session_row[12], None, "", "")
            session = self._current_session(session_row, cmd, now, (SessionStatus.ONLINE,))
            if session.version != cmd.session_version:
                raise WorkerLeaseFenceRejectedError(
                    f"session {cmd.session_id!r} of worker {cmd.worker_id!r} is at version {session.version}, "
                    f"not {cmd.session_version}; it takes no work on a stale fence"
                )
            reason = self._run_problem(run_row)
            if reason is None and run_row[1] != RunStatus.QUEUED.value:
                reason = NotClaimableReason.RUN_NOT_QUEUED
            if reason is not None:
                return NotClaimableOutcome(reason=reason)
            active = cur.execute(_COUNT_ACTIVE, (cmd.worker_id, session.generation, "")).fetchone()[0]
            if active >= session.max_concurrent_runs or active >= session.available_slots:
                return NoCapacityOutcome(active_leases=active, max_concurrent_runs=session.max_concurrent_runs,
                                         available_slots=session.available_slots)
            run = self._run_version(run_row)
            cur.execute("UPDATE ql3.runs SET status = %s WHERE id = %s", (RunStatus.DISPATCHING.value, cmd.run_id))
            number = insert_attempt(cur, cmd.run_id, cmd.attempt_id, now=now)
            claimed = RunLeaseRecord(
                attempt_id=cmd.attempt_id, run_id=cmd.run_id, worker_id=cmd.worker_id, session_id=cmd.session_id,
                session_generation=cmd.session_generation, lease_generation=1, version=1, token_digest=digest,
                offer_id=cmd.offer_id, status=LeaseStatus.LEASED, expires_at_ms=now + cmd.lease_duration_ms,
                acquired_at_ms=now, updated_at_ms=now,
            )
            store_lease(self._cur, claimed, None)
            move_projection(self._cur, (cmd.run_id, AttemptStatus.CLAIMED, *NO_PROJECTION), None, claimed, now)
            started = _replace(claimed, version=2, started_at_ms=now)
            store_lease(self._cur, started, 1)
            move_projection(self._cur, (cmd.run_id, AttemptStatus.CLAIMED, *projection_of(claimed)), claimed, started, now,
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
            run_row, attempt = self._lock_run_and_attempt(lease.attempt_id)
            row = cur.execute(LOCK_LEASE, (lease.attempt_id,)).fetchone()
            current = None if row is None else lease_from_row(row)
            now = database_now(cur)
            if current is not None and current.status is LeaseStatus.COMPLETED and current.version == lease.version + 1:
                return RunStatus(run_row[1])  # our own earlier attempt at this committed
            if (
                current is None or current.status is not LeaseStatus.LEASED or current.worker_id != lease.worker_id
                or current.session_generation != lease.session_generation
                or current.lease_generation != lease.lease_generation or current.version != lease.version
                or not hmac.compare_digest(current.token_digest, lease.token_digest)
            ):
                raise WorkerLeaseFenceRejectedError(lease_mismatch(lease.attempt_id, current))
            run = self._run_version(run_row)
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
                session_row = cur.execute(_LOCK_SESSION, (cmd.worker_id,)).fetchone()
                run_row, attempt = self._lock_run_and_attempt(row[0])
                lease_row = cur.execute(LOCK_LEASE, (row[0],)).fetchone()
                now = database_now(cur)
                self._current_session(session_row, cmd, now, (SessionStatus.ONLINE,))
                fresh = cur.execute(_ONE_ORPHAN_CANDIDATE, (row[0],)).fetchone()
                if fresh is None or not _is_orphan(fresh, abandon_after_ms):
                    continue
                started = fresh[1] == AttemptStatus.STARTING
                lease = None if lease_row is None else lease_from_row(lease_row)
                run = self._run_version(run_row)
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
                session_row = cur.execute(_LOCK_SESSION, (cmd.worker_id,)).fetchone()
                run_row, attempt = self._lock_run_and_attempt(attempt_id)
                lease_row = cur.execute(LOCK_LEASE, (attempt_id,)).fetchone()
                now = database_now(cur)
                self._current_session(session_row, cmd, now, (SessionStatus.ONLINE,))
                if cur.execute(_ONE_DEAD_WORKER_ATTEMPT, (attempt_id,)).fetchone() is None:
                    continue  # its worker came back, or it ended, since the read
                lease = None if lease_row is None else lease_from_row(lease_row)
                run = self._run_version(run_row)
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
            completed = _replace(lease, status=LeaseStatus.COMPLETED, version=bump(lease.version, "lease"),
                                 completed_at_ms=now, updated_at_ms=now)
            store_lease(self._cur, completed, lease.version)
            move_projection(self._cur, attempt, lease, completed, now)
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

    # ----------------------------------------------------------------- helpers

    def _fenced_session(self, cmd: Any, allowed: tuple[SessionStatus, ...], *, require_live: bool = True
                        ) -> tuple[WorkerSessionRecord, int]:
        cur = self._cur
        row = cur.execute(_LOCK_SESSION, (cmd.worker_id,)).fetchone()
        current = None if row is None else _session(row)
        if (current is None or current.session_id != cmd.session_id or current.generation != cmd.generation
                or current.version != cmd.expected_version):
            found = "no session" if current is None else f"generation {current.generation} version {current.version}"
            raise WorkerLeaseFenceRejectedError(
                f"session {cmd.session_id!r} generation {cmd.generation} version {cmd.expected_version} "
                f"no longer fences worker {cmd.worker_id!r} (found {found})"
            )
        now = clamp(cur, database_now(cur), current.updated_at_ms, None, "", "")
        self._check_state(current, now, allowed, require_live)
        return current, now

    @staticmethod
    def _check_state(session: WorkerSessionRecord, now: int, allowed: tuple[SessionStatus, ...], require_live: bool) -> None:
        if session.status not in allowed:
            raise WorkerSessionRejectedError(
                f"session {session.session_id!r} of worker {session.worker_id!r} is {session.status.value}"
            )
        if require_live and not session.is_live(now):
            raise WorkerSessionRejectedError(
                f"session {session.session_id!r} of worker {session.worker_id!r} has an expired session lease"
            )

    def _current_session(self, row: tuple[Any, ...] | None, cmd: Any, now: int, allowed: tuple[SessionStatus, ...],
                         require_live: bool = True) -> WorkerSessionRecord:
        session = None if row is None else _session(row)
        if session is None or session.session_id != cmd.session_id or session.generation != cmd.session_generation:
            raise WorkerLeaseFenceRejectedError(
                f"session {cmd.session_id!r} generation {cmd.session_generation} is not the current session "
                f"of worker {cmd.worker_id!r}"
            )
        self._check_state(session, now, allowed, require_live)
        return session

    def _lock_run_and_attempt(self, attempt_id: str) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
        """Lock the Attempt's Run, then the Attempt (the Run id of an Attempt never changes)."""
        cur = self._cur
        found = cur.execute(_ATTEMPT_RUN_ID, (attempt_id,)).fetchone()
        run_row = None if found is None else cur.execute(_LOCK_RUN, (found[0],)).fetchone()
        return run_row, cur.execute(LOCK_ATTEMPT, (attempt_id,)).fetchone()

    @staticmethod
    def _run_version(run_row: tuple[Any, ...] | None) -> list[int] | None:
        """The locked Run's ``[version, event_sequence]``, advanced by each event appended."""
        return None if run_row is None else [run_row[3], run_row[4]]

    def _locked_lease(self, cmd: Any, digest: str, session_row: tuple[Any, ...] | None,
                      allowed: tuple[SessionStatus, ...], *, require_live: bool = True, run: list[int] | None = None
                      ) -> tuple[RunLeaseRecord, int]:
        cur = self._cur
        row = cur.execute(LOCK_LEASE, (cmd.attempt_id,)).fetchone()
        current = None if row is None else lease_from_row(row)
        now = clamp(cur, database_now(cur), None if current is None else current.updated_at_ms, run,
                    "" if current is None else current.run_id, cmd.worker_id)
        self._current_session(session_row, cmd, now, allowed, require_live)
        if (
            current is None or current.status is not LeaseStatus.LEASED or current.worker_id != cmd.worker_id
            or current.session_id != cmd.session_id or current.session_generation != cmd.session_generation
            or current.version != cmd.expected_version or not hmac.compare_digest(current.token_digest, digest)
        ):
            raise WorkerLeaseFenceRejectedError(lease_mismatch(cmd.attempt_id, current))
        return current, now

    @staticmethod
    def _run_problem(run: tuple[Any, ...] | None) -> NotClaimableReason | None:
        """Why the Run (owner, status, cancel request) may not be leased now, None when it may."""
        if run is None:
            return NotClaimableReason.RUN_MISSING
        return not_claimable(run[0], run[1], run[2])

    @staticmethod
    def _require_claimed(attempt: tuple[Any, ...] | None, lease: RunLeaseRecord, action: str) -> None:
        status = None if attempt is None else attempt[1]
        if status != AttemptStatus.CLAIMED or lease.started_at_ms is not _UNSET:
            raise StartBarrierPassedError(
                f"attempt {lease.attempt_id!r} is {status}, not claimed; its lease cannot be {action}"
            )

    def _store_session(self, record: WorkerSessionRecord, expected_version: int | None) -> None:
        problem = session_record_problem(record)
        if problem is not None:
            raise ClusterLeaseStorageError(f"refusing to write session of worker {record.worker_id!r}: {problem}")
        text = canonical_capabilities_unchecked(record.capabilities).decode()
        values = (record.session_id, record.generation, record.status.value, record.version, text,
                  record.capabilities_hash, record.max_concurrent_runs, record.available_slots, record.heartbeat_at_ms,
                  record.lease_expires_at_ms, record.created_at_ms, record.updated_at_ms)
        if expected_version is None:
            self._cur.execute(_INSERT_SESSION, (record.worker_id, *values))
            return
        self._cur.execute(_UPDATE_SESSION, (*values, record.worker_id, expected_version))
        if self._cur.rowcount != 1:
            raise ClusterLeaseStorageError(f"session of worker {record.worker_id!r} changed concurrently (CAS missed)")
