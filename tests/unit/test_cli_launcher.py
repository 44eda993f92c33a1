"""The one-file child's tie to its launcher (edge_runtime/cli/launcher.py), from source.

A fake launcher stands in for PyInstaller's bootloader: it makes the unpack directory the way the
bootloader names it (``_MEI`` + its pid as %08x + six characters), starts a Python child that
believes it is frozen (``sys.frozen``, ``sys._MEIPASS``) and waits for it. The tests kill the
launcher with SIGKILL, as a supervisor's escalation does, and watch the child.
tests/artifact/test_built_binary_supervisor.py does the same with the real one-file build.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from edge_runtime.cli import launcher

ROOT = Path(__file__).resolve().parents[2]
LIVENESS_TIMEOUT_S = 30.0  # a guard against hanging, not a performance assertion

# The fake launcher: argv = tmp dir, command, mode. Prints the child's pid, then waits for it
# (mode "race": exits at once, before the child has bound itself).
FAKE_LAUNCHER = """
import os, subprocess, sys
tmp, command, mode = sys.argv[1:4]
home = os.path.join(tmp, "_MEI%08xab12CD" % os.getpid())
os.mkdir(home, 0o700)
for n in range(2000 if mode == "loading" else 1):  # "loading": a removal that takes a while
    open(os.path.join(home, "lib%d.so" % n), "w").close()
child = subprocess.Popen([sys.executable, "-c", sys.argv[4], home, command, mode])
print(child.pid, flush=True)
if mode != "race":
    child.wait()
"""

# The child: what the CLI does first, then a serve-like SIGTERM handler or a long command.
FAKE_CHILD = """
import os, signal, sys, time
home, command, mode = sys.argv[1:4]
sys.frozen, sys._MEIPASS = True, home
from edge_runtime.cli import launcher
tmp = os.path.dirname(home)
if mode == "race":  # wait until the launcher is gone: the watch starts too late
    while os.getppid() == launcher.launcher_pid():
        time.sleep(0.01)
if mode == "poll":  # a kernel without pidfds
    launcher.open_pidfd, launcher._POLL_S = (lambda pid: None), 0.05
launcher.bind_to_launcher(command)
if mode == "loading":  # still starting, loading from the unpack directory, when the launcher dies
    open(os.path.join(tmp, "bound"), "w").close()
    while True:
        try:
            open(os.path.join(home, "lib1999.so")).close()
        except FileNotFoundError:
            open(os.path.join(tmp, "home-gone-while-alive"), "w").close()
            sys.exit(3)
if mode == "stuck":  # a serve that does not stop on SIGTERM
    launcher._STOP_TIMEOUT_S = 0.3
if command == "serve":
    def stop(signum, frame):
        open(os.path.join(tmp, "got-sigterm"), "w").close()
        if mode != "stuck":
            sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
open(os.path.join(tmp, "bound"), "w").close()
while True:
    time.sleep(60)
