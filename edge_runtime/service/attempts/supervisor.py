"""The Attempts of this service as its loop sees them: one object that builds the parts (see the
package docstring), hands each the others it calls, and answers the loop's questions that span
them ("when is something next due?", "is anything left to retry?").

The parts call one another downward only: start -> identity, exits; exits -> identity, fences,
logs, settlement; renewals -> identity, fences; identity -> settlement (one backoff for all
that is retried). All share the registry of watched Attempts (``running.Watched``), which only
``exits`` changes. Single-threaded, driven by the loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from edge_runtime.contract.ports import AttemptLogStore, RunStore
from edge_runtime.contract.runs import AttemptRecord, AttemptStatus
from edge_runtime.service.attempts.exits import Exits
from edge_runtime.service.attempts.fences import Fences
from edge_runtime.service.attempts.identity import REASON_STOPPED_UNRECORDED, Identities
from edge_runtime.service.attempts.logs import AttemptLogs
from edge_runtime.service.attempts.renewals import Renewals
from edge_runtime.service.attempts.running import RunningAttempt, Watched
from edge_runtime.service.attempts.settlement import Settlements
from edge_runtime.service.attempts.start import StartPass, TaskSettings
from edge_runtime.service.attempts.tools import Tools
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.journal import Journal
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.worker import WorkerSession


class AttemptSupervisor:
    """Starts, watches and ends this service's Attempts. ``running``: the watched ones, by id."""

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
        scripts_dir: str | None = None,
        shared_env: Callable[[], Mapping[str, str]] | None = None,
        grace_ms: int = 10_000,
        log_dir_fd: int | None = None,
        task_user: str | None = None,
        attempt_env: Callable[[str], Mapping[str, str]] | None = None,
    ) -> None:
        del slots  # capacity is the lease authority's (``WorkerSession.free_slots``), not counted here
        self._controller = controller
        self._journal = journal
        self.running = Watched()
        tools = Tools(runs, worker, controller, journal, self.running)
        self._settlements = Settlements(runs=runs, worker=worker, journal=journal)
        self._logs = AttemptLogs(tools, log_dir=log_dir, log_dir_fd=log_dir_fd, copies=log_copies)
        self._fences = Fences(tools, grace_ms=grace_ms)
        self._identities = Identities(tools, settlements=self._settlements)
        self._exits = Exits(tools, loop=loop, identities=self._identities, fences=self._fences, logs=self._logs,
                            settlements=self._settlements)
        self._renewals = Renewals(tools, identities=self._identities, fences=self._fences)
        task = TaskSettings(boot_id=boot_id, env=env, pass_env=tuple(pass_env), shared_env=shared_env,
                            work_dir=work_dir, scripts_dir=scripts_dir, log_max_bytes=log_max_bytes, log_linger_ms=log_linger_ms,
                            grace_ms=grace_ms, task_user=task_user, attempt_env=attempt_env)
        self._start = StartPass(tools, logs=self._logs, settlements=self._settlements, identities=self._identities,
                                exits=self._exits, task=task)

    # ----------------------------------------------------------------- what the loop asks

    @property
    def adopted_count(self) -> int:
        return sum(1 for attempt in self.running.values() if attempt.grant is None)

    @property
    def own_children(self) -> int:
        """Attempts this service started that it still watches (their ends are its to record)."""
        return sum(1 for running in self.running.values() if running.started_here)

    @property
    def unrecorded_count(self) -> int:
        """Processes of ours whose identity is not recorded yet."""
        return self._identities.unrecorded_count

    @property
    def pending_retries(self) -> bool:
        return self._settlements.pending or bool(self.unrecorded_count)

    def tracks(self, attempt_id: str) -> bool:
        """Whether this service spawned or is settling the Attempt (watched, or a settlement to
        retry): an Attempt of its own session that it does not track was never spawned by it."""
        return attempt_id in self.running or self._settlements.tracks(attempt_id)

    def needs_poll(self) -> bool:
        """Whether some watched process has no pidfd, so exits must be found by polling."""
        return self._exits.needs_poll()

    def seconds_to_capture_timer(self) -> float | None:
        """Seconds until an exited leader's status file is read again or a log is handed over."""
        at = self._exits.next_check_at()
        exits = () if at is None else (at,)
        logs = self._logs.seconds_to_check()
        due = min((*exits, *(() if logs is None else (time.monotonic() + logs,))), default=None)
        return None if due is None else max(0.0, due - time.monotonic())

    def seconds_to_identity_deadline(self) -> float | None:
        """Seconds until the earliest unrecorded process must be given up; None when there is none."""
        return self._identities.seconds_to_deadline()

    def next_retry_s(self) -> float | None:
        """Seconds until this supervisor has something to retry: a failed settlement (after a
        backoff that doubles while they keep failing) or the end of a pause in starting; None
        when nothing is pending."""
        if self.pending_retries:
            return self._settlements.backoff_s()
        return self._start.seconds_paused()

    def next_due_s(self) -> float | None:
        """Seconds until this supervisor next has something to do on its own (an exit to read
        again, a log to hand over, a retry, the end of a pause in starting, an identity to give
        up, a fenced group to kill); None when only an event (a pidfd, a signal) can bring work.
        With processes to poll (no pidfds) the caller adds its poll interval."""
        dues = [self.seconds_to_capture_timer(), self.next_retry_s(), self.seconds_to_identity_deadline(),
                self._fences.seconds_to_kill()]
        return min((d for d in dues if d is not None), default=None)

    def next_renewal_at_ms(self) -> int | None:
        return self._renewals.next_renewal_at_ms()

    # ----------------------------------------------------------------- what the loop does

    def start_queued(self) -> int:
        """Start queued Runs while the lease authority leaves this session slots; how many started.

        Raises:
            WorkerLeaseFenceRejectedError, WorkerSessionRejectedError: this session was replaced
                or expired: the caller must stop taking work.
        """
        return self._start.start_queued()

    def adopt(self, attempt: AttemptRecord) -> bool:
        """Watch a running Attempt of an earlier session; False when it has ended (see ``Exits.adopt``)."""
        return self._exits.adopt(attempt)

    def poll_exits(self) -> None:
        """Find watched processes that exited without a pidfd to say so (a ``/proc`` poll)."""
        self._exits.poll()

    def run_capture_timers(self) -> None:
        """SIGKILL the fenced groups whose grace is over, read the status files of exited leaders
        again, and hand over the logs completed since."""
        self._fences.enforce()
        self._exits.check_due()
        self._logs.check()

    def enforce_identity_deadlines(self) -> None:
        """Kill the unrecorded processes whose bound has passed (reads no store: every pass)."""
        self._identities.enforce_deadlines()

    def on_kill_enforced(self, attempt_ids: list[str]) -> None:
        """The SIGKILL step ran for these Attempts: end the ones that only waited for it."""
        self._exits.on_kill_enforced(attempt_ids)

    def settle_deferred(self) -> None:
        """End deferred Attempts whose SIGKILL step another service already took."""
        self._exits.settle_deferred()

    def finish(self, running: RunningAttempt, status: AttemptStatus, code: int | None, reason: str | None) -> None:
        self._exits.finish(running, status, code, reason)

    def renew_due(self, now_ms: int) -> None:
        self._renewals.renew_due(now_ms)

    def retry_completions(self) -> None:
        """Settle what failed earlier (e.g. the database was busy): unstarted Attempts, ends of
        exited processes, grants to complete; and record the identities not recorded yet."""
        self._identities.retry()
        self._settlements.retry_unstarted()
        self._settlements.retry_ends_and_completions()
        if not self.pending_retries:
            self._settlements.forget_failures()

    def copy_log(self, attempt_id: str, log_path: Path) -> None:
        """Hand an ended Attempt's log to the store's copies (best effort, see ``AttemptLogs.copy``)."""
        self._logs.copy(attempt_id, log_path)

    def fence_ended(self, why: str) -> int:
        """Stop the processes of this service's Attempts that the store has already ended; how many."""
        return self._fences.fence_ended(why)

    def fence_lost(self, attempt: AttemptRecord, why: str) -> bool:
        """Stop what still runs of an Attempt another session ended ``lost``, and watch it, so
        what its monitor saw is recorded as an event. True when something of it was still running."""
        found = self._fences.fence_lost(attempt, why)
        if found is None:
            return False
        self._exits.follow(found.running, leader_alive=found.leader_alive)
        return found.group_alive

    # ----------------------------------------------------------------- stop

    def undo_before_exit(self) -> None:
        """The service stops: the pending undos of failed starts get their last tries."""
        self._settlements.undo_before_exit()

    def kill_unrecorded(self, reason: str) -> list[str]:
        """Give up every identity not recorded yet; the ids of their Attempts."""
        return self._identities.kill_unrecorded(reason)

    def drop_adopted(self) -> None:
        """Stop watching Attempts this service did not start (the session that replaced ours has them)."""
        self._exits.drop_adopted()

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
        self._identities.kill_unrecorded(REASON_STOPPED_UNRECORDED)
        self._exits.close()
        self._logs.close()
