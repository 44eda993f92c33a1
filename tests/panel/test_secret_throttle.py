"""The throttle of secret checks, on an injected clock: one check per peer per window, decided when
the check is taken (before the secret is compared), and a bound on failed checks from all peers
together, counted the same way."""

from __future__ import annotations

import pytest

from edge_runtime.panel.secret_throttle import (
    SECRET_DELAY_S, SECRET_FAILURE_WINDOW_S, SECRET_FAILURES_PER_MINUTE, SECRET_MAX_DELAY_S, TRACKED_PEERS,
    SecretCheckThrottle, SecretCheckThrottledError, delay_s,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def throttle(clock: Clock) -> SecretCheckThrottle:
    return SecretCheckThrottle(clock=clock)


def _refused(throttle: SecretCheckThrottle, peer: str) -> SecretCheckThrottledError:
    with pytest.raises(SecretCheckThrottledError) as caught:
        throttle.begin(peer)
    assert throttle.would_refuse(peer) is not None
    return caught.value


def test_a_check_under_way_is_the_peer_s_only_one(throttle) -> None:
    """The race: a second request from the peer reaches its check while the first is still being
    compared (the first has not failed yet): it is refused, not compared."""
    first = throttle.begin("a")
    refused = _refused(throttle, "a")
    assert refused.code == "AUTH_THROTTLED" and not refused.everyone
    assert refused.retry_after_s == 1 and "from this address" in str(refused)
    assert first.failed() == 1


def test_after_a_failure_the_peer_waits_doubling_per_failure_in_a_row(throttle, clock) -> None:
    for failures in range(1, 9):
        with throttle.begin("a") as check:
            assert check.failed() == failures
        wait = _refused(throttle, "a").wait_s
        assert wait == pytest.approx(min(SECRET_DELAY_S * 2 ** (failures - 1), SECRET_MAX_DELAY_S))
        clock.now += wait - 0.001
        _refused(throttle, "a")  # not a moment early
        clock.now += 0.001
        assert throttle.would_refuse("a") is None
        clock.now += SECRET_FAILURE_WINDOW_S  # keep the global limit out of it
    assert delay_s(8) == SECRET_MAX_DELAY_S


def test_many_racing_requests_get_one_check_per_window(throttle, clock) -> None:
    """What 16 connections whose heads all arrived first become at the check: one is compared."""
    taken, refused = [], 0
    for _ in range(16):
        try:
            taken.append(throttle.begin("a"))
        except SecretCheckThrottledError:
            refused += 1
    assert len(taken) == 1 and refused == 15
    taken[0].failed()
    for _ in range(15):
        _refused(throttle, "a")
    clock.now += SECRET_DELAY_S
    throttle.begin("a").failed()  # the next window: one more check, no more


def test_a_check_that_passed_forgets_the_peer_s_failures(throttle, clock) -> None:
    with throttle.begin("a") as check:
        check.failed()
    clock.now += SECRET_DELAY_S
    with throttle.begin("a") as check:
        check.passed()
    assert throttle.would_refuse("a") is None
    with throttle.begin("a") as check:
        assert check.failed() == 1  # counting again from one


def test_peers_are_throttled_apart(throttle) -> None:
    throttle.begin("a").failed()
    assert throttle.would_refuse("b") is None
    throttle.begin("b").passed()


def test_a_check_without_a_verdict_counts_as_failed(throttle) -> None:
    with pytest.raises(OSError):
        with throttle.begin("a"):
            raise OSError("the database failed under the comparison")
    refused = _refused(throttle, "a")
    assert refused.wait_s == pytest.approx(SECRET_DELAY_S)


def test_a_check_is_settled_once(throttle) -> None:
    check = throttle.begin("a")
    check.failed()
    with pytest.raises(RuntimeError):
        check.passed()


def test_failures_from_all_peers_together_make_everyone_wait(throttle, clock) -> None:
    for i in range(SECRET_FAILURES_PER_MINUTE):
        throttle.begin(f"spray-{i}").failed()
        clock.now += 1.0
    refused = _refused(throttle, "fresh")
    assert refused.everyone and "from all addresses together" in str(refused)
    # Until the oldest failure is a window old.
    assert refused.wait_s == pytest.approx(SECRET_FAILURE_WINDOW_S - SECRET_FAILURES_PER_MINUTE)
    clock.now += refused.wait_s
    throttle.begin("fresh").passed()


def test_checks_under_way_count_against_the_global_limit(throttle) -> None:
    """The global limit is decided at the check too: checks taken and not yet settled count as
    failed, so a race from many addresses gets no more checks than the limit."""
    taken = [throttle.begin(f"peer-{i}") for i in range(SECRET_FAILURES_PER_MINUTE)]
    refused = _refused(throttle, "one-more")
    assert refused.everyone
    taken[0].passed()  # a check that passed frees its place
    throttle.begin("one-more").failed()
    for check in taken[1:]:
        check.failed()
    assert _refused(throttle, "yet-another").everyone


def test_would_refuse_takes_nothing(throttle) -> None:
    for _ in range(5):
        assert throttle.would_refuse("a") is None
    throttle.begin("a").failed()


def test_forgetting_peers_never_forgets_one_whose_check_is_under_way(throttle, clock) -> None:
    under_way = throttle.begin("first")
    for i in range(TRACKED_PEERS + 10):
        throttle.begin(f"peer-{i}").failed()
        clock.now += SECRET_FAILURE_WINDOW_S  # keep the global limit out of it
    _refused(throttle, "first")  # still known to be checking
    assert under_way.failed() == 1
    assert throttle.would_refuse("peer-0") is None  # the least recently failed are forgotten
