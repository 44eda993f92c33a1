"""Local Worker Session and Run Lease repository (spec §5, ADR-0057 Local Profile).

:class:`LocalWorkerLeaseRepository` is the one public entry. It is made of the spec's two
authorities, one class each: the Worker Session authority (:mod:`edge_runtime.local.worker_session`,
its base) and the Run Lease authority (:mod:`edge_runtime.local.run_lease`, with its start sequence
in :mod:`edge_runtime.local.run_start`), which fences every grant through the session authority.
The reads are below. Every mutation is one
``BEGIN IMMEDIATE`` transaction reading the injected clock after the lock is held.

Lease and session state is about *authority*, never about processes: an offline session or an
expired lease does not mean that a process stopped, and no method reports "not running".
"""

from __future__ import annotations

from edge_runtime.contract.run_lease import RunLeaseRecord
from edge_runtime.contract.validation import ATTEMPT_ID_MAX_LENGTH, identifier_problem
from edge_runtime.contract.worker_lease import WORKER_ID_MAX_LENGTH, reject
from edge_runtime.contract.worker_session import SessionStatus, WorkerSessionRecord
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


class LocalWorkerLeaseRepository(WorkerSessions, RunLeases, RunStarts):
    """Fenced Worker Sessions and Run Leases on a :class:`~edge_runtime.local.database.LocalDatabase`
    (``LocalWorkerLeaseRepository(db)``).

    Mutations: ``register``, ``heartbeat``, ``drain``, ``offline`` (:class:`WorkerSessions`),
    ``claim_run``, ``renew``, ``release``, ``begin_start``, ``complete`` (:class:`RunLeases`), and
    the composed start sequence of :mod:`edge_runtime.local.run_start` (``start_run``,
    ``abandon_start``, ``sweep_orphans``: :class:`RunStarts`); the reads are below.
    Not thread-safe (one connection).
    """

    __slots__ = ()

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

