"""The clock discipline: a wall clock that never goes back below what was already persisted.

Routers boot at 1970 (no RTC) or at the firmware build date and then jump when NTP syncs. Every
lease expiry, retry time and ``updated_at_ms`` is computed from ``now_ms``; a clock that goes back
would make a lease look longer-lived, a retry come late, and ``updated_at_ms < created_at_ms``
(which the dispatch invariants refuse). :class:`GuardedClock` wraps the inner (system) clock:

Backward jumps (wall clock below the last time handed out): never followed. Time keeps counting
from the last value handed out at the rate of the monotonic clock, so leases and retries still
come due in real elapsed time; the guarded clock then runs ahead of the wall clock by the size of
the jump until the wall clock catches up (usually when NTP corrects it).

Forward jumps (wall clock advanced more than the monotonic clock by over
``forward_threshold_ms``): followed at once. Leases and retry delays then end early in real
time. That is safe for fencing: an early takeover bumps the dispatch version and the stale holder
is rejected by the version/owner/digest fence; it only costs a possibly repeated signal attempt.

Boot: the floor is ``max(watermark, newest observation time stored in any table)``
(:func:`restore_floor`), so a reboot at 1970 cannot go below anything already written. A wall
clock below the floor at the first read after the floor is restored is recorded as a backward
jump with ``at_boot`` set. A wall clock far above the floor at boot is not a jump: downtime looks
the same, so it is followed silently.

Wiring (service start): ``clock = GuardedClock(SystemClock())``, ``db = open_database(path,
clock=clock)``, ``restore_floor(clock, db)`` before serving, then ``clock.maybe_persist(db)`` on
every loop iteration.

Every detected jump is kept in memory and written as a ``clock.jump_detected`` row of
``device_events`` (payload: direction, ``jump_ms``, wall and guarded times, ``at_boot``) by
:meth:`GuardedClock.persist`, together with the watermark. Repositories read ``now_ms`` inside
their own write transaction, so the clock itself never writes: the service loop calls
:meth:`GuardedClock.maybe_persist`, which costs one short transaction at most once per
``persist_interval_ms`` (or at once when a jump is pending), never one per operation.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import apsw
import msgspec

from edge_runtime.local.clock import InvalidClockValueError, read_now_ms
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.errors import LocalStorageError

if TYPE_CHECKING:  # the port, for annotations only
    from edge_runtime.contract.ports import Clock

__all__ = [
    "CLOCK_JUMP_EVENT",
    "ClockJump",
    "GuardedClock",
    "list_clock_jumps",
    "full_observed_floor_ms",
    "observed_floor_ms",
    "restore_floor",
    "watermark_ms",
]

CLOCK_JUMP_EVENT = "clock.jump_detected"

#: Wall-clock steps backwards smaller than this are jitter (NTP slew, coarse clocks): guarded
#: silently, never recorded.
DEFAULT_BACKWARD_TOLERANCE_MS = 1_000
#: A forward step this much larger than the monotonic time elapsed is recorded as a jump.
DEFAULT_FORWARD_THRESHOLD_MS = 60_000
#: How often the service persists the watermark (one small transaction): its slack. Every write
#: stores observed times, which raise the boot floor too (:func:`observed_floor_ms`), so the
#: watermark only matters for time handed out while nothing was written; a restart may begin up
#: to this far below such time, never below anything stored (docs/storage.md: opening a database, clock).
DEFAULT_PERSIST_INTERVAL_MS = 300_000
#: How soon a detected jump is persisted (and a failed persist of one retried).
_PENDING_RETRY_MS = 1_000

#: Every stored time, classified. Observed times (when something happened) raise the floor a
#: restarted runtime may hand out. Future times (an expiry, a due time, a deadline) never do: a
#: floor taken from a retry due in 24 hours would push the clock a day ahead. A migration that
#: adds an ``*_at_ms`` column lists it here (tests/unit/test_clock_columns.py fails until it does).
OBSERVED_TIME_COLUMNS: tuple[tuple[str, str], ...] = (
    ("runs", "cancel_requested_at_ms"), ("runs", "created_at_ms"), ("runs", "updated_at_ms"),
    ("runs", "finished_at_ms"),
    ("run_attempts", "created_at_ms"), ("run_attempts", "updated_at_ms"), ("run_attempts", "finished_at_ms"),
    ("run_attempts", "started_at_ms"), ("run_attempts", "term_sent_at_ms"), ("run_attempts", "killed_at_ms"),
    ("run_events", "created_at_ms"),
    ("run_cancellation_dispatches", "last_dispatched_at_ms"), ("run_cancellation_dispatches", "created_at_ms"),
    ("run_cancellation_dispatches", "updated_at_ms"),
    ("worker_sessions", "heartbeat_at_ms"), ("worker_sessions", "created_at_ms"),
    ("worker_sessions", "updated_at_ms"),
    ("run_dispatch_leases", "acquired_at_ms"), ("run_dispatch_leases", "renewed_at_ms"),
    ("run_dispatch_leases", "started_at_ms"), ("run_dispatch_leases", "released_at_ms"),
    ("run_dispatch_leases", "completed_at_ms"), ("run_dispatch_leases", "updated_at_ms"),
    ("schema_migrations", "applied_at_ms"),
    ("clock_watermark", "updated_at_ms"), ("device_events", "created_at_ms"),
    # A waiting fire time is a slot that already came (overlap kept it for later): observed.
    ("schedules", "waiting_fire_at_ms"), ("schedules", "last_fire_at_ms"), ("schedules", "created_at_ms"),
    ("schedules", "updated_at_ms"), ("env_entries", "created_at_ms"), ("env_entries", "updated_at_ms"),
    # Small tables (one password, a few panel sessions): read whole by the floor.
    ("panel_password", "set_at_ms"), ("panel_sessions", "created_at_ms"), ("panel_sessions", "last_seen_at_ms"),
    # Small too: at most MAX_APPS apps, each with about TOKEN_WINDOWS_PER_TTL live tokens.
    ("panel_apps", "created_at_ms"), ("panel_app_tokens", "created_at_ms"),
    # Small: one row per subscription.
    ("subscriptions", "pulled_at_ms"), ("subscriptions", "created_at_ms"), ("subscriptions", "updated_at_ms"),
    # Small: the channels and rules a user configured.
    ("notify_channels", "created_at_ms"), ("notify_rules", "created_at_ms"),
    # One row per message: a notified Run's go with it at retention (ON DELETE CASCADE), so the
    # floor's scan stays as short as the kept history.
    ("notify_outbox", "created_at_ms"), ("notify_outbox", "sent_at_ms"),
)
#: Observed columns whose every value is at most another observed column's value in a row the
#: floor reads anyway: the floor need not read them. An event append sets its Run's
#: ``updated_at_ms`` to at least the event's time, and it never goes down
#: (edge_runtime/local/run_events.py; migration 0008 brought older rows up to it); the triggers
#: of migration 0009 do the same for every write of an Attempt or a Run Lease. ``check``
#: verifies the floor against every column (edge_runtime/local/health.py).
_COVERED_BY_THEIR_RUN = ("run_events", "run_attempts", "run_dispatch_leases")
DOMINATED_BY: dict[tuple[str, str], tuple[str, str]] = {
    (table, column): ("runs", "updated_at_ms") for table, column in OBSERVED_TIME_COLUMNS
    if table in _COVERED_BY_THEIR_RUN
}
FUTURE_TIME_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_attempts", "kill_deadline_at_ms"), ("run_attempts", "lease_expires_at_ms"),
    ("run_cancellation_dispatches", "next_attempt_at_ms"), ("run_cancellation_dispatches", "lease_expires_at_ms"),
    ("worker_sessions", "lease_expires_at_ms"), ("run_dispatch_leases", "expires_at_ms"),
    ("schedules", "next_fire_at_ms"), ("runs", "retry_at_ms"), ("panel_app_tokens", "expires_at_ms"),
    ("notify_outbox", "next_at_ms"), ("notify_outbox", "lease_expires_at_ms"), ("notify_outbox", "window_ends_at_ms"),
)


class JumpDirection(enum.StrEnum):
    BACKWARD = "backward"
    FORWARD = "forward"


class ClockJump(msgspec.Struct, frozen=True, kw_only=True):
    """One detected jump of the inner clock."""

    direction: JumpDirection
    jump_ms: int
    wall_ms: int
    guarded_ms: int
    at_boot: bool


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class GuardedClock:
    """A :class:`~edge_runtime.local.clock.Clock` that never returns less than its floor or any
    value it returned before, and records jumps of the inner clock. Thread-safe."""

    def __init__(
        self,
        inner: Clock,
        *,
        floor_ms: int = 0,
        monotonic_ms: Callable[[], int] | None = None,
        backward_tolerance_ms: int = DEFAULT_BACKWARD_TOLERANCE_MS,
        forward_threshold_ms: int = DEFAULT_FORWARD_THRESHOLD_MS,
        persist_interval_ms: int = DEFAULT_PERSIST_INTERVAL_MS,
        on_jump: Callable[[ClockJump], None] | None = None,
    ) -> None:
        """
        Args:
            inner: the wall clock to guard (the system clock in the service).
            floor_ms: the lowest time ever handed out (see :func:`restore_floor`).
            monotonic_ms: a clock that never jumps, in ms (``time.monotonic`` by default;
                tests inject a manual one).
            on_jump: called (outside the lock) with each jump as it is detected, e.g. to log it.
        """
        self._inner = inner
        self._monotonic = monotonic_ms or _monotonic_ms
        self._backward_tolerance_ms = backward_tolerance_ms
        self._forward_threshold_ms = forward_threshold_ms
        self._persist_interval_ms = persist_interval_ms
        self._on_jump = on_jump
        self._lock = threading.Lock()
        self._floor_ms = floor_ms
        self._check_floor = floor_ms > 0
        self._last_returned: int | None = None
        self._last_wall = 0
        self._last_mono = 0
        self._last_persist_mono: int | None = None
        self._pending: list[ClockJump] = []
        self.jumps_detected = 0

    # ----------------------------------------------------------------- reading

    def now_ms(self) -> int:
        """The guarded time in milliseconds.

        Raises:
            InvalidClockValueError: the inner clock returned something that is not a time.
        """
        wall = read_now_ms(self._inner)
        mono = self._monotonic()
        with self._lock:
            jump, guarded = self._advance(wall, mono)
        if jump is not None and self._on_jump is not None:
            self._on_jump(jump)
        return guarded

    def _advance(self, wall: int, mono: int) -> tuple[ClockJump | None, int]:
        last = self._last_returned
        if last is None:
            guarded = max(wall, self._floor_ms)
            skew = 0
        else:
            elapsed = max(0, mono - self._last_mono)
            skew = (wall - self._last_wall) - elapsed
            # Ahead of the wall clock (after a backward jump) time goes on at the monotonic rate.
            guarded = max(wall if wall >= last else last + elapsed, self._floor_ms)
        jump = None
        if self._check_floor:
            # First read since the floor came from the database: a wall clock below it is the
            # reboot-at-1970 case, measured against what was persisted.
            self._check_floor = False
            if self._floor_ms - wall > self._backward_tolerance_ms:
                jump = self._jump(JumpDirection.BACKWARD, self._floor_ms - wall, wall, guarded, at_boot=True)
        if jump is None and -skew > self._backward_tolerance_ms:
            jump = self._jump(JumpDirection.BACKWARD, -skew, wall, guarded, at_boot=False)
        elif jump is None and skew > self._forward_threshold_ms:
            jump = self._jump(JumpDirection.FORWARD, skew, wall, guarded, at_boot=False)
        self._last_returned = guarded
        self._last_wall = wall
        self._last_mono = mono
        return jump, guarded

    def _jump(self, direction: JumpDirection, size: int, wall: int, guarded: int, *, at_boot: bool) -> ClockJump:
        jump = ClockJump(direction=direction, jump_ms=size, wall_ms=wall, guarded_ms=guarded, at_boot=at_boot)
        self._pending.append(jump)
        self.jumps_detected += 1
        return jump

    # ----------------------------------------------------------------- floor and persistence

    @property
    def floor_ms(self) -> int:
        with self._lock:
            return self._floor_ms if self._last_returned is None else max(self._floor_ms, self._last_returned)

    def raise_floor(self, floor_ms: int) -> None:
        """Never hand out less than ``floor_ms`` from now on (a lower value is ignored)."""
        if type(floor_ms) is not int or floor_ms < 0:
            raise InvalidClockValueError(f"clock floor must be milliseconds >= 0, got {floor_ms!r}")
        with self._lock:
            if floor_ms > self._floor_ms:
                self._floor_ms = floor_ms
                self._check_floor = True

    def pending_jumps(self) -> list[ClockJump]:
        """Jumps detected and not yet persisted."""
        with self._lock:
            return list(self._pending)

    def persist(self, db: LocalDatabase) -> int:
        """Write the watermark and any pending jump events in one short transaction.

        Call it from the service loop (see :meth:`maybe_persist`), never from inside another
        write transaction. Returns the watermark written.

        Raises:
            LocalStorageError: the database failed; the pending jumps are kept for the next try.
        """
        with self._lock:
            jumps = list(self._pending)
        encode = msgspec.json.encode
        try:
            with db.write() as now:
                connection = db.connection
                connection.execute(
                    "INSERT INTO clock_watermark (id, watermark_ms, updated_at_ms) VALUES (1, ?1, ?1) "
                    "ON CONFLICT (id) DO UPDATE SET watermark_ms = max(watermark_ms, excluded.watermark_ms), "
                    "updated_at_ms = excluded.updated_at_ms",
                    (now,),
                )
                for jump in jumps:
                    connection.execute(
                        "INSERT INTO device_events (type, payload, created_at_ms) VALUES (?, ?, ?)",
                        (CLOCK_JUMP_EVENT, encode(jump).decode(), now),
                    )
        except (apsw.Error, InvalidClockValueError) as exc:
            raise LocalStorageError(f"could not persist the clock watermark: {exc}") from exc
        with self._lock:
            del self._pending[: len(jumps)]
            self._last_persist_mono = self._monotonic()
        return now

    def flush(self, db: LocalDatabase) -> bool:
        """Persist pending jump events now, whatever the pacing (a service on its way out).
        Returns whether anything was pending.

        Raises:
            LocalStorageError: as :meth:`persist`.
        """
        with self._lock:
            pending = bool(self._pending)
        if pending:
            self.persist(db)
        return pending

    def maybe_persist(self, db: LocalDatabase) -> bool:
        """:meth:`persist` when ``persist_interval_ms`` has passed since the last attempt (always
        the first time), or sooner, at most once a second, while a jump is pending. A failing
        disk is thus retried at that pace, not on every loop iteration. Returns whether it wrote.

        Raises:
            LocalStorageError: as :meth:`persist`.
        """
        with self._lock:
            mono = self._monotonic()
            last = self._last_persist_mono
            since = None if last is None else mono - last
            due = (
                since is None
                or since >= self._persist_interval_ms
                or (bool(self._pending) and since >= min(_PENDING_RETRY_MS, self._persist_interval_ms))
            )
            if due:
                self._last_persist_mono = mono  # counts the attempt, so a failure backs off too
        if due:
            self.persist(db)
        return due


def _observation_columns(connection: apsw.Connection) -> list[tuple[str, str]]:
    """The observed-time columns this database has (an opt-in step may have left a table out)."""
    present = {(table, row[0]) for table in {t for t, _ in OBSERVED_TIME_COLUMNS}
               for row in connection.execute("SELECT name FROM pragma_table_info(?)", (table,))}
    return [column for column in OBSERVED_TIME_COLUMNS if column in present]


def observed_time_expression(columns: list[str]) -> str:
    """The newest of ``columns`` in one row: the expression migration 0008 indexes on each table
    that grows with history, so that its max() is one index seek. Built the same way for every
    table; a table whose expression matches no index is scanned (tests/unit/test_hot_path_plans.py
    fails for a history table)."""
    if len(columns) == 1:
        return f'"{columns[0]}"'
    newest = ", ".join(f'coalesce("{column}", 0)' for column in columns)
    return f"max({newest})"


def full_observed_floor_ms(db: LocalDatabase) -> int:
    """:func:`observed_floor_ms` the slow way, every observed column of every row (for ``check``,
    which proves with it that the indexed floor misses nothing)."""
    parts = [f'SELECT max("{column}") AS t FROM "{table}"' for table, column in _observation_columns(db.connection)]
    if not parts:
        return 0
    return db.connection.execute(f"SELECT max(t) FROM ({' UNION ALL '.join(parts)})").fetchone()[0] or 0


def observed_floor_ms(db: LocalDatabase) -> int:
    """``max(clock_watermark, every stored observation time)``: the lowest time a restarted
    runtime may hand out. One index seek per table that grows with history (migration 0008), the
    event log read through its Runs (:data:`DOMINATED_BY`); the few other tables (sessions,
    schedules, migrations) are small. Run once at startup."""
    connection = db.connection
    present = _observation_columns(connection)
    by_table: dict[str, list[str]] = {}
    for table, column in present:
        if DOMINATED_BY.get((table, column)) not in present:
            by_table.setdefault(table, []).append(column)
    parts = [f'SELECT max({observed_time_expression(columns)}) AS t FROM "{table}"' for table, columns in by_table.items()]
    if not parts:
        return 0
    row = connection.execute(f"SELECT max(t) FROM ({' UNION ALL '.join(parts)})").fetchone()
    return row[0] or 0


def watermark_ms(db: LocalDatabase) -> int:
    """The persisted watermark alone (one row): a cheap floor for short-lived processes such as
    the CLI, which must not scan every table on each call. It trails the service's guarded time
    by at most the service's persist interval."""
    row = db.connection.execute("SELECT watermark_ms FROM clock_watermark WHERE id = 1").fetchone()
    return 0 if row is None else row[0]


def restore_floor(clock: GuardedClock, db: LocalDatabase) -> int:
    """Raise ``clock``'s floor to what ``db`` has already persisted; call before serving.

    Returns the floor applied.
    """
    floor = observed_floor_ms(db)
    clock.raise_floor(floor)
    return floor


def list_clock_jumps(db: LocalDatabase) -> list[ClockJump]:
    """Every persisted ``clock.jump_detected`` event, oldest first."""
    decode = msgspec.json.Decoder(ClockJump).decode
    rows = db.connection.execute(
        "SELECT payload FROM device_events WHERE type = ? ORDER BY id", (CLOCK_JUMP_EVENT,)
    ).fetchall()
    return [decode(row[0]) for row in rows]
