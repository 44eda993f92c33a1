"""Hardening (a task's environment, trusted directories, hostile files beside the database, log
paths) against real ``serve`` processes, as a hostile user or careless admin would try them.
The task environment and the unpack directory against the built executables:
tests/artifact/test_built_binary_hardening.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.service_harness import Harness, process_gone, wait_for

from edge_runtime.contract.runs import ProcessIdentity
from edge_runtime.service.process_identity import read_boot_id, read_stat
from tests.support.hostile_user import OtherUser, other_user  # noqa: F401

pytestmark = pytest.mark.e2e


def _serve_refused(harness: Harness, *flags: str) -> str:
    """Run ``serve`` expecting it to refuse to start; its stderr."""
    log = harness.tmp / "refused.log"
    with open(log, "wb") as out:
        code = subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(harness.db_path), "serve", *flags],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out, env=harness.env,
                              timeout=60).returncode
    text = log.read_text()
    assert code == 1, text
    assert "Traceback" not in text
    return text


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A sticky world-writable directory like /tmp, where the other user can act first."""
    path = Path(tempfile.mkdtemp(prefix="edge-hardening-", dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ------------------------------------------------------------------ point 1: the task's environment

def test_a_task_never_sees_bundler_variables(harness: Harness) -> None:
    harness.serve(env={"_PYI_APPLICATION_HOME_DIR": "/tmp/_MEIgone", "_PYI_ARCHIVE_FILE": "/x",
                       "LD_LIBRARY_PATH": "/opt/vendor/lib", "EDGE_TEST_MARK": "kept",
                       # Passed on only when pass_env names them; a bundler's variable not even then.
                       "EDGE_RUNTIME_PASS_ENV": "LD_LIBRARY_PATH,EDGE_TEST_MARK,_PYI_ARCHIVE_FILE"})
    run_id = harness.submit("env")
    harness.wait_status(run_id, "succeeded")
    task_env = dict(line.split("=", 1) for line in harness.cli("logs", run_id).stdout.splitlines() if "=" in line)
    assert not [key for key in task_env if key.startswith("_PYI_")]
    assert task_env["LD_LIBRARY_PATH"] == "/opt/vendor/lib"  # from source nothing was prepended: kept as given
    assert task_env["EDGE_TEST_MARK"] == "kept" and task_env["EDGE_RUNTIME_RUN_ID"] == run_id


# ------------------------------------------------------------------ point 4: directories, logs and FIFOs

def test_a_log_dir_another_user_created_is_refused(harness: Harness, shared_dir: Path, other_user: OtherUser) -> None:
    planted = shared_dir / "logs"
    other_user.run(["mkdir", "-m", "0755", str(planted)])
    text = _serve_refused(harness, "--log-dir", str(planted))
    assert f"refusing the log directory {planted}" in text and f"owned by uid {other_user.uid}" in text
    assert "[SERVICE_UNTRUSTED_DIRECTORY]" in text
    assert list(planted.iterdir()) == []  # nothing written there


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770])
def test_a_log_dir_writable_by_others_is_refused(harness: Harness, mode: int) -> None:
    logs = harness.tmp / "logs"
    logs.mkdir()
    logs.chmod(mode)
    text = _serve_refused(harness, "--log-dir", str(logs))
    assert "writable by group or others" in text


def test_a_database_folder_writable_by_others_is_refused(harness: Harness) -> None:
    folder = harness.tmp / "shared"
    folder.mkdir()
    folder.chmod(0o1777)  # sticky is not enough: another user could create edge-runtime.db-wal first
    harness.db_path = folder / "edge-runtime.db"
    text = _serve_refused(harness, "--log-dir", str(harness.tmp / "logs"))
    assert f"refusing the database's directory {folder}" in text
    assert not harness.db_path.exists()


def test_a_log_reached_through_a_symlink_is_never_written(harness: Harness) -> None:
    """Swap an Attempt's log for a symlink to a root-only file while the service is down: its
    monitor writes through the descriptor it was handed at the start, never through the path."""
    harness.serve()
    run_id = harness.submit("sh", "-c", "while :; do echo tick; sleep 0.1; done")
    harness.wait_running(run_id)
    log_path = Path(harness.detail(run_id).attempts[-1].log_path)
    wait_for(lambda: log_path.stat().st_size > 0, "output in the log")
    harness.services[-1].stop()
    secret = harness.tmp / "root-only"
    secret.write_text("untouched\n")
    secret.chmod(0o600)
    log_path.unlink()
    log_path.symlink_to(secret)
    service = harness.serve()
    service.wait_log("attempt.adopted")
    time.sleep(0.5)  # the task keeps writing; none of it may reach the target
    assert secret.read_text() == "untouched\n"


