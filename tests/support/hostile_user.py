"""A second, unprivileged local user for the hardening tests (docs/threat-model.md), made and removed by them.

The service runs as root on a shared device; these tests let a real other user act first (create a
directory, plant a file) and check that the service refuses to trust it. Needs root and ``useradd``;
otherwise the tests that use it skip, saying why. Each test run gets its own user
(``edgeh<pid>-<n>``), so parallel runs in other worktrees never remove each other's; users left by a
killed run (their pid no longer alive) are removed at the next start. One user per test module
that uses it (a fixture imported into two modules is instantiated once in each).
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from typing import NamedTuple

import pytest

_PREFIX = "edgeh"
_serial = itertools.count(1)


class OtherUser(NamedTuple):
    name: str
    uid: int
    gid: int

    def run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        """Run ``argv`` as this user (no supplementary groups), failing the test if it fails."""
        return subprocess.run(argv, user=self.uid, group=self.gid, extra_groups=[], check=True,
                              capture_output=True, text=True, timeout=30, **kwargs)


def _remove_stale() -> None:
    for entry in pwd.getpwall():
        pid = entry.pw_name[len(_PREFIX):].split("-")[0]
        if entry.pw_name.startswith(_PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            subprocess.run(["userdel", entry.pw_name], capture_output=True, check=False)


def _unavailable(reason: str) -> None:
    # CI's artifact smoke test (EDGE_RUNTIME_REQUIRE_ARTIFACT=1) runs as root and must not skip.
    if os.environ.get("EDGE_RUNTIME_REQUIRE_ARTIFACT") == "1":
        pytest.fail(f"{reason} (EDGE_RUNTIME_REQUIRE_ARTIFACT=1)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def other_user() -> Iterator[OtherUser]:
    if os.geteuid() != 0:
        _unavailable("needs root to create a second unprivileged user (useradd)")
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        _unavailable("useradd/userdel are not installed: cannot create a second user")
    _remove_stale()
    name = f"{_PREFIX}{os.getpid()}-{next(_serial)}"
    created = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", name],
                             capture_output=True, text=True, check=False)
    if created.returncode != 0:
        _unavailable(f"useradd failed: {created.stderr.strip()}")
    try:
        entry = pwd.getpwnam(name)
        yield OtherUser(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
