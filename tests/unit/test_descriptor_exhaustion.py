"""Issue 10 point 8 in-process: every descriptor the start sequence opens can be refused (EMFILE,
ENFILE); whatever step it hits, the Run runs exactly once, its output is kept, and the failed
start leaves no descriptor open. The black-box form (``serve`` under a low RLIMIT_NOFILE):
tests/e2e/test_descriptor_exhaustion_e2e.py.
"""

from __future__ import annotations

import errno
import io
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.contract.runs import SubmitRunCommand
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service import attempts as attempts_module
from edge_runtime.service import executor, log_capture
from edge_runtime.service.attempts import AttemptSupervisor
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.errors import ProcfsUnavailableError
from edge_runtime.service.executor import reap, spawn
from edge_runtime.service.journal import Journal
from edge_runtime.service.log_capture import create_fifo, log_paths, open_child_output
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.process_identity import read_boot_id, read_stat
from edge_runtime.service.worker import WorkerSession
from tests.supervisor_rig import SupervisorRig

SLOTS = 2


def _emfile() -> OSError:
    return OSError(errno.EMFILE, os.strerror(errno.EMFILE))


def _open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


@pytest.fixture
def rig(db: LocalDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SupervisorRig]:
    monkeypatch.setattr(attempts_module, "START_BACKOFF_MS", (20, 20))
    r = SupervisorRig(db, tmp_path, slots=SLOTS)
    yield r
    r.close()


def _fail_nth_call(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, nth: int, error: BaseException) -> list[int]:
    """Make the ``nth`` call (from 1) of ``owner.name`` raise ``error``; the calls counted so far."""
    original = getattr(owner, name)
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == nth:
            raise error
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return calls


# Every descriptor-taking call before the process exists, in the order of a start: the FIFO's
# writer (1st open_checked), the capture's reader (2nd) and its log file (3rd), the spawn itself
# (the child's /dev/null, an interpreter's open in exec).
BEFORE_THE_PROCESS: dict[str, tuple[Any, str, int]] = {
    "fifo writer": (log_capture, "open_checked", 1),
    "capture reader": (log_capture, "open_checked", 2),
    "capture log file": (log_capture, "open_checked", 3),
    "posix_spawn": (os, "posix_spawnp", 1),
}


