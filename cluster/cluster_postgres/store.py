"""The PostgreSQL adapter of the service's ``Store`` port (edge_runtime/contract/ports.py).

Time is the database's (``ql3.now_ms()``), so there is no watermark to keep; the wake-up is a
``LISTEN`` on a connection of its own, on the database's secret wake channel (``ql3.wake_channel``:
only the runtime role may read its name), which the run store notifies inside the transaction of
a ``submit`` or ``cancel`` (delivered on commit, to every listening service of the database).
Only a composition root builds it.

A worker outlives its database connections: when one is lost (the server restarted, a failover,
the network), the operation fails with a retryable storage error and the next operation opens a
new connection, through every host of a multi-host DSN (``target_session_attrs=read-write`` picks
the new primary). The service backs off between failed ticks; the listener reconnects on its own
(capped backoff) and wakes the service the moment it is connected again, so a worker resumes as
soon as the database answers instead of at the end of its backoff.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from cluster_postgres.attempt_logs import PostgresAttemptLogs
from cluster_postgres.cancellation_dispatch import PostgresCancellationDispatchRepository
from cluster_postgres.connection import WAKE_CHANNEL_SQL, connect, describe_dsn
from cluster_postgres.environment import ClusterEnvironmentStorageError, PostgresEnvironment
from cluster_postgres.errors import (
    ClusterDsnError,
    ClusterDispatchStorageError,
    ClusterLeaseStorageError,
    ClusterRunStorageError,
    ClusterScheduleStorageError,
    reading,
)
from cluster_postgres.notifications import ClusterNotifyStorageError, PostgresNotifications
from cluster_postgres.runs import PostgresRunRepository
from cluster_postgres.retention import PostgresRetentionRepository
from cluster_postgres.schedules import PostgresScheduleRepository
from cluster_postgres.worker_lease import PostgresWorkerLeaseRepository
from edge_runtime.contract.backoff import capped_backoff, worth_logging
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.sql_vocabulary import sql_literal
from edge_runtime.contract.worker_session import SessionStatus

_ONLINE = sql_literal(SessionStatus.ONLINE)

#: The listener's reconnect backoff: doubling from the first, capped (a refused connection costs
#: nothing; an unreachable host costs its connect_timeout per try anyway).
LISTEN_RETRY_FIRST_S = 0.2
LISTEN_RETRY_MAX_S = 5.0

#: Wake-ups passed to the service are at least this far apart: each wake-up costs the service a
#: tick of queries, and the workers' own changes may come in floods (a batch of schedule commands,
#: many submitting clients), so notifications are at most this many ticks per second. The first
#: notification after a quiet interval wakes at once; the rest come at its end, together.
WAKE_MIN_INTERVAL_S = 0.1

#: ``problem(event, **fields)``: where the adapter reports what it cannot raise (the listener
#: thread's failures); the composition root passes the service's journal.
Reporter = Callable[..., None]


class WakeCoalescer:
    """When notifications become wake-ups: every notification received since the last wake-up is
    one wake-up, and wake-ups are at least ``min_interval_s`` apart. The first after a quiet
    interval is passed on at once (a cancel or a takeover is not delayed); one received sooner is
    kept pending and passed on when the interval ends (a trailing wake-up: none is ever lost).
    ``clock``: monotonic seconds (tests inject one). Not thread-safe: the listener thread owns it."""

    __slots__ = ("_interval", "_clock", "_last", "_pending", "notified", "wakeups")

    def __init__(self, min_interval_s: float = WAKE_MIN_INTERVAL_S, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = min_interval_s
        self._clock = clock
        self._last: float | None = None
        self._pending = False
        #: Notifications received and wake-ups passed on, since the start (for tests and logs).
        self.notified = 0
        self.wakeups = 0

    def notify(self, count: int = 1) -> None:
        """``count`` notifications arrived (0: none, e.g. only other messages were read)."""
        if count > 0:
            self.notified += count
            self._pending = True

    def wake_now(self) -> None:
        """Pass a wake-up on regardless of the notifications (a new connection: some were lost)."""
        self._pending = True
        self._last = None

    def take(self) -> bool:
        """Whether a wake-up is due now; if so it counts as passed on."""
        if not self._pending:
            return False
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            return False
        self._pending, self._last = False, now
        self.wakeups += 1
        return True

    def wait_s(self) -> float | None:
        """Seconds until a pending wake-up is due (0: now), None when none is pending."""
        if not self._pending:
            return None
        if self._last is None:
            return 0.0
        return max(0.0, self._last + self._interval - self._clock())


class PostgresWake:
    """``LISTEN`` on its own connection, in a thread that turns notifications into a byte on a
    socket pair: the service's selector watches the socket, whose descriptor never changes
    while the connection behind it is lost and opened again.

    The thread sleeps in ``select`` on the connection and on a stop socket: it wakes only for a
    notification, a lost connection (TCP keepalives notice a silent one), ``close`` or the end of
    a wake-up's minimum interval while one is pending. Notifications are coalesced
    (:class:`WakeCoalescer`): a burst is one wake-up, and a flood at most
    ``1 / WAKE_MIN_INTERVAL_S`` a second. Only a role that may read the channel's name reaches it:
    a notification on any other channel is never sent to this connection, so it costs the
    thread no read (:attr:`reads` counts them). It holds no transaction (autocommit, only ``LISTEN``)
    and never touches the service's state; after every (re)connection it wakes the service once,
    since notifications sent while it was not listening are lost.
    """

    __slots__ = ("_dsn", "_report", "_reader", "_writer", "_stop_reader", "_stop_writer", "_thread", "_conn",
                 "refused", "where", "coalescer", "reads")

    def __init__(self, dsn: str, *, report: Reporter | None = None,
                 coalescer: WakeCoalescer | None = None) -> None:
        self._dsn = dsn
        self._report = report
        #: Owned by the listener thread; its counters may be read from others.
        self.coalescer = coalescer or WakeCoalescer()
        self.refused: list[str] = []
        #: How many times the thread woke to read the connection (for tests and the bench).
        self.reads = 0
        # Never the channel's name: it is the database's secret, and logs travel.
        self.where = f"LISTEN on the wake channel ({describe_dsn(dsn)})"
        # The first connection is made here, so a wrong DSN or a missing grant fails the start.
        self._conn: psycopg.Connection[Any] | None = self._listen_connection()
        self._reader, self._writer = socket.socketpair()
        self._stop_reader, self._stop_writer = socket.socketpair()
        for end in (self._reader, self._writer, self._stop_reader, self._stop_writer):
            end.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="ql3-wake", daemon=True)
        self._thread.start()

    def _listen_connection(self) -> psycopg.Connection[Any]:
        with reading(ClusterRunStorageError):
            conn = connect(self._dsn)
            try:
                row = conn.execute(WAKE_CHANNEL_SQL).fetchone()
                if row is None:
                    raise ClusterRunStorageError("ql3.wake_channel has no row: is migration 0008 applied?")
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(row[0])))
            except BaseException:
                conn.close()
                raise
        return conn

    def fileno(self) -> int:
        return self._reader.fileno()

    def drain(self) -> int:
        """Consume the wake-ups received so far, without waiting; how many bytes there were."""
        count = 0
        while True:
            try:
                chunk = self._reader.recv(4096)
            except (BlockingIOError, InterruptedError):
                return count
            if not chunk:
                return count
            count += len(chunk)

    def _poke(self) -> None:
        try:
            self._writer.send(b"\0")
        except BlockingIOError:
            pass  # the socket is full of unread wake-ups: the service wakes anyway

    def _stopping(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` (None: for ever) for ``close``; whether it came."""
        return bool(select.select([self._stop_reader], [], [], timeout)[0])

    def _run(self) -> None:
        failures = 0
        while True:
            try:
                if self._conn is None:
                    self._conn = self._listen_connection()
                    self.coalescer.wake_now()  # notifications sent while we were not listening are lost
                    if failures and self._report is not None:
                        self._report("info", "wake.listening", failures=failures, where=self.where)
                    failures = 0
                if self.coalescer.take():
                    self._poke()
                ready = select.select([self._conn.fileno(), self._stop_reader], [], [], self.coalescer.wait_s())[0]
                if self._stop_reader in ready:
                    return
                if ready:  # notifications, or the end of the connection, which raises here
                    self.reads += 1
                    for _ in self._conn.notifies(timeout=0):
                        self.coalescer.notify()
                        if self.coalescer.take():  # (a flood that never pauses still wakes the loop)
                            self._poke()
                    if self._conn.broken or self._conn.closed:
                        raise ClusterRunStorageError("the LISTEN connection was lost", retryable=True)
            except (psycopg.Error, EdgeRuntimeError, OSError) as exc:
                failures += 1
                delay = capped_backoff(LISTEN_RETRY_FIRST_S, failures, LISTEN_RETRY_MAX_S)
                if self._report is not None and worth_logging(failures):
                    self._report("error", "wake.listen_failed", failures=failures, retry_in_s=delay,
                                 detail=str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
                self._close_connection()
                if self._stopping(delay):
                    return

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass  # closing a connection that is already lost: nothing left to release

    def close(self) -> None:
        try:
            self._stop_writer.send(b"\0")
        except BlockingIOError:
            pass  # a stop byte is already waiting
        self._thread.join(timeout=10)  # only a connect in progress can take this long (its timeout)
        if not self._thread.is_alive():
            self._close_connection()
        for end in (self._reader, self._writer, self._stop_reader, self._stop_writer):
            end.close()


class _Reopening:
    """A repository of the store that is looked up on every call, after the store made sure its
    connection is usable (reopened if it was lost): the service keeps this object for its whole
    life, while the connection behind it may be replaced."""

    __slots__ = ("_store", "_name")

    def __init__(self, store: "PostgresStore", name: str) -> None:
        self._store = store
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._store._repositories(self._name), attr)


