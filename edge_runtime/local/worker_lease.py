"""Local Worker Session and Run Lease repository (spec §5, ADR-0057 Local Profile).

:class:`LocalWorkerLeaseRepository` is the one public entry. It is composed of the spec's two
authorities: the Worker Session authority (:mod:`edge_runtime.local.worker_session`) and the Run
Lease authority (:mod:`edge_runtime.local.run_lease`, with its start sequence in
:mod:`edge_runtime.local.run_start`), which fences every grant through the session authority.
The reads are below. Every mutation is one
``BEGIN IMMEDIATE`` transaction reading the injected clock after the lock is held.

Lease and session state is about *authority*, never about processes: an offline session or an
expired lease does not mean that a process stopped, and no method reports "not running".
"""

from __future__ import annotations

from typing import Any

from edge_runtime.contract.run_lease import (
    BeginStartCommand,
    ClaimRunCommand,
    ClaimRunOutcome,
    CompleteRunLeaseCommand,
    LeaseTransitionOutcome,
    ReleaseRunLeaseCommand,
    RenewRunLeaseCommand,
    RunLeaseRecord,
    StartRunCommand,
    StartRunOutcome,
)
from edge_runtime.contract.runs import RunStatus
from edge_runtime.contract.validation import ATTEMPT_ID_MAX_LENGTH, identifier_problem
from edge_runtime.contract.worker_lease import WORKER_ID_MAX_LENGTH, reject
from edge_runtime.contract.worker_session import (
    DrainCommand,
    HeartbeatCommand,
    OfflineCommand,
    RegisterOutcome,
    RegisterWorkerCommand,
    SessionStatus,
    WorkerSessionRecord,
)
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.run_lease import RunLeases
from edge_runtime.local.run_start import RunStarts
from edge_runtime.local.worker_session import WorkerSessions
from edge_runtime.local.worker_lease_rows import (
    count_other_active,
    read_active_leases,
    read_lease,
    read_session,
    repository_errors,
)

__all__ = ["LocalWorkerLeaseRepository"]


class LocalWorkerLeaseRepository:
    """Fenced Worker Sessions and Run Leases on a :class:`~edge_runtime.local.database.LocalDatabase`.

    Mutations: ``register``, ``heartbeat``, ``drain``, ``offline``, ``claim_run``, ``renew``,
    ``release``, ``begin_start``, ``complete``, and the composed start sequence of
    :mod:`edge_runtime.local.run_start` (``start_run``, ``abandon_start``, ``sweep_orphans``).
    Not thread-safe (one connection).
    """

    __slots__ = ("_db", "_sessions", "_leases", "_starts")

    def __init__(self, db: LocalDatabase) -> None:
        self._db = db
        self._sessions = WorkerSessions(db)
        self._leases = RunLeases(db, self._sessions)
        self._starts = RunStarts(db, self._sessions)

    # ================================================================= Worker Session authority

    def register(self, cmd: RegisterWorkerCommand) -> RegisterOutcome:
        return self._sessions.register(cmd)

    def heartbeat(self, cmd: HeartbeatCommand) -> WorkerSessionRecord:
        return self._sessions.heartbeat(cmd)

    def drain(self, cmd: DrainCommand) -> WorkerSessionRecord:
        return self._sessions.drain(cmd)

    def offline(self, cmd: OfflineCommand) -> WorkerSessionRecord:
        return self._sessions.offline(cmd)

    # ================================================================= Run Lease authority

    def claim_run(self, cmd: ClaimRunCommand) -> ClaimRunOutcome:
        return self._leases.claim_run(cmd)

    def renew(self, cmd: RenewRunLeaseCommand) -> RunLeaseRecord:
        return self._leases.renew(cmd)

    def release(self, cmd: ReleaseRunLeaseCommand) -> LeaseTransitionOutcome:
        return self._leases.release(cmd)

    def begin_start(self, cmd: BeginStartCommand) -> LeaseTransitionOutcome:
        return self._leases.begin_start(cmd)

    def complete(self, cmd: CompleteRunLeaseCommand) -> LeaseTransitionOutcome:
        return self._leases.complete(cmd)

    def start_run(self, cmd: StartRunCommand) -> StartRunOutcome:
        return self._starts.start_run(cmd)

    def abandon_start(self, lease: RunLeaseRecord, *, reason: str, actor_id: str) -> RunStatus:
        return self._starts.abandon_start(lease, reason=reason, actor_id=actor_id)

    def sweep_orphans(self, cmd: Any, *, abandon_after_ms: int) -> list[tuple[str, RunStatus]]:
        return self._starts.sweep_orphans(cmd, abandon_after_ms=abandon_after_ms)

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

    def free_slots(self, worker_id: str, session_generation: int) -> int:
        """What a start by that session may still take: ``min(max_concurrent_runs, available_slots)``
        minus the session's own ``leased`` grants; 0 unless it is the worker's current online session.

        A read for planning a start pass; :meth:`start_run` decides again under the write lock.
        """
        reject(identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH))
        with repository_errors():
            session = read_session(self._db.connection, worker_id)
            if (session is None or session.generation != session_generation
                    or session.status is not SessionStatus.ONLINE):
                return 0
            active = count_other_active(self._db.connection, worker_id, session_generation, "")
            return max(0, min(session.max_concurrent_runs, session.available_slots) - active)

    def list_active_leases(self, worker_id: str) -> list[RunLeaseRecord]:
        """Every ``leased`` grant of the worker, of any session generation (for restart recovery).

        An expired grant is listed too: expiry says nothing about the process.
        """
        reject(identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH))
        with repository_errors():
            return read_active_leases(self._db.connection, worker_id)

