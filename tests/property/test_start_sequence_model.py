"""Hypothesis stateful test of the start sequence (every queued Run runs once) with faults, against a model.

Services of one worker id (each a ``WorkerSession``; a takeover registers a new one and fences
the others out) start queued Runs (``start_run``), then either fail to spawn (``abandon_start``),
spawn (``record_running``, and later the exit), or die, leaving their grants behind. Any commit
may fail (busy, I/O error, disk full); the orphan sweep runs as the current session; time moves.
The model, written from the start sequence's rules (docs/operating.md), says what each step must
do. After every step the stored Run statuses equal the model's, no command ran twice, no session
holds more grants than its slots, and a Run failed only where a process may have started.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import apsw
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.run_lease import NoCapacityOutcome
from edge_runtime.contract.runs import AttemptStatus, CancelRunCommand, RunError, SubmitRunCommand
from edge_runtime.contract.worker_lease import WorkerLeaseFenceRejectedError, WorkerSessionRejectedError
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import WriteTransaction, open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.process_identity import ProcessIdentity
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.worker import WorkerSession

SLOTS = 2
SESSION_MS = 10_000
RUN_LEASE_MS = 6_000
FAULTS = st.sampled_from((None, None, None, apsw.BusyError, apsw.IOError, apsw.FullError))
TERMINAL = ("succeeded", "failed", "cancelled")


class _CommitFaults:
    """Makes the next commit fail with a chosen SQLite error (rolled back, as SQLite does)."""

    pending: type[BaseException] | None = None
    original = WriteTransaction.__exit__



def _faulty_exit(tx: WriteTransaction, exc_type: Any, exc: Any, tb: Any) -> None:
    if exc_type is None and _CommitFaults.pending is not None:
        error, _CommitFaults.pending = _CommitFaults.pending, None
        tx._rollback()
        raise error("injected")
    return _CommitFaults.original(tx, exc_type, exc, tb)


class StartSequenceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="start-model-"))
        self.clock = ManualClock(1_700_000_000_000)
        self.db = open_database(self.tmp / "db", clock=self.clock)
        self.runs = LocalRunRepository(self.db)
        WriteTransaction.__exit__ = _faulty_exit  # type: ignore[method-assign]
        self.services: list[WorkerSession] = []
        self._takeover()
        # The model.
        self.status: dict[str, str] = {}
        self.cancel: set[str] = set()
        self.executions: dict[str, int] = {}
        #: attempt id -> [service index, generation, run id, phase ("started" | "running"), expires, grant]
        self.grants: dict[str, list[Any]] = {}
        self.barrier_crossed: set[str] = set()
        #: Starts whose undo failed: the service retries them (every tick, and at its stop), and
        #: never spawns them.
        self.undo_pending: set[str] = set()

    def teardown(self) -> None:
        WriteTransaction.__exit__ = _CommitFaults.original  # type: ignore[method-assign]
        self.db.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ----------------------------------------------------------------- helpers

    def _takeover(self) -> None:
        worker = WorkerSession(LocalWorkerLeaseRepository(self.db), worker_id="w", slots=SLOTS, session_lease_ms=SESSION_MS,
                               run_lease_ms=RUN_LEASE_MS)
        worker.register()
        self.services.append(worker)

    @property
    def current(self) -> int:
        return len(self.services) - 1

    def _held(self, generation: int) -> int:
        return sum(1 for g in self.grants.values() if g[1] == generation)

    def _faulty(self, fault: type[BaseException] | None) -> None:
        _CommitFaults.pending = fault

    def _drop(self, attempt_id: str) -> None:
        self.grants.pop(attempt_id, None)
        self.undo_pending.discard(attempt_id)

    # ----------------------------------------------------------------- rules

    @initialize()
    def queue(self) -> None:
        for _ in range(3):
            self.submit()

    @rule()
    def submit(self) -> None:
        run = self.runs.submit(SubmitRunCommand(argv=["true"]))
        self.status[run.id] = "queued"
        self.executions[run.id] = 0

    @precondition(lambda self: self.status)
    @rule(data=st.data(), service=st.sampled_from((-1, -1, -1, 0, 1)), fault=FAULTS)
    def start(self, data: st.DataObject, service: int, fault: type[BaseException] | None) -> None:
        """``service`` -1: the current session; 0, 1: an older one, if any (fenced out)."""
        queued = [r for r, status in self.status.items() if status == "queued"]
        run_id = data.draw(st.sampled_from(queued or list(self.status)))
        index = self.current if service < 0 else min(service, self.current)
        worker = self.services[index]
        self._faulty(fault)
        try:
            outcome = worker.start(run_id)
        except (WorkerLeaseFenceRejectedError, WorkerSessionRejectedError):
            _CommitFaults.pending = None
            assert index != self.current, "the current session was fenced out"
            return
        except EdgeRuntimeError:
            assert fault is not None and index == self.current
            return  # rolled back: nothing changed (the invariants check it)
        assert index == self.current, "a replaced session took work"
        event(f"start: {type(outcome).__name__}")
        assert fault is None or _CommitFaults.pending is None
        if isinstance(outcome, NoCapacityOutcome):
            assert self._held(worker.generation) >= SLOTS
            return
        if outcome is None:
            assert self.status[run_id] != "queued" or run_id in self.cancel
            return
        assert self.status[run_id] == "queued" and run_id not in self.cancel
        assert self._held(worker.generation) < SLOTS
        self.status[run_id] = "dispatching"
        self.grants[outcome.lease.attempt_id] = [index, worker.generation, run_id, "started",
                                                 outcome.lease.expires_at_ms, outcome]
        self.barrier_crossed.add(run_id)

    def _grant(self, data: st.DataObject, phase: str) -> tuple[str, list[Any]] | None:
        choices = [a for a, g in self.grants.items() if g[3] == phase and a not in self.undo_pending]  # insertion order: uuids differ per run
        if not choices:
            return None
        attempt_id = data.draw(st.sampled_from(choices))
        return attempt_id, self.grants[attempt_id]

    @rule(data=st.data(), fault=FAULTS)
    def spawn_fails(self, data: st.DataObject, fault: type[BaseException] | None) -> None:
        """EMFILE at the FIFO or the spawn: no process; the Run must go back to the queue."""
        picked = self._grant(data, "started")
        if picked is None:
            return
        attempt_id, (index, _, run_id, _, _, grant) = picked
        self._faulty(fault)
        try:
            status = self.services[index].abandon_start(grant, "no descriptors")
        except EdgeRuntimeError:
            assert fault is not None
            event("abandon_start: failed, kept for a retry")
            self.undo_pending.add(attempt_id)
            return  # the service keeps it and retries
        self._undone(attempt_id, run_id, status)

    def _undone(self, attempt_id: str, run_id: str, status: Any) -> None:
        self.status[run_id] = "cancelled" if run_id in self.cancel else "queued"
        event("abandon_start: requeued")
        assert status.value == self.status[run_id]
        self._drop(attempt_id)

    @precondition(lambda self: self.undo_pending)
    @rule(data=st.data(), fault=FAULTS)
    def retry_undo(self, data: st.DataObject, fault: type[BaseException] | None) -> None:
        """The service's retry of a failed undo (a later tick, or its stop): grant-fenced, so it
        works after a takeover; refused only once the orphan sweep settled the Attempt."""
        attempt_id = data.draw(st.sampled_from(sorted(self.undo_pending)))
        index, _, run_id, _, _, grant = self.grants[attempt_id]
        self._faulty(fault)
        try:
            status = self.services[index].abandon_start(grant, "no descriptors")
        except EdgeRuntimeError:
            assert fault is not None
            return
        self._undone(attempt_id, run_id, status)

    @rule(data=st.data(), fault=FAULTS)
    def spawn_succeeds(self, data: st.DataObject, fault: type[BaseException] | None) -> None:
        picked = self._grant(data, "started")
        if picked is None:
            return
        attempt_id, grant_state = picked
        index, _, run_id = grant_state[:3]
        self.executions[run_id] += 1  # a process exists from here on
        identity = ProcessIdentity(pid=4_000_000, pgid=4_000_000, start_ticks=1, boot_id="b")
        self._faulty(fault)
        try:
            self.runs.record_running(attempt_id, identity, log_path="/dev/null", actor_id="w")
        except EdgeRuntimeError:
            assert fault is not None
            # The service kills the unrecorded process; it may have begun: the Run fails.
            self.runs.finish_attempt(attempt_id, AttemptStatus.LOST, actor_id="w", reason="identity not recorded")
            self.services[index].complete(attempt_id)
            self.status[run_id] = "cancelled" if run_id in self.cancel else "failed"
            self._drop(attempt_id)
            return
        self.status[run_id] = "running"
        grant_state[3] = "running"
        event("record_running: running")

    @rule(data=st.data())
    def process_exits(self, data: st.DataObject) -> None:
        """Its parent (a replaced service still finishes its own children) records the end."""
        picked = self._grant(data, "running")
        if picked is None:
            return
        attempt_id, (index, _, run_id, *_) = picked
        end = AttemptStatus.CANCELLED if run_id in self.cancel else AttemptStatus.SUCCEEDED
        self.runs.finish_attempt(attempt_id, end, actor_id="w", exit_code=0)
        self.services[index].complete(attempt_id)
        self.status[run_id] = end.value
        self._drop(attempt_id)

    @precondition(lambda self: self.status)
    @rule(data=st.data())
    def cancel_run(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(list(self.status)))
        try:
            self.runs.request_cancel(CancelRunCommand(run_id=run_id))
        except RunError:
            assert self.status[run_id] in TERMINAL
            return
        self.cancel.add(run_id)
        if self.status[run_id] == "queued":
            self.status[run_id] = "cancelled"

    @rule()
    def takeover(self) -> None:
        """Another ``serve`` of the same worker id; the old one keeps its in-memory grants."""
        self._takeover()

    @rule(ms=st.sampled_from((500, 2_000, RUN_LEASE_MS + 1)))
    def time_passes(self, ms: int) -> None:
        self.clock.advance(ms)
        self.services[self.current].heartbeat(SLOTS)

    @rule(fault=FAULTS)
    def sweep(self, fault: type[BaseException] | None) -> None:
        now = self.clock.now_ms()
        generation = self.services[self.current].generation
        self._faulty(fault)
        try:
            done = dict(self.services[self.current].sweep_orphans(RUN_LEASE_MS))
        except EdgeRuntimeError:
            assert fault is not None
            return
        _CommitFaults.pending = None  # a sweep with nothing to do commits nothing
        expected = {a for a, g in self.grants.items() if g[3] == "started" and g[1] != generation and g[4] <= now}
        assert set(done) == expected or (fault is not None and set(done) < expected)
        for attempt_id in done:
            event("sweep: orphan ended")
            run_id = self.grants[attempt_id][2]
            # Past the barrier, its owner gone: a process may have started, so the Run fails.
            self.status[run_id] = "cancelled" if run_id in self.cancel else "failed"
            assert done[attempt_id].value == self.status[run_id]
            self._drop(attempt_id)

    # ----------------------------------------------------------------- invariants

    @invariant()
    def stored_runs_match_the_model(self) -> None:
        stored = dict(self.db.connection.execute("SELECT id, status FROM runs").fetchall())
        assert stored == self.status

    @invariant()
    def no_command_runs_twice_and_no_run_fails_unstarted(self) -> None:
        for run_id, status in self.status.items():
            assert self.executions[run_id] <= 1
            if status == "failed":
                assert run_id in self.barrier_crossed

    @invariant()
    def no_session_above_its_capacity(self) -> None:
        over = self.db.connection.execute(
            "SELECT session_generation, count(*) FROM run_dispatch_leases WHERE status = 'leased' "
            "GROUP BY session_generation HAVING count(*) > ?", (SLOTS,)).fetchall()
        assert over == []
        held = {a for (a,) in self.db.connection.execute(
            "SELECT attempt_id FROM run_dispatch_leases WHERE status = 'leased'")}
        assert held == set(self.grants)  # every slot taken is accounted for; freed ones are free


StartSequenceMachine.TestCase.settings = settings(
    # No deadline and no speed health checks: a shared, loaded machine makes any one step slow.
    max_examples=150, stateful_step_count=50, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
                           HealthCheck.large_base_example],
)
test_start_sequence_model = StartSequenceMachine.TestCase
