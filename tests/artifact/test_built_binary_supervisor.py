"""The built one-file executable under a supervisor that escalates to SIGKILL.

The one-file build is two processes: the launcher (PyInstaller's bootloader; the pid a supervisor
sees) and the Python child doing the work. A SIGKILL of the launcher cannot be forwarded; the child
must end by itself (edge_runtime/cli/launcher.py): ``serve`` stops cleanly, leaving its Attempts to
the next start, and any other command is killed. Without a current build these tests skip; CI
(.ci/run) runs them right after ``make build`` with ``EDGE_RUNTIME_REQUIRE_ARTIFACT=1``, where they
cannot. The one-folder build runs Python in one process, so it has nothing to test here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.artifact_layout import ROOT, load_path_module
from tests.support.built_binary import ARTIFACT_DIR_ENV, LIVENESS_TIMEOUT_S, artifact_dir, unavailable, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def onefile() -> Path:
    dist = artifact_dir()
    path = dist / "edge-runtime"
    if not path.is_file():
        unavailable(f"no one-file build at {path}")
    if ARTIFACT_DIR_ENV not in os.environ:
        build = load_path_module("edge_runtime_build_script", ROOT / "build" / "build.py")
        if not build.dist_is_current():
            unavailable("dist/ holds a build of older sources")
    return path


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A scrubbed environment, as in test_built_binary.py; TMPDIR is where the build unpacks."""
    (tmp_path / "home").mkdir()
    (tmp_path / "unpack").mkdir()
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "unpack"),
            "LANG": "C.UTF-8"}


class Cli:
    """Runs the one-file executable on one database; remembers every process it starts."""

    def __init__(self, executable: Path, db: Path, env: dict[str, str], cwd: Path) -> None:
        self.executable, self.db, self.env, self.cwd = executable, db, env, cwd
        self.started: list[subprocess.Popen] = []
        self.strays: list[int] = []  # children and Attempts to kill if a test fails half-way

    def __call__(self, *args: str) -> str:
        result = subprocess.run([str(self.executable), "--db", str(self.db), *args], env=self.env, cwd=self.cwd,
                                capture_output=True, text=True, timeout=LIVENESS_TIMEOUT_S, check=False)
        assert result.returncode == 0, f"{args}: {result.stderr}"
        return result.stdout

    def start(self, *args: str, **popen) -> subprocess.Popen:
        process = subprocess.Popen([str(self.executable), "--db", str(self.db), *args], env=self.env, cwd=self.cwd,
                                   **popen)
        self.started.append(process)
        return process

    def show(self, run_id: str) -> dict:
        return json.loads(self("show", run_id, "--json"))

    def serve(self, log: Path) -> subprocess.Popen:
        with open(log, "ab") as out:
            process = self.start("serve", "--grace-ms", "2000", stdout=out, stderr=subprocess.STDOUT)
        wait_for(lambda: "service.started" in log.read_text(), "serve to start")
        return process


@pytest.fixture
def cli(onefile, env, tmp_path) -> Iterator[Cli]:
    cli = Cli(onefile, tmp_path / "state" / "edge.db", env, tmp_path)
    yield cli
    for process in cli.started:
        if process.poll() is None:
            process.kill()
            process.wait()
    for pid in cli.strays:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def _alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z", "X")  # a zombie has exited; init may be slow to reap it


def _child_of(pid: int) -> int:
    """The one-file launcher's Python child."""
    def find() -> list[int]:
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                found.append(int(stat.parent.name))
        return found
    (child,) = wait_for(find, f"the Python child of launcher {pid}")
    return child


def _kill_launcher_and_wait_for_child(cli: Cli, launcher: subprocess.Popen) -> tuple[int, float]:
    """SIGKILL the launcher, as a supervisor's escalation does; the child must end by itself."""
    child = _child_of(launcher.pid)
    cli.strays.append(child)
    assert _alive(child)
    launcher.kill()
    assert launcher.wait(timeout=LIVENESS_TIMEOUT_S) == -signal.SIGKILL
    killed_at = time.monotonic()
    wait_for(lambda: not _alive(child), f"the child {child} to end after its launcher was killed")
    return child, time.monotonic() - killed_at


