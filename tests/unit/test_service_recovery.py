"""Restart recovery: a new session adopts live Attempts of earlier sessions and ends the rest."""

from __future__ import annotations

import io
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from edge_runtime.contract.runs import AttemptStatus, CancelRunCommand, ProcessIdentity, SubmitRunCommand
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.attempts import AttemptSupervisor
from edge_runtime.service.attempts.running import REASON_ADOPTED_EXIT, REASON_GONE
from edge_runtime.service.controller import LocalProcessController
from tests.support.monitor import spawn_monitored
from edge_runtime.service.journal import Journal
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.process_identity import read_boot_id, read_stat
from edge_runtime.contract.run_lease import REASON_ORPHAN_STARTING, REASON_ORPHAN_UNSTARTED
from edge_runtime.service.recovery import REASON_REBOOTED, REASON_START_UNCONFIRMED, recover
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.worker import WorkerSession
from tests.support.unfenced_attempts import take_queued_run

RUN_LEASE_MS = 60_000


def _session(db: LocalDatabase) -> WorkerSession:
    worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=4, session_lease_ms=30_000, run_lease_ms=RUN_LEASE_MS)
    worker.register()
    return worker


class Setup:
    def __init__(self, db: LocalDatabase, tmp_path: Path) -> None:
        self.db = db
        self.runs = LocalRunRepository(db)
        self.old = _session(db)
        self.tmp = tmp_path

    def attempt(self, *, until: str, identity: ProcessIdentity | None = None, log_path: Path | None = None) -> str:
        run = self.runs.submit(SubmitRunCommand(argv=["sleep", "60"]))
        attempt = take_queued_run(self.db, run.id, actor_id="old")
        if until == "unleased":
            return attempt.id
        grant = self.old.claim(run.id, attempt.id)
        if until == "claimed":
            return attempt.id
        self.old.begin_start(grant)
        if until == "starting":
            return attempt.id
        log_path = log_path or self.tmp / f"{attempt.id}.log"  # without a status file: a release without monitors
        self.runs.record_running(attempt.id, identity, log_path=str(log_path), actor_id="old")
        return attempt.id


@pytest.fixture
def setup(db: LocalDatabase, tmp_path: Path) -> Setup:
    return Setup(db, tmp_path)


