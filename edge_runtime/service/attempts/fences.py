"""Fences: stopping the processes of Attempts that are no longer this service's to run.

An Attempt is fenced out when the store has already ended it while its process still runs: the
orphan sweep of another session ended it ``lost`` once this service's session or Run Lease was
gone (``fence_ended``, and a renewal that finds the grant gone), or a worker restarted with the
same id finds its earlier lives' Attempts ended ``lost`` elsewhere (``fence_lost``). Its process
group gets SIGTERM at once and SIGKILL once the grace is over, every member, also when the
leader ends first (a member ignoring SIGTERM, a grandchild such as ``sleep 600 &``). What its
monitor saw is recorded only as a ``run.fenced_end`` event, never over the verdict.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import NamedTuple

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.runs import ACTIVE_ATTEMPT_STATUSES, AttemptRecord, AttemptStatus, ProcessIdentity
from edge_runtime.service.attempts.running import RunningAttempt, describe_exit, exit_code_of
from edge_runtime.service.attempts.tools import Tools
from edge_runtime.service.errors import ProcfsUnavailableError
from edge_runtime.service.log_capture import status_path_of
from edge_runtime.service.monitor import MonitorEnd, read_status

_UNSET = msgspec.UNSET


class FencedLost(NamedTuple):
    """An Attempt ended ``lost`` elsewhere that still has something to see: to be watched (its
    leader runs) or settled from its status file (it ended)."""

    running: RunningAttempt
    leader_alive: bool
    #: Whether some of its group still ran (and was signalled).
    group_alive: bool


class Fences:
    """The fenced process groups still to SIGKILL: their identity and the monotonic time of it."""

    def __init__(self, tools: Tools, *, grace_ms: int) -> None:
        self._runs, self._worker, self._controller, self._journal, self._watched = tools
        self._grace_s = grace_ms / 1000
        self._kills: dict[str, tuple[ProcessIdentity, float]] = {}

    def fence_ended(self, why: str) -> int:
        """This service learnt that its session (or Run Leases) may be gone: stop the process groups
        of its own Attempts that the store has already ended (SIGTERM now, SIGKILL after the
        grace); their ends are then recorded only as events, never over the verdict. How many."""
        fenced = 0
        for running in [r for r in self._watched.values() if r.started_here]:
            fenced += self.fence_if_ended(running, why)
        return fenced

    def fence_if_ended(self, running: RunningAttempt, why: str) -> bool:
        """Fence ``running`` if the store has ended its Attempt; whether it did now."""
        try:
            attempt = self._runs.get_attempt(running.attempt_id)
        except EdgeRuntimeError as exc:
            self._journal.error("attempt.fence_check_failed", attempt=running.attempt_id, error=exc.code,
                                detail=str(exc))
            return False
        if attempt is not None and attempt.status in ACTIVE_ATTEMPT_STATUSES:
            return False  # still this Attempt's: it runs on (a session that replaced ours re-adopts it)
        if running.attempt_id in self._kills or running.exited_since is not None:
            return False
        self._fence(running, why, None if attempt is None else attempt.status)
        return True

    def fence_lost(self, attempt: AttemptRecord, why: str) -> FencedLost | None:
        """An Attempt of this worker that another session already ended ``lost`` (a worker
        restarted with the same id finds them with ``RunStore.lost_with_process``): if its process
        group still runs, stop it (SIGTERM now, SIGKILL after the grace; every member, a
        grandchild too). What is left to see of it, for the caller to watch (its exit is read from
        the status file and recorded as a ``run.fenced_end`` event); None when nothing is."""
        identity = attempt.identity
        if identity is None or attempt.id in self._watched:
            return None
        try:
            leader = self._controller.leader_alive(identity)
            group = leader or self._controller.group_alive(identity)
        except ProcfsUnavailableError as exc:
            self._journal.error("attempt.fence_check_failed", attempt=attempt.id, detail=str(exc))
            return None
        log_path = None if attempt.log_path is _UNSET else Path(attempt.log_path)
        if not group:
            if log_path is None:
                return None
            try:
                end = read_status(status_path_of(log_path)).end
            except (OSError, ValueError):
                return None  # nothing runs and nothing was kept: nothing to see
            if end is None:
                return None
        running = RunningAttempt(attempt.id, attempt.run_id, identity, started_here=False, grant=None,
                                 log_path=log_path)
        if group:
            self._fence(running, why, attempt.status)
        return FencedLost(running, leader, group)

    def _fence(self, running: RunningAttempt, why: str, status: AttemptStatus | None) -> None:
        """SIGTERM the fenced Attempt's group now, SIGKILL when the grace is over."""
        result = self._controller.request_termination(running.identity)
        self._kills[running.attempt_id] = (running.identity, time.monotonic() + self._grace_s)
        self._journal.warning("attempt.fenced", run=running.run_id, attempt=running.attempt_id, detail=why,
                              status=None if status is None else status.value, signal=result.value)

    def forget(self, attempt_id: str) -> None:
        """The Attempt ends as this service's own after all: its group is not to be killed."""
        self._kills.pop(attempt_id, None)

    def enforce(self) -> None:
        """SIGKILL the fenced groups whose grace is over."""
        now = time.monotonic()
        for attempt_id, (identity, at) in list(self._kills.items()):
            if at <= now:
                del self._kills[attempt_id]
                outcome = self._controller.force_kill(identity)
                self._journal.warning("attempt.fence_killed", attempt=attempt_id, outcome=outcome.value)

    def seconds_to_kill(self) -> float | None:
        """Seconds until the earliest fenced group is due its SIGKILL; None when none is."""
        due = min((at for _, at in self._kills.values()), default=None)
        return None if due is None else max(0.0, due - time.monotonic())

    def record_end(self, running: RunningAttempt, end: MonitorEnd) -> None:
        """What the monitor of an Attempt ended ``lost`` elsewhere saw: an event, never a verdict."""
        code, reason = exit_code_of(end.status), describe_exit(end.status)
        try:
            self._runs.record_fenced_end(running.attempt_id, exit_code=code, reason=reason,
                                         actor_id=self._worker.owner)
        except EdgeRuntimeError as exc:
            self._journal.error("attempt.fenced_end_not_recorded", attempt=running.attempt_id, error=exc.code,
                                detail=str(exc))
