"""``ql3.attempt_logs`` (migration 0003): the ``AttemptLogStore`` port on PostgreSQL.

An Attempt's log is a file on the host whose worker ran it; ``edge-runtime-cluster logs`` runs
anywhere. So when an Attempt ends, its worker stores the log's tail here (at most
``STORED_LOG_MAX_BYTES``), once: the table is append-only by privilege, and only the worker that
held the Attempt's Run Lease may store it, only after the Attempt ended.
"""

from __future__ import annotations

from typing import Any

import psycopg

from edge_runtime.contract.runs import (
    STORED_LOG_MAX_BYTES,
    InvalidRunCommandError,
    StoredAttemptLog,
)
from edge_runtime.contract.sql_vocabulary import ENDED_ATTEMPT_SQL
from edge_runtime.contract.validation import ATTEMPT_ID_MAX_LENGTH, first_problem, identifier_problem, int_problem
from edge_runtime.contract.worker_lease import WORKER_ID_MAX_LENGTH
from cluster_postgres.errors import ClusterRunStorageError, Transaction, reading
from cluster_postgres.run_events import database_now

# The Attempt must have ended and its Run Lease be the storing worker's: a copy is the end of a
# log, written by the host that has the file. The first copy stands (ON CONFLICT DO NOTHING needs
# no UPDATE privilege).
_INSERT = (
    "INSERT INTO ql3.attempt_logs (attempt_id, content, size_bytes, worker_id, stored_at_ms) "
    "SELECT a.id, %s, %s, %s, %s FROM ql3.run_attempts a "
    "JOIN ql3.run_dispatch_leases l ON l.attempt_id = a.id AND l.worker_id = %s "
    f"WHERE a.id = %s AND a.status IN {ENDED_ATTEMPT_SQL} "
    "ON CONFLICT (attempt_id) DO NOTHING"
)
_SELECT = "SELECT attempt_id, content, size_bytes, worker_id, stored_at_ms FROM ql3.attempt_logs WHERE attempt_id = %s"


class PostgresAttemptLogs:
    """Copies of ended Attempts' logs, on the caller's connection (one short transaction each)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def keep(self, attempt_id: str, content: bytes, *, size_bytes: int, worker_id: str) -> bool:
        """Store the copy; False when nothing was stored: a copy already exists, the Attempt has not
        ended, or ``worker_id`` did not hold its Run Lease.

        Raises:
            InvalidRunCommandError: bad id, content over ``STORED_LOG_MAX_BYTES``, or a size below it.
        """
        problem = first_problem(
            identifier_problem("attempt_id", attempt_id, ATTEMPT_ID_MAX_LENGTH),
            identifier_problem("worker_id", worker_id, WORKER_ID_MAX_LENGTH),
            None if isinstance(content, bytes) and len(content) <= STORED_LOG_MAX_BYTES
            else f"content must be bytes of at most {STORED_LOG_MAX_BYTES}",
            int_problem("size_bytes", size_bytes, len(content) if isinstance(content, bytes) else 0, 2**63 - 1),
        )
        if problem is not None:
            raise InvalidRunCommandError(problem)
        with Transaction(self._conn, ClusterRunStorageError):
            cur = self._conn.cursor()
            now = database_now(cur)
            cur.execute(_INSERT, (content, size_bytes, worker_id, now, worker_id, attempt_id))
            return cur.rowcount == 1

    def find(self, attempt_id: str) -> StoredAttemptLog | None:
        problem = identifier_problem("attempt_id", attempt_id, ATTEMPT_ID_MAX_LENGTH)
        if problem is not None:
            raise InvalidRunCommandError(problem)
        with reading(ClusterRunStorageError):
            row = self._conn.execute(_SELECT, (attempt_id,)).fetchone()
        if row is None:
            return None
        return StoredAttemptLog(attempt_id=row[0], content=bytes(row[1]), size_bytes=row[2], worker_id=row[3],
                                stored_at_ms=row[4])
