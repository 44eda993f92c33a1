"""Finished Runs made through the real start sequence (submit, start, running, finish, complete):
rows exactly like the service's, for the retention tests and the simulated-week benchmark."""

from __future__ import annotations

from pathlib import Path

from edge_runtime.contract.runs import AttemptStatus, ProcessIdentity, SubmitRunCommand
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.worker import RunGrant, WorkerSession

IDENTITY = ProcessIdentity(pid=4242, pgid=4242, start_ticks=777, boot_id="boot-a")


def start_run(runs: LocalRunRepository, worker: WorkerSession, log_dir: Path | None = None,
              output: bytes | None = None) -> tuple[str, str]:
    """Submit and start one Run; returns ``(run id, attempt id)``, the Attempt running."""
    run_id = runs.submit(SubmitRunCommand(argv=["true"])).id
    grant = worker.start(run_id)
    assert isinstance(grant, RunGrant)
    attempt_id = grant.lease.attempt_id
    log_path = f"{log_dir}/{attempt_id}.log" if log_dir is not None else "/nonexistent/x.log"
    if log_dir is not None and output is not None:
        Path(log_path).write_bytes(output)
    runs.record_running(attempt_id, IDENTITY, log_path=log_path, actor_id=worker.owner)
    return run_id, attempt_id


def finish_run(runs: LocalRunRepository, worker: WorkerSession, attempt_id: str) -> None:
    runs.finish_attempt(attempt_id, AttemptStatus.SUCCEEDED, actor_id=worker.owner, exit_code=0)
    worker.complete(attempt_id)


def finished_run(runs: LocalRunRepository, worker: WorkerSession, log_dir: Path | None = None,
                 output: bytes | None = None, clock: ManualClock | None = None) -> tuple[str, str]:
    """One finished Run; ``clock`` (if given) moves on 10 ms first, so Runs finish in order."""
    if clock is not None:
        clock.advance(10)
    run_id, attempt_id = start_run(runs, worker, log_dir, output)
    finish_run(runs, worker, attempt_id)
    return run_id, attempt_id