@pytest.fixture
def live_group(tmp_path: Path) -> Iterator[ProcessIdentity]:
    identity = spawn_monitored(["sleep", "60"], tmp_path / "live.log")
    yield identity
    try:
        os.killpg(identity.pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    while read_stat(identity.pid) is not None:  # reaped by its monitor
        time.sleep(0.01)


def _recover(setup: Setup, clock: ManualClock, loop: EventLoop, log: io.StringIO) -> tuple[AttemptSupervisor, dict]:
    new = _session(setup.db)
    assert new.generation > setup.old.generation
    controller = LocalProcessController()
    supervisor = AttemptSupervisor(
        runs=setup.runs, worker=new, controller=controller, loop=loop, journal=Journal(log), slots=4,
        log_dir=setup.tmp, log_max_bytes=4096, boot_id=read_boot_id(),
    )
    counts = recover(runs=setup.runs, worker=new, supervisor=supervisor, controller=controller,
                     journal=Journal(log), boot_id=read_boot_id(), abandon_after_ms=RUN_LEASE_MS)
    return supervisor, counts


def _settle(supervisor: AttemptSupervisor, timeout: float = 10.0) -> None:
    """Poll until every re-adopted Attempt whose process is gone was settled (after the grace)."""
    deadline = time.monotonic() + timeout
    while supervisor.running:
        assert time.monotonic() < deadline, "gone processes were not settled"
        supervisor.poll_exits()
        supervisor.run_capture_timers()
        time.sleep(0.05)


def _ended(setup: Setup, attempt_id: str) -> tuple[str, str]:
    attempt = setup.runs.get_attempt(attempt_id)
    return attempt.status.value, attempt.end_reason


def test_attempts_without_a_live_process_are_lost_with_a_reason(setup: Setup, clock: ManualClock,
                                                                tmp_path: Path) -> None:
    boot = read_boot_id()
    gone = ProcessIdentity(2**22 + 5, 2**22 + 5, 1, boot)  # above pid_max: never a process
    other_boot = ProcessIdentity(os.getpid(), os.getpgid(0), 1, "another-boot")
    claimed = setup.attempt(until="claimed")
    starting = setup.attempt(until="starting")
    rebooted = setup.attempt(until="running", identity=other_boot)
    exited = setup.attempt(until="running", identity=gone)
    loop = EventLoop()
    try:
        supervisor, counts = _recover(setup, clock, loop, io.StringIO())
        assert counts["lost"] == 1 and counts["adopted"] == 0
        assert (counts["requeued"], counts["settling"], counts["pending"]) == (1, 1, 2)  # pending: claimed, starting
        _settle(supervisor)
    finally:
        loop.close()
    # Never started: back in the queue, never failed for it.
    assert _ended(setup, claimed) == ("lost", REASON_ORPHAN_UNSTARTED)
    assert setup.runs.get(setup.runs.get_attempt(claimed).run_id).status.value == "queued"
    assert _ended(setup, rebooted) == ("lost", REASON_REBOOTED)
    assert _ended(setup, exited) == ("lost", REASON_GONE)
    assert setup.old.lease_of(claimed).status.value == "completed"  # grants closed, not left open
    # Past the barrier: its owner may still be spawning it, until its grant runs out.
    assert setup.runs.get_attempt(starting).status is AttemptStatus.STARTING
    clock.advance(RUN_LEASE_MS + 1)
    loop = EventLoop()
    try:
        _recover(setup, clock, loop, io.StringIO())
    finally:
        loop.close()
    assert _ended(setup, starting) == ("lost", REASON_ORPHAN_STARTING)
    assert setup.runs.get(setup.runs.get_attempt(starting).run_id).status.value == "failed"  # may have run
    assert setup.runs.active_attempts() == []


def test_an_attempt_abandoned_before_its_lease_is_requeued_only_when_old(setup: Setup, clock: ManualClock) -> None:
    stale = setup.attempt(until="unleased")
    clock.advance(RUN_LEASE_MS + 1)
    fresh = setup.attempt(until="unleased")  # created now: younger than a run lease
    clock.advance(RUN_LEASE_MS // 2)
    loop = EventLoop()
    try:
        _recover(setup, clock, loop, io.StringIO())
    finally:
        loop.close()
    assert _ended(setup, stale) == ("lost", REASON_ORPHAN_UNSTARTED)
    assert setup.runs.get(setup.runs.get_attempt(stale).run_id).status.value == "queued"
    assert setup.runs.get_attempt(fresh).status is AttemptStatus.CLAIMED


@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfd", "proc-poll"])
def test_a_live_process_is_readopted_and_its_exit_ends_the_attempt(setup: Setup, clock: ManualClock,
                                                                   live_group: ProcessIdentity, pidfds: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if not pidfds:  # an old router kernel: exits of re-adopted processes are found by polling /proc
        monkeypatch.setattr("edge_runtime.service.attempts.exits.open_pidfd", lambda pid: None)
    attempt_id = setup.attempt(until="running", identity=live_group, log_path=setup.tmp / "live.log")
    loop = EventLoop()
    log = io.StringIO()
    try:
        supervisor, counts = _recover(setup, clock, loop, log)
        assert counts["adopted"] == 1
        assert set(supervisor.running) == {attempt_id}
        assert supervisor.adopted_count == 1
        assert supervisor.needs_poll() is (not pidfds)
        assert setup.runs.get_attempt(attempt_id).status is AttemptStatus.RUNNING
        os.killpg(live_group.pgid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while attempt_id in supervisor.running:
            assert time.monotonic() < deadline, "the adopted exit was not noticed"
            for callback in loop.wait(0.2):
                callback()
            supervisor.poll_exits()
            supervisor.run_capture_timers()
        supervisor.close()
    finally:
        loop.close()
    # Not this service's child, yet its true end: its monitor kept it.
    assert _ended(setup, attempt_id) == ("failed", "terminated by SIGKILL")
    assert setup.runs.get_attempt(attempt_id).exit_code == 128 + signal.SIGKILL
    assert "attempt.adopted" in log.getvalue()


def test_a_cancelled_readopted_process_ends_cancelled(setup: Setup, clock: ManualClock,
                                                      live_group: ProcessIdentity) -> None:
    attempt_id = setup.attempt(until="running", identity=live_group, log_path=setup.tmp / "live.log")
    run_id = setup.runs.get_attempt(attempt_id).run_id
    loop = EventLoop()
    try:
        supervisor, _ = _recover(setup, clock, loop, io.StringIO())
        setup.runs.request_cancel(CancelRunCommand(run_id=run_id))
        assert LocalProcessController().request_termination(live_group).value == "termination_requested"
        deadline = time.monotonic() + 10
        while attempt_id in supervisor.running:
            assert time.monotonic() < deadline
            for callback in loop.wait(0.2):
                callback()
            supervisor.poll_exits()
            supervisor.run_capture_timers()
        supervisor.close()
    finally:
        loop.close()
    attempt = setup.runs.get_attempt(attempt_id)
    assert attempt.status is AttemptStatus.CANCELLED
    assert attempt.exit_code == 128 + signal.SIGTERM  # not our child, yet its monitor kept its status
    assert setup.runs.get(run_id).status.value == "cancelled"


def test_a_start_of_this_session_it_never_saw_confirmed_is_undone_and_its_run_requeued(
        setup: Setup, clock: ManualClock, tmp_path: Path) -> None:
    # A start that committed while the service saw an error (an ambiguous COMMIT on PostgreSQL):
    # the Attempt holds the current session's grant, but no process was spawned for it.
    run = setup.runs.submit(SubmitRunCommand(argv=["sleep", "60"]))
    worker = _session(setup.db)
    grant = worker.start(run.id)
    assert setup.runs.get_attempt(grant.lease.attempt_id).status is AttemptStatus.STARTING
    loop = EventLoop()
    try:
        log = io.StringIO()
        supervisor = AttemptSupervisor(
            runs=setup.runs, worker=worker, controller=LocalProcessController(), loop=loop, journal=Journal(log),
            slots=4, log_dir=tmp_path, log_max_bytes=4096, boot_id=read_boot_id(),
        )
        counts = recover(runs=setup.runs, worker=worker, supervisor=supervisor, controller=LocalProcessController(),
                         journal=Journal(log), boot_id=read_boot_id(), abandon_after_ms=RUN_LEASE_MS)
    finally:
        loop.close()
    assert counts["requeued"] == 1
    assert _ended(setup, grant.lease.attempt_id) == ("lost", REASON_START_UNCONFIRMED)
    assert setup.runs.get(run.id).status.value == "queued"  # certainly never ran: back in the queue
    assert worker.lease_of(grant.lease.attempt_id).status.value == "completed"
    assert worker.free_slots() == 4  # the slot is free again
    assert "recovery.unconfirmed_start" in log.getvalue()
