"""``edge-runtime serve``: the device service's lifecycle and its event loop.

The service sees storage only through the ports of ``edge_runtime.contract.ports``; the composition
root (``cli/serve.py``) picks the adapter and hands an opener of its ``Store`` in.

Start: open the store (Local: open and migrate the database), bind its wake-up, register a new worker session
(generation + 1), recover the Attempts of earlier sessions, report capacity. Then loop:

1. act on signals (flags set by the handlers): SIGTERM/SIGINT stop, SIGCHLD reaps;
2. deliver due cancellations and enforce due SIGKILL deadlines;
3. start queued Runs while slots are free;
4. heartbeat the session and renew Run Leases when due (between heartbeats, which are minutes
   apart while idle, read every third of ``session_lease_ms`` whether the session is still current);
5. sleep in one ``select`` until the earliest of: a dispatch retry or lease expiry, a SIGKILL
   deadline, a heartbeat or renewal, a pidfd or log FIFO becoming readable, a poke on the wake
   socket, a signal, the recovery pass (a third of ``run_lease_ms``) or the slow fallback poll
   (``poll_interval_ms``, default 30 s). There is no busy polling: an idle service wakes only for
   its heartbeat, the recovery pass and the fallback poll;
6. when a tick did no work: one small retention batch (the ``Retention`` port the composition
   root passes in; docs/storage.md: storage bounds), again soon while more remains, about a second after
   an Attempt ended, otherwise every minute.

Stop: running Attempts keep running (their processes are in their own sessions, so the
service's signals never reach them) and are re-adopted by the next start, unless
``stop_runs_on_exit``: then each group gets SIGTERM, and SIGKILL after the grace. The session
goes offline, which says nothing about processes (spec §5).

Losing the worker session (another service registered the same worker id, or the session lease
lapsed during a long suspend) stops the service taking work at once (every start is fenced by
the session); it then waits for its own children to exit, so their real exit status is recorded,
and exits with an error: its supervisor (procd, systemd) restarts it, and the restart's recovery
re-adopts what still runs. Recovery also runs every third of a Run Lease while serving, so
Attempts stranded by any session are found within one Run Lease period.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from edge_runtime.contract.backoff import capped_backoff, worth_logging
from edge_runtime.contract.errors import EdgeRuntimeError, StoredRowError
from edge_runtime.contract.ports import RunStore, Store
from edge_runtime.contract.retention import Retention
from edge_runtime.contract.worker_lease import WorkerLeaseFenceRejectedError, WorkerSessionRejectedError
from edge_runtime.service.attempts import REASON_STOPPED_UNRECORDED, AttemptSupervisor
from edge_runtime.service.config import ServiceConfig
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.dispatcher import CancellationDispatcher
from edge_runtime.service.errors import ServiceError
from edge_runtime.service.executor import seal_inherited_descriptors
from edge_runtime.service.journal import Journal, JournalSecrets
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.monitor import monitor_path
from edge_runtime.service.process_identity import read_boot_id
from edge_runtime.service.recovery import recover
from edge_runtime.service.task_user import task_user_exists
from edge_runtime.service.trusted_paths import hold_trusted_directory
from edge_runtime.service.watch import pidfds_supported
from edge_runtime.service.worker import IDLE_SESSION_LEASE_MS, WorkerSession

#: Poll for exits of re-adopted processes when the kernel has no pidfds.
ADOPTED_POLL_MS = 2_000
#: The shortest sleep when something is overdue but could not be done (busy database, a
#: deadline another service holds): bounds a loop that would otherwise spin.
MIN_SLEEP_MS = 200
#: After consecutive failed ticks (a full disk, an I/O error) the loop backs off, doubling from
#: MIN_SLEEP_MS up to this, so a broken disk is neither hammered nor logged ten times a second.
MAX_FAILURE_BACKOFF_MS = 30_000
#: Retention runs only when a tick did no work: the next batch this soon while more remains, else
#: a check this often (a check that finds nothing writes nothing).
RETENTION_BATCH_GAP_S = 0.05
RETENTION_IDLE_S = 60.0
#: After an Attempt ended, retention looks again this soon (a finished Run may now be beyond policy).
RETENTION_AFTER_FINISH_S = 1.0
#: After SIGKILL at shutdown, how long to wait for the groups to be reaped.
_SHUTDOWN_KILL_WAIT_S = 2.0

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SideServer(Protocol):
    """Something the service runs beside its loop (the submit hand-off, the web panel): ``start`` binds and starts a
    thread of its own or raises ``EdgeRuntimeError``; ``stop`` ends it."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class TickHook(Protocol):
    """Work the composition root adds to each pass of the loop (the scheduler): ``tick`` does
    what is due and says whether anything happened; the loop sleeps no later than
    ``next_due_at_ms`` (guarded-clock ms)."""

    def tick(self) -> bool: ...

    def next_due_at_ms(self) -> int | None: ...


