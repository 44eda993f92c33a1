"""Every process of an Attempt ends with it (docs/monitor.md, "What it ends"): a task that
double-forks into a session of its own, out of its process group and re-parented away from it,
is ended by the Attempt's monitor (its subreaper) on cancel, on timeout and when the task simply
exits, and the Attempt's reason counts what was ended. Real ``serve``, real processes; each test
scans ``/proc`` for its own marker afterwards."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.service_harness import Harness, wait_for

pytestmark = pytest.mark.e2e

# argv: MARKER PIDFILE LEADER IGNORE_TERM. The grandchild leaves the task's session and group
# (setsid) and its parent exits at once, so nothing links it to the task's leader any more.
DOUBLE_FORK = """
import os, signal, sys, time
marker, pidfile, leader, ignore_term = sys.argv[1:5]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        if ignore_term == "yes":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(pidfile + ".tmp", "w") as out:
            out.write(str(os.getpid()))
        os.rename(pidfile + ".tmp", pidfile)
        time.sleep(300)
    os._exit(0)
os.wait()
while not os.path.exists(pidfile):
    time.sleep(0.01)
if leader == "stay":
    time.sleep(300)
"""


def marked_processes(marker: str) -> list[int]:
    """Live processes (not zombies) whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(name))
    return found


@pytest.fixture
def marker() -> Iterator[str]:
    """A marker for this test's processes; whatever still carries it at the end is SIGKILLed."""
    mark = f"edge-leftover-{uuid.uuid4().hex}"
    yield mark
    for pid in marked_processes(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _submit(harness: Harness, tmp_path: Path, marker: str, *options: str, leader: str = "stay",
            ignore_term: str = "no") -> tuple[str, Path]:
    pidfile = tmp_path / f"{marker}.pid"
    run_id = harness.cli("submit", *options, "--", sys.executable, "-c", DOUBLE_FORK, marker, str(pidfile), leader,
                         ignore_term).stdout.strip()
    return run_id, pidfile


def _grandchild(pidfile: Path, marker: str, leader: int) -> int:
    pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), "the grandchild to start"))
    assert pid in marked_processes(marker)
    # It left the task's session (and so its group): the leader's session id is the leader's pid.
    assert os.getsid(leader) == leader and os.getsid(pid) != leader and os.getpgid(pid) != leader
    return pid


def test_a_cancel_ends_a_grandchild_that_left_the_session(harness: Harness, tmp_path: Path, marker: str) -> None:
    run_id, pidfile = _submit(harness, tmp_path, marker)
    harness.serve()
    grandchild = _grandchild(pidfile, marker, harness.wait_running(run_id).pid)
    harness.cli("cancel", run_id)
    detail = harness.wait_status(run_id, "cancelled")
    assert marked_processes(marker) == []
    reason = detail.attempts[-1].end_reason
    assert f"1 process(es) it left running were ended with it (pids {grandchild})" in reason, reason


def test_a_timeout_ends_a_grandchild_that_ignores_sigterm(harness: Harness, tmp_path: Path, marker: str) -> None:
    run_id, pidfile = _submit(harness, tmp_path, marker, "--timeout", "2s", ignore_term="yes")
    harness.serve()
    grandchild = _grandchild(pidfile, marker, harness.wait_running(run_id).pid)
    detail = harness.wait_status(run_id, "cancelled", "failed")
    assert marked_processes(marker) == []
    reason = detail.attempts[-1].end_reason
    assert (f"1 process(es) it left running were ended with it (pids {grandchild}); 1 ignored SIGTERM and were "
            f"killed") in reason, reason


def test_a_task_that_exits_leaving_an_orphan_ends_it_and_succeeds(harness: Harness, tmp_path: Path,
                                                                 marker: str) -> None:
    run_id, pidfile = _submit(harness, tmp_path, marker, leader="exit")
    harness.serve()
    detail = harness.wait_status(run_id, "succeeded")
    grandchild = int(pidfile.read_text())
    assert marked_processes(marker) == []
    assert detail.attempts[-1].exit_code == 0
    assert f"(pids {grandchild})" in detail.attempts[-1].end_reason
    assert "ended with it" in harness.cli("show", run_id).stdout
    (ended,) = [e for e in harness.events(run_id) if e.type == "run.succeeded"]
    assert f"(pids {grandchild})" in ended.payload["reason"]  # the Run's own event says it too


def test_a_shell_double_fork_is_ended_by_a_cancel(harness: Harness, tmp_path: Path, marker: str) -> None:
    run_id = harness.cli("submit", "--", "sh", "-c", f'(setsid sh -c "sleep 300; : {marker}" &) ; sleep 300').stdout.strip()
    harness.serve()
    harness.wait_running(run_id)
    wait_for(lambda: marked_processes(marker), "the double-forked shell to start")
    harness.cli("cancel", run_id)
    harness.wait_status(run_id, "cancelled")
    assert marked_processes(marker) == []


def test_a_task_that_leaves_nothing_has_no_note(harness: Harness) -> None:
    run_id = harness.submit("true")
    harness.serve()
    detail = harness.wait_status(run_id, "succeeded")
    assert "left running" not in str(detail.attempts[-1].end_reason)
    assert "left running" not in harness.cli("show", run_id).stdout
