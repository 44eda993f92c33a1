"""The one capped exponential backoff and the one "log the 1st, 2nd, 4th... failure" rule
(edge_runtime/contract/backoff.py), and each retry of the runtime that uses them: the same waits
as the formulas each place computed on its own before."""

from __future__ import annotations

import pytest

from edge_runtime.contract.backoff import capped_backoff, worth_logging
from edge_runtime.contract.cancellation_dispatch import MAX_RETRY_DELAY_MS as MAX_DISPATCH_DELAY_MS
from edge_runtime.contract.runs import DEFAULT_RETRY_DELAY_MS, MAX_RETRY_DELAY_MS, retry_wait_ms
from edge_runtime.service import dispatcher
from edge_runtime.service.attempts import settlement
from edge_runtime.service.attempts.start import START_BACKOFF_MS
from edge_runtime.service.service import MAX_FAILURE_BACKOFF_MS, MIN_SLEEP_MS, failure_backoff_ms

FAILURES = range(1, 80)


def test_the_wait_doubles_from_the_first_up_to_the_cap() -> None:
    assert [capped_backoff(500, n, 30_000) for n in range(1, 10)] == [
        500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]
    assert [capped_backoff(0.25, n, 1.5) for n in range(1, 5)] == [0.25, 0.5, 1.0, 1.5]


def test_no_failure_yet_waits_the_first_and_a_first_above_the_cap_waits_the_cap() -> None:
    assert capped_backoff(200, 0, 30_000) == capped_backoff(200, -3, 30_000) == 200
    assert capped_backoff(90, 1, 60) == 60


def test_a_very_long_run_of_failures_waits_the_cap() -> None:
    assert capped_backoff(1, 10**9, 3_600_000) == 3_600_000
    assert capped_backoff(0.2, 10**9, 5.0) == 5.0


def test_float_waits_equal_doubling_step_by_step() -> None:
    delay, waits = 0.2, []
    for _ in FAILURES:
        waits.append(delay)
        delay = min(delay * 2, 5.0)
    assert [capped_backoff(0.2, n, 5.0) for n in FAILURES] == waits


def test_failures_are_logged_at_powers_of_two() -> None:
    assert [n for n in range(1, 300) if worth_logging(n)] == [1, 2, 4, 8, 16, 32, 64, 128, 256]


def test_a_runs_retries_wait_as_before() -> None:
    for delay in (None, 1_000, 10_000, 3_600_000):
        base = DEFAULT_RETRY_DELAY_MS if delay is None else delay
        for attempt in range(1, 40):
            assert retry_wait_ms(39, delay, attempt) == min(MAX_RETRY_DELAY_MS, base << min(attempt - 1, 32))
    assert retry_wait_ms(3, 1_000, 4) is None and retry_wait_ms(0, 1_000, 1) is None


@pytest.mark.parametrize(("base_ms", "max_ms"), [(0, 60_000), (1, 60_000), (1_000, 60_000), (5_000, 10**12)])
def test_a_cancellation_dispatch_retry_waits_as_before(base_ms: int, max_ms: int) -> None:
    for count in range(0, 60):
        before = max(1, min(base_ms << min(max(0, count - 1), 40), max_ms, MAX_DISPATCH_DELAY_MS))
        assert dispatcher.retry_delay_ms(count, base_ms, max_ms) == before


def test_a_failed_sigkill_retry_waits_as_before() -> None:
    first, cap = dispatcher._KILL_RETRY_BASE_MS, dispatcher._KILL_RETRY_MAX_MS
    for n in FAILURES:
        assert capped_backoff(first, n, cap) == min(first << min(n - 1, 16), cap)


def test_failed_ticks_and_paused_starts_wait_as_before() -> None:
    for n in (0, *FAILURES):
        assert failure_backoff_ms(n) == min(MIN_SLEEP_MS << min(max(n - 1, 0), 16), MAX_FAILURE_BACKOFF_MS)
    low, high = START_BACKOFF_MS
    for n in FAILURES:
        assert capped_backoff(low, n, high) == min(high, low << min(n - 1, 16))


def test_settlement_retries_wait_as_before() -> None:
    settlements = settlement.Settlements(runs=None, worker=None, journal=None)  # type: ignore[arg-type]
    assert settlements.next_retry_s() is None  # nothing pending
    settlements.uncompleted.add("attempt")
    for failures in range(0, 40):
        settlements.failures = failures
        before = min(settlement.RETRY_INTERVAL_S * (1 << min(failures, 5)), 30.0)
        assert settlements.backoff_s() == settlements.next_retry_s() == before


def test_a_failed_settlement_is_logged_at_powers_of_two() -> None:
    settlements = settlement.Settlements(runs=None, worker=None, journal=None)  # type: ignore[arg-type]
    assert [n for n in range(1, 70) if settlements.failed()] == [1, 2, 4, 8, 16, 32, 64]
