"""Issue 10 point 8 in-process: every descriptor the start sequence opens can be refused (EMFILE,
ENFILE); whatever step it hits, the Run runs exactly once, its output is kept, and the failed
start leaves no descriptor open. The black-box form (``serve`` under a low RLIMIT_NOFILE):
tests/e2e/test_descriptor_exhaustion_e2e.py.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.local.database import LocalDatabase
from edge_runtime.service import attempts as attempts_module
from edge_runtime.service import executor, log_capture
from edge_runtime.service.errors import ProcfsUnavailableError
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
