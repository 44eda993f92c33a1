"""The wake directory beside the database (``<db>.wake/``) and the sockets a running service
keeps in it: ``<pid>.sock`` (the wake-up datagram, ``wake.py``) and ``<pid>.submit`` (the submit
hand-off, ``submit_handoff.py``).

The rules that make the directory trusted live here once, for the service that binds and for
every process that connects: opened with ``O_NOFOLLOW`` (a planted symlink is refused), owned by
this user and writable by nobody else; inside it, only sockets owned by this user are used.

This module imports nothing beyond the interpreter's start-up set (``os`` and ``stat``): a
``submit`` handed to the running service runs it before anything else is loaded.
"""

from __future__ import annotations

import os
import stat

#: ``sizeof(sun_path)`` on Linux, minus the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107
#: The wake directories of one database, in order: when ``<db>.wake`` is not usable (another
#: user created it first), the next one is used; a client looks in every usable one.
DIR_SUFFIXES = (".wake", ".wake.1", ".wake.2")
#: The name endings of the two sockets a service binds (``<pid><suffix>``).
WAKE_SOCKET_SUFFIX = ".sock"
SUBMIT_SOCKET_SUFFIX = ".submit"


def wake_dir_paths(db_path: str | os.PathLike[str]) -> tuple[str, ...]:
    """The directories that may hold the sockets of the services on ``db_path``, in order."""
    absolute = os.path.abspath(os.fspath(db_path))
    return tuple(absolute + suffix for suffix in DIR_SUFFIXES)


def open_dir(path: str) -> int | None:
    """A descriptor of the directory ``path`` (never through a symlink); None when it is missing.

    Raises:
        OSError: it cannot be opened (a symlink: ``ELOOP``; not a directory: ``ENOTDIR``).
    """
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def refusal(dir_fd: int) -> str | None:
    """Why the directory held as ``dir_fd`` is not trusted, or None when it is: it must be owned
    by this user and writable by nobody else."""
    info = os.fstat(dir_fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        return (f"owned by uid {info.st_uid} with mode {stat.filemode(info.st_mode)}, "
                f"not by this user (uid {os.geteuid()}) and writable only by it")
    return None


def socket_address(dir_fd: int, directory: str, name: str) -> str | None:
    """An address for the socket ``name`` in the directory held as ``dir_fd``: through
    ``/proc/self/fd`` (short whatever the database path), else the plain path when it fits a
    Unix socket address; None when neither works."""
    via_fd = f"/proc/self/fd/{dir_fd}"
    if os.path.isdir(via_fd):
        return f"{via_fd}/{name}"
    plain = os.path.join(directory, name)
    return plain if len(os.fsencode(plain)) <= MAX_SOCKET_PATH_BYTES else None


def own_socket(dir_fd: int, name: str) -> bool:
    """Whether ``name`` in the directory is a socket owned by this user (never followed)."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISSOCK(info.st_mode) and info.st_uid == os.geteuid()


def unlink_socket(dir_fd: int, name: str) -> None:
    """Remove our socket ``name`` from the directory held as ``dir_fd`` (already gone is fine:
    its service, or another client, removed it first)."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