def test_a_fifo_swapped_in_for_a_log_neither_hangs_the_service_nor_logs(harness: Harness) -> None:
    harness.serve()
    run_id = harness.submit("sh", "-c", "while :; do echo tick; sleep 0.1; done")
    harness.wait_running(run_id)
    log_path = Path(harness.detail(run_id).attempts[-1].log_path)
    harness.services[-1].stop()
    log_path.unlink()
    os.mkfifo(log_path, 0o600)
    service = harness.serve()  # waits for recovery.done: a blocking open would hang here
    service.wait_log("attempt.adopted")  # its monitor still writes the log it was handed, unlinked
    result = harness.cli("logs", run_id, check=False)  # timeout=60 in cli(): a hang fails the test
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"Error: cannot read the log file {log_path}: ") and "[LOG_UNREADABLE]" in result.stderr


@pytest.mark.parametrize("kind", ["directory", "symlink"])
def test_logs_refuses_a_directory_or_symlink_with_one_error_line(harness: Harness, kind: str) -> None:
    harness.serve()
    run_id = harness.submit("echo", "hello")
    harness.wait_status(run_id, "succeeded")
    log_path = Path(harness.detail(run_id).attempts[-1].log_path)
    log_path.unlink()
    if kind == "directory":
        log_path.mkdir()
    else:
        (harness.tmp / "elsewhere").write_text("not the log\n")
        log_path.symlink_to(harness.tmp / "elsewhere")
    result = harness.cli("logs", run_id, check=False)
    assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.rstrip().endswith("[LOG_UNREADABLE]")


# ------------------------------------------------------------------ point 8: a descendant holding stdout

def _fds_into(pid: int, directory: Path) -> list[str]:
    """What ``pid`` holds open in ``directory`` (the directory itself, which serve holds for its
    whole life, aside)."""
    targets = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{name}"))
        except FileNotFoundError:
            continue
    return [t for t in targets if t.startswith(f"{directory}/")]


def test_a_capture_is_closed_after_the_linger_time_though_a_descendant_keeps_stdout(harness: Harness) -> None:
    # The descendant ignores SIGTERM, so it outlives the leader by the monitor's grace (3 s) before
    # its SIGKILL: longer than the linger time (0.5 s).
    service = harness.serve(grace_ms=3000, env={"EDGE_RUNTIME_LOG_LINGER_MS": "500"})
    ready = harness.tmp / "daemon-ignores-term"  # the leader ends only once the trap is set
    run_id = harness.submit("sh", "-c", f"(trap '' TERM; touch {ready}; while :; do echo daemon; sleep 0.05; done) & "
                                        f"while [ ! -e {ready} ]; do sleep 0.01; done; echo leader done")
    harness.wait_status(run_id, "succeeded")
    logs_dir = harness.db_path.parent / "logs"
    # The Attempt's monitor drains it for the linger time, notes the stop, and exits.
    wait_for(lambda: harness.cli("logs", run_id).stdout.rstrip().endswith("which is no longer read]"),
             "the monitor's note that it stopped reading")
    wait_for(lambda: _fds_into(service.process.pid, logs_dir) == [], "the service to hold nothing of the logs")
    text = harness.cli("logs", run_id).stdout
    assert "leader done" in text and "daemon" in text  # drained while it lingered
    assert text.rstrip().endswith("which is no longer read]")
    size = os.path.getsize(harness.detail(run_id).attempts[-1].log_path)
    time.sleep(0.3)
    assert os.path.getsize(harness.detail(run_id).attempts[-1].log_path) == size  # nothing after the note


# ------------------------------------------------------------------ setsid escapes the group