@pytest.mark.parametrize("step", sorted(BEFORE_THE_PROCESS))
def test_no_descriptor_before_the_process_requeues_keeps_the_output_and_leaks_nothing(
    rig: SupervisorRig, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    run_id = rig.submit(then="echo the-output")
    owner, name, nth = BEFORE_THE_PROCESS[step]
    calls = _fail_nth_call(monkeypatch, owner, name, nth, _emfile())
    before = _open_fds()
    rig.supervisor.start_queued()
    assert calls[0] >= nth  # the failure was really injected at this step
    assert _open_fds() == before  # the failed start left nothing open
    assert rig.runs.get(run_id).status.value == "queued"  # never left dispatching
    (first,) = rig.runs.attempts(run_id)
    assert first.status.value == "lost" and first.identity is None and "Too many open files" in first.end_reason
    assert rig.run_until_ended(run_id) == "succeeded"
    assert rig.executions().count(run_id) == 1 and len(rig.runs.attempts(run_id)) == 2
    log_path = Path(rig.runs.attempts(run_id)[-1].log_path)
    assert "the-output" in log_path.read_text()  # captured: the capture opened before the spawn
    assert not list(log_path.parent.glob("*.fifo"))  # the failed start's FIFO is gone too
    assert "attempt.log_unavailable" not in rig.log.getvalue()


def test_no_pidfd_falls_back_to_sigchld_and_the_run_ends_once(rig: SupervisorRig, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENFILE can still take the descriptor the start freed for the pidfd: the exit is then found
    by SIGCHLD (as on kernels without pidfds), never by a crash of the service."""
    run_id = rig.submit(then="echo the-output")
    _fail_nth_call(monkeypatch, attempts_module, "open_pidfd", 1, OSError(errno.ENFILE, os.strerror(errno.ENFILE)))
    assert rig.run_until_ended(run_id) == "succeeded"
    assert rig.executions().count(run_id) == 1 and len(rig.runs.attempts(run_id)) == 1
    assert "attempt.pidfd_unavailable" in rig.log.getvalue()
    assert "the-output" in Path(rig.runs.attempts(run_id)[-1].log_path).read_text()


def test_a_passing_lack_of_descriptors_for_the_identity_is_waited_out(
    rig: SupervisorRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child is unreaped, so its pid stays its own: reading ``/proc/<pid>/stat`` is retried
    (within the setsid wait) instead of killing a process that already began the command."""
    run_id = rig.submit()
    _fail_nth_call(monkeypatch, executor, "read_identity", 1, ProcfsUnavailableError("ENFILE"))
    assert rig.run_until_ended(run_id) == "succeeded"
    assert rig.executions().count(run_id) == 1 and len(rig.runs.attempts(run_id)) == 1


def test_spawn_closes_the_output_descriptor_whatever_happens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The identity read after the spawn takes the descriptor the output's copy held."""
    outcomes: dict[str, Callable[[], object]] = {
        "empty command": lambda: executor.spawn([], output_fd=fd, env={}, boot_id="b"),
        "not found": lambda: executor.spawn(["no-such-program-xyz"], output_fd=fd, env={}, boot_id="b"),
    }
    for what, call in outcomes.items():
        fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        with pytest.raises(executor.SpawnError):
            call()
        with pytest.raises(OSError) as closed:
            os.fstat(fd)
        assert closed.value.errno == errno.EBADF, what


# ----------------------------------------------------------------- re-adopted after a restart


class _Adopted:
    """An Attempt a previous service started and recorded running, whose process writes into its
    FIFO while no service reads it; then a new service (session) that re-adopts it."""

    def __init__(self, db: LocalDatabase, tmp_path: Path, script: str, *, linger_ms: int) -> None:
        self.runs = LocalRunRepository(db)
        old = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=2, session_lease_ms=30_000,
                            run_lease_ms=60_000)
        old.register()
        run = self.runs.submit(SubmitRunCommand(argv=["sh", "-c", script]))
        attempt = self.runs.get_attempt(old.start(run.id).lease.attempt_id)  # the fenced start
        self.log_path, fifo_path = log_paths(tmp_path / "logs", attempt.id)
        create_fifo(fifo_path)
        self.identity = spawn(["sh", "-c", script], output_fd=open_child_output(fifo_path), env=dict(os.environ),
                              boot_id=read_boot_id())
        self.runs.record_running(attempt.id, self.identity, log_path=str(self.log_path), actor_id="old")
        self.attempt_id = attempt.id
        self.fifo_path = fifo_path
        new = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=2, session_lease_ms=30_000,
                            run_lease_ms=60_000)
        new.register()
        self.loop = EventLoop()
        self.log = io.StringIO()
        self.supervisor = AttemptSupervisor(
            runs=self.runs, worker=new, controller=LocalProcessController(), loop=self.loop, journal=Journal(self.log),
            slots=2, log_dir=tmp_path / "logs", log_max_bytes=4096, boot_id=read_boot_id(), log_linger_ms=linger_ms)

    def drive_until(self, condition: Callable[[], bool], timeout: float = 15.0) -> None:
        """The service loop's passes (pidfd, /proc poll, capture timers); this test is the
        process's parent, so it reaps it (recording nothing, as a replaced service may not)."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, self.log.getvalue()[-2000:]
            for callback in self.loop.wait(0.02):
                callback()
            self.supervisor.poll_adopted()
            self.supervisor.run_capture_timers()
            reap(self.identity.pid)

    def close(self) -> None:
        self.supervisor.close()
        self.loop.close()
        try:
            os.killpg(self.identity.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while reap(self.identity.pid) is None and read_stat(self.identity.pid) is not None:
            time.sleep(0.01)


def _refuse_capture_opens(monkeypatch: pytest.MonkeyPatch, times: int | None) -> list[int]:
    """``LogCapture.open`` fails with EMFILE ``times`` times (None: always); the calls made."""
    original = log_capture.LogCapture.open
    calls = [0]

    def refused(self: log_capture.LogCapture) -> None:
        calls[0] += 1
        if times is None or calls[0] <= times:
            raise _emfile()
        original(self)

    monkeypatch.setattr(log_capture.LogCapture, "open", refused)
    return calls


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attempts_module, "RETRY_INTERVAL_S", 0.05)
    monkeypatch.setattr(attempts_module, "ADOPTED_EXIT_GRACE_S", 0.1)


def test_a_reopen_refused_for_lack_of_descriptors_is_retried_and_no_output_is_lost(
    db: LocalDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast_retries: None
) -> None:
    adopted = _Adopted(db, tmp_path, "echo before-restart; sleep 0.6; echo after-restart; sleep 0.3", linger_ms=5_000)
    try:
        calls = _refuse_capture_opens(monkeypatch, times=3)
        assert adopted.supervisor.adopt(adopted.runs.get_attempt(adopted.attempt_id))
        assert "attempt.log_reopen_pending" in adopted.log.getvalue()
        adopted.drive_until(lambda: adopted.attempt_id not in adopted.supervisor.running
                            and not adopted.supervisor.seconds_to_capture_timer())
    finally:
        adopted.close()
    assert calls[0] == 4  # three refused, then retried until it opened
    assert "attempt.log_reopened" in adopted.log.getvalue()
    text = adopted.log_path.read_text()
    assert "before-restart" in text and "after-restart" in text and "output gap" not in text
    assert not adopted.fifo_path.exists()
    assert adopted.runs.get_attempt(adopted.attempt_id).status.value == "lost"  # exit status unknown: not our child


def test_a_reopen_refused_until_after_the_end_marks_the_gap_and_stops_trying(
    db: LocalDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast_retries: None
) -> None:
    adopted = _Adopted(db, tmp_path, "echo lost-with-the-fifo; sleep 0.3", linger_ms=300)
    try:
        calls = _refuse_capture_opens(monkeypatch, times=None)
        assert adopted.supervisor.adopt(adopted.runs.get_attempt(adopted.attempt_id))
        adopted.drive_until(lambda: "attempt.output_lost" in adopted.log.getvalue())
        tries = calls[0]
        adopted.drive_until(lambda: adopted.supervisor.seconds_to_capture_timer() is None)
        assert calls[0] == tries  # given up: no retry once the gap is marked
    finally:
        adopted.close()
    assert tries >= 3  # at adoption, retried while it ran, at its end, while it lingered
    assert "output gap: no descriptor was free to re-open" in adopted.log_path.read_text()
    assert not adopted.fifo_path.exists()
