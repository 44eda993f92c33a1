"""The retention port: what the service needs to keep storage bounded, whatever the adapter.

The service only decides *when* (idle, one small step at a time); the adapter decides *what*
(which finished Runs, which log files) and does each step as one short transaction.
"""

from __future__ import annotations

from typing import Annotated, Protocol

import msgspec

#: The history kept, on a device (``serve``'s ``retain_runs``/``retain_days``) and on a cluster (one
#: ``ql3.retention_settings`` row, whose migration writes these defaults): at most so many finished
#: Runs, none finished more than so many days ago. Unfinished Runs are never removed.
DEFAULT_RETAIN_RUNS = 1000
DEFAULT_RETAIN_DAYS = 7
RetainRuns = Annotated[int, msgspec.Meta(ge=1, le=10_000_000)]
RetainDays = Annotated[int, msgspec.Meta(ge=1, le=36_500)]


class Retention(Protocol):
    def prune_step(self) -> bool:
        """Remove one small batch of what the retention policy no longer keeps.

        Returns True when more remains (call again soon), False when storage is within policy.

        Raises:
            EdgeRuntimeError: the step failed; nothing was half-done (retry later).
        """
        ...

    def attempts_ended(self) -> None:
        """Attempts ended while serving: their logs may have taken the log directory past
        ``log_total_max_bytes``, so the next step enforces the total again (without this it held
        only at start and after Runs were deleted)."""
        ...
