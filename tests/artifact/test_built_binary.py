"""Smoke test of the built artifacts: the executable, not the source tree, does the work.

Runs against ``$EDGE_RUNTIME_ARTIFACT_DIR`` (default: dist/), both forms: the one-file executable and
the one-folder build unpacked from its tarball. Without a current build it skips, saying why; CI
(.ci/run) runs it right after ``make build`` with ``EDGE_RUNTIME_REQUIRE_ARTIFACT=1``, where a
missing or stale build fails instead.

The executables run in a temp directory with a scrubbed environment (no PYTHONPATH, no venv), so
nothing of the source tree can stand in for what the artifact lacks; the stdlib modules the build
excludes are really absent there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_runtime import __version__
from tests.support.artifact_layout import ROOT
from tests.support.built_binary import LIVENESS_TIMEOUT_S, artifact_dir, env, executable, run, wait_for  # noqa: F401


def test_version(executable, env, tmp_path) -> None:
    result = run(executable, ["--version"], env, tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"edge-runtime {__version__}\n", "")


def test_help_is_the_same_as_from_source(executable, env, tmp_path) -> None:
    # optimize=2 drops docstrings; the help must not have depended on them.
    built = run(executable, ["--help"], env, tmp_path)
    source = subprocess.run(
        [sys.executable, "-m", "edge_runtime", "--help"],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0 and source.returncode == 0
    assert built.stdout == source.stdout


def test_creates_a_database_and_checks_it(executable, env, tmp_path) -> None:
    db = tmp_path / "state" / "edge.db"
    migrated = run(executable, ["--db", str(db), "migrate"], env, tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    assert db.is_file()
    checked = run(executable, ["--db", str(db), "check", "--json"], env, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert report["ok"] is True
    # Every migration of the source tree is inside the artifact (edge_runtime/_migrations): the
    # automatic ones are applied, and the opt-in layout steps (9000 and up) run from it too.
    files = sorted(path.stem for path in (ROOT / "local_migrations").glob("*.sql"))
    latest = [name for name in files if int(name[:4]) < 9000][-1]
    (migrations,) = [c for c in report["checks"] if c["name"] == "migrations"]
    assert migrations["detail"].endswith(f"latest {latest}")
    scrubbed = run(executable, ["--db", str(db), "migrate", "--scrub-legacy-tokens"], env, tmp_path)
    assert scrubbed.returncode == 0, scrubbed.stderr
    checked = run(executable, ["--db", str(db), "check", "--json"], env, tmp_path)
    (migrations,) = [c for c in json.loads(checked.stdout)["checks"] if c["name"] == "migrations"]
    assert migrations["detail"].endswith(f"opt-in: {', '.join(n for n in files if int(n[:4]) >= 9000)}")
    # The one-file build cleaned up the directory it unpacked into.
    assert list(Path(env["TMPDIR"]).iterdir()) == []


def test_a_non_ascii_path_works_under_the_c_locale(executable, env, tmp_path) -> None:
    # UTF-8 mode is baked in, so the trimmed codecs are never needed, whatever the router's locale.
    db = tmp_path / "数据" / "édge.db"
    result = run(executable, ["--db", str(db), "migrate"], {**env, "LANG": "C", "LC_ALL": "C"}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert db.is_file()


def test_bad_usage_is_a_clear_error(executable, env, tmp_path) -> None:
    result = run(executable, ["--db", str(tmp_path / "missing.db"), "check"], env, tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("Error: ") and "Traceback" not in result.stderr


def test_the_interpreter_options_are_baked_in(executable) -> None:
    from PyInstaller.archive.readers import CArchiveReader

    options = CArchiveReader(str(executable)).options
    assert options.count("O") == 2 and "X utf8" in options


@pytest.fixture
def service(executable, env, tmp_path) -> Iterator[tuple[Path, subprocess.Popen]]:
    help_text = run(executable, ["--help"], env, tmp_path).stdout
    if "serve" not in help_text.split():
        pytest.skip("this build has no serve command yet")
    db = tmp_path / "svc" / "edge.db"
    log = open(tmp_path / "serve.log", "w")
    process = subprocess.Popen(
        [str(executable), "--db", str(db), "serve", "--grace-ms", "2000"],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: "service.started" in (tmp_path / "serve.log").read_text(), "serve to start")
        yield db, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=LIVENESS_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


@pytest.mark.e2e
def test_serves_runs_a_command_and_cancels_it(executable, service, env, tmp_path) -> None:
    db, process = service
    submitted = run(executable, ["--db", str(db), "submit", "--name", "smoke", "--", "sleep", "60"], env, tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()

    def show() -> dict:
        return _shown(executable, db, run_id, env, tmp_path)

    running = wait_for(lambda: (s := show())["status"] == "running" and s["attempts"][0].get("pid") and s, "the run to start")
    pid = running["attempts"][0]["pid"]
    assert os.path.exists(f"/proc/{pid}")

    cancelled = run(executable, ["--db", str(db), "cancel", run_id, "--reason", "smoke test"], env, tmp_path)
    assert cancelled.returncode == 0, cancelled.stderr
    final = wait_for(lambda: (s := show())["status"] == "cancelled" and s, "the run to be cancelled")
    assert final["attempts"][0]["status"] == "cancelled"
    assert final["cancelRequestedAtMs"] > 0
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or _is_zombie(pid), "the command's process to be gone")

    if executable.parent == artifact_dir():  # the one-file build unpacked itself into $TMPDIR
        assert [p.name.startswith("_MEI") for p in Path(env["TMPDIR"]).iterdir()] == [True]
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=LIVENESS_TIMEOUT_S) == 0
    assert list(Path(env["TMPDIR"]).iterdir()) == []  # and removed it on a clean stop


@pytest.mark.e2e
def test_a_process_the_task_leaves_behind_ends_with_its_run(executable, service, env, tmp_path) -> None:
    """Also where the kernel refuses the monitor's subreaper (qemu-user 7.2, which runs this for
    the router targets): what the task leaves in its own process group is ended with it."""
    db, _process = service
    script = "sleep 300 & echo leftover=$!"
    submitted = run(executable, ["--db", str(db), "submit", "--", "sh", "-c", script], env, tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    final = wait_for(lambda: (s := _shown(executable, db, run_id, env, tmp_path))["status"] == "succeeded" and s,
                     "the run to end")
    logs = run(executable, ["--db", str(db), "logs", run_id], env, tmp_path)
    leftover = int(logs.stdout.split("leftover=")[1].split()[0])
    # The status is written only once the group is empty: nothing of it is left at the end.
    assert not os.path.exists(f"/proc/{leftover}") or _is_zombie(leftover), final


def _shown(executable: Path, db: Path, run_id: str, env: dict[str, str], tmp_path: Path) -> dict:
    """``show RUN --json``, as the built executable answers it."""
    result = run(executable, ["--db", str(db), "show", run_id, "--json"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.e2e
def test_serves_the_panel_page_and_health_with_a_session(executable, env, tmp_path) -> None:
    """The built executable carries the panel (its modules, h11 and the page's files): the page
    and, after a login, /api/health (make cross-test runs this under qemu for each router target)."""
    import re
    import socket

    db = tmp_path / "svc" / "edge.db"
    set_password = run(executable, ["--db", str(db), "panel", "password"], env, tmp_path, input="a panel password\n")
    assert set_password.returncode == 0, set_password.stderr
    log_path = tmp_path / "serve-panel.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen([str(executable), "--db", str(db), "serve", "--panel-listen", "127.0.0.1:0"],
                                   env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        found = wait_for(lambda: re.search(r"panel\.started listen=127\.0\.0\.1:(\d+)", log_path.read_text()),
                         "the panel to start")
        port = int(found.group(1))

        def exchange(text: str) -> bytes:
            with socket.create_connection(("127.0.0.1", port), timeout=LIVENESS_TIMEOUT_S) as sock:
                sock.sendall(text.encode())
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
            return data

        host = f"Host: 127.0.0.1:{port}\r\nConnection: close\r\n"
        page = exchange(f"GET / HTTP/1.1\r\n{host}\r\n")
        assert page.startswith(b"HTTP/1.1 200") and b'id="login-form"' in page
        assert exchange(f"GET /panel.js HTTP/1.1\r\n{host}\r\n").startswith(b"HTTP/1.1 200")
        assert exchange(f"GET /text.js HTTP/1.1\r\n{host}\r\n").startswith(b"HTTP/1.1 200")
        assert exchange(f"GET /api/health HTTP/1.1\r\n{host}\r\n").startswith(b"HTTP/1.1 401")
        body = b'{"password": "a panel password"}'
        login = exchange(f"POST /api/login HTTP/1.1\r\n{host}X-Edge-Panel: 1\r\nContent-Length: {len(body)}\r\n\r\n"
                         + body.decode())
        assert login.startswith(b"HTTP/1.1 200"), login
        token = re.search(rb"edge_panel=([^;]+)", login).group(1).decode()
        health = exchange(f"GET /api/health HTTP/1.1\r\n{host}Cookie: edge_panel={token}\r\n\r\n")
        assert health.startswith(b"HTTP/1.1 200"), health
        assert json.loads(health.partition(b"\r\n\r\n")[2])["sessionLive"] is True
        # The everyday pages' reads, whose modules the build must carry (the device's check among them).
        for target, kind in (("/api/crons", list), ("/api/envs", list), ("/api/subscriptions", list),
                             ("/api/apps", list), ("/api/check", dict)):
            answer = exchange(f"GET {target} HTTP/1.1\r\n{host}Cookie: edge_panel={token}\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200"), answer
            assert isinstance(json.loads(answer.partition(b"\r\n\r\n")[2]), kind)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=LIVENESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