def test_cancel_reports_descendants_that_left_the_process_group(harness: Harness) -> None:
    harness.serve()
    run_id = harness.submit("sh", "-c", "setsid sleep 300 & echo $! ; exec sleep 300")
    identity = harness.wait_running(run_id)
    log_path = Path(harness.detail(run_id).attempts[-1].log_path)
    escaped_pid = int(wait_for(lambda: log_path.read_text().strip(), "the escaped pid in the log"))
    escaped = wait_for(lambda: (s := read_stat(escaped_pid)) and s.pgid == escaped_pid and s, "setsid to run")
    harness.extra_identities.append(ProcessIdentity(escaped_pid, escaped_pid, escaped.start_ticks, read_boot_id()))
    harness.cli("cancel", run_id)
    harness.wait_status(run_id, "cancelled")
    wait_for(lambda: process_gone(identity.pid), "the group to end")
    (event,) = [e for e in harness.events(run_id) if e.type == "run.cancel_escaped"]
    assert (event.dedupe_key, event.payload) == ("a1:cancel-escaped", {"count": 1, "pids": [escaped_pid]})
    assert event.attempt_id == harness.detail(run_id).attempts[0].id
    shown = harness.cli("show", run_id).stdout
    assert f"not signalled: 1 process(es) that had left the group at cancel time, pids {escaped_pid}" in shown
    # The cancel's signal did not reach it; the Attempt's monitor, its subreaper, ended it with the
    # Attempt, and the Attempt's reason says so.
    assert process_gone(escaped_pid)
    assert f"1 process(es) it left running were ended with it (pids {escaped_pid})" in shown


def test_cancel_of_a_plain_group_reports_nothing_escaped(harness: Harness) -> None:
    harness.serve()
    run_id = harness.submit("sh", "-c", "sleep 300 & exec sleep 300")
    harness.wait_running(run_id)
    harness.cli("cancel", run_id)
    harness.wait_status(run_id, "cancelled")
    assert "run.cancel_escaped" not in harness.event_types(run_id)
    assert "not signalled" not in harness.cli("show", run_id).stdout


# ------------------------------------------------------------------ output while the service is down

def test_output_written_while_no_service_ran_is_kept_and_the_end_is_true(harness: Harness) -> None:
    harness.serve()
    gate = harness.tmp / "gate"
    run_id = harness.submit("sh", "-c", f"echo before; while [ ! -e {gate} ]; do sleep 0.05; done; echo while-down")
    identity = harness.wait_running(run_id)
    log_path = Path(harness.detail(run_id).attempts[-1].log_path)
    wait_for(lambda: log_path.read_text() == "before\n", "the first line")
    harness.services[-1].stop()
    gate.touch()  # the task now writes and exits with no service running: its monitor reads it
    wait_for(lambda: process_gone(identity.pid), "the task to exit while the service is down")
    harness.serve()
    detail = harness.wait_status(run_id, "succeeded", "failed")
    assert (detail.attempts[-1].status.value, detail.attempts[-1].exit_code) == ("succeeded", 0)
    assert harness.cli("logs", run_id).stdout == "before\nwhile-down\n"
    assert not log_path.with_suffix(".fifo").exists()


def test_a_log_dir_whose_symlink_flips_after_the_check_never_gets_a_log(harness: Harness) -> None:
    """``--log-dir`` is root's own symlink to a private directory when ``serve`` checks it, then
    points at another user's directory (what a flip that a check by name let through does, or a
    flip by whoever may change the symlink): the service holds the directory it checked, so each
    Attempt's log and status file are created, read and swept there, never in the other."""
    good = harness.tmp / "logs-checked"
    good.mkdir(mode=0o700)
    evil = harness.tmp / "logs-attacker"
    evil.mkdir(mode=0o755)
    if os.geteuid() == 0:
        os.chown(evil, 65534, 65534)
    link = harness.tmp / "logs"
    link.symlink_to(good)
    service = harness.serve("--log-dir", str(link))
    flipped = harness.tmp / "logs.flipped"
    flipped.symlink_to(evil)
    os.replace(flipped, link)
    run_id = harness.submit("sh", "-c", "echo out-of-the-task")
    assert harness.wait_status(run_id, "succeeded").status == "succeeded"
    service.stop()
    assert sorted(os.listdir(evil)) == []
    logs = [path for path in good.iterdir() if path.suffix == ".log"]
    assert len(logs) == 1 and logs[0].read_text() == "out-of-the-task\n"
