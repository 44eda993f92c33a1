"""A restart never changes a Run's outcome: each Attempt's monitor keeps its exit status and output
while no service runs, and the next service records the true end (docs/monitor.md).

Real ``serve`` processes stopped by SIGTERM or SIGKILL, real tasks, real signals. Every waiting is
bounded by a generous timeout that ends as soon as the condition holds; nothing here is a timing.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from edge_runtime.service.log_capture import status_path_of
from edge_runtime.service.monitor import read_status
from edge_runtime.service.process_identity import read_identity, read_stat

from tests.support.service_harness import Harness, process_gone, wait_for

pytestmark = pytest.mark.e2e


def _log_path(harness: Harness, run_id: str) -> Path:
    return Path(harness.detail(run_id).attempts[-1].log_path)


def _monitor_of(pid: int) -> int:
    """The pid of the task's parent: its monitor (never the service)."""
    return read_stat(pid).ppid


def _ended_meanwhile(harness: Harness, run_id: str, pid: int) -> None:
    """Wait, with no service running, until the task ended and its monitor wrote its end."""
    wait_for(lambda: process_gone(pid), f"the task of {run_id} to end while no service runs")
    status = status_path_of(_log_path(harness, run_id))
    wait_for(lambda: read_status(status).end is not None, "its monitor to write its end")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["sigterm", "sigint", "kill-9"])
def test_a_restart_while_the_task_runs_records_its_true_success(harness: Harness, stop: int) -> None:
    first = harness.serve()
    go = harness.tmp / "go"
    run_id = harness.submit("sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; echo finished ok; exit 0")
    leader = harness.wait_running(run_id)
    assert _monitor_of(leader.pid) != first.process.pid  # the service is no task's parent
    first.stop(stop)
    second = harness.serve()
    second.wait_log("attempt.adopted")
    go.touch()  # the task ends while the restarted service watches it
    detail = harness.wait_status(run_id, "succeeded", "failed")
    attempt = detail.attempts[-1]
    assert (detail.status.value, attempt.status.value, attempt.exit_code) == ("succeeded", "succeeded", 0)
    assert harness.cli("logs", run_id).stdout.strip().endswith("finished ok")
    assert not status_path_of(_log_path(harness, run_id)).exists()  # served its purpose


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_a_task_ending_while_no_service_runs_is_recorded_with_its_real_code(harness: Harness, stop: int) -> None:
    first = harness.serve()
    go = harness.tmp / "go"
    run_id = harness.submit("sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; echo failing now; exit 3")
    leader = harness.wait_running(run_id)
    first.stop(stop)
    go.touch()
    _ended_meanwhile(harness, run_id, leader.pid)
    harness.serve()
    detail = harness.wait_status(run_id, "succeeded", "failed")
    attempt = detail.attempts[-1]
    assert (detail.status.value, attempt.status.value, attempt.exit_code) == ("failed", "failed", 3)
    assert "while no service was running" in attempt.end_reason
    assert "unknown" not in attempt.end_reason
    assert harness.cli("logs", run_id).stdout.strip().endswith("failing now")


def test_a_signal_death_while_no_service_runs_names_the_signal(harness: Harness) -> None:
    first = harness.serve()
    go = harness.tmp / "go"
    run_id = harness.submit("sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; kill -USR1 $$")
    leader = harness.wait_running(run_id)
    first.stop(signal.SIGKILL)
    go.touch()
    _ended_meanwhile(harness, run_id, leader.pid)
    harness.serve()
    detail = harness.wait_status(run_id, "succeeded", "failed")
    attempt = detail.attempts[-1]
    assert (attempt.status.value, attempt.exit_code) == ("failed", 128 + signal.SIGUSR1)
    assert attempt.end_reason.startswith("terminated by SIGUSR1; it ended at ")


