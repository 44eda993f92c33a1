"""A local user who flips an entry of a sticky directory between their own directory and their
own symlink to a root-owned directory, as fast as the kernel lets them (``renameat2`` with
``RENAME_EXCHANGE``: each flip is atomic, so at any instant the name is one or the other).

The hardening tests start it in a child process that drops to another uid first (the sticky bit
lets that user exchange only entries they own), point the service at the flipped name, and check
that root never opens, creates or lists anything in the user's directory.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest

#: A uid no file of the test belongs to otherwise ("nobody" on most systems).
ATTACKER_UID = 65534
_RENAME_EXCHANGE = 2


class FlipScene(NamedTuple):
    #: root-owned (0700): what the service may use.
    good: Path
    #: the name that is, at any instant, the attacker's directory (0755, their uid) or their
    #: symlink to ``good``: ``<sticky>/x`` (the other one is ``<sticky>/y``).
    flipped: Path

    def evil(self) -> Path:
        """Where the attacker's directory is now (only meaningful while nobody flips)."""
        for name in ("x", "y"):
            path = self.flipped.parent / name
            if not path.is_symlink():
                return path
        raise AssertionError("neither x nor y is the attacker's directory")


@contextmanager
def flip_scene() -> Iterator[FlipScene]:
    """The directories, under a fresh root-owned directory in ``/tmp`` (readable by the attacker:
    ``pytest``'s own temporary directories are private to root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the flip is done by another uid")
    base = Path(tempfile.mkdtemp(prefix="edge-flip-", dir="/tmp"))
    try:
        base.chmod(0o755)
        good = base / "good"
        good.mkdir(mode=0o700)
        sticky = base / "sticky"
        sticky.mkdir()
        sticky.chmod(0o1777)
        evil = sticky / "x"
        evil.mkdir(mode=0o755)
        os.chown(evil, ATTACKER_UID, ATTACKER_UID)
        link = sticky / "y"
        link.symlink_to(good)
        os.lchown(link, ATTACKER_UID, ATTACKER_UID)
        yield FlipScene(good, evil)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def flipping(scene: FlipScene) -> Iterator[None]:
    """The attacker flips ``x`` and ``y`` (their directory, their symlink) until the block ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2"):
        pytest.skip("the C library has no renameat2 (glibc 2.28 or later)")
    renameat2 = libc.renameat2
    pid = os.fork()
    if pid == 0:  # the attacker: another uid, no groups, nothing but flips
        try:
            os.setgroups([])
            os.setgid(ATTACKER_UID)
            os.setuid(ATTACKER_UID)
            fd = os.open(scene.flipped.parent, os.O_RDONLY | os.O_DIRECTORY)
            while True:
                if renameat2(fd, b"x", fd, b"y", _RENAME_EXCHANGE) != 0:
                    os._exit(3)
        finally:
            os._exit(2)
    try:
        yield
        assert os.waitpid(pid, os.WNOHANG) == (0, 0), "the flipper stopped (renameat2 failed?)"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
