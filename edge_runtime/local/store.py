"""The Local adapter of the service's ``Store`` port: one SQLite file, the guarded device clock and
the wake socket beside the database. Only the composition roots build it: ``cli/serve.py`` for the
service, ``cli/common.py`` for the user commands (which never touch the lease authority or the wake
socket's listening side, so those modules are imported only when used: a read command on a router
pays for no more than it needs)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

import apsw

from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import SystemClock, read_now_ms
from edge_runtime.local.environment import LocalEnvironmentRepository
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.guarded_clock import ClockJump, GuardedClock, restore_floor
from edge_runtime.local.runs import LocalRunRepository

if TYPE_CHECKING:  # the port, for annotations only
    from edge_runtime.contract.ports import Clock


class LocalStore:
    """The repositories over one opened database, its time and its wake-up."""

    __slots__ = ("db", "where", "clock", "runs", "dispatches", "environment", "_leases", "_schedules",
                 "_subscriptions", "_notifications")

    #: The logs are files on this device, where every ``logs`` command runs: no copies kept.
    attempt_logs = None

    def __init__(self, db: LocalDatabase, db_path: str, clock: Clock) -> None:
        self.db, self.where, self.clock = db, db_path, clock
        self.runs = LocalRunRepository(db)
        self.dispatches = LocalCancellationDispatchRepository(db)
        self.environment = LocalEnvironmentRepository(db)
        self._leases = None
        self._schedules = None
        self._subscriptions = None
        self._notifications = None

    @property
    def notifications(self):
        """Notification channels, rules and the outbox (``notify ...``; docs/notifications.md)."""
        if self._notifications is None:
            from edge_runtime.local.notifications import LocalNotificationRepository

            self._notifications = LocalNotificationRepository(self.db)
        return self._notifications

    @property
    def schedules(self):
        """The schedule commands' repository (``schedule add|edit|run|list|show|...``)."""
        if self._schedules is None:
            from edge_runtime.local.schedules import LocalScheduleRepository

            self._schedules = LocalScheduleRepository(self.db)
        return self._schedules

    @property
    def subscriptions(self):
        """The subscriptions (``subscription add|list|run|pull|...``; the Local store's alone:
        docs/architecture.md), whose pulls make schedules in :attr:`schedules`."""
        if self._subscriptions is None:
            from edge_runtime.local.subscriptions import LocalSubscriptionRepository

            self._subscriptions = LocalSubscriptionRepository(self.db, self.schedules)
        return self._subscriptions

    @property
    def leases(self):
        if self._leases is None:
            from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository

            self._leases = LocalWorkerLeaseRepository(self.db)
        return self._leases

    def now_ms(self) -> int:
        return read_now_ms(self.clock)

    def open_wake(self):
        from edge_runtime.local.wake import WakeSocket

        return WakeSocket(self.where)

    def wake_workers(self) -> int:
        """Poke the service's wake socket beside the database; how many services took it (0: none
        is running; the work waits for one)."""
        from edge_runtime.local.wake import poke

        return poke(self.where)

    def keep_time(self, *, final: bool = False) -> None:
        """The guarded clock's watermark and jump events: one short transaction per interval."""
        if isinstance(self.clock, GuardedClock):
            if final:
                self.clock.flush(self.db)
            else:
                self.clock.maybe_persist(self.db)

    def close(self) -> None:
        self.db.close()


def local_store_opener(
    db_path: str, *, clock: Clock | None = None, on_jump: Callable[[ClockJump], None] | None = None
) -> Callable[[], LocalStore]:
    """A function that opens (and migrates) the database at ``db_path`` as a ``LocalStore``.

    Routers boot at 1970 and jump on NTP sync: unless a clock is given, the store's time is the
    system clock guarded by the watermark stored in the database (never below what was stored).
    """

    def open_store() -> LocalStore:
        used = clock or GuardedClock(SystemClock(), on_jump=on_jump)
        db = open_database(db_path, clock=used)
        try:
            if isinstance(used, GuardedClock):
                restore_floor(used, db)
        except BaseException:
            db.close()
            raise
        return LocalStore(db, os.fspath(db_path), used)

    return open_store


def route_sqlite_log(report: Callable[[int, str], None]) -> bool:
    """Send SQLite's own notices and warnings (a WAL recovered after a power cut, an automatic
    index) to ``report(code, message)``. Its errors are not routed: each also surfaces as the
    failed call's exception, which the service logs (with backoff, so a full disk cannot flood).
    Must run before the first connection; False when SQLite was already initialised."""

    def handler(code: int, message: str) -> None:
        if code & 0xFF in (apsw.SQLITE_NOTICE, apsw.SQLITE_WARNING):
            report(code, message)

    try:
        apsw.config(apsw.SQLITE_CONFIG_LOG, handler)
    except apsw.MisuseError:
        return False
    return True
