"""A failing tick (full disk, I/O error) backs off and thins out its log lines instead of flooding."""

from __future__ import annotations

import io

from edge_runtime.local.errors import LocalStorageError
from edge_runtime.service.config import load_config
from edge_runtime.service.journal import Journal
from edge_runtime.service.service import (
    MAX_FAILURE_BACKOFF_MS,
    MIN_SLEEP_MS,
    DeviceService,
    failure_backoff_ms,
)


class _FailingDispatcher:
    """Fails every call like a repository on a full disk, until told the space is back."""

    def __init__(self) -> None:
        self.broken = True

    def dispatch_due(self) -> int:
        if self.broken:
            raise LocalStorageError("database or disk is full")
        return 0

    def enforce_kills(self) -> list[str]:
        return []


class _Idle:
    """Stands in for the worker and the supervisor: nothing to start, renew or settle."""

    adopted_count = 0
    running: dict = {}

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: 0 if name in ("start_queued", "release_due_retries") else None


def test_backoff_doubles_from_the_minimum_and_is_capped() -> None:
    assert [failure_backoff_ms(n) for n in (1, 2, 3, 4)] == [MIN_SLEEP_MS, 2 * MIN_SLEEP_MS, 4 * MIN_SLEEP_MS,
                                                            8 * MIN_SLEEP_MS]
    assert failure_backoff_ms(50) == MAX_FAILURE_BACKOFF_MS


def test_repeated_tick_failures_log_at_powers_of_two_then_recovery_once(tmp_path) -> None:
    stream = io.StringIO()
    service = DeviceService(_Idle, load_config(env={}), log_dir=tmp_path / "logs", journal=Journal(stream))
    service._store = _Idle()  # the store as the running service holds it: its time and keep_time
    service._store.now_ms = lambda: 1
    service._store.runs = _Idle()  # no retry wait is over
    dispatcher = _FailingDispatcher()
    idle = _Idle()
    idle.session = type("Session", (), {"available_slots": 2, "max_concurrent_runs": 2})()
    idle.next_heartbeat_at_ms = lambda busy_since_ms=None: 10**12
    idle.check_interval_ms = lambda: 10_000
    for _ in range(10):
        service._tick(idle, idle, dispatcher)
    lines = stream.getvalue().splitlines()
    assert [line.split("failures=")[1] for line in lines] == ["1", "2", "4", "8"]
    assert all(" error service.tick_failed " in line and "LOCAL_STORAGE_FAILED" in line for line in lines)
    assert service._tick_failures == 10

    dispatcher.broken = False
    service._tick(idle, idle, dispatcher)
    assert stream.getvalue().splitlines()[-1].endswith("info service.recovered failures=10")
    assert service._tick_failures == 0
