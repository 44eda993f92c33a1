"""Self-fencing in-process: an Attempt the store already ended (``lost``, as the orphan sweep of
another session ends it once this service's session or Run Lease is gone) is no one's to run. The
service that learns it stops the process group (SIGTERM, SIGKILL after the grace; every
descendant), records what it saw as a ``run.fenced_end`` event, never overwrites the verdict and
never logs a success the store does not hold. And a cancel that sent no signal never makes a Run
``cancelled`` with the exit code of an ordinary end."""

from __future__ import annotations

import io
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_runtime.contract.runs import AttemptStatus, CancelRunCommand, SubmitRunCommand
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.attempts import AttemptSupervisor
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.journal import Journal
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.process_identity import read_boot_id, read_stat
from edge_runtime.service.worker import WorkerSession

GRACE_MS = 300


class Rig:
    def __init__(self, db: LocalDatabase, tmp_path: Path) -> None:
        self.runs = LocalRunRepository(db)
        self.worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=2,
                                    session_lease_ms=30_000, run_lease_ms=60_000)
        self.worker.register()
        self.loop = EventLoop()
        self.log = io.StringIO()
        self.supervisor = AttemptSupervisor(
            runs=self.runs, worker=self.worker, controller=LocalProcessController(), loop=self.loop,
            journal=Journal(self.log), slots=2, log_dir=tmp_path / "logs", log_max_bytes=4096,
            boot_id=read_boot_id(), grace_ms=GRACE_MS,
        )

    def start(self, script: str) -> tuple[str, str]:
        run_id = self.runs.submit(SubmitRunCommand(argv=["sh", "-c", script])).id
        assert self.supervisor.start_queued() == 1
        (attempt,) = self.runs.attempts(run_id)
        return run_id, attempt.id

    def drive_until_idle(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while self.supervisor.running:
            assert time.monotonic() < deadline, f"attempts did not end: {self.log.getvalue()[-1500:]}"
            due = self.supervisor.next_due_s()
            for callback in self.loop.wait(0.05 if due is None else min(due, 0.05)):
                callback()
            self.supervisor.poll_exits()
            self.supervisor.run_capture_timers()

    def close(self) -> None:
        self.supervisor.close()
        self.loop.close()


@pytest.fixture
def rig(db: LocalDatabase, tmp_path: Path) -> Iterator[Rig]:
    r = Rig(db, tmp_path)
    yield r
    for attempt in [a for run in r.runs.list_runs() for a in r.runs.attempts(run.id)]:
        if attempt.identity is not None:
            LocalProcessController().force_kill(attempt.identity)
    r.close()


def _alive(pid: int) -> bool:
    stat = read_stat(pid)
    return stat is not None and not stat.is_zombie


@pytest.mark.parametrize("ignores_term", [False, True], ids=["stops-on-sigterm", "ignores-sigterm"])
def test_an_attempt_ended_lost_elsewhere_is_stopped_and_its_end_is_only_an_event(
    rig: Rig, tmp_path: Path, ignores_term: bool
) -> None:
    pids = tmp_path / "pids"
    trap = "trap '' TERM; " if ignores_term else ""
    run_id, attempt_id = rig.start(f"{trap}sleep 60 & echo $! > {pids}; while :; do sleep 0.05; done")
    deadline = time.monotonic() + 10
    while not (pids.exists() and pids.read_text().strip()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    grandchild = int(pids.read_text())
    leader = rig.runs.get_attempt(attempt_id).identity.pid
    # Another session's orphan sweep ended it while this service was paused past its leases.
    rig.runs.finish_attempt(attempt_id, AttemptStatus.LOST, actor_id="w#2", reason="swept")
    assert rig.supervisor.fence_ended("its worker session is gone") == 1
    rig.drive_until_idle()
    assert not _alive(leader) and not _alive(grandchild)  # the whole group, not only the leader
    attempt = rig.runs.get_attempt(attempt_id)
    assert (attempt.status, attempt.end_reason) == (AttemptStatus.LOST, "swept")  # the verdict stands
    assert rig.runs.get(run_id).status.value == "failed"
    (event,) = [e for e in rig.runs.events(run_id) if e.type == "run.fenced_end"]
    want = signal.SIGKILL if ignores_term else signal.SIGTERM
    assert event.payload["exit_code"] == 128 + want and event.payload["attempt_status"] == "lost"
    assert "attempt.finished" not in rig.log.getvalue()  # never a success the store does not hold
    assert ("attempt.fence_killed" in rig.log.getvalue()) is ignores_term


def test_an_attempt_still_active_is_not_fenced(rig: Rig) -> None:
    _, attempt_id = rig.start("sleep 60")
    assert rig.supervisor.fence_ended("its worker session is gone") == 0
    assert _alive(rig.runs.get_attempt(attempt_id).identity.pid)


def test_a_cancel_that_sent_no_signal_leaves_the_real_end(rig: Rig) -> None:
    # No dispatcher delivers it here (as while a fenced-out worker lingers): the task ends by itself.
    run_id, attempt_id = rig.start("sleep 0.3; exit 0")
    rig.runs.request_cancel(CancelRunCommand(run_id=run_id))
    rig.drive_until_idle()
    attempt = rig.runs.get_attempt(attempt_id)
    assert (attempt.status, attempt.exit_code) == (AttemptStatus.SUCCEEDED, 0)
    assert "a cancel was requested, but it ended before any signal was sent" in attempt.end_reason
    assert rig.runs.get(run_id).status.value == "succeeded"
