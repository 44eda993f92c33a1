"""Waking a sleeping service: Unix datagram sockets that the CLI pokes after it commits.

The service sleeps until its next due time; a ``submit`` or ``cancel`` committed by another
process would otherwise wait for the slow fallback poll. Each running service binds its own
datagram socket ``<pid>.sock`` in a directory next to the database (``<db>.wake/``), so several
services on one database are all woken; the CLI sends one byte to each. A socket whose service
died is refused by the kernel (``ECONNREFUSED``) and removed by the next poke.

The directory is trusted only as far as the service and the CLI check it, both the same way: it
is opened with ``O_NOFOLLOW`` (a planted symlink is refused), and must be owned by this user and
not writable by group or other (the rules of ``wake_dir.py``, which the submit hand-off shares).
Inside it only sockets owned by this user are poked or removed. When ``<db>.wake`` is not usable
(another user created it first), the next of ``wake_dir.DIR_SUFFIXES`` is used; the CLI pokes
every usable one.

A Unix socket path is limited to 107 bytes (``sun_path`` holds 108 with the NUL). Sockets are
addressed through the directory's descriptor (``/proc/self/fd/N/<pid>.sock``), which is short
whatever the database path: nothing is ever placed in ``/tmp`` or another shared directory.
Without ``/proc``, the plain path is used when it fits.

Delivery is best effort by design: the wake-up only shortens the sleep; the durable state is
already committed, and the fallback poll would find it.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from edge_runtime.local import wake_dir
from edge_runtime.local.errors import WakeSocketError
from edge_runtime.local.wake_dir import MAX_SOCKET_PATH_BYTES, WAKE_SOCKET_SUFFIX

__all__ = ["MAX_SOCKET_PATH_BYTES", "BoundSocket", "WakeSocket", "bind_in_wake_dir", "poke", "wake_dirs"]


def wake_dirs(db_path: str | os.PathLike[str]) -> tuple[Path, ...]:
    """The directories that may hold the wake sockets of the services on ``db_path``, in order."""
    return tuple(Path(path) for path in wake_dir.wake_dir_paths(db_path))


def _open_private_dir(path: Path, *, create: bool) -> int | None:
    """A descriptor of ``path`` once it is proved ours; None when it does not exist.

    Raises:
        WakeSocketError: a symlink, not a directory, another user's, or writable by others.
    """
    if create:
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise WakeSocketError(f"cannot create the wake directory {path}: {exc.strerror or exc}") from None
    try:
        fd = wake_dir.open_dir(os.fspath(path))
    except OSError as exc:
        raise WakeSocketError(f"wake directory {path} refused: {exc.strerror or exc}") from None
    if fd is None:
        return None
    why = wake_dir.refusal(fd)
    if why is not None:
        os.close(fd)
        raise WakeSocketError(f"wake directory {path} refused: {why}")
    return fd


def _address(dir_fd: int, directory: Path, name: str) -> str:
    """A socket address for ``name`` in the directory held open as ``dir_fd``."""
    address = wake_dir.socket_address(dir_fd, os.fspath(directory), name)
    if address is None:
        raise WakeSocketError(f"no /proc and the wake socket path {directory / name} is too long for a Unix socket")
    return address


def _private_dirs(db_path: str | os.PathLike[str], refused: list[str], *, create: bool) -> Iterator[tuple[Path, int]]:
    """Each usable wake directory of ``db_path`` with an open fd the caller closes, in order; why
    each refused one was refused is appended to ``refused`` (a missing one is skipped quietly)."""
    for directory in wake_dirs(db_path):
        try:
            dir_fd = _open_private_dir(directory, create=create)
        except WakeSocketError as exc:
            refused.append(str(exc))
            continue
        if dir_fd is not None:
            yield directory, dir_fd


class BoundSocket:
    """A socket bound in a wake directory, with the directory held open until ``close`` closes
    the socket and removes its file (idempotent)."""

    __slots__ = ("socket", "path", "_dir_fd")

    def __init__(self, sock: socket.socket, path: Path, dir_fd: int) -> None:
        self.socket: socket.socket | None = sock
        self.path = path
        self._dir_fd: int | None = dir_fd

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close()
            self.socket = None
        if self._dir_fd is not None:
            wake_dir.unlink_socket(self._dir_fd, self.path.name)
            os.close(self._dir_fd)
            self._dir_fd = None


def bind_in_wake_dir(db_path: str | os.PathLike[str], suffix: str, kind: int) -> tuple[BoundSocket, list[str]]:
    """A socket of ``kind`` bound as ``<pid><suffix>`` in the first usable wake directory of
    ``db_path`` (created private when missing), and why earlier directories were refused.

    Raises:
        WakeSocketError: no directory is usable, or the socket cannot be bound.
    """
    refused: list[str] = []
    found = next(_private_dirs(db_path, refused, create=True), None)
    if found is None:
        raise WakeSocketError("; ".join(refused))
    directory, dir_fd = found
    name = f"{os.getpid()}{suffix}"
    sock = socket.socket(socket.AF_UNIX, kind)
    try:
        if wake_dir.own_socket(dir_fd, name):
            os.unlink(name, dir_fd=dir_fd)  # left by an earlier process that had our pid
        sock.bind(_address(dir_fd, directory, name))
    except (OSError, WakeSocketError) as exc:
        sock.close()
        os.close(dir_fd)
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise WakeSocketError(f"cannot bind the socket {directory / name}: {detail}") from None
    return BoundSocket(sock, directory / name, dir_fd), refused


class WakeSocket:
    """The service's end: a non-blocking datagram socket that becomes readable when poked."""

    __slots__ = ("path", "refused", "_bound")

    def __init__(self, db_path: str | os.PathLike[str]) -> None:
        self._bound, refused = bind_in_wake_dir(db_path, WAKE_SOCKET_SUFFIX, socket.SOCK_DGRAM)
        self._bound.socket.setblocking(False)
        self.path = self._bound.path
        #: Why the directories before the one used were not (for the service's log).
        self.refused: list[str] = refused

    @property
    def where(self) -> str:
        return str(self.path.parent)

    def fileno(self) -> int:
        if self._bound.socket is None:
            raise ValueError("wake socket is closed")
        return self._bound.socket.fileno()

    def drain(self) -> int:
        """Read every pending datagram; how many there were."""
        count = 0
        while self._bound.socket is not None:
            try:
                self._bound.socket.recv(64)
            except (BlockingIOError, InterruptedError):
                break
            count += 1
        return count

    def close(self) -> None:
        self._bound.close()


