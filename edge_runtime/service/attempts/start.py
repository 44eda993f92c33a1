"""The start pass: queued Runs become Attempts with a process, or go back to the queue.

For each queued Run while the lease authority leaves this session a slot:

1. ``WorkerSession.start`` (``start_run``, one fenced transaction): the queued Run moves to
   ``dispatching``, its Attempt is created, its Run Lease claimed and the start barrier crossed
   (``starting``), only if this session is still the current one and its leases, counted under
   the write lock, leave a slot. A refusal writes nothing; a failed transaction leaves the Run
   queued.
2. spawn under the Attempt's monitor (docs/monitor.md), the task in a new session and process
   group. The output's descriptors (its FIFO's two ends, the log file, the status file) are all
   opened before the spawn, so a lack of descriptors hits before a process exists.
   Until a process exists, every failure is undone (the settlements' ``not_started``): the Run
   goes back to the queue (a lack of descriptors, processes or memory also pauses starting, with
   a backoff, ``START_BACKOFF_MS``); a command that cannot be started at all (not found) fails,
   and one whose process existed for an instant ends ``lost`` (it may have begun). A ``task``
   command is resolved first (``service/script_task.py``: its script, program and accounts); one
   that cannot run fails, with the reason naming what is missing.
3. its identity recorded (``identity``), and its leader watched (``exits``).

A broken stored row (``StoredRowError``: only another program writing the database leaves one)
costs its own Run, never the pass: a Run whose event log another program appended to is set
aside, failed with the reason (``RunStore.set_aside``), and the pass goes on with the next; one
whose end cannot be recorded either is skipped for as long as this service runs. A value no
process can be given (a NUL byte in the command, the working directory or a variable, stored
by another program) fails its Attempt with the reason, before anything reads it as a path
(``refuse_unspawnable``: the one check at the spawn boundary).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

import msgspec

from edge_runtime.contract.backoff import capped_backoff
from edge_runtime.contract.environment import compose_environment
from edge_runtime.contract.errors import EdgeRuntimeError, StoredRowError, UnspawnableValueError
from edge_runtime.contract.run_lease import NoCapacityOutcome
from edge_runtime.contract.runs import AttemptStatus, RunRecord
from edge_runtime.contract.script_task import InvalidTaskCommandError, TaskUnavailableError
from edge_runtime.service.attempts.exits import Exits
from edge_runtime.service.attempts.identity import Identities, record_deadline
from edge_runtime.service.attempts.logs import AttemptLogs
from edge_runtime.service.attempts.running import RunningAttempt
from edge_runtime.service.attempts.settlement import Settlements
from edge_runtime.service.attempts.tools import Tools
from edge_runtime.service.errors import RETRYABLE_SPAWN_ERRNOS, SpawnError
from edge_runtime.service.executor import refuse_unspawnable, spawn, task_environment
from edge_runtime.service.log_capture import AttemptOutput
from edge_runtime.service.script_task import task_launch
from edge_runtime.service.task_user import TaskUserUnknownError, resolve_task_user
from edge_runtime.service.worker import RunGrant

_UNSET = msgspec.UNSET
#: After a start failed for lack of resources (EMFILE, ...), starting pauses for this long,
#: doubling while it goes on, so a full descriptor table is not hammered once per tick.
START_BACKOFF_MS = (500, 30_000)
#: ``_start`` result: end this start pass (no capacity left, or starting is paused).
_STOP = object()
#: ``_start`` result: the Run was set aside (a broken stored row); its slot is still free.
_SET_ASIDE = object()


class TaskSettings(NamedTuple):
    """What every Attempt's process is started with, besides its Run's own command and variables."""

    boot_id: str
    #: Where a task's documented base environment is taken from; None: the service's own
    #: (docs/environment.md).
    env: Mapping[str, str] | None
    #: What a task's environment is composed of besides the base.
    pass_env: tuple[str, ...]
    shared_env: Callable[[], Mapping[str, str]] | None
    #: Where a Run that names no directory runs.
    work_dir: str | None
    #: Where a ``task`` command's relative script is (the ``scripts_dir`` setting); None: nowhere.
    scripts_dir: str | None
    log_max_bytes: int
    log_linger_ms: int
    #: How long the processes a task left get after its end, between SIGTERM and SIGKILL.
    grace_ms: int = 10_000
    #: The user a Run that names none runs as (the ``task_user`` setting); None: the service's own.
    task_user: str | None = None
    #: The variables the service itself gives an Attempt by its id (the capability of a task's
    #: own message, ``EDGE_RUNTIME_NOTIFY``); set last, over everything else. None: none.
    attempt_env: Callable[[str], Mapping[str, str]] | None = None


class StartPass:
    """Starts queued Runs; owns what an Attempt's process is started with and the pause in
    starting after a lack of resources."""

    def __init__(
        self, tools: Tools, *, logs: AttemptLogs, settlements: Settlements, identities: Identities, exits: Exits,
        task: TaskSettings,
    ) -> None:
        self._runs, self._worker, _, self._journal, _ = tools
        #: The parts a start hands on to: its files, its undo, its identity, its watch.
        self._logs, self._settlements, self._identities, self._exits = logs, settlements, identities, exits
        self._task = task
        self._base_env = task_environment(os.environ if task.env is None else task.env)
        #: Consecutive starts that failed for lack of resources, and when starting may resume.
        self._failures = 0
        self._paused_until = 0.0
        #: Queued Runs a broken stored row keeps from starting whose end could not be recorded
        #: either: skipped by every later pass of this service (``check`` names them).
        self._set_aside: set[str] = set()

    def start_queued(self) -> int:
        """Start queued Runs while the lease authority leaves this session slots; how many started.

        Raises:
            WorkerLeaseFenceRejectedError, WorkerSessionRejectedError: this session was replaced
                or expired: the caller must stop taking work.
        """
        started = 0
        while time.monotonic() >= self._paused_until:
            free = self._worker.free_slots()
            if free <= 0:
                break
            set_aside = False
            for run_id in self._runs.queued_run_ids(free + len(self._set_aside)):
                if run_id in self._set_aside:
                    continue
                outcome = self._start(run_id)
                if outcome is _STOP:
                    return started
                set_aside |= outcome is _SET_ASIDE
                started += outcome is True
            if not set_aside:
                break
            # A Run set aside took no slot: the Runs behind it start in this pass, not at the next
            # wake (each round sets at least one more aside, so the rounds end).
        return started

    def seconds_paused(self) -> float | None:
        """Seconds until starting resumes after a lack of resources; None when it is not paused."""
        paused = self._paused_until - time.monotonic()
        return paused if paused > 0 else None

    def _start(self, run_id: str) -> bool | object:
        try:
            grant = self._worker.start(run_id)
        except StoredRowError as exc:  # nothing was written: this Run alone is set aside
            return self._set_aside_run(run_id, exc)
        if grant is None:
            return False  # another service took it, or it was cancelled meanwhile
        if isinstance(grant, NoCapacityOutcome):
            return _STOP  # nothing was written; a slot frees when one of ours ends
        attempt_id = grant.lease.attempt_id
        log_path, fifo_path = self._logs.paths(attempt_id)
        try:
            run = self._runs.get(run_id)
            shared = {} if self._task.shared_env is None else self._task.shared_env()
            # Every descriptor the monitor needs, before a process exists: once one does, a lack of
            # descriptors could only cost its output or the Run.
            output = self._logs.open_output(log_path, fifo_path)
        except (EdgeRuntimeError, OSError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            retryable = not isinstance(exc, OSError) or exc.errno in RETRYABLE_SPAWN_ERRNOS
            if isinstance(exc, OSError) and not retryable:
                self._journal.error("attempt.log_unavailable", attempt=attempt_id, detail=str(exc))
            return self._not_started(grant, f"the process was not started: {detail}", retryable=retryable)
        return self._spawn(run, attempt_id, grant, output, shared)

    def _set_aside_run(self, run_id: str, error: StoredRowError) -> object:
        """Fail the Run ``error`` keeps from starting, recording why; the pass goes on."""
        self._journal.error("run.set_aside", run=run_id, error=error.code, detail=str(error))
        try:
            self._runs.set_aside(run_id, error, actor_id=self._worker.owner)
        except EdgeRuntimeError as exc:
            if exc.retryable:
                return _STOP  # a busy database: the next tick tries again
            self._set_aside.add(run_id)
            self._journal.error("run.set_aside_unrecorded", run=run_id, error=exc.code, detail=str(exc))
        return _SET_ASIDE

    def _not_started(self, grant: RunGrant, reason: str, *, retryable: bool, end: AttemptStatus | None = None) -> object:
        """No process was recorded: give the Run back to the queue (every queued Run runs once),
        or end it for good (``end``: a command that cannot be started at all, or one that may
        have begun)."""
        attempt_id = grant.lease.attempt_id
        self._journal.warning("attempt.not_started", run=grant.lease.run_id, attempt=attempt_id, detail=reason,
                              retryable=retryable)
        if retryable:
            self._failures += 1
            low, high = START_BACKOFF_MS
            self._paused_until = time.monotonic() + capped_backoff(low, self._failures, high) / 1000
        self._settlements.not_started(grant, reason, None if retryable else end or AttemptStatus.FAILED)
        return _STOP if retryable else False

    def _spawn(
        self, run: RunRecord, attempt_id: str, grant: RunGrant, output: AttemptOutput, shared: Mapping[str, str],
    ) -> bool | object:
        argv = [] if run.command is _UNSET else list(run.command)
        task = self._task
        env = compose_environment(self._base_env, pass_env=task.pass_env, shared=shared,
                                  own=None if run.env is _UNSET else run.env, run_id=run.id, attempt_id=attempt_id)
        if task.attempt_env is not None:
            env.update(task.attempt_env(attempt_id))
        cwd = task.work_dir if run.cwd is _UNSET else run.cwd
        try:  # before anything reads them as paths: a NUL byte would raise there, not say why
            refuse_unspawnable(argv, env, cwd)
        except UnspawnableValueError as exc:
            output.abandon()
            return self._not_started(grant, exc.reason(), retryable=False)
        try:  # a `task` command: what runs is decided now, from the scripts directory and this environment
            launch = task_launch(argv, env=env, scripts_dir=task.scripts_dir, cwd=None if run.cwd is _UNSET else run.cwd)
        except (InvalidTaskCommandError, TaskUnavailableError) as exc:
            output.abandon()
            return self._not_started(grant, str(exc), retryable=False)  # nothing started: the Run fails, saying why
        if launch is not None:
            argv, env, cwd = launch.argv, launch.env, launch.cwd
            self._journal.info("attempt.task", run=run.id, attempt=attempt_id, program=launch.program,
                               script=launch.script, accounts=" ".join(map(str, launch.numbers)) or None)
        user_name = task.task_user if run.task_user is _UNSET else run.task_user
        user = None
        if user_name is not None:
            try:  # looked up at every start: a user removed since the Run was queued fails it here
                user = resolve_task_user(user_name)
            except TaskUserUnknownError as exc:
                output.abandon()
                self._journal.warning("attempt.task_user_unknown", run=run.id, attempt=attempt_id, user=user_name,
                                      error=exc.code)
                return self._not_started(grant, f"{exc} ({exc.code})", retryable=False)
            env = user.environment(env)
            if launch is None and run.cwd is _UNSET and user.uid != os.geteuid():
                # The service's work_dir is its own (0700): a Run of another user that names no
                # directory runs in that user's home, or in / when that is not a directory.
                cwd = user.home if os.path.isdir(user.home) else "/"
        try:
            identity = spawn(argv, output=output, env=env, boot_id=task.boot_id, log_cap_bytes=task.log_max_bytes,
                             log_linger_ms=task.log_linger_ms, cwd=cwd, leftover_grace_ms=task.grace_ms, user=user)
        except SpawnError as exc:
            output.abandon()  # its FIFO, status file and still empty log go with it
            # A process that existed for an instant may have begun the command: the Run ends.
            return self._not_started(grant, str(exc), retryable=exc.retryable,
                                     end=AttemptStatus.LOST if exc.started else AttemptStatus.FAILED)
        output.close_after_spawn()
        self._failures = 0
        running = RunningAttempt(attempt_id, run.id, identity, started_here=True, grant=grant,
                                 log_path=output.log_path)
        try:
            conflict = self._identities.record(running)
        except EdgeRuntimeError as exc:
            if not exc.retryable:
                self._exits.watch(running)
                self._identities.give_up(running, f"the process identity could not be recorded: {exc}",
                                         error=exc.code)
                return False
            # Keep it: it is watched by its pidfd; the identity retries record it later.
            running.await_record(record_deadline(grant), str(exc))
            self._journal.warning("attempt.identity_pending", run=run.id, attempt=attempt_id, pid=identity.pid,
                                  error=exc.code, detail=str(exc),
                                  give_up_in_s=round(running.record_by - time.monotonic(), 1))
            self._exits.watch(running)
            return True
        self._exits.watch(running)
        if conflict is not None:
            self._identities.give_up(running, conflict)
            return False
        self._journal.info("attempt.running", run=run.id, attempt=attempt_id, pid=identity.pid)
        return True
