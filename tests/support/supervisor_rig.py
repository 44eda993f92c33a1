"""The Attempt supervisor on a Local database, driven pass by pass as the service loop drives it
(in-process, real processes): shared by the start-sequence fault tests and the identity-retry tests."""

from __future__ import annotations

import io
import time
from pathlib import Path

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.runs import SubmitRunCommand
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.attempts import AttemptSupervisor
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.journal import Journal
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.process_identity import read_boot_id
from edge_runtime.service.worker import WorkerSession


class SupervisorRig:
    """Every Run's command appends its run id to ``out``: ``executions()`` counts how often it ran."""

    def __init__(self, db: LocalDatabase, tmp_path: Path, *, slots: int, run_lease_ms: int = 60_000) -> None:
        self.tmp_path = tmp_path
        self.runs = LocalRunRepository(db)
        self.worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=slots,
                                    session_lease_ms=30_000, run_lease_ms=run_lease_ms)
        self.worker.register()
        self.loop = EventLoop()
        self.log = io.StringIO()
        self.out = tmp_path / "executions"
        self.supervisor = AttemptSupervisor(
            runs=self.runs, worker=self.worker, controller=LocalProcessController(), loop=self.loop,
            journal=Journal(self.log), slots=slots, log_dir=tmp_path / "logs", log_max_bytes=4096,
            boot_id=read_boot_id(),
        )

    def submit(self, then: str = "true") -> str:
        command = f'echo "$EDGE_RUNTIME_RUN_ID" >> {self.out}; {then}'
        return self.runs.submit(SubmitRunCommand(argv=["sh", "-c", command])).id

    def step(self, wait_s: float = 0.05) -> None:
        """One pass of the service loop's supervisor work."""
        self.supervisor.enforce_identity_deadlines()
        try:
            self.supervisor.start_queued()
            self.supervisor.retry_completions()
        except EdgeRuntimeError:
            pass  # a failed tick: the service logs it and tries again after a sleep
        for callback in self.loop.wait(wait_s):
            callback()
        self.supervisor.poll_exits()
        self.supervisor.run_capture_timers()

    def run_until_ended(self, run_id: str, timeout: float = 15.0) -> str:
        """Drive passes until the Run ended and nothing is left to settle; its status."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.runs.get(run_id).status.value
            if status in ("succeeded", "failed", "cancelled") and not self.supervisor.running \
                    and not self.supervisor.pending_retries:
                return status
            assert time.monotonic() < deadline, f"liveness guard: run stuck {status}: {self.log.getvalue()[-2000:]}"
            self.step()

    def executions(self) -> list[str]:
        """The run ids the commands wrote, one per execution."""
        return self.out.read_text().split() if self.out.exists() else []

    def close(self) -> None:
        self.supervisor.close()
        self.loop.close()