def poke(db_path: str | os.PathLike[str]) -> int:
    """Wake every service running on ``db_path``; how many sockets accepted the datagram.

    Missing directories, dead services and full queues (that service is already due to wake) are
    normal. Stale sockets of dead services are removed: only sockets owned by this user, in a
    directory that passed the same checks as the service's.

    Raises:
        WakeSocketError: after poking every usable directory, when one was refused (a symlink,
            another user's directory) or a socket could not be poked; the caller warns.
    """
    woken, problems = 0, []
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        for directory, dir_fd in _private_dirs(db_path, problems, create=False):
            try:
                woken += _poke_dir(sock, dir_fd, directory, problems)
            finally:
                os.close(dir_fd)
    if problems:
        raise WakeSocketError(f"woke {woken} service(s); {'; '.join(problems)}")
    return woken


def _poke_dir(sock: socket.socket, dir_fd: int, directory: Path, problems: list[str]) -> int:
    woken = 0
    for name in os.listdir(dir_fd):
        if not name.endswith(WAKE_SOCKET_SUFFIX) or not wake_dir.own_socket(dir_fd, name):
            continue
        try:
            sock.sendto(b"!", _address(dir_fd, directory, name))
            woken += 1
        except BlockingIOError:
            woken += 1
        except ConnectionRefusedError:
            wake_dir.unlink_socket(dir_fd, name)  # its service died; checked above to be our socket
        except OSError as exc:
            if exc.errno != errno.ENOENT:  # ENOENT: its service removed it meanwhile
                problems.append(f"{directory / name}: {exc.strerror or exc}")
        except WakeSocketError as exc:
            problems.append(str(exc))
    return woken
