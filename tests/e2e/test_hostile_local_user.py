"""Issue 10 point 3, black-box: a second, unprivileged local user plants things where the wake-up
looks (symlinks, sockets of its own, a directory of its own) and root's CLI and service run there.

The user is created with ``useradd`` for the test and removed afterwards; the tests skip, saying
why, when not run as root or when the OS has no ``useradd``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from service_harness import Harness

_AS_USER = r"""
import os, socket, sys, time
wake = sys.argv[1]
os.mkdir(wake, 0o755)
os.symlink(sys.argv[2], os.path.join(wake, "1.sock"))       # a stale socket to remove? no: root's file
stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # made submit exit 1 after committing
stream.bind(os.path.join(wake, "2.sock")); stream.listen(1)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # a datagram socket of this user's
listener.bind(os.path.join(wake, "3.sock")); os.chmod(os.path.join(wake, "3.sock"), 0o777)
listener.settimeout(float(sys.argv[3]))
print("ready", flush=True)
try:
    print("received", listener.recv(16), flush=True)
except socket.timeout:
    print("nothing", flush=True)
"""


@pytest.fixture
def other_user() -> Iterator[tuple[int, int]]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second user (useradd) and to run the service as root")
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("this OS has no useradd/userdel to create a second, unprivileged user")
    name = f"er10b{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True,
                   capture_output=True)
    try:
        import pwd

        entry = pwd.getpwnam(name)
        yield entry.pw_uid, entry.pw_gid
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


def _interpreter_for_other_users() -> str:
    """The test's own interpreter may live under root's home, out of the other user's reach."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK) and os.stat(candidate).st_mode & 0o001:
            return candidate
    pytest.skip("no python3 that an unprivileged user may run (/usr/bin/python3) to plant the sockets")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A sticky, world-writable directory like /tmp (pytest's own tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="er10b-", dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_cli_refuses_another_users_wake_directory_and_the_commit_still_succeeds(
    harness: Harness, other_user: tuple[int, int], shared_dir: Path
) -> None:
    uid, gid = other_user
    harness.db_path = shared_dir / "edge-runtime.db"
    harness.cli("migrate")
    victim = shared_dir / "root-only.txt"
    victim.write_text("precious")
    victim.chmod(0o600)
    planted = subprocess.Popen(
        [_interpreter_for_other_users(), "-c", _AS_USER, f"{harness.db_path}.wake", str(victim), "2"],
        user=uid, group=gid, extra_groups=[], stdout=subprocess.PIPE, text=True, cwd="/",
    )
    try:
        assert planted.stdout.readline().strip() == "ready"
        result = harness.cli("submit", "--", "true", check=False)
        received = planted.stdout.readline().strip()
    finally:
        planted.kill()
        planted.wait(10)
        planted.stdout.close()
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.strip()) == 36  # the Run id: the commit is reported as such
    assert result.stderr.startswith("Warning: committed, but could not wake the service")
    assert "Traceback" not in result.stderr and f"uid {uid}" in result.stderr
    assert victim.read_text() == "precious"  # the planted symlink was not followed into an unlink
    assert (Path(f"{harness.db_path}.wake") / "1.sock").is_symlink()
    assert received == "nothing"  # no datagram went into the other user's socket
    assert harness.cli("show", result.stdout.strip()).returncode == 0


def test_a_symlinked_wake_directory_is_not_followed(harness: Harness, tmp_path: Path) -> None:
    harness.cli("migrate")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as dead:
        dead.bind(str(elsewhere / "9.sock"))  # refused when poked: a plain poke would unlink it
    Path(f"{harness.db_path}.wake").symlink_to(elsewhere)
    result = harness.cli("submit", "--", "true", check=False)
    assert result.returncode == 0 and "refused" in result.stderr and "Traceback" not in result.stderr
    assert (elsewhere / "9.sock").exists()


def test_serve_uses_another_path_when_its_wake_directory_belongs_to_another_user(
    harness: Harness, other_user: tuple[int, int], tmp_path: Path
) -> None:
    uid, gid = other_user
    foreign = Path(f"{harness.db_path}.wake")
    foreign.mkdir(mode=0o755)
    os.chown(foreign, uid, gid)  # created by that user while it could write the folder
    service = harness.serve("--poll-interval-ms", "3600000")
    assert service.process.poll() is None
    own = Path(f"{harness.db_path}.wake.1")
    assert (own / f"{service.process.pid}.sock").exists()
    assert own.stat().st_uid == 0 and own.stat().st_mode & 0o077 == 0
    assert not list(foreign.iterdir())
    assert "wake.directory_refused" in service.log() and f"uid {uid}" in service.log()
    result = harness.cli("submit", "--", "true", check=False)
    assert result.returncode == 0, result.stderr
    assert "wake directory" in result.stderr  # the planted directory is reported, not used
    # The poll is an hour: only the wake-up through the other path can start it this soon.
    harness.wait_status(result.stdout.strip(), "succeeded", timeout=10)