def failure_backoff_ms(failures: int) -> int:
    """The sleep after ``failures`` consecutive failed ticks: MIN_SLEEP_MS doubling, capped."""
    return capped_backoff(MIN_SLEEP_MS, failures, MAX_FAILURE_BACKOFF_MS)


class SessionLostError(ServiceError, code="SERVICE_SESSION_LOST"):
    """This service's worker session was replaced or expired; restart to open a new one."""


class DeviceService:
    """One run of the service. ``run()`` returns when it was asked to stop."""

    def __init__(
        self,
        open_store: Callable[[], Store],
        config: ServiceConfig,
        *,
        log_dir: Path,
        work_dir: Path | None = None,
        scripts_dir: Path | None = None,
        journal: Journal | None = None,
        controller: LocalProcessController | None = None,
        retention: Callable[[Store, int], Retention] | None = None,
        tick_hooks: Sequence[Callable[[Store, Journal], TickHook]] = (),
        side_servers: Mapping[str, Callable[[Journal, Store], SideServer]] | None = None,
        attempt_env: Callable[[str], Mapping[str, str]] | None = None,
    ) -> None:
        #: The variables the composition root gives each Attempt by its id (a task's notify capability).
        self._attempt_env = attempt_env
        #: Servers beside the loop by name (cli/serve.py: the submit hand-off, the web panel when
        #: configured): started after the session is registered, each in a thread of its own;
        #: their failures are logged (``<name>.not_started``) and never stop the service.
        self._side_server_factories = dict(side_servers or {})
        self._side_servers: list[SideServer] = []
        #: Built by the composition root (cli/serve.py) once the store is open; see TickHook.
        self._hook_factories = tuple(tick_hooks)
        self._hooks: list[TickHook] = []
        self.config = config
        self.log_dir = log_dir
        #: Where an Attempt whose Run names no directory runs (the ``work_dir`` setting).
        self.work_dir = work_dir
        #: Where a ``task`` command's relative script is (the ``scripts_dir`` setting); None: nowhere.
        self.scripts_dir = scripts_dir
        self.journal = journal or Journal()
        self.controller = controller or LocalProcessController()
        self._open_store = open_store
        self._store: Store | None = None
        #: Consecutive ticks that failed; drives the backoff and thins out repeated error lines.
        self._tick_failures = 0
        self._recovery_failures = 0
        self._boot_id = ""
        #: Built on the open database and the held log directory's descriptor by the composition
        #: root's factory; None keeps everything.
        self._make_retention = retention
        self._retention: Retention | None = None
        self._next_retention = 0.0
        #: See _busy_since.
        self._busy_since_ms: int | None = None
        #: When the loop next reads whether its session is still current (WorkerSession.check_current).
        self._next_session_check_ms = 0
        #: Keeps the journal's mask to the store's secrets (set once the store is open).
        self._secrets: JournalSecrets | None = None

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT.

        Raises:
            EdgeRuntimeError: the database, the wake socket or the worker session failed at start,
                or the session was lost while serving.
        """
        boot_id = read_boot_id()
        monitor_path()  # refuse to start without the per-Attempt monitor, before taking any work
        seal_inherited_descriptors()
        log_dir = self.log_dir
        try:
            log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ServiceError(f"cannot create the log directory {log_dir}: {exc.strerror or exc}") from None
        # Root writes task output there by fixed names: held open from the check on, every log is
        # created, read and removed relative to it, whatever a symlink on its path points to later.
        log_dir_fd = hold_trusted_directory(log_dir, "log directory")
        try:
            return self._run(boot_id, log_dir, log_dir_fd)
        finally:
            os.close(log_dir_fd)

    def _run(self, boot_id: str, log_dir: Path, log_dir_fd: int) -> int:
        if self.work_dir is not None:
            try:
                self.work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                raise ServiceError(f"cannot create the work directory {self.work_dir} (setting work_dir): "
                                   f"{exc.strerror or exc}") from None
        store = self._store = self._open_store()
        try:
            self._retention = self._make_retention(store, log_dir_fd) if self._make_retention is not None else None
            self._hooks = [make(store, self.journal) for make in self._hook_factories]
            loop = EventLoop()
            try:
                return self._serve(store, loop, boot_id, log_dir, log_dir_fd)
            finally:
                loop.close()
                # A jump detected in the last tick (one that may have cost the session) is kept.
                self._keep_time(final=True)
        finally:
            self._store = None
            store.close()

    def _serve(self, store: Store, loop: EventLoop, boot_id: str, log_dir: Path, log_dir_fd: int) -> int:
        config, journal = self.config, self.journal
        loop.install_signals((*_STOP_SIGNALS, signal.SIGCHLD))
        wake = store.open_wake()
        supervisor: AttemptSupervisor | None = None
        try:
            loop.register(wake, wake.drain)
            for reason in wake.refused:
                journal.warning("wake.directory_refused", detail=reason, using=wake.where)
            runs = store.runs
            # Before the first line that could quote a stored text: the log masks every secret.
            secrets = self._secrets = JournalSecrets(journal, lambda: getattr(store, "environment", None))
            secrets.refresh()
            worker = WorkerSession(
                store.leases,
                worker_id=config.worker_id,
                slots=config.slots,
                session_lease_ms=config.session_lease_ms,
                run_lease_ms=config.run_lease_ms,
                idle_session_lease_ms=config.resolved_idle_session_lease_ms(IDLE_SESSION_LEASE_MS),
            )
            session = worker.register()
            journal.info(
                "service.started", db=store.where, worker=config.worker_id, generation=session.generation,
                slots=config.slots, grace_ms=config.grace_ms, pid=os.getpid(), pidfd=pidfds_supported(),
            )
            if isinstance(config.task_user, str) and not task_user_exists(config.task_user):
                # Said at start; each Attempt that would run as it fails with the reason.
                journal.warning("service.task_user_unknown", user=config.task_user)
            supervisor = AttemptSupervisor(
                runs=runs, worker=worker, controller=self.controller, loop=loop, journal=journal,
                slots=config.slots, log_dir=log_dir, log_max_bytes=config.log_max_bytes, boot_id=boot_id,
                log_linger_ms=config.log_linger_ms, log_copies=store.attempt_logs, grace_ms=config.grace_ms,
                pass_env=config.pass_env, work_dir=None if self.work_dir is None else str(self.work_dir),
                scripts_dir=None if self.scripts_dir is None else str(self.scripts_dir),
                # Read at each start; a change also renews the journal's mask (JournalSecrets).
                shared_env=None if getattr(store, "environment", None) is None else secrets.task_values,
                log_dir_fd=log_dir_fd,
                task_user=config.task_user if isinstance(config.task_user, str) else None,
                attempt_env=self._attempt_env,
            )
            dispatcher = CancellationDispatcher(
                dispatches=store.dispatches, runs=runs, controller=self.controller,
                owner=lambda: worker.owner, now_ms=store.now_ms, journal=journal, grace_ms=config.grace_ms,
                lease_ms=config.dispatch_lease_ms, retry_base_ms=config.retry_base_ms,
                retry_max_ms=config.retry_max_ms,
            )
            self._boot_id = boot_id
            counts = self._recover(runs, worker, supervisor, at_start=True)
            journal.info("recovery.done", **counts)
            worker.heartbeat(self._available_slots(supervisor), idle=not supervisor.running)
            self._start_side_servers()
            # Every side server is up (or said why not): what is measured at rest from here on
            # (descriptors, memory) is the whole service.
            journal.info("service.ready", side_servers=",".join(type(s).__name__ for s in self._side_servers) or None)
            try:
                self._loop(loop, runs, worker, supervisor, dispatcher)
            except SessionLostError as lost:
                self._linger(loop, supervisor, lost)
                supervisor.undo_before_exit()  # grant-fenced: works although the session was replaced
                raise
            self._shutdown(loop, worker, supervisor, dispatcher)
            journal.info("service.stopped", running_left=len(supervisor.running))
            return 0
        finally:
            if supervisor is not None:
                supervisor.close()
            self._stop_side_servers()
            wake.close()

    def _start_side_servers(self) -> None:
        """Start each side server; one that cannot start is logged and left out."""
        self._side_servers = []
        for name, make in self._side_server_factories.items():
            server = None
            try:
                server = make(self.journal, self._store)
                server.start()
            except EdgeRuntimeError as exc:
                self.journal.error(f"{name}.not_started", error=exc.code, detail=str(exc))
            except Exception as exc:  # noqa: BLE001  (a side server's boundary: a bug in it never stops the service)
                self.journal.error(f"{name}.not_started", error=type(exc).__name__, detail=str(exc))
            else:
                self._side_servers.append(server)
                continue
            if server is not None:
                server.stop()

    def _stop_side_servers(self) -> None:
        servers, self._side_servers = self._side_servers, []
        for server in reversed(servers):
            server.stop()

    # ----------------------------------------------------------------- the loop

    def _loop(
        self,
        loop: EventLoop,
        runs: RunStore,
        worker: WorkerSession,
        supervisor: AttemptSupervisor,
        dispatcher: CancellationDispatcher,
    ) -> None:
        callbacks: list = []
        next_fallback = time.monotonic() + self.config.poll_interval_ms / 1000
        recovery_s = max(self.config.run_lease_ms // 3, MIN_SLEEP_MS) / 1000
        next_recovery = time.monotonic() + recovery_s
        running_before = len(supervisor.running)
        while True:
            for callback in callbacks:
                callback()
            if any(loop.flags.take(signum) for signum in _STOP_SIGNALS):
                self.journal.info("service.stopping", running=len(supervisor.running))
                return
            loop.flags.take(signal.SIGCHLD)  # a monitor's first process, reaped by the spawn itself
            if supervisor.needs_poll():
                supervisor.poll_exits()
            supervisor.run_capture_timers()
            supervisor.enforce_identity_deadlines()  # before the tick: it must not wait for the database
            if time.monotonic() >= next_fallback:
                next_fallback = time.monotonic() + self.config.poll_interval_ms / 1000
            if time.monotonic() >= next_recovery:
                next_recovery = time.monotonic() + recovery_s
                self._recover(runs, worker, supervisor, periodic=True)
            if len(supervisor.running) < running_before:  # Attempts ended since the last tick
                self._attempts_ended()
            worked = self._tick(worker, supervisor, dispatcher)
            running_before = len(supervisor.running)
            if not worked and not self._tick_failures:
                self._retain()
            wake_at = min(next_fallback, next_recovery, self._next_retention if self._retention else next_fallback)
            callbacks = loop.wait(self._sleep_s(runs, worker, supervisor, dispatcher, worked, wake_at))

    def _recover(
        self, runs: RunStore, worker: WorkerSession, supervisor: AttemptSupervisor, *, periodic: bool = False,
        at_start: bool = False,
    ) -> dict:
        """Adopt or end what earlier sessions left and sweep orphans (see ``recovery``)."""
        try:
            counts = recover(runs=runs, worker=worker, supervisor=supervisor, controller=self.controller,
                             journal=self.journal, boot_id=self._boot_id, abandon_after_ms=self.config.run_lease_ms,
                             at_start=at_start)
        except (WorkerLeaseFenceRejectedError, WorkerSessionRejectedError) as exc:
            raise SessionLostError(f"the worker session of {worker.worker_id!r} was lost: {exc}") from exc
        except EdgeRuntimeError as exc:
            if not periodic:
                raise
            # Logged at the 1st, 2nd, 4th... failure in a row, like a failing tick.
            self._recovery_failures += 1
            if worth_logging(self._recovery_failures):
                self.journal.error("service.recovery_failed", error=exc.code, detail=str(exc),
                                   failures=self._recovery_failures)
            return {}
        self._recovery_failures = 0
        if periodic and any(counts.values()):
            self.journal.info("recovery.periodic", **{k: v for k, v in counts.items() if v})
        return counts

    def _attempts_ended(self) -> None:
        """Retention looks again soon, the logs' total included: the cap holds while serving."""
        self._next_retention = min(self._next_retention, time.monotonic() + RETENTION_AFTER_FINISH_S)
        if self._retention is not None:
            self._retention.attempts_ended()

    def _retain(self) -> None:
        """One small retention batch when idle and due; a failure is logged and retried later."""
        if self._retention is None or time.monotonic() < self._next_retention:
            return
        try:
            more = self._retention.prune_step()
        except EdgeRuntimeError as exc:
            self.journal.error("retention.failed", error=exc.code, detail=str(exc))
            more = False
        self._next_retention = time.monotonic() + (RETENTION_BATCH_GAP_S if more else RETENTION_IDLE_S)

    def _linger(self, loop: EventLoop, supervisor: AttemptSupervisor, lost: SessionLostError) -> None:
        """The session is gone: take nothing more. Self-fencing first: the Attempts of ours that the
        store already ended (``lost``, by the orphan sweep of another session) are no one's to run:
        their groups are stopped at once (SIGTERM, SIGKILL after the grace) and what they ended
        with is recorded only as an event. The others still run as Attempts: wait for them to exit
        and record their real end (not session-fenced), so the session that replaced ours need
        not guess it. SIGTERM/SIGINT cut this short; those keep running and are re-adopted."""
        supervisor.drop_adopted()
        fenced = supervisor.fence_ended("its worker session is gone")
        self.journal.warning("service.session_lost", detail=str(lost), own_children=supervisor.own_children,
                             fenced=fenced)
        while supervisor.own_children:
            if any(loop.flags.take(signum) for signum in _STOP_SIGNALS):
                return  # ``supervisor.close`` kills what was never recorded
            supervisor.poll_exits()
            supervisor.run_capture_timers()
            supervisor.enforce_identity_deadlines()
            try:
                supervisor.settle_deferred()
                supervisor.retry_completions()
            except EdgeRuntimeError as exc:
                self.journal.error("service.tick_failed", error=exc.code, detail=str(exc), retryable=exc.retryable)
            due_s = supervisor.next_due_s()
            wait_s = ADOPTED_POLL_MS / 1000 if due_s is None else min(ADOPTED_POLL_MS / 1000, due_s)
            for callback in loop.wait(wait_s):
                callback()
        try:
            supervisor.retry_completions()
        except EdgeRuntimeError as exc:
            self.journal.error("service.tick_failed", error=exc.code, detail=str(exc), retryable=exc.retryable)

    def _keep_time(self, *, final: bool = False) -> None:
        """Let the store keep its time monotonic (Local: the guarded clock's watermark)."""
        if self._store is not None:
            try:
                self._store.keep_time(final=final)
            except EdgeRuntimeError as exc:
                self.journal.error("clock.persist_failed", error=exc.code, detail=str(exc))

    def _busy_since(self, supervisor: AttemptSupervisor, now: int) -> int | None:
        """Since when (guarded-clock ms) Attempts have been watched without a break; None while
        none is. Picks the session lease the heartbeat takes (docs/storage.md: flash writes)."""
        if not supervisor.running:
            self._busy_since_ms = None
        elif self._busy_since_ms is None:
            self._busy_since_ms = now
        return self._busy_since_ms

    def _available_slots(self, supervisor: AttemptSupervisor) -> int:
        """Slots this session may report: re-adopted Attempts of earlier sessions occupy slots
        that the lease authority does not count against this session's own leases."""
        return max(0, self.config.slots - supervisor.adopted_count)

    def _tick(self, worker: WorkerSession, supervisor: AttemptSupervisor, dispatcher: CancellationDispatcher) -> bool:
        worked = False
        self._keep_time()
        try:
            if self._secrets is not None:
                self._secrets.refresh_when_due()
            for hook in self._hooks:  # first: a fired Run starts and a timeout's cancel is sent in this tick
                worked |= hook.tick()
            worked |= dispatcher.dispatch_due() > 0
            enforced = dispatcher.enforce_kills()
            worked |= bool(enforced)
            supervisor.on_kill_enforced(enforced)
            supervisor.settle_deferred()
            # The lease authority counts capacity from the last reported available_slots; once a
            # re-adopted Attempt ends, report the freed slot before claiming it, or the claim is
            # refused (found by the kill -9 campaign). One heartbeat serves both that and the
            # periodic one.
            available = self._available_slots(supervisor)
            now = self._store.now_ms()
            busy_since = self._busy_since(supervisor, now)
            if worker.session.available_slots != available or now >= worker.next_heartbeat_at_ms(busy_since):
                worker.heartbeat(available, idle=not supervisor.running)
                self._next_session_check_ms = now + worker.check_interval_ms()
            elif now >= self._next_session_check_ms:
                # A replaced session is noticed as soon as when it heartbeated every 10 s, by a read.
                worker.check_current()
                self._next_session_check_ms = now + worker.check_interval_ms()
            # A Run whose retry wait is over goes back to the queue, to start in this very tick.
            worked |= self._release_due_retries(worker)
            worked |= supervisor.start_queued() > 0
            supervisor.renew_due(now)
            supervisor.retry_completions()
        except (WorkerLeaseFenceRejectedError, WorkerSessionRejectedError) as exc:
            raise SessionLostError(f"the worker session of {worker.worker_id!r} was lost: {exc}") from exc
        except EdgeRuntimeError as exc:
            # A busy database or one failed step: try again after a sleep that grows while the
            # failures go on; log the 1st, 2nd, 4th, 8th... so a full disk cannot flood the log.
            self._tick_failures += 1
            if worth_logging(self._tick_failures):
                self.journal.error("service.tick_failed", error=exc.code, detail=str(exc), retryable=exc.retryable,
                                   failures=self._tick_failures)
            return worked
        if self._tick_failures:
            self.journal.info("service.recovered", failures=self._tick_failures)
            self._tick_failures = 0
        return worked

    def _release_due_retries(self, worker: WorkerSession) -> bool:
        """Queue again the Runs whose retry wait is over. One whose event log another program
        appended to (``StoredRowError``) would fail the whole batch at every tick: it is set aside,
        failed with the reason, and the others are released by the next pass (at once: it worked)."""
        runs = self._store.runs
        try:
            return runs.release_due_retries(actor_id=worker.owner) > 0
        except StoredRowError as exc:
            self.journal.error("run.set_aside", run=exc.row_id, error=exc.code, detail=str(exc))
            runs.set_aside(exc.row_id, exc, actor_id=worker.owner)
            return True

    def _sleep_s(
        self,
        runs: RunStore,
        worker: WorkerSession,
        supervisor: AttemptSupervisor,
        dispatcher: CancellationDispatcher,
        worked: bool,
        next_fallback: float,
    ) -> float:
        fallback_ms = max(0.0, (next_fallback - time.monotonic()) * 1000)
        if supervisor.needs_poll():
            fallback_ms = min(fallback_ms, ADOPTED_POLL_MS)
        supervisor_due_s = supervisor.next_due_s()  # "when is something next due?"
        if supervisor_due_s is not None:
            fallback_ms = min(fallback_ms, supervisor_due_s * 1000)
        try:
            now = self._store.now_ms()
            dues = [
                runs.next_due_at_ms(),
                worker.next_heartbeat_at_ms(self._busy_since(supervisor, now)),
                self._next_session_check_ms,
                dispatcher.next_kill_retry_at_ms(),
                supervisor.next_renewal_at_ms(),
                *(hook.next_due_at_ms() for hook in self._hooks),
            ]
            due = min((d for d in dues if d is not None), default=None)
            sleep_ms = fallback_ms if due is None else min(fallback_ms, max(0, due - now))
        except EdgeRuntimeError as exc:
            # While ticks fail (the database is away) the tick's own line, at powers of two, says so.
            if not self._tick_failures:
                self.journal.error("service.schedule_failed", error=exc.code, detail=str(exc))
            sleep_ms = 1_000
        if sleep_ms <= 0 and not worked:
            sleep_ms = MIN_SLEEP_MS  # overdue but nothing could be done now: do not spin
        if self._tick_failures:
            sleep_ms = max(sleep_ms, failure_backoff_ms(self._tick_failures))
        identity_due_s = supervisor.seconds_to_identity_deadline()
        if identity_due_s is not None:
            # Even while the database is away: an unrecorded process is killed on time (attempts._spawn).
            sleep_ms = min(sleep_ms, max(identity_due_s * 1000, 1))
        return sleep_ms / 1000

    # ----------------------------------------------------------------- stop

    def _shutdown(
        self, loop: EventLoop, worker: WorkerSession, supervisor: AttemptSupervisor, dispatcher: CancellationDispatcher
    ) -> None:
        # A start that made no process and whose undo failed: its Run's way back to the queue.
        supervisor.undo_before_exit()
        # A process whose identity is not recorded could not be re-adopted by the next start: it
        # must not outlive this service. Killed, reaped and (database permitting) ended ``lost``.
        unrecorded = supervisor.kill_unrecorded(REASON_STOPPED_UNRECORDED)
        if unrecorded:
            self._wait_for_exits(loop, supervisor, time.monotonic() + _SHUTDOWN_KILL_WAIT_S, only=set(unrecorded))
        if self.config.stop_runs_on_exit and supervisor.running:
            signalled = supervisor.terminate_all()
            self._wait_for_exits(loop, supervisor, time.monotonic() + self.config.grace_ms / 1000)
            for running in signalled:
                if running.attempt_id in supervisor.running:
                    outcome = self.controller.force_kill(running.identity)
                    self.journal.info("attempt.killed_on_exit", attempt=running.attempt_id, outcome=outcome.value)
            self._wait_for_exits(loop, supervisor, time.monotonic() + _SHUTDOWN_KILL_WAIT_S)
            for running in list(supervisor.running.values()):
                if running.deferred is not None:
                    supervisor.finish(running, *running.deferred)
        try:
            worker.offline()
        except EdgeRuntimeError as exc:
            self.journal.warning("service.offline_failed", error=exc.code, detail=str(exc))

    def _wait_for_exits(
        self, loop: EventLoop, supervisor: AttemptSupervisor, deadline: float, *, only: set[str] | None = None
    ) -> None:
        """Watch exits until every watched Attempt (or every one of ``only``) without a deferred end
        has ended, or ``deadline`` (monotonic)."""
        while any(r.deferred is None and (only is None or r.attempt_id in only) for r in supervisor.running.values()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            for callback in loop.wait(min(remaining, ADOPTED_POLL_MS / 1000)):
                callback()
            supervisor.poll_exits()
            supervisor.run_capture_timers()
