"""An Attempt's output and exit status files, and the service's view of the monitors that fill them.

Each Attempt runs under its own monitor (``edge_runtime/service/monitor.py``, docs/monitor.md),
which outlives the service: it owns the Attempt's output (a pipe it makes, opened read-write for
the task so that a write never raises SIGPIPE), the log file and its cap, and writes the task's
exit status to the Attempt's status file. The service only opens the two files before the spawn
(so a lack of descriptors hits before a process exists; each without following a symlink and
checked for its type on the open descriptor):

- ``<stem>.log``: the log, appended to by the monitor only;
- ``<stem>.status``: empty until the task ended, then one line; the monitor holds a ``flock`` on it
  for its whole life, so "no line and no lock" means the monitor is gone without a word.

``<stem>.fifo`` (``log_paths``' second path) is only what a release without monitors left: it is
removed where found.

``LogCaptures`` keeps the Attempts that ended while their monitor still writes the log (a
descendant of the task holds its output, drained for ``log_linger_ms``): once the monitor is gone
the log is complete, and is handed to the store's copies.

Log writes are not fsynced: they are diagnostics, and an fsync per chunk would wear small flash.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path

#: Default cap on the bytes of output kept per Attempt (beyond it: its beginning, a marker, its end).
DEFAULT_LOG_CAP_BYTES = 1024 * 1024

#: Of the cap, the end of the output kept when it is exceeded (held in the monitor's memory until
#: the Attempt ends, so it is bounded by the monitor's RSS budget, not by the cap).
LOG_TAIL_MAX_BYTES = 64 * 1024

_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def log_tail_bytes(cap_bytes: int) -> int:
    """How much of a log over ``cap_bytes`` is its end (the rest of the cap is its beginning)."""
    return min(LOG_TAIL_MAX_BYTES, cap_bytes // 2)


def file_stem(attempt_id: str) -> str:
    """A file name for an Attempt id; ids that are not plain names are hashed."""
    if _SAFE_NAME.fullmatch(attempt_id) and not attempt_id.startswith("."):
        return attempt_id
    return hashlib.sha256(attempt_id.encode()).hexdigest()[:32]


def log_paths(log_dir: Path, attempt_id: str) -> tuple[Path, Path]:
    """``(log file, fifo)`` of an Attempt under ``log_dir``."""
    stem = file_stem(attempt_id)
    return log_dir / f"{stem}.log", log_dir / f"{stem}.fifo"


def status_path_of(log_path: Path | str) -> Path:
    """The status file beside an Attempt's log (the monitor writes the exit status there)."""
    return Path(log_path).with_suffix(".status")


def read_tail(log_path: Path | str, limit: int, *, dir_fd: int | None = None) -> tuple[bytes, int]:
    """The last ``limit`` bytes of a log and the log's size; ``(b"", 0)`` when there is no file
    (an Attempt that wrote nothing leaves none). Never follows a symlink, refuses a non-file.
    ``dir_fd``: see :func:`open_checked`."""
    try:
        fd = open_checked(log_path, os.O_RDONLY, stat.S_IFREG, dir_fd=dir_fd)
    except FileNotFoundError:
        return b"", 0
    with open(fd, "rb") as log:
        size = os.fstat(fd).st_size
        log.seek(max(0, size - limit))
        content = log.read(limit)
    return content, max(size, len(content))  # a writer may still append (lingering output)