def _wait_for_unpack_dir_removed(env: dict[str, str]) -> None:
    """The child's reaper removes the dead launcher's unpack dir just after the child has exited."""
    wait_for(lambda: not list(Path(env["TMPDIR"]).iterdir()), "the unpack directory to be removed")


def test_serve_stops_with_its_killed_launcher_and_a_new_serve_readopts_its_attempt(cli, env, tmp_path) -> None:
    first_log, second_log = tmp_path / "serve-1.log", tmp_path / "serve-2.log"
    first = cli.serve(first_log)
    run_id = cli("submit", "--name", "survivor", "--", "sleep", "300").strip()
    running = wait_for(lambda: (s := cli.show(run_id))["status"] == "running" and s["attempts"][0].get("pid") and s,
                       "the run to start")
    attempt_pid = running["attempts"][0]["pid"]
    cli.strays.append(attempt_pid)

    child, elapsed = _kill_launcher_and_wait_for_child(cli, first)
    print(f"serve child {child} ended {elapsed:.2f} s after its launcher was killed")

    log = first_log.read_text()
    assert "launcher (pid" in log and "exited" in log  # it said why it stopped
    assert "service.stopped" in log  # a clean stop (SIGTERM), not a kill
    _wait_for_unpack_dir_removed(env)  # the unpack dir the launcher left is gone too
    assert _alive(attempt_pid)  # the Attempt was left running, to be re-adopted

    second = cli.serve(second_log)
    wait_for(lambda: f"attempt.adopted run={run_id}" in second_log.read_text(), "the new serve to re-adopt the Attempt")
    assert f"pid={attempt_pid}" in second_log.read_text()
    # The new service owns the Attempt: a cancel goes through it and ends the process.
    cli("cancel", run_id, "--reason", "supervisor test")
    wait_for(lambda: cli.show(run_id)["status"] == "cancelled", "the re-adopted run to be cancelled")
    wait_for(lambda: not _alive(attempt_pid), "the re-adopted Attempt's process to end")

    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=LIVENESS_TIMEOUT_S) == 0
    assert list(Path(env["TMPDIR"]).iterdir()) == []


def test_a_long_cli_command_dies_with_its_killed_launcher(cli, env, tmp_path) -> None:
    # A Run whose log is far bigger than a pipe's buffer.
    serve_log = tmp_path / "serve.log"
    service = cli.serve(serve_log)
    run_id = cli("submit", "--name", "big-log", "--", "seq", "1", "200000").strip()
    wait_for(lambda: cli.show(run_id)["status"] == "succeeded", "the run to finish")
    service.send_signal(signal.SIGTERM)
    assert service.wait(timeout=LIVENESS_TIMEOUT_S) == 0

    # `logs`, read slowly through a pipe: the command blocks writing, as behind a slow consumer.
    reader = cli.start("logs", run_id, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        first = reader.stdout.read(4096)
        assert first.startswith(b"1\n2\n3\n")
        time.sleep(0.5)
        reader.stdout.read(4096)

        child, elapsed = _kill_launcher_and_wait_for_child(cli, reader)
        print(f"logs child {child} ended {elapsed:.2f} s after its launcher was killed")
        _wait_for_unpack_dir_removed(env)
    finally:
        reader.stdout.close()


def test_a_launcher_killed_while_its_child_starts_leaves_no_child(cli, env, tmp_path) -> None:
    # Killed as soon as the child exists, most often before its Python reached the CLI: the child
    # then finds itself re-parented at start and ends at once (else its watch ends it).
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        launcher = cli.start("serve", stdout=out, stderr=subprocess.STDOUT)
    child, elapsed = _kill_launcher_and_wait_for_child(cli, launcher)
    print(f"starting child {child} ended {elapsed:.2f} s after its launcher was killed")
    _wait_for_unpack_dir_removed(env)
