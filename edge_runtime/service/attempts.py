"""The executor side of the service: start queued Runs as Attempts, watch them, end them.

Lifecycle of one Attempt, each step its own short transaction (never one held across a spawn,
a signal or a wait):

1. ``create_attempt``: the queued Run moves to ``dispatching`` by compare-and-set, so of two
   services on one database only one gets an Attempt for it (``claimed``).
2. ``claim`` the Run Lease: bounded by this session's slots, counted under the write lock.
3. ``begin_start``: the start barrier (``claimed`` -> ``starting``); refused if a cancel arrived.
4. spawn in a new session and process group, output into the Attempt's FIFO.
5. ``record_running``: pid, pgid, start time and boot id stored *before* the Attempt is
   reported running; if that fails the group is SIGKILLed at once (an unrecorded process could
   never be cancelled safely).
6. the leader exits (pidfd readable, or SIGCHLD / a slow ``/proc`` poll without pidfds): reaped,
   and the Attempt ends ``succeeded``, ``failed`` (exit code kept; a signal N is kept as 128+N,
   as shells do) or ``cancelled``; the Run Lease is completed.

A cancelled Attempt whose leader exited while other members of its group still run (they got
SIGTERM too, and may ignore it) is kept open until its SIGKILL deadline, so the group is killed
when the grace is over, not forgotten. Leftover processes of an Attempt that simply finished
are left alone: a task may start a daemon on purpose.

Re-adopted Attempts (see ``recovery``) are not our children: their exit status cannot be read,
so they end ``cancelled`` when a cancel was requested and ``lost`` (with the reason) otherwise.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.run_lease import ReleaseReason
from edge_runtime.contract.runs import AttemptRecord, AttemptStatus, RunRecord
from edge_runtime.contract.worker_lease import RunNotStartableError
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.errors import ProcfsUnavailableError, SpawnError
from edge_runtime.service.executor import reap, spawn, task_environment
from edge_runtime.service.journal import Journal
from edge_runtime.service.log_capture import (
    DISCARD_INTERVAL_S,
    LogCapture,
    create_fifo,
    log_paths,
    open_child_output,
)
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.running import REASON_ADOPTED_EXIT, RunningAttempt, describe_exit, exit_code_of
from edge_runtime.service.watch import open_pidfd
from edge_runtime.service.worker import RunGrant, WorkerSession

_UNSET = msgspec.UNSET
_ACTIVE = (AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.RUNNING)

class AttemptSupervisor:
    """Starts, watches and ends this service's Attempts. Single-threaded, driven by the loop."""

    def __init__(
        self,
        *,
        runs: LocalRunRepository,
        worker: WorkerSession,
        controller: LocalProcessController,
        loop: EventLoop,
        journal: Journal,
        slots: int,
        log_dir: Path,
        log_max_bytes: int,
        boot_id: str,
        env: Mapping[str, str] | None = None,
        log_linger_ms: int = 30_000,
    ) -> None:
        self._runs = runs
        self._worker = worker
        self._controller = controller
        self._loop = loop
        self._journal = journal
        #: Set when a Run Lease was refused in this start pass, which then ends.
        self._lease_refused = False
        self._slots = slots
        self._log_dir = log_dir
        self._log_max_bytes = log_max_bytes
        self._boot_id = boot_id
        self._env = task_environment(os.environ if env is None else env)
        self.running: dict[str, RunningAttempt] = {}
        #: Log captures still being drained, by attempt id (may outlive the Attempt briefly).
        self._captures: dict[str, LogCapture] = {}
        #: Captures past their cap, off the loop until this monotonic time (read at a slow pace).
        self._paused: dict[str, float] = {}
        #: Captures of ended Attempts (a descendant holds the output open), closed at this time.
        self._linger_until: dict[str, float] = {}
        self._log_linger_s = log_linger_ms / 1000
        #: Ended Attempts whose Run Lease could not be completed yet.
        self._uncompleted: set[str] = set()

    # ----------------------------------------------------------------- capacity

    @property
    def free_slots(self) -> int:
        return max(0, self._slots - len(self.running))

    @property
    def adopted_count(self) -> int:
        return sum(1 for attempt in self.running.values() if attempt.grant is None)

    def needs_poll(self) -> bool:
        """Whether some watched process has no pidfd, so exits must be found by polling."""
        return any(attempt.pidfd is None and attempt.deferred is None for attempt in self.running.values())

    # ----------------------------------------------------------------- start

    def start_queued(self) -> int:
        """Start queued Runs while this service has free slots; how many were started."""
        free = self.free_slots
        if free <= 0:
            return 0
        started = 0
        self._lease_refused = False
        for run_id in self._runs.queued_run_ids(free):
            if self.free_slots <= 0 or self._lease_refused:
                break
            try:
                if self._start(run_id):
                    started += 1
            except EdgeRuntimeError as exc:
                self._journal.error("attempt.start_failed", run=run_id, error=exc.code, detail=str(exc))
        return started

    def _start(self, run_id: str) -> bool:
        actor = self._worker.owner
        run = self._runs.get(run_id)
        attempt = self._runs.create_attempt(run_id, actor_id=actor)
        if attempt is None:
            return False  # another service took it, or it was cancelled meanwhile
        grant = self._worker.claim(run_id, attempt.id)
        if grant is None:
            # Refused: a cancel arrived (the Run ends cancelled), or no slot is free in this
            # session after all (the Run waits in the queue for a later pass instead of failing).
            ended = self._runs.requeue_unstarted(
                attempt.id, actor_id=actor, reason="no run lease could be taken (no free slot in this session)"
            )
            self._journal.warning("attempt.not_claimed", run=run_id, attempt=attempt.id, status=ended.status.value)
            if ended.status is AttemptStatus.LOST:
                self._lease_refused = True  # the session's count disagrees with ours: wait for the next pass
            return False
        try:
            self._worker.begin_start(grant)
        except RunNotStartableError:
            self._worker.release(grant, ReleaseReason.DECLINED)
            self._runs.finish_attempt(attempt.id, AttemptStatus.CANCELLED, actor_id=actor,
                                      reason="cancelled before the process was started")
            self._journal.info("attempt.cancelled_before_start", run=run_id, attempt=attempt.id)
            return False
        return self._spawn(run, attempt, grant)

    def _spawn(self, run: RunRecord, attempt: AttemptRecord, grant: RunGrant) -> bool:
        actor = self._worker.owner
        log_path, fifo_path = log_paths(self._log_dir, attempt.id)
        argv = [] if run.command is _UNSET else list(run.command)
        env = dict(self._env, EDGE_RUNTIME_RUN_ID=run.id, EDGE_RUNTIME_ATTEMPT_ID=attempt.id)
        try:
            create_fifo(fifo_path)
            writer = open_child_output(fifo_path)
        except OSError as exc:
            return self._spawn_failed(attempt, f"cannot create the log FIFO {fifo_path}: {exc.strerror or exc}")
        try:
            identity = spawn(argv, output_fd=writer, env=env, boot_id=self._boot_id)
        except SpawnError as exc:
            os.close(writer)
            _unlink(fifo_path)
            return self._spawn_failed(attempt, str(exc))
        try:
            capture = LogCapture(attempt.id, log_path, fifo_path, self._log_max_bytes)
            capture.open()  # our writer copy is still open, so the reader never sees a false EOF
        except OSError as exc:
            capture = None
            self._journal.error("attempt.log_unavailable", attempt=attempt.id, detail=str(exc))
        finally:
            os.close(writer)
        running = RunningAttempt(attempt.id, run.id, identity, own_child=True, grant=grant)
        running.fifo_path = fifo_path
        self._watch(running, capture)
        try:
            self._runs.record_running(attempt.id, identity, log_path=str(log_path), actor_id=actor)
        except EdgeRuntimeError as exc:
            # The identity is not durable, so nobody could cancel this process safely later.
            running.failure = f"the process identity could not be recorded: {exc}"
            self._journal.error("attempt.identity_not_recorded", attempt=attempt.id, error=exc.code, detail=str(exc))
            self._controller.force_kill(identity)
            return False
        self._journal.info("attempt.running", run=run.id, attempt=attempt.id, pid=identity.pid)
        return True

    def _spawn_failed(self, attempt: AttemptRecord, reason: str) -> bool:
        self._runs.finish_attempt(attempt.id, AttemptStatus.FAILED, actor_id=self._worker.owner, reason=reason)
        self._complete_lease(attempt.id)
        self._journal.warning("attempt.spawn_failed", run=attempt.run_id, attempt=attempt.id, detail=reason)
        return False

    # ----------------------------------------------------------------- watch

    def adopt(self, attempt: AttemptRecord) -> bool:
        """Watch a running Attempt of an earlier session whose process still runs.

        False when the process turned out to be gone (checked again after the pidfd was opened,
        so the pidfd cannot belong to a later holder of the pid).
        """
        identity = attempt.identity
        if identity is None:
            return False
        running = RunningAttempt(attempt.id, attempt.run_id, identity, own_child=False, grant=None)
        capture = None
        if attempt.log_path is not _UNSET:
            log_path = Path(attempt.log_path)
            fifo_path = log_path.with_suffix(".fifo")
            running.fifo_path = fifo_path
            if fifo_path.exists():
                capture = LogCapture(attempt.id, log_path, fifo_path, self._log_max_bytes)
                try:
                    capture.open()
                except OSError as exc:
                    capture = None
                    self._journal.warning("attempt.log_unavailable", attempt=attempt.id, detail=str(exc))
        self._watch(running, capture)
        if not self._controller.leader_alive(identity):
            self.running.pop(attempt.id, None)
            self._unwatch(running)
            self._close_capture(attempt.id, unlink=False)
            return False
        self._journal.info("attempt.adopted", run=attempt.run_id, attempt=attempt.id, pid=identity.pid,
                           pidfd=running.pidfd is not None)
        return True

    def adopt_deferred(self, attempt: AttemptRecord, status: AttemptStatus, reason: str) -> None:
        """Keep a cancelled Attempt whose leader is gone open until its SIGKILL step."""
        running = RunningAttempt(attempt.id, attempt.run_id, attempt.identity, own_child=False, grant=None)
        running.deferred = (status, None, reason)
        if attempt.log_path is not _UNSET:
            running.fifo_path = Path(attempt.log_path).with_suffix(".fifo")
        self.running[attempt.id] = running
        self._journal.info("attempt.awaiting_kill", run=attempt.run_id, attempt=attempt.id)

    def _watch(self, running: RunningAttempt, capture: LogCapture | None) -> None:
        self.running[running.attempt_id] = running
        pidfd = open_pidfd(running.identity.pid)
        if pidfd is not None:
            running.pidfd = pidfd
            self._loop.register(pidfd, lambda: self._on_pidfd(running))
        if capture is not None:
            self._captures[running.attempt_id] = capture
            self._loop.register(capture, lambda: self._on_output(capture))

    def _unwatch(self, running: RunningAttempt) -> None:
        if running.pidfd is not None:
            self._loop.unregister(running.pidfd)
            os.close(running.pidfd)
            running.pidfd = None

    def _on_output(self, capture: LogCapture) -> None:
        try:
            more = capture.pump()
        except OSError as exc:
            self._journal.error("attempt.log_write_failed", attempt=capture.attempt_id, detail=str(exc))
            more = False
        if not more:
            self._close_capture(capture.attempt_id, unlink=capture.attempt_id not in self.running)
        elif capture.truncated and capture.attempt_id not in self._paused:
            # Everything read from now on is dropped: read at a slow pace, not at the writer's.
            self._loop.unregister(capture)
            self._paused[capture.attempt_id] = time.monotonic() + DISCARD_INTERVAL_S

    def run_capture_timers(self) -> None:
        """Resume paused captures and stop lingering ones whose time has come."""
        now = time.monotonic()
        for attempt_id, at in list(self._paused.items()):
            capture = self._captures.get(attempt_id)
            if capture is not None and at <= now:
                self._paused[attempt_id] = now + DISCARD_INTERVAL_S
                self._on_output(capture)
        for attempt_id, at in list(self._linger_until.items()):
            capture = self._captures.get(attempt_id)
            if capture is not None and at <= now:
                self._on_output(capture)
                if capture.is_open:
                    capture.note(f"output capture stopped {self._log_linger_s:g} s after the attempt ended; "
                                 "processes it left running still hold its output, which is no longer read")
                    self._journal.info("attempt.capture_stopped", attempt=attempt_id)
                    self._close_capture(attempt_id, unlink=True)

    def seconds_to_capture_timer(self) -> float | None:
        due = min((*self._paused.values(), *self._linger_until.values()), default=None)
        return None if due is None else max(0.0, due - time.monotonic())

    def _close_capture(self, attempt_id: str, *, unlink: bool) -> None:
        self._paused.pop(attempt_id, None)
        self._linger_until.pop(attempt_id, None)
        capture = self._captures.pop(attempt_id, None)
        if capture is not None:
            self._loop.unregister(capture)
            capture.close(unlink_fifo=unlink)

    def _on_pidfd(self, running: RunningAttempt) -> None:
        if running.own_child:
            status = reap(running.identity.pid)
            if status is None:
                # A readable pidfd means it exited; if it cannot be reaped it was reaped elsewhere.
                # End it without a status rather than spin on a descriptor that stays readable.
                if not self._leader_alive(running):
                    self._leader_exited(running, None)
                return
            self._leader_exited(running, status)
        else:
            self._leader_exited(running, None)

    def _leader_alive(self, running: RunningAttempt) -> bool:
        try:
            return self._controller.leader_alive(running.identity)
        except ProcfsUnavailableError as exc:
            self._journal.error("attempt.poll_failed", attempt=running.attempt_id, detail=str(exc))
            return False

    def reap_children(self) -> None:
        """SIGCHLD (no pidfds): reap every child of ours that has exited."""
        for running in list(self.running.values()):
            if running.own_child and running.deferred is None:
                status = reap(running.identity.pid)
                if status is not None:
                    self._leader_exited(running, status)

    def poll_adopted(self) -> None:
        """Without pidfds: find re-adopted processes that exited, through ``/proc``."""
        for running in list(self.running.values()):
            if running.own_child or running.pidfd is not None or running.deferred is not None:
                continue
            try:
                alive = self._controller.leader_alive(running.identity)
            except ProcfsUnavailableError as exc:
                self._journal.error("attempt.poll_failed", attempt=running.attempt_id, detail=str(exc))
                continue
            if not alive:
                self._leader_exited(running, None)

    # ----------------------------------------------------------------- end

    def _leader_exited(self, running: RunningAttempt, status: int | None) -> None:
        self._unwatch(running)
        capture = self._captures.get(running.attempt_id)
        if capture is not None:
            self._on_output(capture)  # drain what the process wrote before it exited
        try:
            self._decide_end(running, status)
        except EdgeRuntimeError as exc:
            # The Attempt stays active in the database; recovery on the next start ends it.
            self._journal.error("attempt.finish_failed", attempt=running.attempt_id, error=exc.code, detail=str(exc))
            self.running.pop(running.attempt_id, None)

    def _decide_end(self, running: RunningAttempt, status: int | None) -> None:
        run = self._runs.get(running.run_id)
        cancel_requested = run.cancel_requested_at_ms is not _UNSET
        code = None if status is None else exit_code_of(status)
        reason = None if status is None else describe_exit(status)
        if running.failure is not None:
            end, reason = AttemptStatus.LOST, running.failure
        elif cancel_requested:
            end = AttemptStatus.CANCELLED
        elif status is None:
            end, reason = AttemptStatus.LOST, REASON_ADOPTED_EXIT
        else:
            end = AttemptStatus.SUCCEEDED if status == 0 else AttemptStatus.FAILED
        if cancel_requested and self._kill_pending(running):
            running.deferred = (end, code, reason)
            self._journal.info("attempt.awaiting_kill", run=running.run_id, attempt=running.attempt_id,
                               pid=running.identity.pid)
            return
        self.finish(running, end, code, reason)

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
            running = self.running.get(attempt_id)
            if running is not None and running.deferred is not None:
                end, code, reason = running.deferred
                self.finish(running, end, code, reason)

    def settle_deferred(self) -> None:
        """End deferred Attempts whose SIGKILL step another service already took."""
        for running in list(self.running.values()):
            if running.deferred is None:
                continue
            attempt = self._runs.get_attempt(running.attempt_id)
            if attempt is None or attempt.killed_at_ms is not _UNSET or attempt.status not in _ACTIVE:
                end, code, reason = running.deferred
                self.finish(running, end, code, reason)

    def finish(self, running: RunningAttempt, status: AttemptStatus, code: int | None, reason: str | None) -> None:
        self._unwatch(running)
        if running.fifo_path is not None:
            # Before the end is committed, so nobody who sees the Attempt ended finds its FIFO;
            # open descriptors (leftover grandchildren) keep working and are drained until EOF.
            _unlink(running.fifo_path)
        self._runs.finish_attempt(running.attempt_id, status, actor_id=self._worker.owner, exit_code=code,
                                  reason=reason)
        self.running.pop(running.attempt_id, None)
        if running.attempt_id in self._captures:  # a descendant still holds the output open
            self._linger_until[running.attempt_id] = time.monotonic() + self._log_linger_s
        self._complete_lease(running.attempt_id)
        self._journal.info("attempt.finished", run=running.run_id, attempt=running.attempt_id,
                           status=status.value, exit_code=code, reason=reason)

    def _complete_lease(self, attempt_id: str) -> None:
        try:
            self._worker.complete(attempt_id)
            self._uncompleted.discard(attempt_id)
        except EdgeRuntimeError as exc:
            # An open grant would keep counting against this session's slots: retry it each tick.
            self._uncompleted.add(attempt_id)
            self._journal.error("lease.complete_failed", attempt=attempt_id, error=exc.code, detail=str(exc),
                                retryable=exc.retryable)

    def retry_completions(self) -> None:
        """Complete the grants whose completion failed earlier (e.g. the database was busy)."""
        for attempt_id in list(self._uncompleted):
            self._complete_lease(attempt_id)

    # ----------------------------------------------------------------- leases

    def renew_due(self, now_ms: int) -> None:
        for running in list(self.running.values()):
            grant = running.grant
            if grant is None or self._worker.next_renewal_at_ms(grant) > now_ms:
                continue
            try:
                self._worker.renew(grant)
            except EdgeRuntimeError as exc:
                # After the start barrier the grant cannot be taken over; a lapse is not fatal.
                running.grant = None
                self._journal.warning("lease.renew_failed", attempt=running.attempt_id, error=exc.code,
                                      detail=str(exc))

    def next_renewal_at_ms(self) -> int | None:
        return min(
            (self._worker.next_renewal_at_ms(r.grant) for r in self.running.values() if r.grant is not None),
            default=None,
        )

    # ----------------------------------------------------------------- shutdown

    def terminate_all(self) -> list[RunningAttempt]:
        """``--stop-runs-on-exit``: SIGTERM every watched group; the Attempts that were signalled."""
        signalled = []
        for running in self.running.values():
            result = self._controller.request_termination(running.identity)
            self._journal.info("attempt.stop_on_exit", attempt=running.attempt_id, result=result.value)
            signalled.append(running)
        return signalled

    def close(self) -> None:
        """Stop watching without touching the processes: they keep running and are re-adopted."""
        for running in list(self.running.values()):
            self._unwatch(running)
        for attempt_id in list(self._captures):
            self._close_capture(attempt_id, unlink=False)
        self.running.clear()


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
