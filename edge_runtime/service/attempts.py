"""The executor side of the service: start queued Runs as Attempts, watch them, end them.

Lifecycle of one Attempt (issue 9: every queued Run runs exactly once):

1. ``start`` (``start_run``, one fenced transaction): the queued Run moves to ``dispatching``, its
   Attempt is created, its Run Lease claimed and the start barrier crossed (``starting``), only
   if this session is still the current one and its leases, counted under the write lock, leave
   a slot. A refusal writes nothing; a failed transaction leaves the Run queued.
2. spawn in a new session and process group, output into the Attempt's FIFO. The FIFO's
   writer, the capture's reader and the log file are all opened before the spawn, so a lack of
   descriptors hits before a process exists (issue 10 point 8).
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
4. the leader exits (pidfd readable, or SIGCHLD / a slow ``/proc`` poll without pidfds): reaped,
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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import msgspec

from edge_runtime.contract.environment import compose_environment
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.ports import AttemptLogStore, RunStore
from edge_runtime.contract.run_lease import NoCapacityOutcome
from edge_runtime.contract.runs import (
    STORED_LOG_MAX_BYTES,
    AttemptRecord,
    AttemptStatus,
    RunRecord,
    RunStateConflictError,
)
from edge_runtime.contract.worker_lease import WorkerLeaseFenceRejectedError
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.errors import RETRYABLE_SPAWN_ERRNOS, ProcfsUnavailableError, SpawnError
from edge_runtime.service.executor import reap, spawn, task_environment
from edge_runtime.service.journal import Journal
from edge_runtime.service.log_capture import (
    DISCARD_INTERVAL_S,
    LogCapture,
    create_fifo,
    log_paths,
    mark_gap,
    open_child_output,
    read_tail,
)
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.running import REASON_ADOPTED_EXIT, DeferredEnd, RunningAttempt, describe_exit, exit_code_of
from edge_runtime.service.process_identity import read_stat
from edge_runtime.service.watch import open_pidfd
from edge_runtime.service.worker import RunGrant, WorkerSession

_UNSET = msgspec.UNSET
_ACTIVE = (AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.RUNNING)
#: After a start failed for lack of resources (EMFILE, ...), starting pauses for this long,
#: doubling while it goes on, so a full descriptor table is not hammered once per tick.
START_BACKOFF_MS = (500, 30_000)

#: How long a re-adopted process must have been gone (not even a zombie) before this service,
#: not its parent, ends its Attempt ``lost``: the parent records the real status within ms.
ADOPTED_EXIT_GRACE_S = 1.0
#: How soon a failed settlement (a requeue, an Attempt's end, a grant's completion) is retried.
RETRY_INTERVAL_S = 1.0
#: When the service stops, the undos of failed starts still pending are retried for this long, this
#: often, before it exits: each is the Run's way back to the queue (a passing busy database
#: usually clears within it), and the rest of a stop must stay short for procd's/systemd's timeout.
UNDO_AT_STOP_S = 3.0
UNDO_AT_STOP_INTERVAL_S = 0.1
#: ``_start`` result: end this start pass (no capacity left, or starting is paused).
_STOP = object()
#: A process whose identity could not be recorded yet is killed once this share of its Run
#: Lease's term has passed (its grant is what keeps the orphan sweep off its ``starting``
#: Attempt). The rest of the term covers a database call blocked up to its timeouts and the
#: drift between this host's clock and the store's, so the kill comes before the lease expires.
RECORD_WITHIN_LEASE_SHARE = 2 / 3
#: The log's note when a re-adopted Attempt's output could not be read in time (see ``adopt``).
_REOPEN_GAP = ("output gap: no descriptor was free to re-open this attempt's output after a service restart "
               "before it ended; what it wrote since the restart, up to 64 KiB, may be lost")
#: Why an unrecorded process was killed when the service stopped (a restart could not re-adopt it).
REASON_STOPPED_UNRECORDED = "the service stopped before the process identity could be recorded"


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
    ) -> None:
        self._runs = runs
        self._worker = worker
        self._controller = controller
        self._loop = loop
        self._journal = journal
        self._slots = slots
        self._log_dir = log_dir
        self._log_max_bytes = log_max_bytes
        self._boot_id = boot_id
        self._env = task_environment(os.environ if env is None else env)
        #: What an Attempt's environment is composed of besides the base (docs/environment.md).
        self._pass_env = tuple(pass_env)
        self._work_dir = work_dir
        self._shared_env = shared_env
        #: Where a copy of each ended Attempt's log goes (``Store.attempt_logs``), or None (Local).
        self._log_copies = log_copies
        self.running: dict[str, RunningAttempt] = {}
        #: Log captures still being drained, by attempt id (may outlive the Attempt briefly).
        self._captures: dict[str, LogCapture] = {}
        #: Captures past their cap, off the loop until this monotonic time (read at a slow pace).
        self._paused: dict[str, float] = {}
        #: Captures of ended Attempts (a descendant holds the output open), closed at this time;
        #: also the re-opens still pending when their Attempt ended, given up at this time.
        self._linger_until: dict[str, float] = {}
        #: Captures of re-adopted Attempts that a lack of descriptors kept from re-opening their
        #: FIFO (the output waits there, up to 64 KiB): retried every RETRY_INTERVAL_S.
        self._reopen: dict[str, LogCapture] = {}
        self._next_reopen = 0.0
        self._log_linger_s = log_linger_ms / 1000
        #: Ended Attempts whose Run Lease could not be completed yet.
        self._uncompleted: set[str] = set()
        #: Starts that made no process and whose undoing failed: retried every tick.
        self._unstarted: dict[str, tuple[RunGrant, str, AttemptStatus | None]] = {}
        #: Exited processes whose Attempt could not be ended yet: retried every tick.
        self._unfinished: dict[str, tuple[RunningAttempt, int | None]] = {}
        #: Consecutive starts that failed for lack of resources, and when starting may resume.
        self._start_failures = 0
        self._start_paused_until = 0.0
        #: Consecutive failed settlements (requeue, end, completion): their retry backs off.
        self._retry_failures = 0

    # ----------------------------------------------------------------- capacity

    @property
    def adopted_count(self) -> int:
        return sum(1 for attempt in self.running.values() if attempt.grant is None)

    def needs_poll(self) -> bool:
        """Whether some watched process has no pidfd, so exits must be found by polling."""
        return any(attempt.pidfd is None and attempt.deferred is None for attempt in self.running.values())

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
            create_fifo(fifo_path)
            writer, capture = self._open_output(attempt_id, log_path, fifo_path)
        except (EdgeRuntimeError, OSError) as exc:
            _unlink(fifo_path)
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            retryable = not isinstance(exc, OSError) or exc.errno in RETRYABLE_SPAWN_ERRNOS
            return self._not_started(grant, f"the process was not started: {detail}", retryable=retryable)
        return self._spawn(run, attempt_id, grant, fifo_path, writer, capture, shared)

    def _open_output(self, attempt_id: str, log_path: Path, fifo_path: Path) -> tuple[int, LogCapture | None]:
        """The child's end of the output and the service's capture of it, both opened before the
        spawn: once a process exists, a lack of descriptors could only cost its output or the Run
        (issue 10 point 8). A start needs these three at once; after the spawn it needs one at a
        time (``/proc``, then the pidfd), and ``spawn`` has just closed ``writer``.

        Returns ``(writer, capture)``; capture is None when the log cannot be opened for a reason
        other than a lack of resources (a planted symlink or FIFO: the task runs, uncaptured).

        Raises:
            OSError: no descriptor (or another failure) for the FIFO; nothing is left open.
        """
        writer = open_child_output(fifo_path)
        capture = LogCapture(attempt_id, log_path, fifo_path, self._log_max_bytes)
        try:
            capture.open()  # our writer is open, so the reader never sees a false EOF
        except OSError as exc:
            if exc.errno in RETRYABLE_SPAWN_ERRNOS:
                os.close(writer)
                raise
            capture = None
            self._journal.error("attempt.log_unavailable", attempt=attempt_id, detail=str(exc))
        return writer, capture

    def _not_started(self, grant: RunGrant, reason: str, *, retryable: bool, end: AttemptStatus | None = None) -> object:
        """No process was recorded: give the Run back to the queue (issue 9), or end it for good
        (``end``: a command that cannot be started at all, or one that may have begun)."""
        attempt_id = grant.lease.attempt_id
        self._journal.warning("attempt.not_started", run=grant.lease.run_id, attempt=attempt_id, detail=reason,
                              retryable=retryable)
        if retryable:
            self._start_failures += 1
            low, high = START_BACKOFF_MS
            self._start_paused_until = time.monotonic() + min(high, low << min(self._start_failures - 1, 16)) / 1000
        self._unstarted[attempt_id] = (grant, reason, None if retryable else end or AttemptStatus.FAILED)
        self.retry_unstarted()
        return _STOP if retryable else False

    def retry_unstarted(self) -> None:
        """Settle the starts that recorded no process (again, if an earlier try failed)."""
        for attempt_id, (grant, reason, end) in list(self._unstarted.items()):
            try:
                if end is None:
                    status = self._worker.abandon_start(grant, reason).value
                else:
                    self._runs.finish_attempt(attempt_id, end, actor_id=self._worker.owner, reason=reason)
                    self._worker.complete(attempt_id)
                    status = end.value
            except WorkerLeaseFenceRejectedError as exc:
                # Someone else settled it (an orphan sweep after our grant expired): nothing to undo.
                self._journal.warning("attempt.requeue_skipped", attempt=attempt_id, detail=str(exc))
            except EdgeRuntimeError as exc:
                if self._retry_failed():
                    self._journal.error("attempt.requeue_failed", attempt=attempt_id, error=exc.code,
                                        detail=str(exc), retryable=exc.retryable, failures=self._retry_failures)
                continue
            else:
                self._journal.info("attempt.unstarted", run=grant.lease.run_id, attempt=attempt_id, status=status)
            del self._unstarted[attempt_id]

    def undo_before_exit(self) -> None:
        """The service stops: retry the pending undos of failed starts until none is left or
        ``UNDO_AT_STOP_S`` passed; each one still pending is logged. Those keep their grant, so
        the next service's orphan sweep ends them once it ran out: within one Run Lease."""
        deadline = time.monotonic() + UNDO_AT_STOP_S
        tries = 0
        while self._unstarted:
            if tries:
                time.sleep(min(UNDO_AT_STOP_INTERVAL_S, max(0.0, deadline - time.monotonic())))
            tries += 1
            self.retry_unstarted()
            if time.monotonic() >= deadline:
                break
        for attempt_id, (grant, reason, _) in self._unstarted.items():
            self._journal.error(
                "attempt.undo_left", run=grant.lease.run_id, attempt=attempt_id, detail=reason, tries=tries,
                next_step="the next service's orphan sweep ends it once its Run Lease ran out")

    def _spawn(
        self, run: RunRecord, attempt_id: str, grant: RunGrant, fifo_path: Path, writer: int,
        capture: LogCapture | None, shared: Mapping[str, str],
    ) -> bool | object:
        argv = [] if run.command is _UNSET else list(run.command)
        env = compose_environment(self._env, pass_env=self._pass_env, shared=shared,
                                  own=None if run.env is _UNSET else run.env, run_id=run.id, attempt_id=attempt_id)
        cwd = self._work_dir if run.cwd is _UNSET else run.cwd
        try:
            identity = spawn(argv, output_fd=writer, env=env, boot_id=self._boot_id, cwd=cwd)
        except SpawnError as exc:
            if capture is not None:
                capture.abandon()  # its FIFO and its still empty log go with it
            else:
                _unlink(fifo_path)
            # A process that existed for an instant may have begun the command: the Run ends.
            return self._not_started(grant, str(exc), retryable=exc.retryable,
                                     end=AttemptStatus.LOST if exc.started else AttemptStatus.FAILED)
        self._start_failures = 0
        running = RunningAttempt(attempt_id, run.id, identity, own_child=True, grant=grant)
        running.fifo_path = fifo_path
        self._watch(running, capture)
        try:
            conflict = self._record_identity(running)
        except EdgeRuntimeError as exc:
            if not exc.retryable:
                self._give_up_identity(running, f"the process identity could not be recorded: {exc}", error=exc.code)
                return False
            # Keep it: it is our child, watched by its pidfd; retry_identities records it later.
            running.record_by = _record_deadline(grant)
            running.record_error = str(exc)
            self._journal.warning("attempt.identity_pending", run=run.id, attempt=attempt_id, pid=identity.pid,
                                  error=exc.code, detail=str(exc),
                                  give_up_in_s=round(running.record_by - time.monotonic(), 1))
            return True
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
        running.record_by = None
        running.record_error = None
        return None

    def _give_up_identity(self, running: RunningAttempt, reason: str, *, error: str | None = None) -> None:
        """The identity will not be recorded: SIGKILL the group (nobody could cancel or re-adopt an
        unrecorded process safely later); its exit then ends the Attempt ``lost`` with ``reason``."""
        running.failure = reason
        running.record_by = None
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
                running.record_error = str(exc)
                if self._retry_failed():
                    self._journal.error("attempt.identity_retry_failed", attempt=running.attempt_id, error=exc.code,
                                        detail=str(exc), failures=self._retry_failures)
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
                    if exc.errno in RETRYABLE_SPAWN_ERRNOS:
                        self._reopen[attempt.id] = capture
                        self._next_reopen = time.monotonic() + RETRY_INTERVAL_S
                        self._journal.warning("attempt.log_reopen_pending", attempt=attempt.id, detail=str(exc))
                    else:
                        self._journal.warning("attempt.log_unavailable", attempt=attempt.id, detail=str(exc))
                    capture = None
        self._watch(running, capture)
        if not self._controller.leader_alive(identity):
            self.running.pop(attempt.id, None)
            self._unwatch(running)
            self._close_capture(attempt.id, unlink=False)
            return False
        self._journal.info("attempt.adopted", run=attempt.run_id, attempt=attempt.id, pid=identity.pid,
                           pidfd=running.pidfd is not None)
        return True

    def adopt_gone(self, attempt: AttemptRecord, reason: str) -> None:
        """Settle an earlier session's Attempt whose process has exited (see :meth:`_settle_gone`)."""
        running = RunningAttempt(attempt.id, attempt.run_id, attempt.identity, own_child=False, grant=None)
        if attempt.log_path is not _UNSET:
            running.fifo_path = Path(attempt.log_path).with_suffix(".fifo")
        running.gone_since = time.monotonic()
        running.failure = reason
        self.running[attempt.id] = running

    def adopt_deferred(self, attempt: AttemptRecord, status: AttemptStatus, reason: str) -> None:
        """Keep a cancelled Attempt whose leader is gone open until its SIGKILL step."""
        running = RunningAttempt(attempt.id, attempt.run_id, attempt.identity, own_child=False, grant=None)
        running.deferred = DeferredEnd(status, None, reason)
        if attempt.log_path is not _UNSET:
            running.fifo_path = Path(attempt.log_path).with_suffix(".fifo")
        self.running[attempt.id] = running
        self._journal.info("attempt.awaiting_kill", run=attempt.run_id, attempt=attempt.id)

    def _watch(self, running: RunningAttempt, capture: LogCapture | None) -> None:
        self.running[running.attempt_id] = running
        try:
            pidfd = open_pidfd(running.identity.pid)
        except OSError as exc:
            # Out of descriptors (ENFILE: another process took the one just freed). The exit is
            # then found as without pidfds: SIGCHLD for our children, a /proc poll for the others.
            pidfd = None
            self._journal.warning("attempt.pidfd_unavailable", attempt=running.attempt_id, pid=running.identity.pid,
                                  detail=str(exc))
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
        """Resume paused captures, retry pending re-opens and stop lingering captures (or give up
        pending re-opens) whose time has come."""
        now = time.monotonic()
        if self._reopen and self._next_reopen <= now:
            self._retry_reopens()
        for attempt_id, at in list(self._paused.items()):
            capture = self._captures.get(attempt_id)
            if capture is not None and at <= now:
                self._paused[attempt_id] = now + DISCARD_INTERVAL_S
                self._on_output(capture)
        for attempt_id, at in list(self._linger_until.items()):
            capture = self._captures.get(attempt_id)
            if attempt_id in self._reopen and at <= now:
                self._give_up_reopen(attempt_id)
            if capture is not None and at <= now:
                self._on_output(capture)
                if capture.is_open:
                    capture.note(f"output capture stopped {self._log_linger_s:g} s after the attempt ended; "
                                 "processes it left running still hold its output, which is no longer read")
                    self._journal.info("attempt.capture_stopped", attempt=attempt_id)
                    self._close_capture(attempt_id, unlink=True)

    def seconds_to_capture_timer(self) -> float | None:
        reopen = (self._next_reopen,) if self._reopen else ()
        due = min((*self._paused.values(), *self._linger_until.values(), *reopen), default=None)
        return None if due is None else max(0.0, due - time.monotonic())

    def _retry_reopens(self) -> None:
        """Open the captures a lack of descriptors refused at re-adoption (see ``adopt``)."""
        for attempt_id in list(self._reopen):
            self._try_reopen(attempt_id, ended=attempt_id not in self.running)
        self._next_reopen = time.monotonic() + RETRY_INTERVAL_S

    def _try_reopen(self, attempt_id: str, *, ended: bool) -> None:
        """Open a pending capture; it stays pending while descriptors still lack. Once its Attempt
        ``ended``, a FIFO found empty and without a writer lost what it held with its last holder
        (if anything): the gap is marked in the log, as for output written while no service ran."""
        capture = self._reopen[attempt_id]
        try:
            capture.open()
        except OSError as exc:
            if exc.errno in RETRYABLE_SPAWN_ERRNOS:
                return  # retried after RETRY_INTERVAL_S; given up log_linger_ms after the end
            del self._reopen[attempt_id]
            self._journal.warning("attempt.log_unavailable", attempt=attempt_id, detail=str(exc))
            return
        del self._reopen[attempt_id]
        self._journal.info("attempt.log_reopened", attempt=attempt_id, ended=ended)
        self._captures[attempt_id] = capture
        self._loop.register(capture, lambda: self._on_output(capture))
        try:
            if ended and not capture.pump() and not capture.received:
                capture.note(_REOPEN_GAP)
        except OSError as exc:
            self._journal.error("attempt.log_write_failed", attempt=attempt_id, detail=str(exc))
        self._on_output(capture)  # what waited in the FIFO; closes the capture if no writer is left

    def _give_up_reopen(self, attempt_id: str) -> None:
        """The Attempt ended ``log_linger_ms`` ago and its FIFO could still not be re-opened: what it
        held is lost. Say so in the log (as for output written while no service ran)."""
        capture = self._reopen.pop(attempt_id)
        self._linger_until.pop(attempt_id, None)
        _unlink(capture.fifo_path)
        self._journal.error("attempt.output_lost", attempt=attempt_id,
                            detail="its output could not be re-opened for lack of descriptors")
        try:
            mark_gap(capture.log_path, _REOPEN_GAP)
        except OSError as exc:
            self._journal.warning("attempt.log_not_marked", attempt=attempt_id, detail=str(exc))
        self.copy_log(attempt_id, capture.log_path)

    def _close_capture(self, attempt_id: str, *, unlink: bool) -> None:
        self._paused.pop(attempt_id, None)
        self._linger_until.pop(attempt_id, None)
        self._reopen.pop(attempt_id, None)
        capture = self._captures.pop(attempt_id, None)
        if capture is not None:
            self._loop.unregister(capture)
            capture.close(unlink_fifo=unlink)
            if attempt_id not in self.running:  # the Attempt had ended: its log is complete now
                self.copy_log(attempt_id, capture.log_path)

    def copy_log(self, attempt_id: str, log_path: Path) -> None:
        """Hand the ended Attempt's log tail to the store's copies (``logs`` on other hosts). Best
        effort: the file stays here whatever happens, so a failure is logged, never retried."""
        if self._log_copies is None:
            return
        try:
            content, size = read_tail(log_path, STORED_LOG_MAX_BYTES)
            self._log_copies.keep(attempt_id, content, size_bytes=size, worker_id=self._worker.worker_id)
        except (OSError, EdgeRuntimeError) as exc:
            self._journal.warning("attempt.log_copy_failed", attempt=attempt_id,
                                  error=getattr(exc, "code", type(exc).__name__), detail=str(exc))

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
        """Find re-adopted processes that exited (without pidfds, through ``/proc``), and settle
        the ones that did."""
        for running in list(self.running.values()):
            if running.own_child or running.pidfd is not None or running.deferred is not None:
                continue
            if running.gone_since is not None:
                self._settle_gone(running)
                continue
            try:
                alive = self._controller.leader_alive(running.identity)
            except ProcfsUnavailableError as exc:
                self._journal.error("attempt.poll_failed", attempt=running.attempt_id, detail=str(exc))
                continue
            if not alive:
                self._leader_exited(running, None)

    def _settle_gone(self, running: RunningAttempt) -> None:
        """A re-adopted process exited. Its parent may be alive: a service whose session this one
        replaced finishes its own children and records their real exit status. So: an Attempt
        that was ended meanwhile is dropped; a zombie (its parent has not reaped it yet) is waited
        for; one gone for ADOPTED_EXIT_GRACE_S with its Attempt still active ends ``lost``."""
        try:
            attempt = self._runs.get_attempt(running.attempt_id)
            stat = read_stat(running.identity.pid)
        except EdgeRuntimeError as exc:
            self._journal.error("attempt.poll_failed", attempt=running.attempt_id, detail=str(exc))
            return
        if attempt is None or attempt.status not in _ACTIVE:
            self.running.pop(running.attempt_id, None)
            self._close_capture(running.attempt_id, unlink=False)
            self._journal.info("attempt.ended_elsewhere", run=running.run_id, attempt=running.attempt_id,
                               status=None if attempt is None else attempt.status.value)
        elif stat is not None and stat.start_ticks == running.identity.start_ticks:
            running.gone_since = time.monotonic()  # still a zombie: its parent lives and will reap it
        elif time.monotonic() - running.gone_since >= ADOPTED_EXIT_GRACE_S:
            self._end(running, None)

    # ----------------------------------------------------------------- end

    def _leader_exited(self, running: RunningAttempt, status: int | None) -> None:
        self._unwatch(running)
        capture = self._captures.get(running.attempt_id)
        if capture is not None:
            self._on_output(capture)  # drain what the process wrote before it exited
        if not running.own_child and running.gone_since is None:
            running.gone_since = time.monotonic()  # give a live parent the first word
            self._settle_gone(running)
            return
        self._end(running, status)

    def _end(self, running: RunningAttempt, status: int | None) -> None:
        try:
            self._decide_end(running, status)
        except EdgeRuntimeError as exc:
            # The Attempt stays active in the database: try again every tick, never forget it.
            if self._retry_failed():
                self._journal.error("attempt.finish_failed", attempt=running.attempt_id, error=exc.code,
                                    detail=str(exc), failures=self._retry_failures)
            self.running.pop(running.attempt_id, None)
            self._unfinished[running.attempt_id] = (running, status)

    def _decide_end(self, running: RunningAttempt, status: int | None) -> None:
        if running.record_by is not None and running.failure is None:
            self._record_before_end(running)
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
            running.deferred = DeferredEnd(end, code, reason)
            self._journal.info("attempt.awaiting_kill", run=running.run_id, attempt=running.attempt_id,
                               pid=running.identity.pid)
            return
        self.finish(running, end, code, reason)

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
            running.record_by = None
            self._journal.warning("attempt.identity_not_recorded", attempt=running.attempt_id,
                                  pid=running.identity.pid, error=exc.code, detail=str(exc), exited=True)
            return
        if conflict is not None:
            running.record_by = None
            running.failure = conflict
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
        if running.attempt_id in self._reopen:
            self._try_reopen(running.attempt_id, ended=True)  # the last chance before the unlink
        reopen_pending = running.attempt_id in self._reopen
        if running.fifo_path is not None and not reopen_pending:
            # Before the end is committed, so nobody who sees the Attempt ended finds its FIFO;
            # open descriptors (leftover grandchildren) keep working and are drained until EOF.
            _unlink(running.fifo_path)
        self._runs.finish_attempt(running.attempt_id, status, actor_id=self._worker.owner, exit_code=code,
                                  reason=reason)
        self.running.pop(running.attempt_id, None)
        if running.attempt_id in self._captures or reopen_pending:  # a descendant may still hold the output
            self._linger_until[running.attempt_id] = time.monotonic() + self._log_linger_s
        else:  # its output is complete: copy it now
            log_path = (running.fifo_path.with_suffix(".log") if running.fifo_path is not None
                        else log_paths(self._log_dir, running.attempt_id)[0])
            self.copy_log(running.attempt_id, log_path)
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
            if self._retry_failed():
                self._journal.error("lease.complete_failed", attempt=attempt_id, error=exc.code, detail=str(exc),
                                    retryable=exc.retryable, failures=self._retry_failures)

    def retry_completions(self) -> None:
        """Settle what failed earlier (e.g. the database was busy): unstarted Attempts, ends of
        exited processes, grants to complete; and records the identities not recorded yet."""
        self.retry_identities()
        self.retry_unstarted()
        for running, status in list(self._unfinished.values()):
            del self._unfinished[running.attempt_id]
            self._end(running, status)
        for attempt_id in list(self._uncompleted):
            self._complete_lease(attempt_id)
        if not self.pending_retries:
            self._retry_failures = 0

    def tracks(self, attempt_id: str) -> bool:
        """Whether this service spawned or is settling the Attempt (watched, or a settlement to
        retry): an Attempt of its own session that it does not track was never spawned by it."""
        return attempt_id in self.running or attempt_id in self._unstarted or attempt_id in self._unfinished

    @property
    def pending_retries(self) -> bool:
        return bool(self._unstarted or self._unfinished or self._uncompleted or self.unrecorded_count)

    @property
    def unrecorded_count(self) -> int:
        """Processes of ours whose identity is not recorded yet (see ``_spawn``)."""
        return sum(1 for running in self.running.values() if running.record_by is not None)

    def _retry_failed(self) -> bool:
        """Count one failed settlement; whether to log it (the 1st, 2nd, 4th, 8th...: a full disk
        must not flood the log)."""
        self._retry_failures += 1
        return self._retry_failures & (self._retry_failures - 1) == 0

    def next_retry_s(self) -> float | None:
        """Seconds until this supervisor has something to retry: a failed settlement (after a
        backoff that doubles while they keep failing) or the end of a pause in starting; None
        when nothing is pending."""
        if self.pending_retries:
            return min(RETRY_INTERVAL_S * (1 << min(self._retry_failures, 5)), 30.0)
        paused = self._start_paused_until - time.monotonic()
        return paused if paused > 0 else None

    # ----------------------------------------------------------------- leases

    def renew_due(self, now_ms: int) -> None:
        for running in list(self.running.values()):
            grant = running.grant
            if grant is None or self._worker.next_renewal_at_ms(grant) > now_ms:
                continue
            try:
                self._worker.renew(grant)
                if running.record_by is not None:  # still unrecorded: the renewed grant fences it longer
                    running.record_by = _record_deadline(grant)
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

    @property
    def own_children(self) -> int:
        return sum(1 for running in self.running.values() if running.own_child)

    def drop_adopted(self) -> None:
        """Stop watching Attempts that are not our children (the session that replaced ours has them)."""
        for running in [r for r in self.running.values() if not r.own_child]:
            self._unwatch(running)
            self._close_capture(running.attempt_id, unlink=False)
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
        """Stop watching without touching the processes: they keep running and are re-adopted.
        Except a process whose identity was never recorded: nothing could re-adopt it, so it is
        SIGKILLed (its ``starting`` Attempt is ended ``lost`` by the orphan sweep)."""
        self.kill_unrecorded(REASON_STOPPED_UNRECORDED)
        for running in list(self.running.values()):
            self._unwatch(running)
        for attempt_id in list(self._captures):
            self._close_capture(attempt_id, unlink=False)
        for attempt_id in [a for a in self._reopen if a not in self.running]:
            self._give_up_reopen(attempt_id)  # ended: no later service re-opens its FIFO
        self._reopen.clear()  # running: the next service re-adopts them and re-opens their FIFOs
        self.running.clear()


def _record_deadline(grant: RunGrant) -> float:
    """By when (monotonic) a process started under ``grant`` must have its identity recorded."""
    return grant.asked_at + (grant.held_until - grant.asked_at) * RECORD_WITHIN_LEASE_SHARE


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
