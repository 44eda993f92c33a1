"""The device service end to end: real ``serve`` processes, real process groups, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from edge_runtime.contract.runs import ProcessIdentity
from edge_runtime.local.database import open_database
from edge_runtime.service.process_identity import read_identity

from tests.support.service_harness import Harness, decode_json, process_gone, wait_for

pytestmark = pytest.mark.e2e


def _pids(path: Path, count: int) -> list[int]:
    text = wait_for(lambda: path.exists() and len(path.read_text().split()) >= count and path.read_text(),
                    f"{count} pids in {path}")
    return [int(pid) for pid in text.split()[:count]]


def test_cancel_stops_a_shell_and_both_grandchildren(harness: Harness) -> None:
    harness.serve(grace_ms=3000)
    pids = harness.tmp / "pids"
    run_id = harness.submit("sh", "-c", f"sleep 60 & echo $! >> {pids}; sleep 60 & echo $! >> {pids}; wait")
    leader = harness.wait_running(run_id)
    grandchildren = _pids(pids, 2)
    for pid in grandchildren:
        assert read_identity(pid).pgid == leader.pgid  # same group as the shell, not the service's

    harness.cli("cancel", run_id, "--reason", "e2e")
    detail = harness.wait_status(run_id, "cancelled")
    for pid in [leader.pid, *grandchildren]:
        wait_for(lambda: process_gone(pid), f"process {pid} of the cancelled group to be gone")

    attempt = detail.attempts[-1]
    assert attempt.status.value == "cancelled"
    assert attempt.exit_code == 128 + signal.SIGTERM
    assert detail.dispatch.status.value == "dispatched"
    assert detail.dispatch.last_result.value == "termination_requested"
    types = harness.event_types(run_id)
    assert types.index("run.cancel_requested") < types.index("run.cancel_dispatched") < types.index("run.cancelled")
    assert "run.kill_sent" not in types  # SIGTERM was enough: no SIGKILL step


def test_a_process_ignoring_sigterm_is_killed_after_the_grace(harness: Harness) -> None:
    harness.serve(grace_ms=1000)
    ready = harness.tmp / "ready"
    run_id = harness.submit("sh", "-c", f"trap '' TERM; echo $$ > {ready}; while :; do sleep 0.1; done")
    leader = harness.wait_running(run_id)
    _pids(ready, 1)

    harness.cli("cancel", run_id)
    wait_for(lambda: "run.cancel_dispatched" in harness.event_types(run_id), "the SIGTERM dispatch")
    assert not process_gone(leader.pid)  # it ignores SIGTERM: only the SIGKILL step can end it
    detail = harness.wait_status(run_id, "cancelled")
    wait_for(lambda: process_gone(leader.pid), "the SIGTERM-ignoring process to be gone")

    attempt = detail.attempts[-1]
    assert attempt.exit_code == 128 + signal.SIGKILL
    assert attempt.killed_at_ms >= attempt.kill_deadline_at_ms >= attempt.term_sent_at_ms
    assert attempt.kill_deadline_at_ms - attempt.term_sent_at_ms == 1000
    kill = [e for e in harness.events(run_id) if e.type == "run.kill_sent"]
    assert len(kill) == 1 and kill[0].payload["outcome"] == "killed"


def test_service_sigkilled_then_restarted_readopts_and_can_still_cancel(harness: Harness) -> None:
    first = harness.serve()
    run_id = harness.submit("sh", "-c", "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.05; done")
    leader = harness.wait_running(run_id)
    log_path = Path(harness.detail(run_id).attempts[-1].log_path)
    wait_for(lambda: log_path.exists() and "tick 3" in log_path.read_text(), "output in the attempt log")

    assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    # Without a service the child keeps running (no SIGPIPE on its output) until the FIFO fills.
    ticks_before = log_path.read_text().count("tick")
    assert read_identity(leader.pid) == leader

    second = harness.serve()
    second.wait_log("attempt.adopted")
    assert "adopted=1" in second.log()
    wait_for(lambda: log_path.read_text().count("tick") > ticks_before + 5, "output pumped again after restart")
    assert harness.detail(run_id).status.value == "running"

    harness.cli("cancel", run_id)
    detail = harness.wait_status(run_id, "cancelled")
    wait_for(lambda: process_gone(leader.pid), "the re-adopted process to be gone")
    assert detail.attempts[-1].status.value == "cancelled"
    assert detail.attempts[-1].pid == leader.pid
    assert detail.dispatch.last_result.value == "termination_requested"
    events = harness.events(run_id)
    lost = [e for e in events if e.type == "run.failed"]
    assert lost == []
    owners = {e.actor_id for e in events if e.type == "run.cancel_dispatched"}
    assert owners == {"e2e-worker#2"}  # delivered by the new session


def test_a_recycled_pid_is_never_signalled(harness: Harness) -> None:
    harness.serve()
    run_id = harness.submit("sleep", "60")
    real = harness.wait_running(run_id)
    harness.extra_identities.append(real)
    attempt_id = harness.detail(run_id).attempts[-1].id
    # A live, unrelated process now holds the recorded pid: simulate the reuse by pointing the
    # stored identity at it while keeping the original start time.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        other = read_identity(bystander.pid)
        harness.extra_identities.append(other)
        connection = apsw.Connection(str(harness.db_path))
        try:
            connection.set_busy_timeout(5000)
            connection.execute("UPDATE run_attempts SET pid = ?, pgid = ? WHERE id = ?",
                               (other.pid, other.pgid, attempt_id))
        finally:
            connection.close()

        harness.cli("cancel", run_id)
        wait_for(lambda: "run.cancel_dispatch_blocked" in harness.event_types(run_id), "the blocked dispatch")
        detail = harness.detail(run_id)
        assert detail.dispatch.status.value == "blocked"
        assert detail.dispatch.last_result.value == "identity_mismatch"
        assert bystander.poll() is None and read_identity(bystander.pid) == other
        assert read_identity(real.pid) == real  # and nothing was sent to the original either
        shown = decode_json(harness.cli("dispatch", "show", run_id, "--json").stdout)
        assert shown["status"] == "blocked"
    finally:
        bystander.kill()
        bystander.wait()


def test_two_services_on_one_database_run_each_run_once(harness: Harness) -> None:
    harness.serve(worker_id="device-a")
    harness.serve(worker_id="device-b")
    out = harness.tmp / "executions"
    run_ids = harness.submit_many([["sh", "-c", f'echo "$EDGE_RUNTIME_RUN_ID" >> {out}; sleep 0.05']] * 12)
    for run_id in run_ids:
        detail = harness.wait_status(run_id, "succeeded", "failed")
        assert detail.status.value == "succeeded"
        assert len(detail.attempts) == 1
    executed = out.read_text().split()
    assert sorted(executed) == sorted(run_ids)  # each exactly once


def test_sigterm_stops_the_service_and_leaves_runs_running(harness: Harness) -> None:
    service = harness.serve()
    run_id = harness.submit("sleep", "60")
    leader = harness.wait_running(run_id)
    assert service.stop(signal.SIGTERM) == 0
    assert "service.stopped" in service.log()
    assert read_identity(leader.pid) == leader  # still running, to be re-adopted
    assert harness.detail(run_id).status.value == "running"


def test_stop_runs_on_exit_stops_running_attempts(harness: Harness) -> None:
    service = harness.serve("--stop-runs-on-exit")
    run_id = harness.submit("sleep", "60")
    leader = harness.wait_running(run_id)
    assert service.stop(signal.SIGINT) == 0
    wait_for(lambda: process_gone(leader.pid), "the attempt to be stopped with the service")
    detail = harness.detail(run_id)
    assert detail.status.value == "failed"
    assert detail.attempts[-1].exit_code == 128 + signal.SIGTERM


def test_serve_refuses_a_malformed_config_and_writes_nothing(harness: Harness, tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('slots = "two"\n')
    result = harness.cli("serve", "--config", str(config), check=False)
    assert result.returncode == 1
    assert result.stderr.startswith("Error: ") and "[CONFIG_INVALID]" in result.stderr
    assert "$.slots" in result.stderr
    assert not harness.db_path.exists()
    bad_flag = harness.cli("serve", "--slots", "many", check=False)
    assert bad_flag.returncode == 2 and "--slots" in bad_flag.stderr
    assert not harness.db_path.exists()
    assert not Path(str(harness.db_path) + ".wake").exists()


def test_a_missing_program_fails_the_run_with_a_reason(harness: Harness) -> None:
    harness.serve()
    run_id = harness.submit("no-such-program-e2e")
    detail = harness.wait_status(run_id, "failed")
    assert "cannot start 'no-such-program-e2e'" in detail.attempts[-1].end_reason


def test_output_is_capped_keeping_its_beginning_and_its_end(harness: Harness) -> None:
    harness.serve("--log-max-bytes", "4096")
    run_id = harness.submit("sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done")
    detail = harness.wait_status(run_id, "succeeded")
    log_path = Path(detail.attempts[-1].log_path)
    wait_for(lambda: b"bytes left out" in log_path.read_bytes(), "the log's end after the marker")
    text = log_path.read_bytes()
    assert text.startswith(b"line-0\nline-1\n")
    assert text.endswith(b"line-1998\nline-1999\n")
    total = sum(len(f"line-{i}\n") for i in range(2000))
    assert f"[edge-runtime: output truncated: {total - 4096} bytes left out between the first 2048 bytes " \
           "and the last 2048 bytes]".encode() in text
    assert len(text) < 4096 + 200
    assert not Path(detail.attempts[-1].log_path).with_suffix(".fifo").exists()


def test_identity_of_recorded_attempt_matches_proc(harness: Harness) -> None:
    harness.serve()
    run_id = harness.submit("sleep", "60")
    identity = harness.wait_running(run_id)
    assert identity == read_identity(identity.pid)
    assert identity.pgid == identity.pid  # a session and group of its own
    assert os.getsid(identity.pid) == identity.pid
    harness.cli("cancel", run_id)
    harness.wait_status(run_id, "cancelled")
    assert isinstance(identity, ProcessIdentity)


def test_an_attempt_gets_only_stdin_stdout_and_stderr(harness: Harness) -> None:
    # The service was handed an inheritable descriptor by whoever started it: no Attempt gets it.
    reader, writer = os.pipe()
    os.set_inheritable(writer, True)
    try:
        harness.serve(pass_fds=(writer,))
    finally:
        os.close(reader)
        os.close(writer)
    run_id = harness.submit("sh", "-c", "ls /proc/$$/fd; readlink /proc/$$/fd/0")
    detail = harness.wait_status(run_id, "succeeded")
    lines = Path(detail.attempts[-1].log_path).read_text().split()
    assert lines == ["0", "1", "2", "/dev/null"]


def test_a_sigkill_deadline_survives_a_service_crash(harness: Harness) -> None:
    first = harness.serve(grace_ms=1000)
    ready = harness.tmp / "ready"
    run_id = harness.submit("sh", "-c", f"trap '' TERM; echo $$ > {ready}; while :; do sleep 0.1; done")
    leader = harness.wait_running(run_id)
    _pids(ready, 1)
    harness.cli("cancel", run_id)
    wait_for(lambda: "run.cancel_dispatched" in harness.event_types(run_id), "the SIGTERM dispatch")
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL  # dies before the grace is over
    deadline = harness.detail(run_id).attempts[-1].kill_deadline_at_ms
    wait_for(lambda: os.path.exists(ready) and time_ms() > deadline + 200, "the deadline to pass unserved")
    assert not process_gone(leader.pid)  # nobody enforced it while no service ran

    second = harness.serve(grace_ms=1000)
    detail = harness.wait_status(run_id, "cancelled")
    wait_for(lambda: process_gone(leader.pid), "the overdue SIGKILL to be enforced")
    assert "kill.enforced" in second.log()
    kill = [e for e in harness.events(run_id) if e.type == "run.kill_sent"]
    assert [e.payload["outcome"] for e in kill] == ["killed"]
    assert detail.attempts[-1].killed_at_ms >= deadline


def time_ms() -> int:
    return time.time_ns() // 1_000_000


def test_a_second_service_with_the_same_worker_id_takes_over_without_running_twice(harness: Harness) -> None:
    fast = {"EDGE_RUNTIME_SESSION_LEASE_MS": "1000"}  # heartbeat every ~333 ms
    first = harness.serve(env=fast)
    run_id = harness.submit("sleep", "60")
    leader = harness.wait_running(run_id)

    second = harness.serve(env=fast)  # same worker id: a new session, generation 2
    second.wait_log("attempt.adopted")
    # Fenced out, the first takes nothing more but waits for its own child, to record its end.
    first.wait_log("service.session_lost")
    assert first.process.poll() is None
    assert read_identity(leader.pid) == leader
    assert len(harness.detail(run_id).attempts) == 1

    harness.cli("cancel", run_id)  # delivered by the second (the current session)
    detail = harness.wait_status(run_id, "cancelled")
    wait_for(lambda: process_gone(leader.pid), "the taken-over process to be gone")
    assert first.process.wait(15) == 1  # then it exits, session lost
    assert "[SERVICE_SESSION_LOST]" in first.log()
    assert len(detail.attempts) == 1
    # The parent read the real status (SIGTERM), rather than the adopter guessing "lost".
    assert harness.detail(run_id).attempts[-1].exit_code == 128 + signal.SIGTERM


def test_a_child_ignoring_sigterm_is_killed_after_its_leader_exited(harness: Harness) -> None:
    harness.serve(grace_ms=2500)  # room for the checks made between the SIGTERM and the SIGKILL
    pids = harness.tmp / "pids"
    run_id = harness.submit(
        "sh", "-c", f"(trap '' TERM; while :; do sleep 0.1; done) & echo $! > {pids}; wait"
    )
    leader = harness.wait_running(run_id)
    [stubborn] = _pids(pids, 1)
    harness.cli("cancel", run_id)
    wait_for(lambda: process_gone(leader.pid), "the shell to die of SIGTERM")
    assert not process_gone(stubborn)
    assert harness.detail(run_id).status.value == "running"  # held open until the SIGKILL step
    detail = harness.wait_status(run_id, "cancelled")
    wait_for(lambda: process_gone(stubborn), "the leftover group member to be killed")
    assert detail.attempts[-1].exit_code == 128 + signal.SIGTERM  # the leader's own status
    kill = [e for e in harness.events(run_id) if e.type == "run.kill_sent"]
    assert [e.payload["outcome"] for e in kill] == ["killed"]


def test_serve_keeps_only_retain_runs_finished_runs_and_their_logs(harness: Harness) -> None:
    """Retention from the real loop (docs/storage.md, storage bounds): beyond retain_runs, the oldest
    finished Runs go with their logs, while the service is idle; `check` reports what is kept."""
    harness.env["EDGE_RUNTIME_RETAIN_RUNS"] = "3"  # serve and check alike
    harness.serve()
    run_ids = harness.submit_many([["sh", "-c", "echo out"]] * 8)
    for run_id in run_ids:
        harness.wait_status(run_id, "succeeded", "failed")

    def kept() -> list[str]:
        with open_database(harness.db_path, create=False) as db:
            return [row[0] for row in db.connection.execute("SELECT id FROM runs ORDER BY finished_at_ms")]

    wait_for(lambda: len(kept()) == 3, "retention down to retain_runs", timeout=20)
    logs = sorted(p.name for p in (harness.tmp / "logs").glob("*.log"))
    assert len(logs) == 3
    assert {f"{a.id}.log" for run_id in kept() for a in harness.detail(run_id).attempts} == set(logs)
    report = harness.cli("check").stdout
    assert "3 finished runs kept (retain_runs=3, retain_days=7); next to remove: 0" in report, report


def test_serve_holds_log_total_max_bytes_as_attempts_end(harness: Harness) -> None:
    """The logs' total cap holds while serving, not only at start and after Runs are deleted: no
    Run is old or many enough to be pruned here, yet the oldest logs go as new ones arrive."""
    harness.env["EDGE_RUNTIME_LOG_TOTAL_MAX_BYTES"] = "20000"
    harness.env["EDGE_RUNTIME_LOG_MAX_BYTES"] = "8192"
    harness.serve()
    run_ids = harness.submit_many([["sh", "-c", "head -c 8000 /dev/zero | tr '\\0' x"]] * 6)
    for run_id in run_ids:
        harness.wait_status(run_id, "succeeded")

    def total() -> int:
        return sum(p.stat().st_size for p in (harness.tmp / "logs").glob("*.log"))

    wait_for(lambda: total() <= 20000, "the logs' total back under log_total_max_bytes while serving", timeout=20)
    assert total() >= 8000  # the newest logs are kept: the cap removes the oldest first
