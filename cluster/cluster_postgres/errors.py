"""The one error mapper of the Cluster Profile (cluster-profile.md §4): by SQLSTATE, never by class.

A storage failure becomes the contract's own repository error class (so callers handle both
profiles alike) with code ``CLUSTER_STORAGE_FAILED`` and ``retryable`` from the table below.
Contract errors raised inside a transaction pass through unchanged, after the rollback.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import psycopg

from edge_runtime.contract.cancellation_dispatch import RepositoryError
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.runs import RunRepositoryError
from edge_runtime.contract.schedules import ScheduleRepositoryError
from edge_runtime.contract.worker_lease import WorkerLeaseRepositoryError

STORAGE_FAILED = "CLUSTER_STORAGE_FAILED"

#: Trying the same thing again may succeed: lock and statement timeouts, deadlock and serialization
#: losers, shutdown, a read-only standby, too many connections, idle-in-transaction timeout.
RETRYABLE_SQLSTATES = frozenset(
    {"55P03", "40P01", "40001", "57014", "57P01", "57P02", "57P03", "25006", "53300", "25P03"}
)


#: The server ended the session (shutdown, crash, administrator): the connection is gone.
_CONNECTION_ENDED = frozenset({"57P01", "57P02", "57P03"})


def is_retryable(sqlstate: str | None) -> bool:
    """Whether a failure with ``sqlstate`` may succeed when retried unchanged.

    ``None`` is a connection lost without a server answer; class ``08`` is a connection exception.
    Everything else (``23xxx`` integrity, ``22xxx`` data, ``42501`` privilege, ``42P01`` missing
    table, and anything unknown) is not.
    """
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in RETRYABLE_SQLSTATES


class RunVersionConflict(Exception):
    """The Run changed between its row lock and the CAS: only a bug or a foreign writer does that."""


class ClusterDispatchStorageError(RepositoryError, code=STORAGE_FAILED):
    """PostgreSQL failed under a CancellationDispatch operation."""


class ClusterLeaseStorageError(WorkerLeaseRepositoryError, code=STORAGE_FAILED):
    """PostgreSQL failed under a Worker Session or Run Lease operation."""


class ClusterRunStorageError(RunRepositoryError, code=STORAGE_FAILED):
    """PostgreSQL failed under a Run or Attempt operation."""


class ClusterScheduleStorageError(ScheduleRepositoryError, code=STORAGE_FAILED):
    """PostgreSQL failed under a schedule operation."""


class ClusterMigrationRefusedError(EdgeRuntimeError, code="CLUSTER_MIGRATION_REFUSED"):
    """A migration was refused: edited or unknown migration, or the wrong role."""


class ClusterDsnError(EdgeRuntimeError, code="CLUSTER_DSN_INVALID"):
    """No DSN was given, or it is not a connection string. The message never quotes the DSN (libpq's
    own parse errors do, and a DSN may hold a password)."""


class ClusterNotReadyError(EdgeRuntimeError, code="CLUSTER_NOT_READY"):
    """The readiness check failed: checksums, privileges or settings drifted."""


def storage_error(kind: type[EdgeRuntimeError], exc: BaseException, *, ambiguous: bool = False) -> EdgeRuntimeError:
    """``kind`` for a psycopg failure ``exc``; ``ambiguous`` when the connection died during COMMIT."""
    sqlstate = getattr(exc, "sqlstate", None)
    # A deferred constraint failing at COMMIT is a known rollback; a lost connection is not.
    if ambiguous and (sqlstate is None or sqlstate.startswith("08") or sqlstate in _CONNECTION_ENDED):
        return kind(f"connection lost during COMMIT: the outcome is unknown; retry the same command ({exc})",
                     retryable=True)
    label = "connection lost" if sqlstate is None else f"SQLSTATE {sqlstate}"
    # One line: libpq splits its messages over lines (with a tab), which a one-line error breaks.
    return kind(f"database operation failed ({label}): {' '.join(str(exc).split())}", retryable=is_retryable(sqlstate))


class Transaction:
    """``with conn.transaction()`` that maps psycopg failures to ``kind`` (see :func:`storage_error`).

    A failure while leaving a block whose body finished is a failed COMMIT: when the connection
    is lost there, the outcome is unknown and the error says so.
    """

    __slots__ = ("_conn", "_kind", "_tx")

    def __init__(self, conn: psycopg.Connection[Any], kind: type[EdgeRuntimeError]) -> None:
        self._conn = conn
        self._kind = kind

    def __enter__(self) -> None:
        self._tx = self._conn.transaction()
        try:
            self._tx.__enter__()
        except psycopg.Error as exc:
            raise storage_error(self._kind, exc) from exc

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        try:
            self._tx.__exit__(exc_type, exc, tb)
        except psycopg.Error as failure:
            raise storage_error(self._kind, failure, ambiguous=exc_type is None) from failure
        if exc_type is not None and issubclass(exc_type, psycopg.Error):
            raise storage_error(self._kind, exc) from exc  # type: ignore[arg-type]
        if exc_type is not None and issubclass(exc_type, RunVersionConflict):
            raise self._kind(str(exc)) from None
        return False


#: The rows of ``ql3.runtime_locks`` (migration 0009), one per serialisation that no row lock
#: gives: a worker's first registration (its row does not exist yet) and every env entry write (the
#: limits over all entries: their number, names and sizes).
LOCK_WORKER_REGISTRATION = "worker_registration"
LOCK_SHARED_ENV_SET = "shared_env_set"
#: Coalescing a Run's end into the notification outbox (migration 0013).
LOCK_NOTIFY_COALESCE = "notify_coalesce"


def take_runtime_lock(cur: psycopg.Cursor[Any], name: str, kind: type[EdgeRuntimeError]) -> None:
    """Lock the row ``name`` of ``ql3.runtime_locks`` until the transaction ends.

    Not an advisory lock: any role that can connect may take any advisory key and keep it, while
    this row may be locked only by a role that may UPDATE the table, the runtime role alone.

    Raises:
        kind: the row is missing (migration 0009 not applied), or the lock failed.
    """
    if cur.execute("SELECT 1 FROM ql3.runtime_locks WHERE name = %s FOR NO KEY UPDATE", (name,)).fetchone() is None:
        raise kind(f"ql3.runtime_locks has no row {name!r}: is migration 0009 applied?")


def reading(kind: type[EdgeRuntimeError]) -> "_Reading":
    """Map failures of a read outside a transaction."""
    return _Reading(kind)


class _Reading:
    __slots__ = ("_kind",)

    def __init__(self, kind: type[EdgeRuntimeError]) -> None:
        self._kind = kind

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if exc_type is not None and issubclass(exc_type, psycopg.Error):
            raise storage_error(self._kind, exc) from exc  # type: ignore[arg-type]
        return False
