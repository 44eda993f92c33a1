"""Retrying after failures in a row: how long to wait, and which failures to log.

Every retry of the runtime (a Run's next Attempt, a retryable cancellation dispatch, a failed
SIGKILL, a failed tick of the service loop, a pause in starting, a settlement, the Cluster's
LISTEN reconnect) waits :func:`capped_backoff`, and every lasting failure is logged only where
:func:`worth_logging` says, so a full disk or an unreachable database cannot flood the log.
"""

from __future__ import annotations

from typing import TypeVar

Delay = TypeVar("Delay", int, float)

#: Doubling stops here: past it ``first * 2**n`` is above any cap the runtime uses, and the int
#: stays small.
_MAX_DOUBLINGS = 64


def capped_backoff(first: Delay, failures: int, cap: Delay) -> Delay:
    """The wait after the ``failures``-th failure in a row: ``first``, doubling after each further
    failure, at most ``cap``: ``min(cap, first * 2**(failures - 1))``. A count below 1 waits
    ``first`` (capped). In the caller's unit (ms as int, or seconds as float)."""
    doublings = min(max(failures - 1, 0), _MAX_DOUBLINGS)
    return min(cap, first * (1 << doublings))


def worth_logging(failures: int) -> bool:
    """Whether the ``failures``-th failure in a row is logged: the 1st, 2nd, 4th, 8th... (a power
    of two), so a failure that lasts writes a line for each doubling of its count, not for each
    try."""
    return failures & (failures - 1) == 0
