"""Firing due schedules and enforcing Run timeouts, through the contract's ScheduleStore port.

The service calls :meth:`Scheduler.tick` on each pass of its loop and sleeps until
:meth:`Scheduler.next_due_at_ms` (the earliest next fire time or timeout deadline): there is no
per-second polling, and a tick reads only what is due (indexed), never every schedule.

Each fire is one short transaction in the store. A schedule that cannot fire (its expression or
zone is not one this version reads, or it never fires in its zone) comes back paused with the
reason (``schedule.paused_unfireable``), so it neither stalls the schedules behind it nor is
retried at every tick. Cancels (``replace`` and timeouts) go through
the Run repository's durable cancel request, so the CancellationDispatch delivers them: SIGTERM,
the grace period, then SIGKILL, across restarts.

``@reboot`` schedules: the first tick arms those not yet fired for this boot (``boot_id``, which
the composition root reads from the kernel), so they fire once per boot of the device and never
on a mere restart of the service.
"""

from __future__ import annotations

from edge_runtime.contract.schedules import TIMEOUT_REASON, PausedUnfireable, ScheduleStore, replaced_reason
from edge_runtime.service.journal import Journal

ACTOR_ID = "scheduler"


class Scheduler:
    __slots__ = ("_store", "_journal", "_boot_id")

    def __init__(self, store: ScheduleStore, journal: Journal, boot_id: str | None = None) -> None:
        self._store = store
        self._journal = journal
        self._boot_id = boot_id
        if boot_id is None:
            journal.warning("schedule.boot_unknown", detail="no boot id: @reboot schedules do not fire")

    def tick(self) -> bool:
        """Fire what is due, start slots that waited, cancel timed-out Runs; whether anything happened.

        Raises:
            EdgeRuntimeError: the store failed; what was done so far is committed, the rest is
                still due and is retried by the service's next tick.
        """
        worked = False
        if self._boot_id is not None:
            armed = self._store.arm_boot_schedules(self._boot_id)
            self._boot_id = None  # once per start: a failure above leaves it set and is retried
            for schedule_id in armed:
                self._journal.info("schedule.boot_armed", schedule=schedule_id)
        for schedule_id in self._store.due_schedule_ids(64):
            plan = self._store.fire(schedule_id, actor_id=ACTOR_ID)
            if plan is None:
                continue
            worked = True
            if isinstance(plan, PausedUnfireable):
                self._journal.warning("schedule.paused_unfireable", schedule=schedule_id, reason=plan.reason)
                continue
            self._journal.info(
                "schedule.fired", schedule=schedule_id, slot_ms=plan.due.fire_at_ms, outcome=plan.outcome.value,
                coalesced=plan.due.coalesced, next_ms=plan.due.next_fire_at_ms,
            )
            self._cancel(plan.cancel_run_ids, replaced_reason(schedule_id))
        if self._cancel(self._store.start_waiting(actor_id=ACTOR_ID), "replaced by its schedule's next slot"):
            worked = True
        return self._cancel(self._store.timed_out_run_ids(), TIMEOUT_REASON) or worked

    def _cancel(self, run_ids: list[str] | tuple[str, ...], reason: str) -> bool:
        for run_id in run_ids:
            self._store.request_cancel(run_id, reason, actor_id=ACTOR_ID)
            self._journal.info("schedule.cancel_requested", run=run_id, reason=reason)
        return bool(run_ids)

    def next_due_at_ms(self) -> int | None:
        return self._store.next_due_at_ms()
