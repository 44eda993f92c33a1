"""Slowing the guessing of a secret: the one throttle for every secret the panel's server checks.

Each guess costs its sender one check of the secret (a slow hash: the panel's password; a client
secret alike). The throttle decides at the check itself, never earlier: :meth:`SecretCheckThrottle.begin`
takes the peer's one check of the current window, under a lock, before the secret is compared,
and the caller settles it with the outcome. However many requests from one peer arrive before
the first is compared, at most one of them is compared per window:

- per peer: after a failed check the peer waits :data:`SECRET_DELAY_S`, doubling with each failure
  in a row up to :data:`SECRET_MAX_DELAY_S`, and while a check of its is under way it waits too;
  a check that passed forgets the peer's failures;
- all peers together: at most :data:`SECRET_FAILURES_PER_MINUTE` failed checks (those under way
  counted as failed) in any :data:`SECRET_FAILURE_WINDOW_S`; beyond that every peer waits until
  the oldest is that old.

For any secret (the caller records its own events)::

    with throttle.begin(peer) as check:      # SecretCheckThrottledError: answer 429 with Retry-After
        if verify(secret):
            check.passed()
        else:
            failures_in_a_row = check.failed()

A check left without a verdict (the comparison raised) counts as failed: no guess is free.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable

from edge_runtime.contract.errors import EdgeRuntimeError

#: A peer's wait after its first failed check; it doubles with each failure in a row.
SECRET_DELAY_S = 1.0
SECRET_MAX_DELAY_S = 60.0
#: Failed checks from all peers together in any window of SECRET_FAILURE_WINDOW_S.
SECRET_FAILURES_PER_MINUTE = 10
SECRET_FAILURE_WINDOW_S = 60.0
#: Peers whose failures are remembered (the least recently failed is forgotten first; the global
#: limit bounds what forgetting is worth to a sender with many addresses).
TRACKED_PEERS = 256


class SecretCheckThrottledError(EdgeRuntimeError, code="AUTH_THROTTLED"):
    """A secret from this peer may not be checked yet (HTTP 429, ``Retry-After: retry_after_s``).

    Attributes:
        wait_s: seconds until a check would be taken.
        retry_after_s: the same, whole seconds rounded up (at least 1).
        everyone: the global limit refused it (every peer waits), not the peer's own failures.
    """

    def __init__(self, wait_s: float, *, everyone: bool) -> None:
        self.wait_s, self.everyone = wait_s, everyone
        self.retry_after_s = max(1, math.ceil(wait_s))
        who = "from all addresses together" if everyone else "from this address"
        super().__init__(f"too many failed tries {who}; try again in {self.retry_after_s} s")


def delay_s(failures: int) -> float:
    """A peer's wait after ``failures`` failed checks in a row."""
    return min(SECRET_DELAY_S * 2 ** (failures - 1), SECRET_MAX_DELAY_S)


class _Peer:
    __slots__ = ("failures", "not_before", "checking")

    def __init__(self) -> None:
        self.failures = 0
        self.not_before = 0.0
        #: A check of this peer's is under way (taken by begin, not settled yet).
        self.checking = False


class SecretCheckThrottle:
    """At most one check of a secret per peer per window, and a bound on failed checks from all
    peers together (monotonic time; ``clock`` is injected in tests). Safe to share between threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._peers: dict[str, _Peer] = {}  # least recently failed first
        self._failed: collections.deque[float] = collections.deque()  # within the window, oldest first
        self._under_way = 0

    def would_refuse(self, peer: str) -> SecretCheckThrottledError | None:
        """The refusal a check from ``peer`` would get now, or None; takes nothing (a request can be
        refused before its body is read, but only :meth:`begin` decides)."""
        with self._lock:
            return self._refusal(peer, self._clock())

    def begin(self, peer: str) -> SecretCheck:
        """Take ``peer``'s check, before the secret is compared; settle it with the outcome.

        Raises:
            SecretCheckThrottledError: ``peer`` (or every peer) must wait; nothing is taken.
        """
        with self._lock:
            refusal = self._refusal(peer, self._clock())
            if refusal is not None:
                raise refusal
            state = self._peers.pop(peer, None) or _Peer()
            state.checking = True
            self._peers[peer] = state
            self._under_way += 1
            self._forget_beyond_tracked()
        return SecretCheck(self, peer)

    def _refusal(self, peer: str, now: float) -> SecretCheckThrottledError | None:
        while self._failed and self._failed[0] <= now - SECRET_FAILURE_WINDOW_S:
            self._failed.popleft()
        state = self._peers.get(peer)
        own = 0.0
        if state is not None:
            own = delay_s(state.failures + 1) if state.checking else state.not_before - now
        everyone = 0.0
        if len(self._failed) + self._under_way >= SECRET_FAILURES_PER_MINUTE:
            # All of it under way (only with checks in several threads): about one check's time.
            everyone = self._failed[0] + SECRET_FAILURE_WINDOW_S - now if self._failed else SECRET_DELAY_S
        if max(own, everyone) <= 0:
            return None
        return SecretCheckThrottledError(max(own, everyone), everyone=everyone > own)

    def _settle(self, peer: str, passed: bool) -> int:
        with self._lock:
            now = self._clock()
            self._under_way -= 1
            state = self._peers.pop(peer, None) or _Peer()
            if passed:
                return 0
            state.checking = False
            state.failures += 1
            state.not_before = now + delay_s(state.failures)
            self._peers[peer] = state
            self._failed.append(now)
            self._forget_beyond_tracked()
            return state.failures

    def _forget_beyond_tracked(self) -> None:
        while len(self._peers) > TRACKED_PEERS:
            # A peer whose check is under way stays: forgetting it would let it begin a second.
            oldest = next((p for p, s in self._peers.items() if not s.checking), None)
            if oldest is None:
                return
            del self._peers[oldest]


class SecretCheck:
    """One peer's check of a secret, taken by :meth:`SecretCheckThrottle.begin`; settle it once."""

    __slots__ = ("_throttle", "_peer", "_settled")

    def __init__(self, throttle: SecretCheckThrottle, peer: str) -> None:
        self._throttle, self._peer, self._settled = throttle, peer, False

    def passed(self) -> None:
        """The secret was right: the peer's failures are forgotten."""
        self._settle(True)

    def failed(self) -> int:
        """The secret was wrong: the peer waits longer. Returns its failures in a row."""
        return self._settle(False)

    def _settle(self, passed: bool) -> int:
        if self._settled:
            raise RuntimeError("a secret check is settled once")
        self._settled = True
        return self._throttle._settle(self._peer, passed)

    def __enter__(self) -> SecretCheck:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if not self._settled:
            self._settle(False)  # no verdict (the comparison raised): counted, never free
