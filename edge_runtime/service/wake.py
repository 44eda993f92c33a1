"""Waking a sleeping service: Unix datagram sockets that the CLI pokes after it commits.

The service sleeps until its next due time; a ``submit`` or ``cancel`` committed by another
process would otherwise wait for the slow fallback poll. Each running service binds its own
datagram socket ``<pid>.sock`` in a directory next to the database (``<db>.wake/``), so several
services on one database are all woken; the CLI sends one byte to each. A socket whose service
died is refused by the kernel (``ECONNREFUSED``) and removed by the next poke.

A Unix socket path is limited to 107 bytes (``sun_path`` holds 108 with the NUL). When the
directory beside the database would make the path too long, a short directory under
``$XDG_RUNTIME_DIR`` (else ``/tmp``) named by a hash of the database's absolute path is used; it is
created private (0700) and refused if another user owns it.

Delivery is best effort by design: the wake-up only shortens the sleep; the durable state is
already committed, and the fallback poll would find it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import socket
import stat
from pathlib import Path

from edge_runtime.service.errors import WakeSocketError

#: ``sizeof(sun_path)`` on Linux, minus the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107
_LONGEST_NAME = f"{2**22}.sock"  # pid_max is at most 2**22 on Linux
_SUFFIX = ".wake"


def wake_dir(db_path: str | os.PathLike[str], env: dict[str, str] | None = None) -> Path:
    """The directory holding the wake sockets of the services on ``db_path``.

    Raises:
        WakeSocketError: neither beside the database nor under the runtime dir nor /tmp fits.
    """
    absolute = Path(os.path.abspath(os.fspath(db_path)))
    beside = absolute.with_name(absolute.name + _SUFFIX)
    if len(os.fsencode(beside / _LONGEST_NAME)) <= MAX_SOCKET_PATH_BYTES:
        return beside
    env = dict(os.environ) if env is None else env
    key = hashlib.sha256(os.fsencode(absolute)).hexdigest()[:16]
    for base in (env.get("XDG_RUNTIME_DIR"), "/tmp"):
        if base:
            candidate = Path(base) / f"edge-runtime-{key}{_SUFFIX}"
            if len(os.fsencode(candidate / _LONGEST_NAME)) <= MAX_SOCKET_PATH_BYTES:
                return candidate
    raise WakeSocketError(f"no wake socket path short enough for {absolute}")  # only if /tmp moved


def _ensure_private_dir(path: Path) -> None:
    try:
        path.mkdir(mode=0o700, parents=False, exist_ok=True)
        info = path.lstat()
    except OSError as exc:
        raise WakeSocketError(f"cannot create the wake directory {path}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise WakeSocketError(f"wake directory {path} is not a directory owned by this user")


class WakeSocket:
    """The service's end: a non-blocking datagram socket that becomes readable when poked."""

    __slots__ = ("path", "_socket")

    def __init__(self, db_path: str | os.PathLike[str]) -> None:
        directory = wake_dir(db_path)
        _ensure_private_dir(directory)
        self.path = directory / f"{os.getpid()}.sock"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            try:
                self.path.unlink()  # left by an earlier process that had our pid
            except FileNotFoundError:
                pass
            sock.bind(os.fspath(self.path))
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise WakeSocketError(f"cannot bind the wake socket {self.path}: {exc.strerror or exc}") from None
        self._socket: socket.socket | None = sock

    def fileno(self) -> int:
        if self._socket is None:
            raise ValueError("wake socket is closed")
        return self._socket.fileno()

    def drain(self) -> int:
        """Read every pending datagram; how many there were."""
        count = 0
        while self._socket is not None:
            try:
                self._socket.recv(64)
            except (BlockingIOError, InterruptedError):
                break
            count += 1
        return count

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass


def poke(db_path: str | os.PathLike[str]) -> int:
    """Wake every service running on ``db_path``; how many sockets accepted the datagram.

    Never raises for a missing directory, a dead service or a full queue (a full queue means
    that service is already due to wake). Stale sockets of dead services are removed.
    """
    directory = wake_dir(db_path)
    try:
        names = [name for name in os.listdir(directory) if name.endswith(".sock")]
    except FileNotFoundError:
        return 0
    except OSError:
        return 0  # unreadable directory: the fallback poll still finds the committed work
    if not names:
        return 0
    woken = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        for name in names:
            target = directory / name
            try:
                sock.sendto(b"!", os.fspath(target))
                woken += 1
            except BlockingIOError:
                woken += 1
            except ConnectionRefusedError:
                _remove_stale(target)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTSOCK, errno.EACCES, errno.EPERM):
                    raise
    return woken


def _remove_stale(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass  # another poker removed it first, or it is not ours to remove
