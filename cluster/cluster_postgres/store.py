"""The PostgreSQL adapter of the service's ``Store`` port (edge_runtime/contract/ports.py).

Time is the database's (``ql3.now_ms()``), so there is no watermark to keep; the wake-up is
``LISTEN ql3_wake`` on a connection of its own, which the run store NOTIFYs inside the transaction
of a ``submit`` or ``cancel`` (delivered on commit, to every listening service of the database).
Only a composition root builds it.
"""

from __future__ import annotations

from collections.abc import Callable
from psycopg.conninfo import conninfo_to_dict

from cluster_postgres.cancellation_dispatch import PostgresCancellationDispatchRepository
from cluster_postgres.connection import connect
from cluster_postgres.errors import ClusterRunStorageError, reading
from cluster_postgres.runs import WAKE_CHANNEL, PostgresRunRepository
from cluster_postgres.worker_lease import PostgresWorkerLeaseRepository

#: What of a DSN may be shown in a log: never the password or other secrets.
_SHOWN = ("host", "hostaddr", "port", "dbname", "user")


def describe_dsn(dsn: str) -> str:
    """The DSN's host, port, database and user, for the log (no password, no other option)."""
    parts = conninfo_to_dict(dsn)
    return " ".join(f"{key}={parts[key]}" for key in _SHOWN if parts.get(key))


class PostgresWake:
    """``LISTEN`` on its own autocommit connection; readable when a notification arrived."""

    __slots__ = ("_conn", "refused", "where")

    def __init__(self, dsn: str) -> None:
        self.refused: list[str] = []
        self.where = f"LISTEN {WAKE_CHANNEL} ({describe_dsn(dsn)})"
        with reading(ClusterRunStorageError):
            self._conn = connect(dsn)
            try:
                self._conn.execute(f"LISTEN {WAKE_CHANNEL}")
            except BaseException:
                self._conn.close()
                raise

    def fileno(self) -> int:
        return self._conn.fileno()

    def drain(self) -> int:
        """Consume the notifications received so far, without waiting; how many there were."""
        with reading(ClusterRunStorageError):
            return sum(1 for _ in self._conn.notifies(timeout=0))

    def close(self) -> None:
        self._conn.close()


class PostgresStore:
    """The repositories over one ``ql3_runtime`` connection, database time and LISTEN/NOTIFY."""

    __slots__ = ("_dsn", "_conn", "where", "runs", "dispatches", "leases")

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self.where = describe_dsn(dsn)
        with reading(ClusterRunStorageError):
            self._conn = connect(dsn)
        self.runs = PostgresRunRepository(self._conn)
        self.dispatches = PostgresCancellationDispatchRepository(self._conn)
        self.leases = PostgresWorkerLeaseRepository(self._conn)

    def now_ms(self) -> int:
        """Database time, the same ``ql3.now_ms()`` every transaction reads."""
        with reading(ClusterRunStorageError):
            return self._conn.execute("SELECT ql3.now_ms()").fetchone()[0]

    def open_wake(self) -> PostgresWake:
        return PostgresWake(self._dsn)

    def keep_time(self, *, final: bool = False) -> None:
        """Nothing to keep: the database's clock is the store's time (no device watermark)."""

    def close(self) -> None:
        self._conn.close()


def postgres_store_opener(dsn: str) -> Callable[[], PostgresStore]:
    """A function that opens a ``PostgresStore`` on ``dsn`` (a ``ql3_runtime`` connection string)."""

    def open_store() -> PostgresStore:
        return PostgresStore(dsn)

    return open_store