_STORAGE_ERROR = {"runs": ClusterRunStorageError, "dispatches": ClusterDispatchStorageError,
                  "leases": ClusterLeaseStorageError, "attempt_logs": ClusterRunStorageError,
                  "environment": ClusterEnvironmentStorageError,
                  "schedules": ClusterScheduleStorageError, "retention": ClusterRunStorageError,
                  "notifications": ClusterNotifyStorageError}


class PostgresStore:
    """The repositories over one ``ql3_runtime`` connection, database time and LISTEN/NOTIFY.

    ``worker_id`` scopes the service's cancel and kill scans to the Attempts this worker holds
    the Run Lease of: their processes are on its host, and no other host can signal them. None
    (the CLI, tools) scans every Attempt.
    """

    __slots__ = ("_dsn", "_conn", "_repos", "_worker_id", "_report", "where", "runs", "dispatches", "leases",
                 "attempt_logs", "environment", "schedules", "retention", "notifications")

    def __init__(self, dsn: str, *, worker_id: str | None = None, report: Reporter | None = None) -> None:
        self._dsn = dsn
        self._worker_id = worker_id
        self._report = report
        self.where = describe_dsn(dsn)
        self._conn: psycopg.Connection[Any] | None = None
        self._repos: dict[str, Any] = {}
        self._reopen(ClusterRunStorageError)
        self.runs = _Reopening(self, "runs")
        self.dispatches = _Reopening(self, "dispatches")
        self.leases = _Reopening(self, "leases")
        #: Copies of ended Attempts' logs (``logs`` on another host than the worker's).
        self.attempt_logs = _Reopening(self, "attempt_logs")
        #: The shared variables (``env set``), passed to every Run on every worker.
        self.environment = _Reopening(self, "environment")
        #: The schedule commands and the service's ``ScheduleStore`` (fires, waiting slots, timeouts).
        self.schedules = _Reopening(self, "schedules")
        #: The retention policy and the prune of finished history (``ql3.prune_history``).
        self.retention = _Reopening(self, "retention")
        #: Notification channels, rules and the outbox (docs/notifications.md).
        self.notifications = _Reopening(self, "notifications")

    def _reopen(self, kind: type[EdgeRuntimeError]) -> None:
        self.close()
        with reading(kind):
            conn = connect(self._dsn)
        self._conn = conn
        runs = PostgresRunRepository(conn, scan_worker_id=self._worker_id)
        self._repos = {
            "runs": runs,
            # Schedules fire by database time on every worker; timeouts are this worker's (``runs``).
            "schedules": PostgresScheduleRepository(conn, runs, worker_id=self._worker_id),
            "dispatches": PostgresCancellationDispatchRepository(conn),
            "leases": PostgresWorkerLeaseRepository(conn),
            "attempt_logs": PostgresAttemptLogs(conn),
            "environment": PostgresEnvironment(conn),
            "retention": PostgresRetentionRepository(conn),
            "notifications": PostgresNotifications(conn),
        }

    def _repositories(self, name: str) -> Any:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            # The connection was lost by an earlier operation (which failed with a retryable
            # error): open a new one. Raises a retryable storage error while the database is away.
            self._reopen(_STORAGE_ERROR[name])
            if self._report is not None:
                self._report("info", "store.reconnected", where=self.where)
        return self._repos[name]

    def now_ms(self) -> int:
        """Database time, the same ``ql3.now_ms()`` every transaction reads."""
        self._repositories("runs")
        with reading(ClusterRunStorageError):
            return self._conn.execute("SELECT ql3.now_ms()").fetchone()[0]

    def open_wake(self) -> PostgresWake:
        return PostgresWake(self._dsn, report=self._report)

    def wake_workers(self) -> int:
        """Nothing to send: submit, cancel and rearm NOTIFY inside their own transaction, so every
        listening worker is woken exactly when the change commits. Returns how many workers are
        there to act (online, session lease live by database time): 0 makes ``submit`` say that
        the Run waits until one starts, as on a device."""
        self._repositories("leases")
        with reading(ClusterLeaseStorageError):
            return self._conn.execute(f"SELECT count(*) FROM ql3.worker_sessions WHERE status = {_ONLINE} "
                                      "AND lease_expires_at_ms > ql3.now_ms()").fetchone()[0]

    def keep_time(self, *, final: bool = False) -> None:
        """Nothing to keep: the database's clock is the store's time (no device watermark)."""

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass  # a lost connection has nothing left to release


def postgres_store_opener(dsn: str, *, worker_id: str | None = None,
                          report: Reporter | None = None) -> Callable[[], PostgresStore]:
    """A function that opens a ``PostgresStore`` on ``dsn`` (a ``ql3_runtime`` connection string)."""

    def open_store() -> PostgresStore:
        return PostgresStore(dsn, worker_id=worker_id, report=report)

    return open_store
