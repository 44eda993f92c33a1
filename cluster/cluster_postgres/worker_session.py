"""Worker Session operations of the PostgreSQL repository: register, heartbeat, drain, offline.

Each is one READ COMMITTED transaction that locks the Worker row ``FOR NO KEY UPDATE`` (after the
runtime's registration lock, on registration) and reads database time once, after those locks. A
session's status and lease describe its *authority*; they are never evidence about its processes.
Used through :class:`cluster_postgres.worker_lease.PostgresWorkerLeaseRepository`.
"""

from __future__ import annotations

from typing import Any

import msgspec
import psycopg

from edge_runtime.contract.worker_lease import (
    InvalidWorkerLeaseCommandError,
    WorkerLeaseFenceRejectedError,
    WorkerSessionRejectedError,
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
)
from cluster_postgres.errors import LOCK_WORKER_REGISTRATION, ClusterLeaseStorageError, Transaction, take_runtime_lock
from cluster_postgres.run_events import clamp, database_now
from cluster_postgres.worker_lease_rows import LOCK_SESSION, bump, session_from_row, store_session

_replace = msgspec.structs.replace




def expect(cmd: Any, kind: type, operation: str) -> None:
    """Refuse a command of the wrong type before opening a transaction."""
    if not isinstance(cmd, kind):
        raise InvalidWorkerLeaseCommandError(f"{operation} expects a {kind.__name__}, got {type(cmd).__name__}")


class WorkerSessions:
    """The Worker Session authority: register, heartbeat, drain, offline, and the session fence the
    Run Lease authority checks every grant against (:meth:`current`). Shares the repository's
    connection and cursor."""

    __slots__ = ("_conn", "_cur")

    def __init__(self, conn: psycopg.Connection[Any], cur: psycopg.Cursor[Any]) -> None:
        self._conn = conn
        self._cur = cur

    def register(self, cmd: RegisterWorkerCommand) -> RegisterOutcome:
        """First registration, idempotent replay, or replacement (generation + 1), under the
        registration lock and the Worker row lock.

        The registration lock serialises registrations, so two first ones of a worker never both
        INSERT (its row does not exist yet to be locked). It is a row of ``ql3.runtime_locks``,
        not ADR-0057's advisory lock by worker id: any role may hold any advisory key, and a
        worker id is no secret. Registrations are rare (a start, a lost session) and short."""
        expect(cmd, RegisterWorkerCommand, "register")
        caps_hash = cmd.capabilities_hash
        cur = self._cur
        with Transaction(self._conn, ClusterLeaseStorageError):
            take_runtime_lock(cur, LOCK_WORKER_REGISTRATION, ClusterLeaseStorageError)
            row = cur.execute(LOCK_SESSION, (cmd.worker_id,)).fetchone()
            current = None if row is None else session_from_row(row)
            now = clamp(cur, database_now(cur), None if current is None else current.updated_at_ms, None, "", "")
            fresh = dict(
                session_id=cmd.session_id, status=SessionStatus.ONLINE, capabilities=cmd.capabilities,
                capabilities_hash=caps_hash, max_concurrent_runs=cmd.max_concurrent_runs,
                available_slots=cmd.max_concurrent_runs, heartbeat_at_ms=now,
                lease_expires_at_ms=now + cmd.lease_duration_ms, updated_at_ms=now,
            )
            if current is None:
                session = WorkerSessionRecord(worker_id=cmd.worker_id, generation=1, version=0, created_at_ms=now, **fresh)
                store_session(self._cur, session, None)
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
            store_session(self._cur, session, current.version)
            return RegisteredOutcome(session=session, replaced_session=True)

    def heartbeat(self, cmd: HeartbeatCommand) -> WorkerSessionRecord:
        expect(cmd, HeartbeatCommand, "heartbeat")
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
            store_session(self._cur, session, current.version)
            return session

    def drain(self, cmd: DrainCommand) -> WorkerSessionRecord:
        expect(cmd, DrainCommand, "drain")
        with Transaction(self._conn, ClusterLeaseStorageError):
            current, now = self._fenced_session(cmd, (SessionStatus.ONLINE,))
            session = _replace(current, status=SessionStatus.DRAINING, version=bump(current.version, "session"),
                               available_slots=0, updated_at_ms=now)
            store_session(self._cur, session, current.version)
            return session

    def offline(self, cmd: OfflineCommand) -> WorkerSessionRecord:
        expect(cmd, OfflineCommand, "offline")
        with Transaction(self._conn, ClusterLeaseStorageError):
            current, now = self._fenced_session(cmd, (SessionStatus.ONLINE, SessionStatus.DRAINING), require_live=False)
            session = _replace(
                current, status=SessionStatus.OFFLINE, version=bump(current.version, "session"), available_slots=0,
                lease_expires_at_ms=max(current.heartbeat_at_ms, min(current.lease_expires_at_ms, now)),
                updated_at_ms=now,
            )
            store_session(self._cur, session, current.version)
            return session

    def _fenced_session(self, cmd: Any, allowed: tuple[SessionStatus, ...], *, require_live: bool = True
                        ) -> tuple[WorkerSessionRecord, int]:
        cur = self._cur
        row = cur.execute(LOCK_SESSION, (cmd.worker_id,)).fetchone()
        current = None if row is None else session_from_row(row)
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

    def current(self, row: tuple[Any, ...] | None, cmd: Any, now: int, allowed: tuple[SessionStatus, ...],
                require_live: bool = True) -> WorkerSessionRecord:
        """The caller's session, fenced by worker, session id and generation (not version), from its
        row as the caller locked it (``LOCK_SESSION``, first in the lock order)."""
        session = None if row is None else session_from_row(row)
        if session is None or session.session_id != cmd.session_id or session.generation != cmd.session_generation:
            raise WorkerLeaseFenceRejectedError(
                f"session {cmd.session_id!r} generation {cmd.session_generation} is not the current session "
                f"of worker {cmd.worker_id!r}"
            )
        self._check_state(session, now, allowed, require_live)
        return session
