"""Run timeouts on the cluster: the device's ``ScheduleStore`` port over the PostgreSQL Run store.

The service's :class:`~edge_runtime.service.scheduler.Scheduler` enforces timeouts through this
port exactly as on a device: a timed-out Run gets a durable cancel request (reason ``timeout``)
and the CancellationDispatch delivers it (SIGTERM, grace, SIGKILL). Deadlines are read by
database time (``ql3.now_ms()``); no worker clock is compared with them. Each worker sees only
the Attempts it holds the Run Lease of, so one Run's timeout is requested by one worker.

The cluster schema has no schedules table yet: this port fires no schedule (``due_schedule_ids``
is empty, ``start_waiting`` starts nothing), it only enforces timeouts.
"""

from __future__ import annotations

from typing import Any

from edge_runtime.contract.runs import CancelRunCommand, RunStateConflictError
from edge_runtime.contract.schedules import FirePlan


class PostgresTimeouts:
    """The ``ScheduleStore`` port of a cluster worker: timeouts by database time, no schedules."""

    __slots__ = ("_runs",)

    def __init__(self, runs: Any) -> None:
        #: The store's (reopening) Run repository, scoped to this worker.
        self._runs = runs

    def due_schedule_ids(self, limit: int) -> list[str]:
        return []

    def fire(self, schedule_id: str, *, actor_id: str) -> FirePlan | None:
        return None

    def start_waiting(self, *, actor_id: str) -> list[str]:
        return []

    def timed_out_run_ids(self) -> list[str]:
        return self._runs.timed_out_run_ids()

    def request_cancel(self, run_id: str, reason: str, *, actor_id: str) -> None:
        try:
            self._runs.request_cancel(CancelRunCommand(run_id=run_id, reason=reason), actor_id=actor_id)
        except RunStateConflictError:
            pass  # it ended meanwhile: nothing left to cancel

    def next_due_at_ms(self) -> int | None:
        return self._runs.next_timeout_at_ms()
