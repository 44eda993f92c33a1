"""PostgreSQL Worker Session and Run Lease repository (ADR-0057 as cluster-profile.md §4 states it).

:class:`PostgresWorkerLeaseRepository` is the one public entry, with the same operations and
results as the Local one (:mod:`edge_runtime.local.worker_lease`) and laid out the same way: it is
composed of the Worker Session authority (:mod:`cluster_postgres.worker_session`) and the Run Lease
authority (:mod:`cluster_postgres.run_lease`, with its start sequence in
:mod:`cluster_postgres.run_start`), which fences every grant through the session authority; their
rows are in :mod:`cluster_postgres.worker_lease_rows`. The reads are below.

Rows are locked ``FOR NO KEY UPDATE`` in the one global order (the registration lock of
``ql3.runtime_locks``, on registration) -> Worker -> Run -> Attempt -> Run Lease, and database
time is read once, after the last blocking lock. A claim's capacity is decided under the Worker row lock, against
``min(max_concurrent_runs, available_slots)``, so concurrent dispatchers never oversell a slot.
Bearer tokens are digested in Python; only digests reach the server. Neither an expired lease nor
an offline session is ever reported as "not running".
"""

from __future__ import annotations

from typing import Any

import psycopg

from edge_runtime.contract.run_lease import (
    BeginStartCommand,
    ClaimRunCommand,
    ClaimRunOutcome,
    CompleteRunLeaseCommand,
    LeaseStatus,
    LeaseTransitionOutcome,
    ReleaseRunLeaseCommand,
    RenewRunLeaseCommand,
    RunLeaseRecord,
    StartRunCommand,
    StartRunOutcome,
)
from edge_runtime.contract.runs import RunStatus
from edge_runtime.contract.sql_vocabulary import sql_literal
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
from cluster_postgres.errors import ClusterLeaseStorageError, Transaction, reading
from cluster_postgres.run_lease import RunLeases
from cluster_postgres.run_start import RunStarts
from cluster_postgres.worker_lease_rows import (
    COUNT_ACTIVE,
    LEASE_COLUMNS,
    SELECT_LEASE,
    SELECT_SESSION,
    lease_from_row,
    session_from_row,
)
from cluster_postgres.worker_session import WorkerSessions

__all__ = ["PostgresWorkerLeaseRepository"]

_SELECT_ACTIVE = (
    f"SELECT {LEASE_COLUMNS} FROM ql3.run_dispatch_leases WHERE worker_id = %s "
    f"AND status = {sql_literal(LeaseStatus.LEASED)} "
    "ORDER BY session_generation, attempt_id"
)


class PostgresWorkerLeaseRepository:
    """Fenced Worker Sessions and Run Leases in ``ql3``. One connection, not thread-safe.

    Mutations: ``register``, ``heartbeat``, ``drain``, ``offline``, ``claim_run``, ``renew``,
    ``release``, ``begin_start``, ``complete``, and the composed, fenced start: ``start_run``,
    ``abandon_start``, ``sweep_orphans``; reads: ``find_session``, ``find_lease``,
    ``count_active_leases``, ``free_slots``, ``list_active_leases``.
    """

    __slots__ = ("_conn", "_cur", "_sessions", "_leases", "_starts")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._cur = conn.cursor()
        # The parts share the one connection and its one cursor.
        self._sessions = WorkerSessions(conn, self._cur)
        self._leases = RunLeases(conn, self._cur, self._sessions)
        self._starts = RunStarts(conn, self._cur, self._sessions)

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
        reject(identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH))
        with reading(ClusterLeaseStorageError):
            row = self._cur.execute(SELECT_SESSION, (worker_id,)).fetchone()
        return None if row is None else session_from_row(row)

    def find_lease(self, attempt_id: str) -> RunLeaseRecord | None:
        reject(identifier_problem("attempt_id", attempt_id, ATTEMPT_ID_MAX_LENGTH))
        with reading(ClusterLeaseStorageError):
            row = self._cur.execute(SELECT_LEASE, (attempt_id,)).fetchone()
        return None if row is None else lease_from_row(row)

    def count_active_leases(self, worker_id: str) -> int:
        """``leased`` grants (expired or not) of the worker's current session; 0 without one."""
        reject(identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH))
        with Transaction(self._conn, ClusterLeaseStorageError):
            row = self._cur.execute(SELECT_SESSION, (worker_id,)).fetchone()
            if row is None:
                return 0
            return self._cur.execute(COUNT_ACTIVE, (worker_id, session_from_row(row).generation, "")).fetchone()[0]

    def free_slots(self, worker_id: str, session_generation: int) -> int:
        """What a start by that session may still take: ``min(max_concurrent_runs, available_slots)``
        minus its own ``leased`` grants; 0 unless it is the worker's current online session. A read
        for planning; :meth:`start_run` decides again under the Worker row lock."""
        reject(identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH))
        with Transaction(self._conn, ClusterLeaseStorageError):
            row = self._cur.execute(SELECT_SESSION, (worker_id,)).fetchone()
            session = None if row is None else session_from_row(row)
            if session is None or session.generation != session_generation or session.status is not SessionStatus.ONLINE:
                return 0
            active = self._cur.execute(COUNT_ACTIVE, (worker_id, session_generation, "")).fetchone()[0]
        return max(0, min(session.max_concurrent_runs, session.available_slots) - active)

    def list_active_leases(self, worker_id: str) -> list[RunLeaseRecord]:
        """Every ``leased`` grant of the worker, of any session generation (restart recovery)."""
        reject(identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH))
        with reading(ClusterLeaseStorageError):
            rows = self._cur.execute(_SELECT_ACTIVE, (worker_id,)).fetchall()
        return [lease_from_row(row) for row in rows]