def test_output_written_while_no_service_runs_is_kept_whole_and_never_blocks(harness: Harness) -> None:
    first = harness.serve()
    go = harness.tmp / "go"
    # 300,000 bytes (far more than a pipe holds) once the service is gone, then a last line.
    run_id = harness.submit("sh", "-c", f"echo before; while [ ! -e {go} ]; do sleep 0.05; done; "
                                        "head -c 300000 /dev/zero | tr '\\0' a; echo; echo after; exit 0")
    leader = harness.wait_running(run_id)
    first.stop(signal.SIGKILL)
    go.touch()
    # No service reads anything now: the task still runs to its end (nothing blocks it, no SIGPIPE).
    _ended_meanwhile(harness, run_id, leader.pid)
    harness.serve()
    detail = harness.wait_status(run_id, "succeeded", "failed")
    assert detail.attempts[-1].exit_code == 0
    assert _log_path(harness, run_id).read_text() == "before\n" + "a" * 300_000 + "\nafter\n"


def test_with_stop_runs_on_exit_a_crash_still_keeps_the_true_end(harness: Harness) -> None:
    first = harness.serve("--stop-runs-on-exit")
    go = harness.tmp / "go"
    run_id = harness.submit("sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 4")
    leader = harness.wait_running(run_id)
    first.stop(signal.SIGKILL)  # a crash: nothing stops the runs
    assert read_identity(leader.pid) == leader
    go.touch()
    _ended_meanwhile(harness, run_id, leader.pid)
    harness.serve("--stop-runs-on-exit")
    detail = harness.wait_status(run_id, "succeeded", "failed")
    assert (detail.attempts[-1].status.value, detail.attempts[-1].exit_code) == ("failed", 4)


def test_cancel_after_a_restart_kills_every_descendant_and_a_sigterm_ignorer_after_the_grace(
    harness: Harness,
) -> None:
    first = harness.serve(grace_ms=1000)
    pids = harness.tmp / "pids"
    run_id = harness.submit("sh", "-c", f"trap '' TERM; sleep 60 & echo $! >> {pids}; "
                                        f"(trap '' TERM; while :; do sleep 0.1; done) & echo $! >> {pids}; "
                                        "while :; do sleep 0.1; done")
    leader = harness.wait_running(run_id)
    descendants = [int(p) for p in wait_for(lambda: pids.exists() and len(pids.read_text().split()) >= 2
                                            and pids.read_text(), "the descendants' pids").split()]
    first.stop(signal.SIGKILL)
    second = harness.serve(grace_ms=1000)
    second.wait_log("attempt.adopted")
    harness.cli("cancel", run_id)
    detail = harness.wait_status(run_id, "cancelled")
    for pid in (leader.pid, *descendants):
        wait_for(lambda: process_gone(pid), f"process {pid} of the re-adopted group to be gone")
    attempt = detail.attempts[-1]
    assert attempt.exit_code == 128 + signal.SIGKILL  # it ignored SIGTERM: killed after the grace
    kills = [e for e in harness.events(run_id) if e.type == "run.kill_sent"]
    assert len(kills) == 1 and kills[0].payload["outcome"] == "killed"


def test_a_timeout_after_a_restart_still_cancels_with_the_real_status(harness: Harness) -> None:
    first = harness.serve(grace_ms=1000)
    run_id = harness.cli("submit", "--timeout", "3s", "--", "sleep", "60").stdout.strip()
    leader = harness.wait_running(run_id)
    first.stop(signal.SIGTERM)
    harness.serve(grace_ms=1000)
    detail = harness.wait_status(run_id, "cancelled", timeout=30)
    wait_for(lambda: process_gone(leader.pid), "the timed-out process to be gone")
    assert detail.attempts[-1].exit_code == 128 + signal.SIGTERM
    assert any(e.type == "run.cancel_requested" and "timeout" in str(e.payload) for e in harness.events(run_id))


def test_a_killed_monitor_is_the_only_way_to_an_unknown_end(harness: Harness) -> None:
    # What a power cut does to the monitor (it also ends the task there); here only the monitor.
    first = harness.serve()
    run_id = harness.submit("sleep", "60")
    leader = harness.wait_running(run_id)
    monitor = _monitor_of(leader.pid)
    first.stop(signal.SIGKILL)
    import os

    os.kill(monitor, signal.SIGKILL)
    os.killpg(leader.pgid, signal.SIGKILL)
    wait_for(lambda: process_gone(leader.pid), "the task to be gone")
    harness.serve()
    detail = harness.wait_status(run_id, "succeeded", "failed")
    assert detail.attempts[-1].status.value == "lost"
    assert "monitor ended without recording" in detail.attempts[-1].end_reason