"""


def _gone(pid: int) -> bool:
    """Exited: no longer in /proc, or a zombie (the container's init may be slow to reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + LIVENESS_TIMEOUT_S
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {LIVENESS_TIMEOUT_S} s waiting for {what}")
        time.sleep(0.02)


def _start(tmp_path: Path, command: str, mode: str) -> tuple[subprocess.Popen, int, Path]:
    fake = subprocess.Popen(
        [sys.executable, "-c", FAKE_LAUNCHER, str(tmp_path), command, mode, FAKE_CHILD],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    child = int(fake.stdout.readline())
    fake.stdout.close()
    (home,) = tmp_path.glob("_MEI*")
    return fake, child, home


def _stop(pid: int) -> None:
    if not _gone(pid):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("mode", ["pidfd", "poll"])
def test_a_command_is_killed_with_its_launcher_and_its_unpack_dir_removed(tmp_path, mode) -> None:
    fake, child, home = _start(tmp_path, "logs", mode)
    try:
        _wait_for((tmp_path / "bound").exists, "the child to bind itself")
        fake.kill()
        fake.wait()
        _wait_for(lambda: _gone(child), "the child to die with its launcher")
        _wait_for(lambda: not home.exists(), "the unpack dir to be removed")  # the launcher no longer can
    finally:
        _stop(child)


def test_serve_is_stopped_with_sigterm_when_its_launcher_is_killed(tmp_path) -> None:
    fake, child, home = _start(tmp_path, "serve", "pidfd")
    try:
        _wait_for((tmp_path / "bound").exists, "the child to bind itself")
        fake.kill()
        fake.wait()
        _wait_for(lambda: _gone(child), "the child to stop with its launcher")
        assert (tmp_path / "got-sigterm").exists()  # its SIGTERM handler ran: a clean stop
        _wait_for(lambda: not home.exists(), "the unpack dir to be removed after the clean stop")
    finally:
        _stop(child)


def test_serve_that_does_not_stop_after_its_launcher_died_is_killed(tmp_path) -> None:
    fake, child, home = _start(tmp_path, "serve", "stuck")
    try:
        _wait_for((tmp_path / "bound").exists, "the child to bind itself")
        fake.kill()
        fake.wait()
        _wait_for((tmp_path / "got-sigterm").exists, "the child to get SIGTERM")
        _wait_for(lambda: _gone(child), "the stuck child to be killed")
        _wait_for(lambda: not home.exists(), "the unpack dir to be removed after the kill")
    finally:
        _stop(child)


@pytest.mark.parametrize("command", ["serve", "logs"])
def test_a_launcher_already_gone_at_start_ends_the_child_at_once(tmp_path, command) -> None:
    fake, child, home = _start(tmp_path, command, "race")
    try:
        fake.wait()
        _wait_for(lambda: _gone(child), "the child to end itself")
        assert not (tmp_path / "bound").exists()  # it never got past the start-up check
        _wait_for(lambda: not home.exists(), "the unpack dir to be removed")
    finally:
        _stop(child)


@pytest.mark.parametrize("command", ["serve", "logs"])
def test_the_unpack_dir_outlives_a_child_still_loading_from_it(tmp_path, command) -> None:
    # The CI failure this guards: the watch thread removed the directory while the main thread was
    # still starting; the start failed half-way and left the directory half removed.
    for attempt in range(5):
        fake, child, home = _start(tmp_path, command, "loading")
        try:
            _wait_for((tmp_path / "bound").exists, "the child to bind itself")
            fake.kill()
            fake.wait()
            _wait_for(lambda: _gone(child), "the child to end with its launcher")
            assert not (tmp_path / "home-gone-while-alive").exists(), f"attempt {attempt}"
            _wait_for(lambda: not home.exists(), "the unpack dir to be removed")
            (tmp_path / "bound").unlink()
        finally:
            _stop(child)


def test_a_child_whose_parent_is_not_its_live_launcher_is_left_alone(tmp_path) -> None:
    # What the bootloader does when the same executable runs with a one-file child's environment
    # (e.g. a Run's command calling edge-runtime before the service scrubbed that environment):
    # Python runs at once, in a process whose parent is not the launcher named in the directory.
    other = subprocess.Popen(["sleep", "60"])
    home = tmp_path / f"_MEI{other.pid:08x}ab12CD"
    home.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-c", FAKE_CHILD, str(home), "logs", "nested"], env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    try:
        _wait_for((tmp_path / "bound").exists, "the child to start")
        assert child.poll() is None and home.exists()
    finally:
        child.kill()
        child.wait()
        other.kill()
        other.wait()


def test_launcher_pid_reads_the_bootloader_directory_name(monkeypatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    for home, expected in [
        ("/tmp/_MEI0000abcdXy12Z9", 0xABCD),
        ("/var/run/edge/_MEI003fffffabcdef", 0x3FFFFF),
        ("/opt/edge-runtime/_internal", None),  # the one-folder build
        ("/tmp/_MEI0000abcdXy12Z", None),  # not the bootloader's length
        ("/tmp/_MEI+000abcdXy12Z9", None),  # not a %08x pid
        ("/tmp/_MEI0000ABCDXy12Z9", None),  # %08x is lower case
        ("", None),
    ]:
        monkeypatch.setattr(sys, "_MEIPASS", home, raising=False)
        assert launcher.launcher_pid() == expected, home


def test_from_source_binding_is_a_no_op(monkeypatch) -> None:
    monkeypatch.delattr(sys, "frozen", raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", "/tmp/_MEI0000abcdXy12Z9", raising=False)  # not frozen: ignored
    before = threading.active_count()
    launcher.bind_to_launcher("serve")
    assert launcher.launcher_pid() is None
    assert threading.active_count() == before


def test_a_one_file_home_that_names_no_launcher_is_said_not_bound(monkeypatch, capsys) -> None:
    # PyInstaller 6.11's bootloader named the directory _MEI + six random characters.
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", "/tmp/_MEIXy12Z9", raising=False)
    before = threading.active_count()
    launcher.bind_to_launcher("serve")
    assert threading.active_count() == before
    assert "will outlive a SIGKILL" in capsys.readouterr().err
    monkeypatch.setattr(sys, "_MEIPASS", "/opt/edge-runtime/_internal", raising=False)  # one-folder: silent
    launcher.bind_to_launcher("serve")
    assert capsys.readouterr().err == ""


def test_the_cli_binds_a_frozen_process_first_with_its_command(monkeypatch, capsys) -> None:
    from edge_runtime.cli.main import main

    bound = []
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(launcher, "bind_to_launcher", bound.append)
    with pytest.raises(SystemExit):
        main(["--db", "unused.db", "serve", "--no-such-flag"])  # refused by argparse, after the binding
    assert main(["--version"]) == 0  # answered before the parser is built, still after the binding
    assert bound == ["serve", None]