def open_checked(path: Path | str, flags: int, file_type: int, *, dir_fd: int | None = None) -> int:
    """Open ``path`` only if it is a ``file_type`` (``stat.S_IFIFO``/``S_IFREG``) and not a symlink.

    ``O_NONBLOCK`` so that a FIFO swapped in for a log file cannot hang the opener, and the type
    is checked on the open descriptor, so nothing can be swapped in between check and use.
    ``dir_fd``: the held descriptor of ``path``'s directory (``hold_trusted_directory``): the
    file is opened by its name relative to it, never through ``path``'s directories again.

    Raises:
        OSError: cannot be opened (``ELOOP``: a symlink), or is of another type.
    """
    where = path if dir_fd is None else os.path.basename(path)
    fd = os.open(where, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    if stat.S_IFMT(os.fstat(fd).st_mode) != file_type:
        os.close(fd)
        kind = "FIFO" if file_type == stat.S_IFIFO else "regular file"
        raise OSError(errno.EINVAL, f"{path} is not a {kind}; refused")
    return fd


def open_checked_in(directory: Path | str, name: str, flags: int, file_type: int) -> int:
    """:func:`open_checked` of ``name`` (one path component) relative to ``directory``, opened
    once as a directory: the file opened is the one in that directory, never one a symlink in its
    name leads to.

    Raises:
        OSError: the directory or the file cannot be opened, or the file is of another type.
    """
    if "/" in name or name in ("", ".", ".."):
        raise OSError(errno.EINVAL, f"{name!r} is not a file name; refused")
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    if stat.S_IFMT(os.fstat(fd).st_mode) != file_type:
        os.close(fd)
        kind = "FIFO" if file_type == stat.S_IFIFO else "regular file"
        raise OSError(errno.EINVAL, f"{Path(directory) / name} is not a {kind}; refused")
    return fd


def unlink_quietly(path: Path | str, *, dir_fd: int | None = None) -> None:
    """Remove ``path`` if it is there (``dir_fd``: by its name in that held directory)."""
    try:
        os.unlink(path if dir_fd is None else os.path.basename(path), dir_fd=dir_fd)
    except FileNotFoundError:
        pass


class AttemptOutput:
    """The files one Attempt's monitor is handed: the log file and the status file. Opened by
    :meth:`open` before the spawn; closed in the service by :meth:`close_after_spawn` (the monitor
    has its copies) or :meth:`abandon`."""

    __slots__ = ("log_path", "fifo_path", "status_path", "log_fd", "status_fd", "_created_log", "_dir_fd")

    def __init__(self, log_path: Path, fifo_path: Path, dir_fd: int | None = None) -> None:
        self._dir_fd = dir_fd
        self.log_path = log_path
        self.fifo_path = fifo_path
        self.status_path = status_path_of(log_path)
        self.log_fd = self.status_fd = -1
        self._created_log = False

    @classmethod
    def open(cls, log_path: Path, fifo_path: Path, *, dir_fd: int | None = None) -> AttemptOutput:
        """Open both files (a stale status file of a failed start is emptied). ``dir_fd``: the
        held log directory all three paths lie in (see :func:`open_checked`).

        Raises:
            OSError: one cannot be opened (no descriptor, a planted symlink...); nothing is left open.
        """
        output = cls(log_path, fifo_path, dir_fd)
        try:
            if dir_fd is None:
                log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                os.stat(log_path if dir_fd is None else log_path.name, dir_fd=dir_fd, follow_symlinks=False)
                existed = True
            except FileNotFoundError:
                existed = False
            output.log_fd = open_checked(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, stat.S_IFREG,
                                         dir_fd=dir_fd)
            output._created_log = not existed
            output.status_fd = open_checked(output.status_path, os.O_RDWR | os.O_CREAT, stat.S_IFREG, dir_fd=dir_fd)
            os.ftruncate(output.status_fd, 0)
        except BaseException:
            output.abandon()
            raise
        return output

    def descriptors(self) -> tuple[int, int]:
        """``(log, status)``, in the order the monitor numbers them (3 and 4)."""
        return self.log_fd, self.status_fd

    def close_after_spawn(self) -> None:
        """The monitor holds both files now: close ours (and remove a FIFO an older release left)."""
        self._close()
        unlink_quietly(self.fifo_path, dir_fd=self._dir_fd)

    def abandon(self) -> None:
        """A start that made no process: close, and remove what this start created (the status
        file and a log file still empty), as if the start had never opened them."""
        created = self._created_log and self.log_fd >= 0 and os.fstat(self.log_fd).st_size == 0
        self._close()
        unlink_quietly(self.status_path, dir_fd=self._dir_fd)
        if created:
            unlink_quietly(self.log_path, dir_fd=self._dir_fd)

    def _close(self) -> None:
        for name in ("log_fd", "status_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


def monitor_lock_free(fd: int) -> bool:
    """Whether no monitor holds the status file open by ``fd`` locked (it exited, or never ran)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


class LogCaptures:
    """Ended Attempts whose monitor still writes their log (output held by a process the task left
    behind, drained by the monitor for ``log_linger_ms``). Each is checked every ``CHECK_S``: once
    its monitor is gone, its log is complete and handed to ``on_complete`` (the store's copies)."""

    CHECK_S = 0.5

    __slots__ = ("_open", "_next_check", "_on_complete")

    def __init__(self, on_complete: Callable[[str, Path], None]) -> None:
        #: attempt id -> (log path, status file descriptor: holds the monitor's lock test).
        self._open: dict[str, tuple[Path, int]] = {}
        self._next_check = 0.0
        self._on_complete = on_complete

    def ended(self, attempt_id: str, log_path: Path, status_fd: int | None) -> None:
        """The Attempt's end is recorded: its log is complete now, or once its monitor is gone."""
        if status_fd is None or monitor_lock_free(status_fd):
            if status_fd is not None:
                os.close(status_fd)
            self._on_complete(attempt_id, log_path)
            return
        if not self._open:
            self._next_check = time.monotonic() + self.CHECK_S
        self._open[attempt_id] = (log_path, status_fd)

    def check(self) -> None:
        """Hand over the logs whose monitor is gone (when the check is due)."""
        if not self._open or time.monotonic() < self._next_check:
            return
        self._next_check = time.monotonic() + self.CHECK_S
        for attempt_id, (log_path, fd) in list(self._open.items()):
            if monitor_lock_free(fd):
                del self._open[attempt_id]
                os.close(fd)
                self._on_complete(attempt_id, log_path)

    def seconds_to_check(self) -> float | None:
        return max(0.0, self._next_check - time.monotonic()) if self._open else None

    def close(self) -> None:
        """The service stops: the monitors finish the logs on their own (only the copies are lost)."""
        for _, fd in self._open.values():
            os.close(fd)
        self._open.clear()
