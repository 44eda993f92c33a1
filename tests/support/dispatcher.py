"""Test rig for the service's cancellation dispatcher: a scripted process controller, a dispatcher
on the real repositories and a manual clock, and a Run started the way the service starts one."""

from __future__ import annotations

import io

from edge_runtime.contract.cancellation_dispatch import DispatchResult
from edge_runtime.contract.runs import ProcessIdentity
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.controller import KillOutcome
from edge_runtime.service.dispatcher import CancellationDispatcher
from edge_runtime.service.journal import Journal
from edge_runtime.service.worker import WorkerSession

GRACE_MS = 10_000
BASE_MS = 1_000
IDENTITY = ProcessIdentity(4242, 4242, 777, "boot-a")


class FakeController:
    """Answers with scripted results and records what it was asked to signal."""

    def __init__(self, *results: DispatchResult, kill: KillOutcome = KillOutcome.KILLED) -> None:
        self.results = list(results)
        self.kill = kill
        self.terminated: list[ProcessIdentity | None] = []
        self.killed: list[ProcessIdentity] = []
        #: Descendants outside the group that the scan "finds" after a delivered SIGTERM.
        self.escaped: list[int] = []

    def escaped_descendants(self, identity: ProcessIdentity) -> list[int]:
        return list(self.escaped)

    def request_termination(self, identity: ProcessIdentity | None) -> DispatchResult:
        self.terminated.append(identity)
        return self.results.pop(0)

    def force_kill(self, identity: ProcessIdentity) -> KillOutcome:
        self.killed.append(identity)
        return self.kill


def start_attempt(db: LocalDatabase, run_id: str) -> str:
    """Take the queued Run as the service does (Attempt, Run Lease, process running as
    :data:`IDENTITY`); the Attempt's id."""
    runs = LocalRunRepository(db)
    worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=2, session_lease_ms=30_000, run_lease_ms=60_000)
    worker.register()
    attempt_id = worker.start(run_id).lease.attempt_id
    runs.record_running(attempt_id, IDENTITY, log_path="/dev/null", actor_id=worker.owner)
    return attempt_id


def make_dispatcher(
    db: LocalDatabase, clock: ManualClock, controller: FakeController, log: io.StringIO
) -> CancellationDispatcher:
    return CancellationDispatcher(
        dispatches=LocalCancellationDispatchRepository(db), runs=LocalRunRepository(db), controller=controller,
        owner=lambda: "w#1", now_ms=clock.now_ms, journal=Journal(log), grace_ms=GRACE_MS, lease_ms=30_000,
        retry_base_ms=BASE_MS, retry_max_ms=60_000,
    )
