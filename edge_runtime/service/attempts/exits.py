"""Watching Attempts' leaders, and what happens when one exits: the end decided and recorded.

A leader is watched by its pidfd (readable once it exits), or by a slow ``/proc`` poll where the
kernel has no pidfds or none was left to open. Its monitor reaps it and writes its exit status to
the status file, where the service reads it (within microseconds of the exit; until then again
every ``EXIT_CHECK_S``). The Attempt then ends:

- ``succeeded``, ``failed`` (exit code kept; a signal N is kept as 128+N, as shells do) or
  ``cancelled`` (a cancel was requested and a signal sent); the Run Lease is completed;
- ``lost`` when its identity could never be recorded (it was SIGKILLed), or when its monitor is
  gone without a word (killed), or when it was started by a release without monitors;
- never over a verdict the store already has: an Attempt ended elsewhere meanwhile (by another
  service that read the same status file, or ``lost`` by the orphan sweep) keeps it, and what
  this service saw is only an event (a ``run.fenced_end`` for one ended ``lost``).

A process that exited before its identity was recorded has it recorded first. A cancelled Attempt
whose leader exited while other members of its group still run (they got SIGTERM too, and may
ignore it) is kept open until its SIGKILL deadline (``AwaitingKill``), so the group is killed when
the grace is over, not forgotten. Processes an Attempt left behind, in its group or not (a
double fork into a session of its own), are ended by its monitor, their subreaper, before it
writes the status; the Attempt's reason counts them. An end that cannot be recorded (the database busy)
is kept by the settlements and tried again every pass, never forgotten.

No task is the service's child: its monitor is its parent, and outlives the service. So an Attempt
re-adopted after a restart (``adopt``) ends exactly as one started by this service, with its true
exit status, also when it ended while no service ran (its end is in the status file).

This module alone changes the registry of watched Attempts (``running.Watched``).
"""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.runs import ACTIVE_ATTEMPT_STATUSES, AttemptRecord, AttemptStatus
from edge_runtime.service.attempts.fences import Fences
from edge_runtime.service.attempts.identity import Identities
from edge_runtime.service.attempts.logs import AttemptLogs
from edge_runtime.service.attempts.running import (
    REASON_ADOPTED_EXIT,
    REASON_GONE,
    REASON_MONITOR_GONE,
    DeferredEnd,
    RunningAttempt,
    describe_exit,
    exit_code_of,
)
from edge_runtime.service.attempts.settlement import Settlements
from edge_runtime.service.attempts.tools import Tools
from edge_runtime.service.errors import ProcfsUnavailableError
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.monitor import MonitorEnd
from edge_runtime.service.watch import open_pidfd

_UNSET = msgspec.UNSET
#: How often an exited leader's status file is read again while its monitor has not written the
#: end yet (it does within microseconds of reaping the task and what it left, unless one of those
#: holds on to its SIGTERM grace).
EXIT_CHECK_S = 0.02
#: The longest wait between two reads of a status file not written yet.
EXIT_CHECK_MAX_S = 0.5


def _ended_unwatched(end: MonitorEnd) -> str:
    at = datetime.datetime.fromtimestamp(end.ended_at_ms / 1000, datetime.UTC).isoformat(timespec="milliseconds")
    return f"it ended at {at.replace('+00:00', 'Z')} while no service was running; its monitor kept the exit status"


