"""Worker Session operations of the Local repository (spec §5): register, heartbeat, drain, offline.

Each is one ``BEGIN IMMEDIATE`` transaction that reads the injected clock once, after the write
lock is held. SQLite's single writer plays the part of ADR-0057's Worker row lock. A session's
status and lease describe its *authority*; they are never evidence about its processes.
Used through :class:`edge_runtime.local.worker_lease.LocalWorkerLeaseRepository`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from edge_runtime.contract.validation import MAX_VERSION
from edge_runtime.contract.worker_lease import (
    InvalidWorkerLeaseCommandError,
    LeaseCommand,
    WorkerLeaseFenceRejectedError,
    WorkerLeaseRepositoryError,
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
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.worker_lease_rows import read_session, repository_errors, store_session

_replace = msgspec.structs.replace


def bump(version: int, what: str) -> int:
    """``version + 1``, refusing to pass the contract's maximum."""
    if version >= MAX_VERSION:
        raise WorkerLeaseRepositoryError(f"{what} has reached the maximum version")
    return version + 1


def expect(cmd: Any, kind: type[LeaseCommand], operation: str) -> None:
    """Refuse a command of the wrong type before opening a transaction."""
    kind.require(cmd, operation)


class WorkerSessions:
    """The Worker Session authority: register, heartbeat, drain, offline, and the session fence the
    Run Lease authority checks every grant against (:meth:`_current_session`).

    The base of :class:`~edge_runtime.local.worker_lease.LocalWorkerLeaseRepository`, which holds
    the database (``_db``) for the Run Lease authority's parts too."""

    __slots__ = ("_db",)

    def __init__(self, db: LocalDatabase) -> None:
        self._db = db

    # ================================================================= sessions

    def register(self, cmd: RegisterWorkerCommand) -> RegisterOutcome:
        """Register a session: first, idempotent replay, or replacement of the current one.

        Raises:
            WorkerSessionRejectedError: same session id, but conflicting capabilities or capacity,
                or the session is draining, offline or expired.
            WorkerLeaseRepositoryError: broken stored row, version overflow or database failure.
        """
        expect(cmd, RegisterWorkerCommand, "register")
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
                generation=bump(current.generation, "session generation"),
                version=bump(current.version, "session"),
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
        expect(cmd, HeartbeatCommand, "heartbeat")
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
                version=bump(current.version, "session"),
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
        expect(cmd, DrainCommand, "drain")
        with repository_errors(), self._db.write() as now:
            current = self._fenced_session(cmd, now, allowed=(SessionStatus.ONLINE,))
            session = _replace(
                current,
                status=SessionStatus.DRAINING,
                version=bump(current.version, "session"),
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
        expect(cmd, OfflineCommand, "offline")
        with repository_errors(), self._db.write() as now:
            current = self._fenced_session(
                cmd, now, allowed=(SessionStatus.ONLINE, SessionStatus.DRAINING), require_live=False
            )
            session = _replace(
                current,
                status=SessionStatus.OFFLINE,
                version=bump(current.version, "session"),
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

