"""The executor side of the service: start queued Runs as Attempts, watch them, end them.

Lifecycle of one Attempt (every queued Run runs exactly once):

1. ``start`` (``start_run``, one fenced transaction): the queued Run moves to ``dispatching``, its
   Attempt is created, its Run Lease claimed and the start barrier crossed (``starting``), only
   if this session is still the current one and its leases, counted under the write lock, leave
   a slot. A refusal writes nothing; a failed transaction leaves the Run queued.
2. spawn under the Attempt's monitor (docs/monitor.md), the task in a new session and process
   group. The output's descriptors (its FIFO's two ends, the log file, the status file) are all
   opened before the spawn, so a lack of descriptors hits before a process exists.
   Until a process exists, every failure is undone by ``abandon_start``: the Run goes back to
   the queue (a lack of descriptors, processes or memory also pauses starting, with a backoff);
   a command that cannot be started at all (not found) fails. A failed compensation is retried
   every tick, never forgotten, and for ``UNDO_AT_STOP_S`` more when the service stops (what is
   still left is logged; the next service's orphan sweep ends it); the grant keeps its slot until then.
3. ``record_running``: pid, pgid, start time and boot id stored *before* the Attempt is
   reported running. A retryable failure (the database busy, or away: a lost connection, a
   COMMIT whose outcome is unknown during a failover) keeps the process, our own child watched
   by its pidfd, and the recording is retried with the settlements' backoff; a retry that finds
   the Attempt already ``running`` with this very identity (the unknown COMMIT did commit) is a
   success. It must succeed while the Run Lease still fences the ``starting`` Attempt from the
   orphan sweep (``RECORD_WITHIN_LEASE_SHARE`` of the grant's term) and before the service
   stops. Otherwise, and at once for any other failure or a conflict (the Attempt ended, or runs
   with another identity), the group is SIGKILLed (an unrecorded process could never be
   cancelled or re-adopted safely) and the Attempt ends ``lost``, its Run ``failed``, since the
   command may have begun. A process that exits before its identity is recorded has it recorded
   first, then ends with its real status.
4. the leader exits (pidfd readable, or a slow ``/proc`` poll without pidfds): its monitor reaped
   it and wrote its exit status to the status file, where the service reads it; the Attempt ends
   ``succeeded``, ``failed`` (exit code kept; a signal N is kept as 128+N, as shells do) or
   ``cancelled``; the Run Lease is completed.

A cancelled Attempt whose leader exited while other members of its group still run (they got
SIGTERM too, and may ignore it) is kept open until its SIGKILL deadline, so the group is killed
when the grace is over, not forgotten. Leftover processes of an Attempt that simply finished
are left alone: a task may start a daemon on purpose.

No task is the service's child: its monitor is its parent, and outlives the service. So an Attempt
re-adopted after a restart (see ``recovery``) ends exactly as one started by this service, with
its true exit status, also when it ended while no service ran (its end is in the status file).
Only an Attempt whose monitor is gone without a word (killed) ends ``lost`` with its status
unknown, as does one started by a release without monitors.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import msgspec

from edge_runtime.contract.backoff import capped_backoff
from edge_runtime.contract.environment import compose_environment
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.ports import AttemptLogStore, RunStore
from edge_runtime.contract.run_lease import NoCapacityOutcome
from edge_runtime.contract.runs import (
    STORED_LOG_MAX_BYTES,
    AttemptRecord,
    AttemptStatus,
    ProcessIdentity,
    RunRecord,
    RunStateConflictError,
)
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.errors import RETRYABLE_SPAWN_ERRNOS, ProcfsUnavailableError, SpawnError
from edge_runtime.service.executor import spawn, task_environment
from edge_runtime.service.journal import Journal
from edge_runtime.service.log_capture import (
    AttemptOutput,
    LogCaptures,
    log_paths,
    read_tail,
    status_path_of,
    unlink_quietly,
)
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.monitor import MonitorEnd, open_status, read_status
from edge_runtime.service.running import (
    REASON_ADOPTED_EXIT,
    REASON_GONE,
    REASON_MONITOR_GONE,
    DeferredEnd,
    RunningAttempt,
    describe_exit,
    exit_code_of,
)
from edge_runtime.service.settlement import RETRY_INTERVAL_S, UNDO_AT_STOP_INTERVAL_S, UNDO_AT_STOP_S, Settlements
from edge_runtime.service.watch import open_pidfd
from edge_runtime.service.worker import RunGrant, WorkerSession

__all__ = ["AttemptSupervisor", "REASON_STOPPED_UNRECORDED", "RETRY_INTERVAL_S", "START_BACKOFF_MS",
           "UNDO_AT_STOP_INTERVAL_S", "UNDO_AT_STOP_S"]

_UNSET = msgspec.UNSET
_ACTIVE = (AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.RUNNING)
#: After a start failed for lack of resources (EMFILE, ...), starting pauses for this long,
#: doubling while it goes on, so a full descriptor table is not hammered once per tick.
START_BACKOFF_MS = (500, 30_000)
#: How often an exited leader's status file is read again while its monitor has not written the
#: end yet (it does within microseconds of reaping the task).
EXIT_CHECK_S = 0.02
#: ``_start`` result: end this start pass (no capacity left, or starting is paused).
_STOP = object()
#: A process whose identity could not be recorded yet is killed once this share of its Run
#: Lease's term has passed (its grant is what keeps the orphan sweep off its ``starting``
#: Attempt). The rest of the term covers a database call blocked up to its timeouts and the
#: drift between this host's clock and the store's, so the kill comes before the lease expires.
RECORD_WITHIN_LEASE_SHARE = 2 / 3
#: Why an unrecorded process was killed when the service stopped (a restart could not re-adopt it).
REASON_STOPPED_UNRECORDED = "the service stopped before the process identity could be recorded"


def _ended_unwatched(end: MonitorEnd) -> str:
    at = datetime.datetime.fromtimestamp(end.ended_at_ms / 1000, datetime.UTC).isoformat(timespec="milliseconds")
    return f"it ended at {at.replace('+00:00', 'Z')} while no service was running; its monitor kept the exit status"


class AttemptSupervisor:
    """Starts, watches and ends this service's Attempts. Single-threaded, driven by the loop."""

    def __init__(
        self,
        *,
        runs: RunStore,
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
        log_copies: AttemptLogStore | None = None,
        pass_env: Sequence[str] = (),
        work_dir: str | None = None,
        shared_env: Callable[[], Mapping[str, str]] | None = None,
        grace_ms: int = 10_000,
        log_dir_fd: int | None = None,
    ) -> None:
        self._runs = runs
        self._worker = worker
        self._controller = controller
        self._loop = loop
        self._journal = journal
        self._slots = slots
        self._log_dir = log_dir
        #: The log directory held open (``hold_trusted_directory``), or None: by path (tests).
        self._log_dir_fd = log_dir_fd
        self._log_max_bytes = log_max_bytes
        self._log_linger_ms = log_linger_ms
        self._grace_s = grace_ms / 1000
        #: Attempts fenced out (see ``fence_ended``, ``fence_lost``): their group's identity and the
        #: monotonic time of its SIGKILL. Kept when the leader ends first (a member ignoring SIGTERM,
        #: a grandchild such as ``sleep 600 &``): the group is killed when the grace is over.
        self._fence_kills: dict[str, tuple[ProcessIdentity, float]] = {}
        self._boot_id = boot_id
        self._env = task_environment(os.environ if env is None else env)
        #: What an Attempt's environment is composed of besides the base (docs/environment.md).
        self._pass_env = tuple(pass_env)
        self._work_dir = work_dir
        self._shared_env = shared_env
        #: Where a copy of each ended Attempt's log goes (``Store.attempt_logs``), or None (Local).
        self._log_copies = log_copies
        self.running: dict[str, RunningAttempt] = {}
        #: Ended Attempts whose monitor still writes the log (see ``LogCaptures``).
        self._logs = LogCaptures(self.copy_log)
        self._settlements = Settlements(runs=runs, worker=worker, journal=journal)
        #: When the exited leaders whose status was not written yet are read again (monotonic).
        self._next_exit_check = 0.0
        #: Consecutive starts that failed for lack of resources, and when starting may resume.
        self._start_failures = 0
        self._start_paused_until = 0.0

    # ----------------------------------------------------------------- capacity

    @property
    def adopted_count(self) -> int:
        return sum(1 for attempt in self.running.values() if attempt.grant is None)

    def needs_poll(self) -> bool:
        """Whether some watched process has no pidfd, so exits must be found by polling."""
        return any(attempt.pidfd is None and attempt.deferred is None and attempt.exited_since is None
                   for attempt in self.running.values())

    # ----------------------------------------------------------------- start

    def start_queued(self) -> int:
        """Start queued Runs while the lease authority leaves this session slots; how many started.

        Raises:
            WorkerLeaseFenceRejectedError, WorkerSessionRejectedError: this session was replaced
                or expired: the caller must stop taking work.
        """
        if time.monotonic() < self._start_paused_until:
            return 0
        free = self._worker.free_slots()
        if free <= 0:
            return 0
        started = 0
        for run_id in self._runs.queued_run_ids(free):
            outcome = self._start(run_id)
            if outcome is _STOP:
                break
            started += outcome is True
        return started

    def _start(self, run_id: str) -> bool | object:
        grant = self._worker.start(run_id)
        if grant is None:
            return False  # another service took it, or it was cancelled meanwhile
        if isinstance(grant, NoCapacityOutcome):
            return _STOP  # nothing was written; a slot frees when one of ours ends
        attempt_id = grant.lease.attempt_id
        log_path, fifo_path = log_paths(self._log_dir, attempt_id)
        try:
            run = self._runs.get(run_id)
            shared = {} if self._shared_env is None else self._shared_env()
            # Every descriptor the monitor needs, before a process exists: once one does, a lack of
            # descriptors could only cost its output or the Run.
            output = AttemptOutput.open(log_path, fifo_path, dir_fd=self._log_dir_fd)
        except (EdgeRuntimeError, OSError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            retryable = not isinstance(exc, OSError) or exc.errno in RETRYABLE_SPAWN_ERRNOS
            if isinstance(exc, OSError) and not retryable:
                self._journal.error("attempt.log_unavailable", attempt=attempt_id, detail=str(exc))
            return self._not_started(grant, f"the process was not started: {detail}", retryable=retryable)
        return self._spawn(run, attempt_id, grant, output, shared)

    def _not_started(self, grant: RunGrant, reason: str, *, retryable: bool, end: AttemptStatus | None = None) -> object:
        """No process was recorded: give the Run back to the queue (every queued Run runs once),
        or end it for good (``end``: a command that cannot be started at all, or one that may
        have begun)."""
        attempt_id = grant.lease.attempt_id
        self._journal.warning("attempt.not_started", run=grant.lease.run_id, attempt=attempt_id, detail=reason,
                              retryable=retryable)
        if retryable:
            self._start_failures += 1
            low, high = START_BACKOFF_MS
            self._start_paused_until = time.monotonic() + capped_backoff(low, self._start_failures, high) / 1000
        self._settlements.not_started(grant, reason, None if retryable else end or AttemptStatus.FAILED)
        return _STOP if retryable else False

    def retry_unstarted(self) -> None:
        """Settle the starts that recorded no process (again, if an earlier try failed)."""
        self._settlements.retry_unstarted()

    def undo_before_exit(self) -> None:
        """The service stops: the pending undos of failed starts get their last tries."""
        self._settlements.undo_before_exit()

    def _spawn(
        self, run: RunRecord, attempt_id: str, grant: RunGrant, output: AttemptOutput, shared: Mapping[str, str],
    ) -> bool | object:
        argv = [] if run.command is _UNSET else list(run.command)
        env = compose_environment(self._env, pass_env=self._pass_env, shared=shared,
                                  own=None if run.env is _UNSET else run.env, run_id=run.id, attempt_id=attempt_id)
        cwd = self._work_dir if run.cwd is _UNSET else run.cwd
        try:
            identity = spawn(argv, output=output, env=env, boot_id=self._boot_id, log_cap_bytes=self._log_max_bytes,
                             log_linger_ms=self._log_linger_ms, cwd=cwd)
        except SpawnError as exc:
            output.abandon()  # its FIFO, status file and still empty log go with it
            # A process that existed for an instant may have begun the command: the Run ends.
            return self._not_started(grant, str(exc), retryable=exc.retryable,
                                     end=AttemptStatus.LOST if exc.started else AttemptStatus.FAILED)
        output.close_after_spawn()
        self._start_failures = 0
        running = RunningAttempt(attempt_id, run.id, identity, started_here=True, grant=grant,
                                 log_path=output.log_path)
        try:
            conflict = self._record_identity(running)
        except EdgeRuntimeError as exc:
            if not exc.retryable:
                self._watch(running)
                self._give_up_identity(running, f"the process identity could not be recorded: {exc}", error=exc.code)
                return False
            # Keep it: it is watched by its pidfd; retry_identities records it later.
            running.await_record(_record_deadline(grant), str(exc))
            self._journal.warning("attempt.identity_pending", run=run.id, attempt=attempt_id, pid=identity.pid,
                                  error=exc.code, detail=str(exc),
                                  give_up_in_s=round(running.record_by - time.monotonic(), 1))
            self._watch(running)
            return True
        self._watch(running)
        if conflict is not None:
            self._give_up_identity(running, conflict)
            return False
        self._journal.info("attempt.running", run=run.id, attempt=attempt_id, pid=identity.pid)
        return True

    def _record_identity(self, running: RunningAttempt) -> str | None:
        """Store the process identity and move the Attempt ``starting -> running``: None once it is
        recorded, else why it never can be (a conflict). Idempotent: after a COMMIT whose outcome
        was unknown the Attempt may already be ``running`` with this very identity, which counts
        as recorded; ``running`` with another identity, or ended, is a conflict.

        Raises:
            EdgeRuntimeError: the store failed (``retryable`` when the same call may succeed).
        """
        attempt_id = running.attempt_id
        log_path = log_paths(self._log_dir, attempt_id)[0]
        try:
            self._runs.record_running(attempt_id, running.identity, log_path=str(log_path), actor_id=self._worker.owner)
        except RunStateConflictError as exc:
            stored = self._runs.get_attempt(attempt_id)
            if stored is None or stored.status is not AttemptStatus.RUNNING or stored.identity != running.identity:
                return f"the process identity could not be recorded: {exc}"
            self._journal.info("attempt.identity_found", attempt=attempt_id, pid=running.identity.pid)
        running.recorded()
        return None

    def _give_up_identity(self, running: RunningAttempt, reason: str, *, error: str | None = None) -> None:
        """The identity will not be recorded: SIGKILL the group (nobody could cancel or re-adopt an
        unrecorded process safely later); its exit then ends the Attempt ``lost`` with ``reason``."""
        running.doom(reason)
        outcome = self._controller.force_kill(running.identity)
        self._journal.error("attempt.identity_not_recorded", attempt=running.attempt_id, pid=running.identity.pid,
                            error=error, detail=reason, kill=outcome.value)

    def retry_identities(self) -> None:
        """Record the identities whose recording failed retryably (see ``_spawn``) while their
        processes run; give up the ones past their bound or failing for good."""
        self.enforce_identity_deadlines()
        for running in [r for r in self.running.values() if r.record_by is not None]:
            try:
                conflict = self._record_identity(running)
            except EdgeRuntimeError as exc:
                if not exc.retryable:
                    self._give_up_identity(running, f"the process identity could not be recorded: {exc}",
                                           error=exc.code)
                    continue
                running.await_record(running.record_by, str(exc))
                if self._settlements.failed():
                    self._journal.error("attempt.identity_retry_failed", attempt=running.attempt_id, error=exc.code,
                                        detail=str(exc), failures=self._settlements.failures)
                continue
            if conflict is not None:
                self._give_up_identity(running, conflict)
            else:
                self._journal.info("attempt.running", run=running.run_id, attempt=running.attempt_id,
                                   pid=running.identity.pid, late=True)

    def enforce_identity_deadlines(self) -> None:
        """Kill the unrecorded processes whose bound has passed. Reads no store (it must work
        while the database is away), so the service loop calls it on every pass."""
        now = time.monotonic()
        for running in list(self.running.values()):
            if running.record_by is not None and now >= running.record_by:
                self._give_up_identity(running, "the process identity could not be recorded before its Run Lease "
                                                f"could lapse: {running.record_error}")

    def seconds_to_identity_deadline(self) -> float | None:
        """Seconds until the earliest unrecorded process must be given up; None when there is none."""
        due = min((r.record_by for r in self.running.values() if r.record_by is not None), default=None)
        return None if due is None else max(0.0, due - time.monotonic())

    def kill_unrecorded(self, reason: str) -> list[str]:
        """Give up every identity not recorded yet (the service stops, and a restart could not
        re-adopt such a process); the ids of their Attempts."""
        pending = [r for r in self.running.values() if r.record_by is not None]
        for running in pending:
            self._give_up_identity(running, reason)
        return [r.attempt_id for r in pending]

    # ----------------------------------------------------------------- watch

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
            self._watch(running)
            if running.exited_since is None:
                self._journal.info("attempt.adopted", run=attempt.run_id, attempt=attempt.id, pid=identity.pid,
                                   pidfd=running.pidfd is not None)
                return True
        else:
            self.running[attempt.id] = running
            running.exited(time.monotonic())
        running.note = "gap"  # it ended while no service watched it
        self._check_exited(running)
        return False

    def _watch(self, running: RunningAttempt) -> None:
        """Watch the leader's exit: its pidfd, or the slow ``/proc`` poll without one. The identity
        is checked again after the pidfd is open, so the pidfd cannot be a later holder's."""
        self.running[running.attempt_id] = running
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

    def poll_exits(self) -> None:
        """Find watched processes that exited without a pidfd to say so (a ``/proc`` poll)."""
        for running in list(self.running.values()):
            if running.pidfd is not None or running.deferred is not None or running.exited_since is not None:
                continue
            try:
                alive = self._controller.leader_alive(running.identity)
            except ProcfsUnavailableError as exc:
                self._journal.error("attempt.poll_failed", attempt=running.attempt_id, detail=str(exc))
                continue
            if not alive:
                self._leader_exited(running)

    def _mark_exited(self, running: RunningAttempt) -> None:
        if running.exited_since is None:
            later = time.monotonic() + EXIT_CHECK_S
            self._next_exit_check = min(self._next_exit_check, later) if self._exits_pending(exclude=running) else later
            running.exited(time.monotonic())

    def _exits_pending(self, exclude: RunningAttempt | None = None) -> bool:
        return any(r.exited_since is not None and r.deferred is None and r is not exclude
                   for r in self.running.values())

    def _leader_exited(self, running: RunningAttempt) -> None:
        self._unwatch(running)
        self._mark_exited(running)
        self._check_exited(running)

    def _check_exited(self, running: RunningAttempt) -> None:
        """The leader is gone: end its Attempt with what its monitor wrote, once it has (the
        monitor reaps the task, then writes; until then this is checked every EXIT_CHECK_S)."""
        if running.attempt_id not in self.running or running.deferred is not None:
            return
        if running.log_path is None:
            self._end(running, None, REASON_GONE)
            return
        try:
            reading = read_status(status_path_of(running.log_path), dir_fd=self._held(running.log_path))
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

    def run_capture_timers(self) -> None:
        """Read the status files of exited leaders again, hand over the logs completed since, and
        SIGKILL the fenced groups whose grace is over."""
        self._enforce_fences()
        now = time.monotonic()
        if self._next_exit_check <= now and self._exits_pending():
            self._next_exit_check = now + EXIT_CHECK_S
            for running in [r for r in self.running.values() if r.exited_since is not None and r.deferred is None]:
                self._check_exited(running)
        self._logs.check()

    def seconds_to_capture_timer(self) -> float | None:
        exits = (self._next_exit_check,) if self._exits_pending() else ()
        logs = self._logs.seconds_to_check()
        due = min((*exits, *(() if logs is None else (time.monotonic() + logs,))), default=None)
        return None if due is None else max(0.0, due - time.monotonic())

    # ----------------------------------------------------------------- end

    def _end(self, running: RunningAttempt, end: MonitorEnd | None, unknown_reason: str | None) -> None:
        try:
            self._decide_end(running, end, unknown_reason)
        except EdgeRuntimeError as exc:
            # The Attempt stays active in the database: try again every pass, never forget it.
            self.running.pop(running.attempt_id, None)
            self._settlements.end_failed(running.attempt_id, lambda: self._retry_end(running, end, unknown_reason), exc)

    def _retry_end(self, running: RunningAttempt, end: MonitorEnd | None, unknown_reason: str | None) -> None:
        self.running[running.attempt_id] = running
        self._end(running, end, unknown_reason)

    def _decide_end(self, running: RunningAttempt, end: MonitorEnd | None, unknown_reason: str | None) -> None:
        if running.unrecorded:
            self._record_before_end(running)
        attempt = self._runs.get_attempt(running.attempt_id)
        if attempt is None or attempt.status not in _ACTIVE:
            # Ended meanwhile elsewhere: by another service that read the same status file (the
            # first to record wins), or ``lost`` by the orphan sweep once this service's session or
            # Run Lease was gone. Its verdict stands; what this service saw is only an event.
            self.running.pop(running.attempt_id, None)
            self._journal.warning("attempt.ended_elsewhere", run=running.run_id, attempt=running.attempt_id,
                                  status=None if attempt is None else attempt.status.value,
                                  exit_code=None if end is None else exit_code_of(end.status))
            if attempt is not None and attempt.status is AttemptStatus.LOST and end is not None:
                self._record_fenced_end(running, end)
            self._release_output(running)
            return
        run = self._runs.get(running.run_id)
        cancel_requested = run.cancel_requested_at_ms is not _UNSET
        status = None if end is None else end.status
        code = None if status is None else exit_code_of(status)
        reason = None if status is None else describe_exit(status)
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
        if running.attempt_id in self._fence_kills:
            self._fence_kills.pop(running.attempt_id)
        if end is not None and running.note == "gap":
            reason = f"{reason}; {_ended_unwatched(end)}" if reason else _ended_unwatched(end)
        if cancel_requested and self._kill_pending(running):
            running.defer(DeferredEnd(result, code, reason))
            self._journal.info("attempt.awaiting_kill", run=running.run_id, attempt=running.attempt_id,
                               pid=running.identity.pid)
            return
        self.finish(running, result, code, reason)

    def _record_before_end(self, running: RunningAttempt) -> None:
        """The process exited before its identity was recorded: record it now, so the Attempt ends
        from ``running`` with its process known, as every other one does.

        Raises:
            EdgeRuntimeError: retryable: ``_end`` keeps the exit and tries again later.
        """
        try:
            conflict = self._record_identity(running)
        except EdgeRuntimeError as exc:
            if exc.retryable:
                raise
            # The process is gone, so its identity guards nothing any more: the Attempt ends from
            # ``starting`` with the real exit status (finish_attempt accepts any active Attempt).
            running.recorded()
            self._journal.warning("attempt.identity_not_recorded", attempt=running.attempt_id,
                                  pid=running.identity.pid, error=exc.code, detail=str(exc), exited=True)
            return
        if conflict is not None:
            running.doom(conflict)
        else:
            self._journal.info("attempt.running", run=running.run_id, attempt=running.attempt_id,
                               pid=running.identity.pid, late=True, exited=True)

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
        self._runs.finish_attempt(running.attempt_id, status, actor_id=self._worker.owner, exit_code=code,
                                  reason=reason)
        self.running.pop(running.attempt_id, None)
        self._release_output(running)
        self._settlements.complete_lease(running.attempt_id)
        self._journal.info("attempt.finished", run=running.run_id, attempt=running.attempt_id,
                           status=status.value, exit_code=code, reason=reason)

    def _release_output(self, running: RunningAttempt) -> None:
        """The end is recorded: the status file has served (its path goes; the monitor, if it
        still drains a descendant's output, keeps its descriptor), and the log is handed to the
        store's copies once its monitor is gone."""
        log_path = running.log_path or log_paths(self._log_dir, running.attempt_id)[0]
        status_path = status_path_of(log_path)
        dir_fd = self._held(log_path)
        try:
            status_fd = open_status(status_path, dir_fd=dir_fd)
            unlink_quietly(status_path, dir_fd=dir_fd)
            # left only by a start interrupted before its unlink
            unlink_quietly(log_path.with_suffix(".fifo"), dir_fd=dir_fd)
        except OSError as exc:
            self._journal.warning("attempt.status_not_removed", attempt=running.attempt_id, detail=str(exc))
            status_fd = None
        self._logs.ended(running.attempt_id, log_path, status_fd)

    def retry_completions(self) -> None:
        """Settle what failed earlier (e.g. the database was busy): unstarted Attempts, ends of
        exited processes, grants to complete; and records the identities not recorded yet."""
        self.retry_identities()
        self._settlements.retry_unstarted()
        self._settlements.retry_ends_and_completions()
        if not self.pending_retries:
            self._settlements.failures = 0

    def tracks(self, attempt_id: str) -> bool:
        """Whether this service spawned or is settling the Attempt (watched, or a settlement to
        retry): an Attempt of its own session that it does not track was never spawned by it."""
        return attempt_id in self.running or self._settlements.tracks(attempt_id)

    @property
    def pending_retries(self) -> bool:
        return self._settlements.pending or bool(self.unrecorded_count)

    @property
    def unrecorded_count(self) -> int:
        """Processes of ours whose identity is not recorded yet (see ``_spawn``)."""
        return sum(1 for running in self.running.values() if running.record_by is not None)

    def next_retry_s(self) -> float | None:
        """Seconds until this supervisor has something to retry: a failed settlement (after a
        backoff that doubles while they keep failing) or the end of a pause in starting; None
        when nothing is pending."""
        if self.pending_retries:
            return self._settlements.backoff_s()
        paused = self._start_paused_until - time.monotonic()
        return paused if paused > 0 else None

    def next_due_s(self) -> float | None:
        """Seconds until this supervisor next has something to do on its own (an exit to read
        again, a log to hand over, a retry, the end of a pause in starting, an identity to give
        up); None when only an event (a pidfd, a signal) can bring work. With processes to poll
        (no pidfds) the caller adds its poll interval."""
        fence = min((at for _, at in self._fence_kills.values()), default=None)
        dues = [self.seconds_to_capture_timer(), self.next_retry_s(), self.seconds_to_identity_deadline(),
                None if fence is None else max(0.0, fence - time.monotonic())]
        return min((d for d in dues if d is not None), default=None)

    def _held(self, path: Path) -> int | None:
        """The held log directory's descriptor when ``path`` lies in it (so it is opened by name
        there); None for a path elsewhere (an Attempt started under another ``log_dir``)."""
        return self._log_dir_fd if Path(path).parent == self._log_dir else None

    def copy_log(self, attempt_id: str, log_path: Path) -> None:
        """Hand the ended Attempt's log tail to the store's copies (``logs`` on other hosts). Best
        effort: the file stays here whatever happens, so a failure is logged, never retried."""
        if self._log_copies is None:
            return
        try:
            content, size = read_tail(log_path, STORED_LOG_MAX_BYTES, dir_fd=self._held(log_path))
            self._log_copies.keep(attempt_id, content, size_bytes=size, worker_id=self._worker.worker_id)
        except (OSError, EdgeRuntimeError) as exc:
            self._journal.warning("attempt.log_copy_failed", attempt=attempt_id,
                                  error=getattr(exc, "code", type(exc).__name__), detail=str(exc))

    # ----------------------------------------------------------------- self-fencing

    def fence_ended(self, why: str) -> int:
        """This service learnt that its session (or Run Leases) may be gone: stop the process groups
        of its own Attempts that the store has already ended (SIGTERM now, SIGKILL after the
        grace); their ends are then recorded only as events, never over the verdict. How many."""
        fenced = 0
        for running in [r for r in self.running.values() if r.started_here]:
            fenced += self._fence_if_ended(running, why)
        return fenced

    def _fence_if_ended(self, running: RunningAttempt, why: str) -> bool:
        try:
            attempt = self._runs.get_attempt(running.attempt_id)
        except EdgeRuntimeError as exc:
            self._journal.error("attempt.fence_check_failed", attempt=running.attempt_id, error=exc.code,
                                detail=str(exc))
            return False
        if attempt is not None and attempt.status in _ACTIVE:
            return False  # still this Attempt's: it runs on (a session that replaced ours re-adopts it)
        if running.attempt_id in self._fence_kills or running.exited_since is not None:
            return False
        self._fence(running, why, None if attempt is None else attempt.status)
        return True

    def _fence(self, running: RunningAttempt, why: str, status: AttemptStatus | None) -> None:
        """SIGTERM the fenced Attempt's group now, SIGKILL when the grace is over."""
        result = self._controller.request_termination(running.identity)
        self._fence_kills[running.attempt_id] = (running.identity, time.monotonic() + self._grace_s)
        self._journal.warning("attempt.fenced", run=running.run_id, attempt=running.attempt_id, detail=why,
                              status=None if status is None else status.value, signal=result.value)

    def fence_lost(self, attempt: AttemptRecord, why: str) -> bool:
        """An Attempt of this worker that another session already ended ``lost`` (a worker
        restarted with the same id finds them with ``RunStore.lost_with_process``): if its process
        group still runs, stop it (SIGTERM now, SIGKILL after the grace; every member, a
        grandchild too), and record what its monitor saw as a ``run.fenced_end`` event, never a
        new verdict. True when something of it was still running."""
        identity = attempt.identity
        if identity is None or attempt.id in self.running:
            return False
        try:
            leader = self._controller.leader_alive(identity)
            group = leader or self._controller.group_alive(identity)
        except ProcfsUnavailableError as exc:
            self._journal.error("attempt.fence_check_failed", attempt=attempt.id, detail=str(exc))
            return False
        log_path = None if attempt.log_path is _UNSET else Path(attempt.log_path)
        if not group:
            if log_path is None:
                return False
            try:
                end = read_status(status_path_of(log_path)).end
            except (OSError, ValueError):
                return False  # nothing runs and nothing was kept: nothing to see
            if end is None:
                return False
        running = RunningAttempt(attempt.id, attempt.run_id, identity, started_here=False, grant=None,
                                 log_path=log_path)
        if group:
            self._fence(running, why, attempt.status)
        if leader:
            self._watch(running)  # its exit is read from the status file, and recorded as an event
            if running.exited_since is not None:
                self._check_exited(running)
        else:
            self.running[attempt.id] = running
            running.exited(time.monotonic())
            self._check_exited(running)
        return group

    def _enforce_fences(self) -> None:
        now = time.monotonic()
        for attempt_id, (identity, at) in list(self._fence_kills.items()):
            if at <= now:
                del self._fence_kills[attempt_id]
                outcome = self._controller.force_kill(identity)
                self._journal.warning("attempt.fence_killed", attempt=attempt_id, outcome=outcome.value)

    @property
    def fencing(self) -> int:
        """Fenced Attempts whose processes have not ended yet."""
        return sum(1 for attempt_id in self._fence_kills if attempt_id in self.running)

    def _record_fenced_end(self, running: RunningAttempt, end: MonitorEnd) -> None:
        code, reason = exit_code_of(end.status), describe_exit(end.status)
        try:
            self._runs.record_fenced_end(running.attempt_id, exit_code=code, reason=reason,
                                         actor_id=self._worker.owner)
        except EdgeRuntimeError as exc:
            self._journal.error("attempt.fenced_end_not_recorded", attempt=running.attempt_id, error=exc.code,
                                detail=str(exc))

    # ----------------------------------------------------------------- leases

    def renew_due(self, now_ms: int) -> None:
        for running in list(self.running.values()):
            grant = running.grant
            if grant is None or self._worker.next_renewal_at_ms(grant) > now_ms:
                continue
            try:
                self._worker.renew(grant)
                if running.record_by is not None:  # still unrecorded: the renewed grant fences it longer
                    running.await_record(_record_deadline(grant), running.record_error)
            except EdgeRuntimeError as exc:
                # After the start barrier the grant cannot be taken over; a lapse is not fatal,
                # unless the Attempt was ended meanwhile (its lease lapsed and the orphan sweep
                # ended it ``lost``): then its process is no longer anyone's to run.
                running.grant = None
                self._journal.warning("lease.renew_failed", attempt=running.attempt_id, error=exc.code,
                                      detail=str(exc))
                self._fence_if_ended(running, "its Run Lease is gone")

    def next_renewal_at_ms(self) -> int | None:
        return min(
            (self._worker.next_renewal_at_ms(r.grant) for r in self.running.values() if r.grant is not None),
            default=None,
        )

    # ----------------------------------------------------------------- shutdown

    @property
    def own_children(self) -> int:
        """Attempts this service started that it still watches (their ends are its to record)."""
        return sum(1 for running in self.running.values() if running.started_here)

    def drop_adopted(self) -> None:
        """Stop watching Attempts this service did not start (the session that replaced ours has them)."""
        for running in [r for r in self.running.values() if not r.started_here]:
            self._unwatch(running)
            del self.running[running.attempt_id]

    def terminate_all(self) -> list[RunningAttempt]:
        """``--stop-runs-on-exit``: SIGTERM every watched group; the Attempts that were signalled."""
        signalled = []
        for running in self.running.values():
            result = self._controller.request_termination(running.identity)
            self._journal.info("attempt.stop_on_exit", attempt=running.attempt_id, result=result.value)
            signalled.append(running)
        return signalled

    def close(self) -> None:
        """Stop watching without touching the processes: they keep running under their monitors
        and are re-adopted. Except a process whose identity was never recorded: nothing could
        re-adopt it, so it is SIGKILLed (its ``starting`` Attempt is ended ``lost`` by the orphan
        sweep)."""
        self.kill_unrecorded(REASON_STOPPED_UNRECORDED)
        for running in list(self.running.values()):
            self._unwatch(running)
        self._logs.close()
        self.running.clear()


def _record_deadline(grant: RunGrant) -> float:
    """By when (monotonic) a process started under ``grant`` must have its identity recorded."""
    return grant.asked_at + (grant.held_until - grant.asked_at) * RECORD_WITHIN_LEASE_SHARE

