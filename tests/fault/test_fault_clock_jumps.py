"""Clock jumps at the repository level: backward and forward by seconds, hours and decades
(a reboot at 1970), with the GuardedClock in front of the wall clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import fault_stats
from tests.support.dispatch import claim_cmd, fresh_event_id, seed, REQUESTED_AT_MS
from edge_runtime.contract.cancellation_dispatch import (
    ClaimedOutcome,
    DispatchResult,
    FenceRejectedError,
    LeasedOutcome,
    RecordResultCommand,
    RepositoryError,
)
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.contract.ports import Clock
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.errors import LocalStorageError
from edge_runtime.local.guarded_clock import (
    DEFAULT_FORWARD_THRESHOLD_MS,
    GuardedClock,
    list_clock_jumps,
    observed_floor_ms,
    restore_floor,
)
from tests.support.vfs_shim import RecordingVFS

pytestmark = pytest.mark.fault

CAMPAIGN = "clock-jumps"
T0_MS = 1_700_000_000_000
SECOND, HOUR, YEAR = 1_000, 3_600_000, 365 * 86_400_000
LEASE_MS = 30_000

JUMPS = {"seconds": 45 * SECOND, "hours": 3 * HOUR, "decades": 30 * YEAR}


class _Device:
    """A wall clock and a monotonic clock that move together, except when the wall clock jumps."""

    def __init__(self, wall_ms: int) -> None:
        self.wall = ManualClock(wall_ms)
        self.mono = ManualClock(0)

    def tick(self, ms: int) -> None:
        self.wall.advance(ms)
        self.mono.advance(ms)

    def jump(self, ms: int) -> None:
        """The wall clock steps by ``ms`` while one real second passes."""
        self.wall.advance(ms + SECOND)
        self.mono.advance(SECOND)
        fault_stats.add(fault_stats.CLOCK_JUMPS, campaign=CAMPAIGN)

    def guarded(self, **kwargs: object) -> GuardedClock:
        return GuardedClock(self.wall, monotonic_ms=self.mono.now_ms, **kwargs)


def _open(path: Path, clock: Clock, **kwargs: object) -> LocalDatabase:
    return open_database(path, clock=clock, **kwargs)


def _record(repo: LocalCancellationDispatchRepository, owner: str, token: str, version: int) -> object:
    return repo.record_result(
        RecordResultCommand("run-1", "att-1", owner, token, version, DispatchResult.TERMINATION_REQUESTED,
                            fresh_event_id())
    )


def _leased_dispatch(db: LocalDatabase) -> tuple[LocalCancellationDispatchRepository, ClaimedOutcome]:
    with db.write():
        seed(db.connection)
    repo = LocalCancellationDispatchRepository(db)
    claimed = repo.claim(claim_cmd(owner="worker-a", lease_token="token-a"))
    assert isinstance(claimed, ClaimedOutcome)
    return repo, claimed


@pytest.mark.parametrize("size", sorted(JUMPS), ids=sorted(JUMPS))
def test_backward_jump_never_shortens_time_or_breaks_invariants(size: str, db_path: Path) -> None:
    device = _Device(T0_MS)
    clock = device.guarded()
    db = _open(db_path, clock)
    restore_floor(clock, db)
    repo, claimed = _leased_dispatch(db)
    before = clock.now_ms()

    device.jump(-JUMPS[size])
    # Guarded time went on by the one real second: the lease is still live, not "longer-lived".
    assert clock.now_ms() == before + SECOND
    other = repo.claim(claim_cmd(owner="worker-b", lease_token="token-b"))
    assert isinstance(other, LeasedOutcome)
    outcome = _record(repo, "worker-a", "token-a", claimed.dispatch.version)
    assert outcome.dispatch.updated_at_ms == before + SECOND >= outcome.dispatch.created_at_ms

    [jump] = clock.pending_jumps()
    assert (jump.direction, jump.jump_ms, jump.at_boot) == ("backward", JUMPS[size], False)
    clock.persist(db)
    assert [j.jump_ms for j in list_clock_jumps(db)] == [JUMPS[size]]
    assert clock.pending_jumps() == []
    db.close()


@pytest.mark.parametrize("size", sorted(JUMPS), ids=sorted(JUMPS))
def test_unguarded_backward_jump_is_what_the_guard_prevents(size: str, db_path: Path) -> None:
    """Control: the raw wall clock makes the very same record_result fail closed."""
    device = _Device(T0_MS)
    db = _open(db_path, device.wall)
    repo, claimed = _leased_dispatch(db)
    device.jump(-JUMPS[size])
    with pytest.raises(RepositoryError, match="updated_at_ms must be >= created_at_ms"):
        _record(repo, "worker-a", "token-a", claimed.dispatch.version)
    db.close()


@pytest.mark.parametrize("size", sorted(JUMPS), ids=sorted(JUMPS))
def test_forward_jump_is_followed_and_the_fence_holds(size: str, db_path: Path) -> None:
    device = _Device(T0_MS)
    clock = device.guarded()
    db = _open(db_path, clock)
    restore_floor(clock, db)
    repo, claimed = _leased_dispatch(db)
    before = clock.now_ms()

    device.jump(JUMPS[size])
    assert clock.now_ms() == before + SECOND + JUMPS[size]
    # The lease ended early in real time; a takeover is allowed and the stale holder is fenced.
    other = repo.claim(claim_cmd(owner="worker-b", lease_token="token-b"))
    assert isinstance(other, ClaimedOutcome)
    with pytest.raises(FenceRejectedError):
        _record(repo, "worker-a", "token-a", claimed.dispatch.version)
    _record(repo, "worker-b", "token-b", other.dispatch.version)

    jumps = clock.pending_jumps()
    if JUMPS[size] > DEFAULT_FORWARD_THRESHOLD_MS:
        assert [(j.direction, j.jump_ms) for j in jumps] == [("forward", JUMPS[size])]
    else:
        assert jumps == []  # small forward steps are followed silently (documented)
    db.close()


def test_reboot_at_1970_stays_above_everything_persisted(tmp_path: Path) -> None:
    path = tmp_path / "edge-runtime.db"
    device = _Device(T0_MS)
    clock = device.guarded()
    db = _open(path, clock)
    restore_floor(clock, db)
    repo, claimed = _leased_dispatch(db)
    # A retry due a day from now is a future time: it must not lift the floor after a reboot.
    outcome = repo.record_result(
        RecordResultCommand("run-1", "att-1", "worker-a", "token-a", claimed.dispatch.version,
                            DispatchResult.DISPATCH_ERROR, fresh_event_id(), retry_delay_ms=86_400_000)
    )
    device.tick(10 * SECOND)
    retaken_at = clock.now_ms()
    clock.persist(db)
    db.close()

    # Power cycle: no RTC, the wall clock restarts near the epoch, a new monotonic clock.
    rebooted = _Device(5 * SECOND)
    fault_stats.add(fault_stats.CLOCK_JUMPS, campaign=CAMPAIGN)
    clock = rebooted.guarded()
    db = _open(path, clock)
    floor = restore_floor(clock, db)
    assert floor == retaken_at < outcome.dispatch.next_attempt_at_ms
    first = clock.now_ms()
    assert first == floor
    rebooted.tick(2 * SECOND)
    assert clock.now_ms() == floor + 2 * SECOND
    [jump] = clock.pending_jumps()
    assert (jump.direction, jump.at_boot, jump.jump_ms) == ("backward", True, floor - 5 * SECOND)
    assert jump.jump_ms > 50 * YEAR

    # The retry stays a day away in guarded time, and comes due after a day of real time.
    repo = LocalCancellationDispatchRepository(db)
    assert repo.claim(claim_cmd(owner="worker-b", lease_token="token-b")).status == "not_due"
    rebooted.tick(86_400_000)
    assert isinstance(repo.claim(claim_cmd(owner="worker-b", lease_token="token-b")), ClaimedOutcome)
    clock.persist(db)
    assert [j.at_boot for j in list_clock_jumps(db)] == [True]
    assert observed_floor_ms(db) >= floor + 86_400_000
    db.close()


def test_watermark_persistence_adds_no_transaction_to_the_hot_path(tmp_path: Path) -> None:
    """Operations read the clock inside their own transaction; persisting the watermark is one
    extra commit per interval, not one per operation (counted as WAL syncs through the shim)."""
    device = _Device(T0_MS)
    clock = device.guarded(persist_interval_ms=30 * SECOND)
    vfs = RecordingVFS()
    try:
        db = _open(tmp_path / "edge-runtime.db", clock, vfs=vfs.name)
        restore_floor(clock, db)
        with db.write():
            for index in range(20):
                seed(db.connection, f"run-{index}", f"att-{index}")
        repo = LocalCancellationDispatchRepository(db)
        assert clock.maybe_persist(db) is True  # the first call always writes
        syncs = len(vfs.sync_positions())
        persisted = 0
        for index in range(20):
            repo.claim(claim_cmd(run_id=f"run-{index}", attempt_id=f"att-{index}", lease_token=f"t-{index}"))
            device.tick(5 * SECOND)  # 100 s in all: three persist intervals
            persisted += clock.maybe_persist(db)
        assert persisted == 3
        assert len(vfs.sync_positions()) - syncs == 20 + persisted
        db.close()
    finally:
        vfs.unregister()


@st.composite
def _timelines(draw: st.DrawFn) -> list[tuple[int, int]]:
    """(wall step, monotonic step) pairs: mostly ordinary ticks, some jumps of any size."""
    tick = st.integers(0, 5 * SECOND).map(lambda ms: (ms, ms))
    jump = st.tuples(st.integers(-40 * YEAR, 40 * YEAR), st.integers(0, 5 * SECOND))
    return draw(st.lists(st.one_of(tick, tick, jump), min_size=1, max_size=40))


def test_guarded_time_never_goes_back_and_follows_an_honest_clock(long_mode: bool) -> None:
    @settings(max_examples=1_000 if long_mode else 150, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(start=st.integers(0, 60 * YEAR), floor=st.integers(0, 60 * YEAR), timeline=_timelines())
    def check(start: int, floor: int, timeline: list[tuple[int, int]]) -> None:
        device = _Device(start)
        clock = device.guarded(floor_ms=floor)
        previous = clock.now_ms()
        assert previous >= floor
        jumps = 0
        for wall_step, mono_step in timeline:
            if device.wall.now_ms() + wall_step < 0:
                continue
            device.wall.advance(wall_step)
            device.mono.advance(mono_step)
            jumps += wall_step != mono_step
            now = clock.now_ms()
            assert now >= previous  # never back
            assert now >= device.wall.now_ms() or now == previous + mono_step  # ahead only by counting on
            previous = now
        if not any(wall != mono for wall, mono in timeline) and start >= floor:
            assert previous == device.wall.now_ms()  # an honest clock is followed exactly
        fault_stats.add(fault_stats.CLOCK_JUMPS, jumps, campaign=CAMPAIGN)

    check()


def test_stored_future_times_never_raise_the_floor(db: LocalDatabase) -> None:
    with db.write():
        seed(db.connection, cancel_requested_at_ms=REQUESTED_AT_MS)
        db.connection.execute(
            "UPDATE run_attempts SET kill_deadline_at_ms = ? WHERE id = 'att-1'", (T0_MS + 10 * YEAR,)
        )
    assert observed_floor_ms(db) < T0_MS + YEAR


def test_a_failing_persist_backs_off_and_keeps_the_jump(db_path: Path) -> None:
    device = _Device(T0_MS)
    clock = device.guarded()
    db = _open(db_path, clock)
    restore_floor(clock, db)
    assert clock.maybe_persist(db) is True
    device.jump(-HOUR)
    clock.now_ms()
    db.close()  # the store fails from now on
    device.tick(2 * SECOND)
    with pytest.raises(LocalStorageError):
        clock.maybe_persist(db)
    assert clock.maybe_persist(db) is False  # not retried on every loop iteration
    assert len(clock.pending_jumps()) == 1  # and the jump is not forgotten
    db = _open(db_path, clock)
    device.tick(SECOND)
    assert clock.maybe_persist(db) is True
    assert [(j.direction, j.jump_ms) for j in list_clock_jumps(db)] == [("backward", HOUR)]
    db.close()
