"""The attempt supervisor in-process: real processes, real repositories, a manual clock."""

from __future__ import annotations

import io
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_runtime.contract.runs import AttemptStatus, CancelRunCommand, SubmitRunCommand
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.attempts import AttemptSupervisor
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.journal import Journal
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.process_identity import read_boot_id
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.worker import WorkerSession


class Rig:
    def __init__(self, db: LocalDatabase, tmp_path: Path, slots: int) -> None:
        self.runs = LocalRunRepository(db)
        self.worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=slots, session_lease_ms=30_000, run_lease_ms=60_000)
        self.worker.register()
        self.loop = EventLoop()
        self.log = io.StringIO()
        self.supervisor = AttemptSupervisor(
            runs=self.runs, worker=self.worker, controller=LocalProcessController(), loop=self.loop,
            journal=Journal(self.log), slots=slots, log_dir=tmp_path / "logs", log_max_bytes=4096,
            boot_id=read_boot_id(),
        )

    def submit(self, *argv: str) -> str:
        return self.runs.submit(SubmitRunCommand(argv=list(argv))).id

    def drive_until_idle(self, timeout: float = 10.0) -> None:
        """Run the loop's callbacks (and the SIGCHLD fallback) until nothing is watched."""
        deadline = time.monotonic() + timeout
        while self.supervisor.running:
            assert time.monotonic() < deadline, "attempts did not end"
            for callback in self.loop.wait(0.05):
                callback()
            self.supervisor.poll_exits()
            self.supervisor.run_capture_timers()

    def close(self) -> None:
        for running in list(self.supervisor.running.values()):
            try:
                os.killpg(running.identity.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.drive_until_idle()
        self.supervisor.close()
        self.loop.close()


@pytest.fixture(params=[True, False], ids=["pidfd", "sigchld"])
def rig(request: pytest.FixtureRequest, db: LocalDatabase, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    if not request.param:
        monkeypatch.setattr("edge_runtime.service.attempts.exits.open_pidfd", lambda pid: None)
    r = Rig(db, tmp_path, slots=1)
    yield r
    r.close()


def test_exit_code_and_output_are_kept(rig: Rig) -> None:
    run_id = rig.submit("sh", "-c", "echo out; echo err >&2; exit 3")
    assert rig.supervisor.start_queued() == 1
    rig.drive_until_idle()
    attempt = rig.runs.attempts(run_id)[-1]
    assert (attempt.status, attempt.exit_code) == (AttemptStatus.FAILED, 3)
    assert rig.runs.get(run_id).status.value == "failed"
    assert Path(attempt.log_path).read_text() == "out\nerr\n"
    assert not Path(attempt.log_path).with_suffix(".fifo").exists()
    assert rig.worker.lease_of(attempt.id).status.value == "completed"


def test_slots_bound_how_many_run_at_once(rig: Rig) -> None:
    first = rig.submit("sleep", "0.2")
    second = rig.submit("true")
    assert rig.supervisor.start_queued() == 1
    assert rig.supervisor.start_queued() == 0  # one slot, taken
    assert rig.runs.get(second).status.value == "queued"
    rig.drive_until_idle()
    assert rig.supervisor.start_queued() == 1
    rig.drive_until_idle()
    assert [rig.runs.get(r).status.value for r in (first, second)] == ["succeeded", "succeeded"]


def test_a_missing_program_fails_the_attempt_with_the_reason(rig: Rig) -> None:
    run_id = rig.submit("definitely-not-a-program")
    assert rig.supervisor.start_queued() == 0
    attempt = rig.runs.attempts(run_id)[-1]
    assert attempt.status is AttemptStatus.FAILED
    assert attempt.end_reason.startswith("cannot start 'definitely-not-a-program'")
    assert rig.supervisor.running == {}


def test_a_cancel_that_lands_before_the_start_means_no_attempt_and_no_process(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = rig.submit("sleep", "60")
    start = WorkerSession.start

    def cancel_then_start(self: WorkerSession, run: str):
        rig.runs.request_cancel(CancelRunCommand(run_id=run))
        return start(self, run)

    monkeypatch.setattr(WorkerSession, "start", cancel_then_start)
    assert rig.supervisor.start_queued() == 0
    assert rig.runs.attempts(run_id) == []  # the start refused: nothing written
    assert rig.runs.get(run_id).status.value == "cancelled"


def test_a_full_session_takes_nothing_and_writes_nothing(rig: Rig) -> None:
    first = rig.submit("sleep", "0.3")
    second = rig.submit("true")
    assert rig.supervisor.start_queued() == 1
    events = len(rig.runs.events(second))
    for _ in range(5):  # every pass sees the authority's count: no Attempt, no event, no churn
        assert rig.supervisor.start_queued() == 0
    assert rig.runs.attempts(second) == [] and len(rig.runs.events(second)) == events
    assert rig.runs.get(second).status.value == "queued"
    rig.drive_until_idle()
    assert rig.supervisor.start_queued() == 1
    rig.drive_until_idle()
    assert [rig.runs.get(r).status.value for r in (first, second)] == ["succeeded", "succeeded"]


def _append_uncounted_event(db: LocalDatabase, run_id: str, dedupe_key: str) -> None:
    """Another program's event at the Run's next sequence, not counted in the Run."""
    db.connection.execute(
        "INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, payload, created_at_ms) "
        "SELECT lower(hex(randomblob(16))), id, event_sequence + 1, 'note', ?, 'script', 'notes.py', '{}', "
        "created_at_ms FROM runs WHERE id = ?", (dedupe_key, run_id))


def test_runs_with_broken_event_logs_are_set_aside_and_the_slot_goes_to_the_next_in_the_same_pass(
        rig: Rig, db: LocalDatabase) -> None:
    unrecordable, broken, good = rig.submit("true"), rig.submit("true"), rig.submit("sleep", "0.2")
    # Its end cannot be recorded either: the foreign row took the end's dedupe key too.
    _append_uncounted_event(db, unrecordable, "run.finished")
    _append_uncounted_event(db, broken, "a-note")
    assert rig.supervisor.start_queued() == 1  # one slot: the good Run has it, in this very pass
    assert rig.runs.get(good).status.value == "running"
    assert rig.runs.get(broken).status.value == "failed"
    [ended] = [e for e in rig.runs.events(broken) if e.type == "run.failed"]
    assert ended.payload["error"] == "RUN_EVENT_LOG_MISMATCH"
    assert rig.runs.get(unrecordable).status.value == "queued"  # kept aside in memory
    log = rig.log.getvalue()
    assert f"run.set_aside_unrecorded run={unrecordable}" in log and f"run.set_aside run={broken}" in log
    rig.drive_until_idle()
    later = rig.submit("true")
    assert rig.supervisor.start_queued() == 1 and rig.runs.get(later).status.value == "running"
    assert rig.log.getvalue().count(f"run.set_aside run={unrecordable}") == 1  # never taken again
    rig.drive_until_idle()


def test_a_nul_byte_in_a_stored_command_fails_the_attempt_saying_where(rig: Rig, db: LocalDatabase) -> None:
    run_id = rig.submit("true")
    db.connection.execute("UPDATE runs SET command = ? WHERE id = ?", ('["echo", "secret\\u0000value"]', run_id))
    assert rig.supervisor.start_queued() == 0
    [attempt] = rig.runs.attempts(run_id)
    assert attempt.status is AttemptStatus.FAILED and rig.runs.get(run_id).status.value == "failed"
    assert attempt.end_reason.startswith("argument 1 of the command holds a NUL byte")
    assert attempt.end_reason.endswith("[SPAWN_VALUE_REFUSED]") and "secret" not in attempt.end_reason
