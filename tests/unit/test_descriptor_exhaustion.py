"""In-process: every descriptor the start sequence opens can be refused (EMFILE,
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
from edge_runtime.service import executor, log_capture
from edge_runtime.service.attempts import exits, start
from edge_runtime.service.attempts import AttemptSupervisor
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.errors import ProcfsUnavailableError
from edge_runtime.service.journal import Journal
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.process_identity import read_boot_id, read_stat
from edge_runtime.service.worker import WorkerSession
from tests.support.supervisor_rig import SupervisorRig

SLOTS = 2


def _emfile() -> OSError:
    return OSError(errno.EMFILE, os.strerror(errno.EMFILE))


def _open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


@pytest.fixture
def rig(db: LocalDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SupervisorRig]:
    monkeypatch.setattr(start, "START_BACKOFF_MS", (20, 20))
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


# Every descriptor-taking call before the process exists, in the order of a start: the log file
# (1st open_checked), the status file (2nd), the report pipe, and the spawn of the monitor itself.
BEFORE_THE_PROCESS: dict[str, tuple[Any, str, int]] = {
    "log file": (log_capture, "open_checked", 1),
    "status file": (log_capture, "open_checked", 2),
    "report pipe": (os, "pipe2", 1),
    "posix_spawn": (os, "posix_spawn", 1),
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
    assert not list(log_path.parent.glob("*.status"))  # served, and the failed start left none
    assert "attempt.log_unavailable" not in rig.log.getvalue()


def test_no_pidfd_falls_back_to_polling_and_the_run_ends_once(rig: SupervisorRig, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENFILE can still take the descriptor the start freed for the pidfd: the exit is then found
    by a /proc poll (as on kernels without pidfds), never by a crash of the service."""
    run_id = rig.submit(then="echo the-output")
    _fail_nth_call(monkeypatch, exits, "open_pidfd", 1, OSError(errno.ENFILE, os.strerror(errno.ENFILE)))
    assert rig.run_until_ended(run_id) == "succeeded"
    assert rig.executions().count(run_id) == 1 and len(rig.runs.attempts(run_id)) == 1
    assert "attempt.pidfd_unavailable" in rig.log.getvalue()
    assert "the-output" in Path(rig.runs.attempts(run_id)[-1].log_path).read_text()


def test_a_failed_spawn_leaves_no_descriptor_open(tmp_path: Path) -> None:
    """The output's descriptors stay the caller's (abandoned on a failure); the spawn's own copies
    and its report pipe are closed whatever happens."""
    for argv in ([], ["no-such-program-xyz"]):
        before = _open_fds()
        output = log_capture.AttemptOutput.open(tmp_path / "a.log", tmp_path / "a.fifo")
        with pytest.raises(executor.SpawnError):
            executor.spawn(argv, output=output, env=dict(os.environ), boot_id=read_boot_id(), log_cap_bytes=4096,
                           log_linger_ms=0)
        output.abandon()
        assert _open_fds() == before, argv
        assert not list(tmp_path.iterdir()), argv  # nothing this start created is left
