"""A fault at every step of the start sequence (docs/operating.md), in-process with real processes: busy
database, I/O error, full disk at each commit; EMFILE/ENFILE at the output files and at the spawn; an
unreadable identity. Whatever fails, the Run ends exactly once, its command runs at most once
(exactly once when no process was started before the fault), the slot is free again, and a fault
costs at most one extra Attempt, never one per pass. (kill -9 between the steps: tests/fault.)
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.runs import SubmitRunCommand
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service import executor
from edge_runtime.service.attempts import start
from edge_runtime.service.log_capture import AttemptOutput
from edge_runtime.service.errors import ProcfsUnavailableError, SpawnError
from edge_runtime.service.worker import WorkerSession
from tests.support.supervisor_rig import SupervisorRig

SLOTS = 2
ERRORS = {"busy": apsw.BusyError, "io": apsw.IOError, "full": apsw.FullError}


class Rig(SupervisorRig):
    def __init__(self, db: LocalDatabase, tmp_path: Path) -> None:
        super().__init__(db, tmp_path, slots=SLOTS)

    def step(self, wait_s: float = 0.05) -> None:
        # This suite's pass: settle what failed before starting anew.
        try:
            self.supervisor.retry_completions()
            self.supervisor.start_queued()
        except EdgeRuntimeError:
            pass  # a failed tick: the service logs it and tries again after a sleep
        for callback in self.loop.wait(wait_s):
            callback()
        self.supervisor.poll_exits()
        self.supervisor.run_capture_timers()


@pytest.fixture
def rig(db: LocalDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    monkeypatch.setattr(start, "START_BACKOFF_MS", (20, 20))  # the pause after EMFILE, shortened
    r = Rig(db, tmp_path)
    yield r
    r.close()


def once(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, before: Callable[[], None]) -> None:
    """Run ``before`` just ahead of the first call of ``owner.name``."""
    original = getattr(owner, name)
    fired = []

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not fired:
            fired.append(True)
            before()
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)


def raise_once(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, error: BaseException) -> None:
    def fail() -> None:
        raise error

    once(monkeypatch, owner, name, fail)


def check_end(rig: Rig, run_id: str, status: str, *, executions: int | None, attempts: int) -> None:
    """``executions=None``: a process existed and was killed at once; it may have begun (at most once)."""
    assert rig.run_until_ended(run_id) == status
    if executions is None:
        assert rig.executions().count(run_id) <= 1
    else:
        assert rig.executions().count(run_id) == executions
    assert len(rig.runs.attempts(run_id)) == attempts
    assert [e.type for e in rig.runs.events(run_id)].count(f"run.{status}") == 1  # ended exactly once
    assert rig.worker.free_slots() == SLOTS  # the slot is free again
    assert rig.runs.active_attempts() == []


# ----------------------------------------------------------------- before any process exists


@pytest.mark.parametrize("kind", sorted(ERRORS))
def test_the_start_transaction_fails(rig: Rig, fail_next_commit: Any, kind: str) -> None:
    run_id = rig.submit()
    fail_next_commit(ERRORS[kind])
    with pytest.raises(EdgeRuntimeError):
        rig.supervisor.start_queued()
    assert rig.runs.attempts(run_id) == [] and rig.runs.get(run_id).status.value == "queued"
    check_end(rig, run_id, "succeeded", executions=1, attempts=1)


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE])
def test_no_descriptor_for_the_output_files_requeues(rig: Rig, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    run_id = rig.submit()
    raise_once(monkeypatch, AttemptOutput, "open", OSError(code, os.strerror(code)))
    check_end(rig, run_id, "succeeded", executions=1, attempts=2)
    assert "attempt.not_started" in rig.log.getvalue()


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.EAGAIN])
def test_no_resources_at_spawn_requeues(rig: Rig, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    run_id = rig.submit()
    raise_once(monkeypatch, os, "posix_spawn", OSError(code, os.strerror(code)))
    check_end(rig, run_id, "succeeded", executions=1, attempts=2)
    first = rig.runs.attempts(run_id)[0]
    assert first.status.value == "lost" and os.strerror(code) in first.end_reason


def test_no_descriptor_for_the_monitors_report_requeues(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = rig.submit()
    raise_once(monkeypatch, executor, "_pipe", SpawnError("no descriptor", os_errno=errno.EMFILE))
    check_end(rig, run_id, "succeeded", executions=1, attempts=2)
    assert not list((rig.tmp_path / "logs").glob("*.status"))  # the failed start left nothing behind


def test_descriptor_exhaustion_pauses_starting_instead_of_churning(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start, "START_BACKOFF_MS", (60_000, 60_000))
    run_ids = [rig.submit() for _ in range(3)]
    monkeypatch.setattr(os, "posix_spawn", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EMFILE, "x")))
    for _ in range(10):
        rig.supervisor.start_queued()
    # One failed start, then a pause: one lost Attempt in all, never one per pass.
    assert sum(len(rig.runs.attempts(r)) for r in run_ids) == 1
    assert all(rig.runs.get(r).status.value == "queued" for r in run_ids)
    assert rig.worker.free_slots() == SLOTS


@pytest.mark.parametrize("kind", sorted(ERRORS))
def test_the_undo_of_a_failed_start_fails_then_is_retried(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, fail_next_commit: Any, kind: str
) -> None:
    run_id = rig.submit()
    raise_once(monkeypatch, os, "posix_spawn", OSError(errno.EMFILE, "Too many open files"))
    once(monkeypatch, WorkerSession, "abandon_start", lambda: fail_next_commit(ERRORS[kind]))
    rig.supervisor.start_queued()
    assert rig.supervisor.pending_retries  # kept, never forgotten; its grant still holds the slot
    assert rig.worker.free_slots() == SLOTS - 1
    check_end(rig, run_id, "succeeded", executions=1, attempts=2)


def test_a_command_that_cannot_start_fails_once(rig: Rig) -> None:
    run_id = rig.runs.submit(SubmitRunCommand(argv=["definitely-not-a-program"])).id
    check_end(rig, run_id, "failed", executions=0, attempts=1)


# ----------------------------------------------------------------- once a process exists


def test_an_unreadable_identity_kills_the_process_and_fails_the_run(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = rig.submit()
    # The monitor could not read the task's start time from /proc: it reports it as 0.
    real_read = executor._read_report
    monkeypatch.setattr(executor, "_read_report", lambda fd: real_read(fd).rsplit(" ", 1)[0] + " 0")
    check_end(rig, run_id, "failed", executions=None, attempts=1)


@pytest.mark.parametrize("kind", sorted(ERRORS))
def test_recording_the_identity_fails(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, fail_next_commit: Any, kind: str
) -> None:
    run_id = rig.submit()
    once(monkeypatch, LocalRunRepository, "record_running", lambda: fail_next_commit(ERRORS[kind]))
    if kind == "busy":
        # Retryable: the process is kept and its identity recorded by a retry (tests/unit/test_identity_retry.py).
        check_end(rig, run_id, "succeeded", executions=1, attempts=1)
    else:
        # Killed at once (it could never be cancelled safely); it may have begun, so the Run fails.
        check_end(rig, run_id, "failed", executions=None, attempts=1)


@pytest.mark.parametrize("kind", sorted(ERRORS))
@pytest.mark.parametrize("step", ["finish_attempt", "complete"])
def test_ending_the_attempt_fails_then_is_retried(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, fail_next_commit: Any, kind: str, step: str
) -> None:
    run_id = rig.submit()
    owner = LocalRunRepository if step == "finish_attempt" else WorkerSession
    once(monkeypatch, owner, step, lambda: fail_next_commit(ERRORS[kind]))
    check_end(rig, run_id, "succeeded", executions=1, attempts=1)


def test_many_runs_with_faults_everywhere_each_run_once(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, fail_next_commit: Any
) -> None:
    """Every third commit fails and every fourth spawn runs out of descriptors."""
    from edge_runtime.local.database import WriteTransaction

    commits = {"n": 0}
    original_exit = WriteTransaction.__exit__

    def flaky_exit(self: WriteTransaction, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            commits["n"] += 1
            if commits["n"] % 3 == 0:
                self._rollback()
                raise apsw.BusyError("injected")
        return original_exit(self, exc_type, exc, tb)

    spawns = {"n": 0}
    real_spawn = os.posix_spawn

    def flaky_spawn(*args: Any, **kwargs: Any) -> int:
        spawns["n"] += 1
        if spawns["n"] % 4 == 0:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_spawn(*args, **kwargs)

    run_ids = [rig.submit() for _ in range(8)]
    monkeypatch.setattr(WriteTransaction, "__exit__", flaky_exit)
    monkeypatch.setattr(os, "posix_spawn", flaky_spawn)
    statuses = {run_id: rig.run_until_ended(run_id, timeout=60) for run_id in run_ids}
    monkeypatch.undo()
    for run_id, status in statuses.items():
        # A failure of record_running kills a process that may have begun: that Run fails; every
        # other one succeeds. Either way no command ever runs twice.
        assert status in ("succeeded", "failed")
        assert rig.executions().count(run_id) == 1 if status == "succeeded" else rig.executions().count(run_id) <= 1
    assert sum(status == "succeeded" for status in statuses.values()) >= 1
    assert rig.worker.free_slots() == SLOTS


def test_a_settlement_that_keeps_failing_backs_off_and_does_not_flood_the_log(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = rig.submit()
    raise_once(monkeypatch, os, "posix_spawn", OSError(errno.EMFILE, "Too many open files"))
    monkeypatch.setattr(WorkerSession, "abandon_start",
                        lambda self, grant, reason: (_ for _ in ()).throw(EdgeRuntimeError("disk full")))
    rig.supervisor.start_queued()
    waits = [rig.supervisor.next_retry_s()]
    for _ in range(7):
        rig.supervisor.retry_completions()
        waits.append(rig.supervisor.next_retry_s())
    assert rig.log.getvalue().count("attempt.requeue_failed") == 4  # failures 1, 2, 4, 8
    assert waits == sorted(waits) and waits[-1] > waits[0]
    monkeypatch.undo()
    check_end(rig, run_id, "succeeded", executions=1, attempts=2)