class Exits:
    """The watched Attempts' exits, and the recording of their ends."""

    def __init__(
        self, tools: Tools, *, loop: EventLoop, identities: Identities, fences: Fences, logs: AttemptLogs,
        settlements: Settlements,
    ) -> None:
        self._runs, self._worker, self._controller, self._journal, self._watched = tools
        self._loop = loop
        #: The parts an exit hands on to: an identity to record first, a fence to drop or an
        #: event to record, the files to release, an end or completion to retry.
        self._identities, self._fences, self._logs, self._settlements = identities, fences, logs, settlements
        #: When the exited leaders whose status was not written yet are read again (monotonic).
        self._next_check = 0.0

    # ----------------------------------------------------------------- watching

    def adopt(self, attempt: AttemptRecord) -> bool:
        """Watch a running Attempt of an earlier session. True when its process still runs; False
        when it has ended (while no service ran): its end is then settled from its status file,
        now or as soon as its monitor wrote it.
        """
        identity = attempt.identity
        if identity is None:
            raise ValueError(f"attempt {attempt.id} has no process identity to adopt")
        log_path = None if attempt.log_path is _UNSET else Path(attempt.log_path)
        running = RunningAttempt(attempt.id, attempt.run_id, identity, started_here=False, grant=None,
                                 log_path=log_path)
        if self._controller.leader_alive(identity):
            self.watch(running)
            if running.exited_since is None:
                self._journal.info("attempt.adopted", run=attempt.run_id, attempt=attempt.id, pid=identity.pid,
                                   pidfd=running.pidfd is not None)
                return True
        else:
            self._watched.add(running)
            running.exited(time.monotonic())
        running.note = "gap"  # it ended while no service watched it
        self._check_exited(running)
        return False

    def follow(self, running: RunningAttempt, *, leader_alive: bool) -> None:
        """Watch an Attempt found by other means (a fenced one), or settle it at once when its
        leader is gone already."""
        if leader_alive:
            self.watch(running)
            if running.exited_since is not None:
                self._check_exited(running)
        else:
            self._watched.add(running)
            running.exited(time.monotonic())
            self._check_exited(running)

    def watch(self, running: RunningAttempt) -> None:
        """Watch the leader's exit: its pidfd, or the slow ``/proc`` poll without one. The identity
        is checked again after the pidfd is open, so the pidfd cannot be a later holder's."""
        self._watched.add(running)
        try:
            pidfd = open_pidfd(running.identity.pid)
        except OSError as exc:
            # Out of descriptors (ENFILE: another process took the one just freed). The exit is
            # then found as without pidfds: by a /proc poll.
            pidfd = None
            self._journal.warning("attempt.pidfd_unavailable", attempt=running.attempt_id, pid=running.identity.pid,
                                  detail=str(exc))
        if pidfd is not None:
            running.pidfd = pidfd
            self._loop.register(pidfd, lambda: self._leader_exited(running))
        if not self._leader_alive(running):
            self._unwatch(running)
            self._mark_exited(running)

    def _unwatch(self, running: RunningAttempt) -> None:
        if running.pidfd is not None:
            self._loop.unregister(running.pidfd)
            os.close(running.pidfd)
            running.pidfd = None

    def _leader_alive(self, running: RunningAttempt) -> bool:
        try:
            return self._controller.leader_alive(running.identity)
        except ProcfsUnavailableError as exc:
            self._journal.error("attempt.poll_failed", attempt=running.attempt_id, detail=str(exc))
            return True  # cannot tell: the pidfd or the next poll says

    def needs_poll(self) -> bool:
        """Whether some watched process has no pidfd, so exits must be found by polling."""
        return any(attempt.pidfd is None and attempt.deferred is None and attempt.exited_since is None
                   for attempt in self._watched.values())

    def poll(self) -> None:
        """Find watched processes that exited without a pidfd to say so (a ``/proc`` poll)."""
        for running in list(self._watched.values()):
            if running.pidfd is not None or running.deferred is not None or running.exited_since is not None:
                continue
            try:
                alive = self._controller.leader_alive(running.identity)
            except ProcfsUnavailableError as exc:
                self._journal.error("attempt.poll_failed", attempt=running.attempt_id, detail=str(exc))
                continue
            if not alive:
                self._leader_exited(running)

    def drop_adopted(self) -> None:
        """Stop watching Attempts this service did not start (the session that replaced ours has them)."""
        for running in [r for r in self._watched.values() if not r.started_here]:
            self._unwatch(running)
            self._watched.discard(running.attempt_id)

    def close(self) -> None:
        """Stop watching, without touching the processes."""
        for running in list(self._watched.values()):
            self._unwatch(running)
        self._watched.clear()

    # ----------------------------------------------------------------- a leader exited

    def _leader_exited(self, running: RunningAttempt) -> None:
        self._unwatch(running)
        self._mark_exited(running)
        self._check_exited(running)

    def _mark_exited(self, running: RunningAttempt) -> None:
        if running.exited_since is None:
            later = time.monotonic() + EXIT_CHECK_S
            self._next_check = min(self._next_check, later) if self._exits_pending(exclude=running) else later
            running.exited(time.monotonic())

    def _exits_pending(self, exclude: RunningAttempt | None = None) -> bool:
        return any(r.exited_since is not None and r.deferred is None and r is not exclude
                   for r in self._watched.values())

    def check_due(self) -> None:
        """Read the status files of exited leaders again, when that is due."""
        now = time.monotonic()
        if self._next_check <= now and self._exits_pending():
            self._next_check = now + self._check_interval(now)
            for running in [r for r in self._watched.values() if r.exited_since is not None and r.deferred is None]:
                self._check_exited(running)

    def _check_interval(self, now: float) -> float:
        """EXIT_CHECK_S at first, longer the longer the oldest exited leader waits: its monitor may
        be giving the processes it left their grace (up to ``grace_ms``) before it writes."""
        oldest = min((r.exited_since for r in self._watched.values()
                      if r.exited_since is not None and r.deferred is None), default=now)
        return min(EXIT_CHECK_MAX_S, max(EXIT_CHECK_S, (now - oldest) / 8))

    def next_check_at(self) -> float | None:
        """When (monotonic) the status files of exited leaders are read again; None: none waits."""
        return self._next_check if self._exits_pending() else None

    def _check_exited(self, running: RunningAttempt) -> None:
        """The leader is gone: end its Attempt with what its monitor wrote, once it has (the
        monitor reaps the task, then writes; until then this is checked every EXIT_CHECK_S)."""
        if running.attempt_id not in self._watched or running.deferred is not None:
            return
        if running.log_path is None:
            self._end(running, None, REASON_GONE)
            return
        try:
            reading = self._logs.read_status(running.log_path)
        except (OSError, ValueError) as exc:
            self._journal.error("attempt.status_unreadable", attempt=running.attempt_id, detail=str(exc))
            self._end(running, None, REASON_MONITOR_GONE)
            return
        if reading.end is not None:
            self._end(running, reading.end, None)
        elif reading.monitor_alive:
            pass  # written within microseconds: read again at the next exit check
        elif not reading.exists:  # started by a release without monitors: nothing kept its status
            self._end(running, None, REASON_GONE if running.note == "gap" else REASON_ADOPTED_EXIT)
        else:
            self._end(running, None, REASON_MONITOR_GONE)

    # ----------------------------------------------------------------- the end

    def _end(self, running: RunningAttempt, end: MonitorEnd | None, unknown_reason: str | None) -> None:
        try:
            self._decide_end(running, end, unknown_reason)
        except EdgeRuntimeError as exc:
            # The Attempt stays active in the database: try again every pass, never forget it.
            self._watched.discard(running.attempt_id)
            self._settlements.end_failed(running.attempt_id, lambda: self._retry_end(running, end, unknown_reason), exc)

    def _retry_end(self, running: RunningAttempt, end: MonitorEnd | None, unknown_reason: str | None) -> None:
        self._watched.add(running)
        self._end(running, end, unknown_reason)

    def _decide_end(self, running: RunningAttempt, end: MonitorEnd | None, unknown_reason: str | None) -> None:
        if running.unrecorded:
            self._identities.record_before_end(running)
        attempt = self._runs.get_attempt(running.attempt_id)
        if attempt is None or attempt.status not in ACTIVE_ATTEMPT_STATUSES:
            # Ended meanwhile elsewhere: by another service that read the same status file (the
            # first to record wins), or ``lost`` by the orphan sweep once this service's session or
            # Run Lease was gone. Its verdict stands; what this service saw is only an event.
            self._watched.discard(running.attempt_id)
            self._journal.warning("attempt.ended_elsewhere", run=running.run_id, attempt=running.attempt_id,
                                  status=None if attempt is None else attempt.status.value,
                                  exit_code=None if end is None else exit_code_of(end.status))
            if attempt is not None and attempt.status is AttemptStatus.LOST and end is not None:
                self._fences.record_end(running, end)
            self._logs.release(running)
            return
        run = self._runs.get(running.run_id)
        cancel_requested = run.cancel_requested_at_ms is not _UNSET
        status = None if end is None else end.status
        code = None if status is None else exit_code_of(status)
        reason = None if status is None else describe_exit(status)
        if end is not None and end.leftover_note:
            reason = f"{reason}; {end.leftover_note}" if reason else end.leftover_note
        if cancel_requested and status is not None and status >= 0 and attempt.term_sent_at_ms is _UNSET:
            # It ended on its own before any signal reached it: never ``cancelled`` with an exit
            # code no signal caused; its real end, and the Run says the cancel sent nothing.
            cancel_requested = False
            note = "a cancel was requested, but it ended before any signal was sent"
            reason = f"{reason}; {note}" if reason else note
        if running.failure is not None:
            result, reason = AttemptStatus.LOST, running.failure
        elif cancel_requested:
            result = AttemptStatus.CANCELLED
        elif status is None:
            result, reason = AttemptStatus.LOST, unknown_reason or REASON_MONITOR_GONE
        else:
            result = AttemptStatus.SUCCEEDED if status == 0 else AttemptStatus.FAILED
        self._fences.forget(running.attempt_id)
        if end is not None and running.note == "gap":
            reason = f"{reason}; {_ended_unwatched(end)}" if reason else _ended_unwatched(end)
        if cancel_requested and self._kill_pending(running):
            running.defer(DeferredEnd(result, code, reason))
            self._journal.info("attempt.awaiting_kill", run=running.run_id, attempt=running.attempt_id,
                               pid=running.identity.pid)
            return
        self.finish(running, result, code, reason)

    def _kill_pending(self, running: RunningAttempt) -> bool:
        """Whether a SIGKILL deadline is still to come and some of the group still runs."""
        attempt = self._runs.get_attempt(running.attempt_id)
        if attempt is None or attempt.kill_deadline_at_ms is _UNSET or attempt.killed_at_ms is not _UNSET:
            return False
        try:
            return self._controller.group_alive(running.identity)
        except ProcfsUnavailableError:
            return True  # cannot tell: keep the group's deadline rather than forget it

    def on_kill_enforced(self, attempt_ids: list[str]) -> None:
        """The SIGKILL step ran for these Attempts: end the ones that only waited for it."""
        for attempt_id in attempt_ids:
            running = self._watched.get(attempt_id)
            if running is not None and running.deferred is not None:
                end, code, reason = running.deferred
                self.finish(running, end, code, reason)

    def settle_deferred(self) -> None:
        """End deferred Attempts whose SIGKILL step another service already took."""
        for running in list(self._watched.values()):
            if running.deferred is None:
                continue
            attempt = self._runs.get_attempt(running.attempt_id)
            if attempt is None or attempt.killed_at_ms is not _UNSET or attempt.status not in ACTIVE_ATTEMPT_STATUSES:
                end, code, reason = running.deferred
                self.finish(running, end, code, reason)

    def finish(self, running: RunningAttempt, status: AttemptStatus, code: int | None, reason: str | None) -> None:
        """Record the Attempt's end, stop watching it, hand its log over and complete its grant."""
        self._unwatch(running)
        self._runs.finish_attempt(running.attempt_id, status, actor_id=self._worker.owner, exit_code=code,
                                  reason=reason)
        self._watched.discard(running.attempt_id)
        self._logs.release(running)
        self._settlements.complete_lease(running.attempt_id)
        self._journal.info("attempt.finished", run=running.run_id, attempt=running.attempt_id,
                           status=status.value, exit_code=code, reason=reason)
