"""Trusted paths for the wake-up, black-box: a second, unprivileged local user plants things where the wake-up
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
from tests.support.service_harness import Harness

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


def test_writing_commands_refuse_a_shared_sticky_directory_before_another_user_can_plant_the_wake_socket(
    harness: Harness, other_user: tuple[int, int], shared_dir: Path
) -> None:
    """A database in a sticky, world-writable directory (like /tmp) is refused by every command
    that writes, as serve refuses it: another user could plant ``<db>.wake``, ``-wal`` or logs
    there first. Nothing is created, and no datagram goes anywhere."""
    harness.db_path = shared_dir / "edge-runtime.db"
    for argv in (["migrate"], ["submit", "--", "true"]):
        result = harness.cli(*argv, check=False)
        assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith(f"Error: refusing the database's directory {shared_dir}")
        assert result.stderr.rstrip().endswith("[SERVICE_UNTRUSTED_DIRECTORY]")
    assert list(shared_dir.iterdir()) == []  # no database, no -wal, no wake directory


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
