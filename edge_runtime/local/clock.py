"""Injected clocks. Repositories read ``now_ms`` once per transaction, after taking the write lock.

A device without a real-time clock boots at 1970 or at the firmware build date, so the clock is a
parameter everywhere: tests use :class:`ManualClock`, the service the system clock (guarded
against backward jumps elsewhere).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from edge_runtime.contract.validation import MAX_SAFE_INTEGER
from edge_runtime.local.errors import InvalidClockValueError

if TYPE_CHECKING:  # the port, for annotations only: a clock is duck-typed
    from edge_runtime.contract.ports import Clock

__all__ = ["InvalidClockValueError", "ManualClock", "SystemClock", "read_now_ms"]


class SystemClock:
    """Wall-clock time in milliseconds."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to; for tests and deterministic simulations."""

    __slots__ = ("_now_ms",)

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = start_ms

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, ms: int) -> int:
        """Move forward (or, with a negative ``ms``, backward) and return the new time."""
        self._now_ms += ms
        return self._now_ms

    def set(self, ms: int) -> None:
        self._now_ms = ms


def read_now_ms(clock: Clock) -> int:
    """Read and validate one clock value.

    Raises:
        InvalidClockValueError: the value is not an int (bools included) in ``[0, 2**53 - 1]``.
    """
    value = clock.now_ms()
    if type(value) is not int or value < 0 or value > MAX_SAFE_INTEGER:
        raise InvalidClockValueError(f"clock returned an invalid time {value!r}; expected milliseconds >= 0")
    return value
