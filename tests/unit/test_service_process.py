"""Process identity, the controller's identity checks and the executor, against real processes."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_runtime.contract.cancellation_dispatch import DispatchResult
from edge_runtime.contract.runs import ProcessIdentity
from edge_runtime.service.controller import KillOutcome, LocalProcessController
from edge_runtime.service.errors import SpawnError
from edge_runtime.service.process_identity import parse_stat, read_boot_id, read_identity, read_stat
from edge_runtime.service.log_capture import status_path_of
from tests.support.monitor import exit_status, spawn_monitored, wait_for_monitor_end


def test_parse_stat_counts_fields_after_the_last_paren_of_comm() -> None:
    # A comm with spaces and parentheses must not shift the fields.
    rest = " ".join(str(n) for n in range(4, 53))
    stat = parse_stat(42, f"42 (we ird) (x) S {rest}\n")
    assert (stat.state, stat.pgid, stat.session, stat.start_ticks) == ("S", 5, 6, 22)


def test_parse_stat_rejects_a_short_line() -> None:
    with pytest.raises(ValueError, match="too few fields"):
        parse_stat(1, "1 (init) S 0 1")


def test_identity_of_this_process_is_stable_and_matches_os() -> None:
    first = read_identity(os.getpid())
    second = read_identity(os.getpid())
    assert first == second
    assert first.pgid == os.getpgid(0)
    assert first.boot_id == read_boot_id()
    assert read_stat(2**22 + 1) is None  # above pid_max: never a process


@pytest.fixture
def groups() -> Iterator[list[int]]:
    """Process groups started by a test; SIGKILLed and reaped whatever the test did."""
    started: list[int] = []
    yield started
    for pgid in started:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _spawn(argv: list[str], out: Path, groups: list[int]) -> ProcessIdentity:
    identity = spawn_monitored(argv, out)
    groups.append(identity.pgid)
    return identity


def _wait_exit(out: Path, timeout: float = 10.0) -> int:
    """The exit status the monitor kept for the process whose output is ``out``."""
    return exit_status(out, timeout)


def test_spawn_runs_in_a_new_session_with_stdin_from_devnull(tmp_path: Path, groups: list[int]) -> None:
    out = tmp_path / "out"
    identity = _spawn(["sh", "-c", "echo sid=$(ps -o sid= -p $$ 2>/dev/null || echo x); cat; echo err >&2; exit 3"],
                      out, groups)
    assert identity.pid == identity.pgid
    assert identity.pgid != os.getpgid(0)
    assert _wait_exit(out) == 3
    assert "err" in out.read_text()


def test_spawn_records_the_tasks_own_group_and_the_monitor_is_outside_it(tmp_path: Path, groups: list[int]) -> None:
    # The monitor reports only after the exec, and the task ran setsid before it: /proc shows its
    # own group at once. Its parent, the monitor, is in neither the task's group nor ours.
    identity = _spawn(["sleep", "30"], tmp_path / "out", groups)
    stat = read_stat(identity.pid)
    assert identity.pgid == identity.pid == stat.pgid == stat.session != os.getpgid(0)
    monitor = read_stat(stat.ppid)
    assert monitor.pid != os.getpid() and monitor.pgid not in (identity.pgid, os.getpgid(0))
    os.killpg(identity.pgid, signal.SIGTERM)
    assert _wait_exit(tmp_path / "out") == -signal.SIGTERM


def test_spawn_of_a_missing_program_is_a_spawn_error(tmp_path: Path, groups: list[int]) -> None:
    with pytest.raises(SpawnError, match="cannot start 'no-such-program-xyz'"):
        _spawn(["no-such-program-xyz"], tmp_path / "out", groups)


def test_an_environment_beyond_what_the_kernel_takes_fails_the_start_saying_how_big(tmp_path: Path,
                                                                                     groups: list[int]) -> None:
    """Linux caps a new program's arguments and environment together at a quarter of the stack
    limit and never above 6 MiB: 7 MiB of strings, each below MAX_ARG_STRLEN, is always refused."""
    env = {"PATH": os.environ["PATH"], **{f"BIG{index}": "x" * 100_000 for index in range(70)}}
    with pytest.raises(SpawnError, match=r"Argument list too long \(its command and environment are \d+ strings of "
                                         r"\d+ bytes, the longest 100007; Linux allows one string at most 131072 "
                                         r"bytes and all of them together a quarter of the stack limit") as refused:
        spawn_monitored(["true"], tmp_path / "out", env=env)
    assert not refused.value.retryable and not refused.value.started


def test_a_signal_death_is_kept_as_the_negative_signal(tmp_path: Path, groups: list[int]) -> None:
    identity = _spawn(["sleep", "30"], tmp_path / "out", groups)
    os.killpg(identity.pgid, signal.SIGUSR1)
    assert _wait_exit(tmp_path / "out") == -signal.SIGUSR1


def test_controller_terminates_the_whole_group(tmp_path: Path, groups: list[int]) -> None:
    pids = tmp_path / "pids"
    identity = _spawn(["sh", "-c", f"sleep 30 & echo $! >> {pids}; sleep 30 & echo $! >> {pids}; wait"],
                      tmp_path / "out", groups)
    deadline = time.monotonic() + 5
    while (not pids.exists() or len(pids.read_text().split()) < 2) and time.monotonic() < deadline:
        time.sleep(0.01)
    children = [int(p) for p in pids.read_text().split()]
    assert LocalProcessController().request_termination(identity) is DispatchResult.TERMINATION_REQUESTED
    _wait_exit(tmp_path / "out")
    deadline = time.monotonic() + 5
    while any(read_stat(p) is not None and not read_stat(p).is_zombie for p in children):
        assert time.monotonic() < deadline, "grandchildren survived SIGTERM to the group"
        time.sleep(0.01)


def test_controller_refuses_a_reused_pid(tmp_path: Path) -> None:
    # A live unrelated process (not in a group of ours) has the recorded pid, but started later.
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        real = read_identity(victim.pid)
        recorded = ProcessIdentity(victim.pid, victim.pid, real.start_ticks - 1, real.boot_id)
        sent: list[tuple[int, int]] = []
        controller = LocalProcessController(killpg=lambda pgid, sig: sent.append((pgid, sig)))
        assert controller.request_termination(recorded) is DispatchResult.IDENTITY_MISMATCH
        assert controller.force_kill(recorded) is KillOutcome.IDENTITY_MISMATCH
        assert sent == []
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_controller_pid_mismatch_when_the_process_left_its_group() -> None:
    me = read_identity(os.getpid())
    recorded = ProcessIdentity(me.pid, me.pgid + 1, me.start_ticks, me.boot_id)
    sent: list[tuple[int, int]] = []
    controller = LocalProcessController(killpg=lambda pgid, sig: sent.append((pgid, sig)))
    assert controller.request_termination(recorded) is DispatchResult.PID_MISMATCH
    assert sent == []


def test_controller_already_exited_for_another_boot_or_a_gone_process(tmp_path: Path, groups: list[int]) -> None:
    me = read_identity(os.getpid())
    controller = LocalProcessController(killpg=lambda pgid, sig: pytest.fail("must not signal"))
    other_boot = ProcessIdentity(me.pid, me.pgid, me.start_ticks, "00000000-0000-0000-0000-000000000000")
    assert controller.request_termination(other_boot) is DispatchResult.ALREADY_EXITED
    identity = _spawn(["true"], tmp_path / "out", groups)
    _wait_exit(tmp_path / "out")
    assert controller.request_termination(identity) is DispatchResult.ALREADY_EXITED
    assert controller.force_kill(identity) is KillOutcome.ALREADY_EXITED
    assert controller.request_termination(None) is DispatchResult.HANDLE_MISSING


def test_controller_maps_eperm_to_a_retryable_dispatch_error() -> None:
    def refuse(pgid: int, sig: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    me = read_identity(os.getpid())
    assert LocalProcessController(killpg=refuse).request_termination(me) is DispatchResult.DISPATCH_ERROR


def test_force_kill_reaches_children_left_behind_by_the_leader(tmp_path: Path, groups: list[int]) -> None:
    # The monitor gives what the leader left its grace (30 s here) after SIGTERM, which this one
    # ignores: the group outlives the leader until the controller's SIGKILL.
    pids = tmp_path / "pids"
    identity = spawn_monitored(["sh", "-c", f"trap '' TERM; sleep 30 & echo $! > {pids}; exit 0"], tmp_path / "out",
                               leftover_grace_ms=30_000)
    groups.append(identity.pgid)
    deadline = time.monotonic() + 10
    while (stat := read_stat(identity.pid)) is not None and stat.state != "Z":
        assert time.monotonic() < deadline, "the leader did not exit"
        time.sleep(0.01)
    orphan = int(pids.read_text())
    controller = LocalProcessController()
    assert controller.group_alive(identity)
    assert controller.force_kill(identity) is KillOutcome.KILLED
    deadline = time.monotonic() + 5
    while controller.group_alive(identity):
        assert time.monotonic() < deadline, f"orphan {orphan} survived SIGKILL"
        time.sleep(0.01)
    end = wait_for_monitor_end(status_path_of(tmp_path / "out"))
    assert (end.status, end.leftovers, end.killed, end.pids) == (0, 1, 1, (orphan,))


def test_a_spawned_process_has_default_signal_dispositions(tmp_path: Path, groups: list[int]) -> None:
    out = tmp_path / "out"
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup; Python ignores SIGPIPE
    try:
        identity = _spawn(["cat", "/proc/self/status"], out, groups)
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert _wait_exit(out) == 0
    fields = dict(line.split(":", 1) for line in out.read_text().splitlines() if ":" in line)
    standard = (1 << 31) - 1  # signals 1..31; 32 and 33 belong to the C library
    assert int(fields["SigIgn"].strip(), 16) & standard == 0
    assert int(fields["SigBlk"].strip(), 16) & standard == 0


@pytest.mark.parametrize("user", [["1000", "1000", "-"], ["1000", "1000", "10,20"]])
def test_the_monitor_takes_a_user_of_decimal_ids(user: list[str]) -> None:
    from edge_runtime.service.monitor import monitor_path

    # Only the arguments are checked here: without descriptors 3-5 it stops right after them.
    result = subprocess.run([str(monitor_path()), "--user", *user, "1024", "0", "0", "--", "true"],
                            capture_output=True, text=True, timeout=10)
    assert "descriptor 3 missing" in result.stderr and result.returncode == 2


@pytest.mark.parametrize("user", [["-1", "0", "-"], ["1000", "", "-"], ["4294967295", "0", "-"], ["4294967296", "0", "-"],
                                  ["9999999999", "0", "-"], ["12345678901", "0", "-"], ["1000", "0", "1,,2"],
                                  ["1000", "0", "x"], ["1000", "0", ""], ["01x", "0", "-"],
                                  ["1000", "0", ",".join(["1"] * 257)]])
def test_the_monitor_refuses_a_user_that_is_not_decimal_ids(user: list[str]) -> None:
    from edge_runtime.service.monitor import monitor_path

    result = subprocess.run([str(monitor_path()), "--user", *user, "1024", "0", "0", "--", "true"],
                            capture_output=True, text=True, timeout=10)
    assert result.returncode == 2 and "--user takes UID GID GROUPS" in result.stderr, result.stderr
