"""Capturing an Attempt's stdout and stderr into a size-capped log file, across service restarts.

Design: one named FIFO per Attempt, beside its log file. The service opens the FIFO read-write
(``O_RDWR``, which never blocks on a FIFO), hands that descriptor to the child as stdout and
stderr, and closes its own copy; the service then reads the FIFO without blocking and appends
what it reads to the log file, counting bytes against the cap.

Why not a plain pipe: the read end of a pipe lives only in the service. If the service dies (crash,
upgrade, SIGKILL), the next write of the child gets SIGPIPE and the very Attempt we promised to
re-adopt is killed by our own restart. Why not let the child write the file directly: nothing
could then enforce the size cap, and a chatty task would fill the router's flash.

With the FIFO opened ``O_RDWR``, the child itself holds a read end, so a write never raises
SIGPIPE, whether or not a service is running. The trade-off: while no service is pumping, the
child blocks once the kernel's pipe buffer (64 KiB on Linux) is full, and resumes when the
restarted service re-opens the FIFO by its path and drains it (a re-open refused for lack of
descriptors is retried: ``AttemptSupervisor.adopt``). What is lost: if the task exits
while no service runs, what it wrote since the service stopped (at most the 64 KiB the pipe
held) goes with the FIFO's last descriptor; the next service then appends a line saying so to
the log (``mark_gap``). Past the cap one truncation marker is written and the rest is read at a
slow pace (``DISCARD_INTERVAL_S``) and discarded.
Processes that outlive the Attempt's leader and keep its stdout are drained for ``log_linger_ms``
after the Attempt ended, then the service closes its end (one note in the log) so that a daemon
a task left behind cannot pin descriptors forever; that daemon's writes then block once the pipe
is full. After the Attempt ends the FIFO path is unlinked (open descriptors keep working), so a
later service does not re-open it.

Log writes are not fsynced: they are diagnostics, and an fsync per chunk would wear small flash.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from pathlib import Path

#: Default cap on the bytes of output kept per Attempt (beyond it: one marker, the rest dropped).
DEFAULT_LOG_CAP_BYTES = 1024 * 1024

#: Past the cap everything read is dropped, so the service reads only this often (up to
#: _MAX_READS_PER_PUMP chunks each time): a task flooding its output past the cap costs the
#: service a few reads per second instead of a core, and is slowed to ~2 MiB/s of output.
DISCARD_INTERVAL_S = 0.5

#: One read; also the Linux default pipe capacity.
_CHUNK = 64 * 1024
#: Reads per pump call, so one chatty Attempt cannot starve the event loop.
_MAX_READS_PER_PUMP = 16

_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")



def truncation_marker(cap_bytes: int) -> bytes:
    return f"\n[edge-runtime: output truncated after {cap_bytes} bytes; the rest was discarded]\n".encode()


def file_stem(attempt_id: str) -> str:
    """A file name for an Attempt id; ids that are not plain names are hashed."""
    if _SAFE_NAME.fullmatch(attempt_id) and not attempt_id.startswith("."):
        return attempt_id
    return hashlib.sha256(attempt_id.encode()).hexdigest()[:32]


def log_paths(log_dir: Path, attempt_id: str) -> tuple[Path, Path]:
    """``(log file, fifo)`` of an Attempt under ``log_dir``."""
    stem = file_stem(attempt_id)
    return log_dir / f"{stem}.log", log_dir / f"{stem}.fifo"


def read_tail(log_path: Path | str, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes of a log and the log's size; ``(b"", 0)`` when there is no file
    (an Attempt that wrote nothing leaves none). Never follows a symlink, refuses a non-file."""
    try:
        fd = open_checked(log_path, os.O_RDONLY, stat.S_IFREG)
    except FileNotFoundError:
        return b"", 0
    with open(fd, "rb") as log:
        size = os.fstat(fd).st_size
        log.seek(max(0, size - limit))
        content = log.read(limit)
    return content, max(size, len(content))  # a writer may still append (lingering output)


def create_fifo(fifo_path: Path) -> None:
    """Create the Attempt's FIFO (private to the user), replacing a stale one of a failed start."""
    fifo_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fifo_path.unlink()
    except FileNotFoundError:
        pass
    os.mkfifo(fifo_path, 0o600)


def open_checked(path: Path | str, flags: int, file_type: int) -> int:
    """Open ``path`` only if it is a ``file_type`` (``stat.S_IFIFO``/``S_IFREG``) and not a symlink.

    ``O_NONBLOCK`` so that a FIFO swapped in for a log file cannot hang the opener, and the type
    is checked on the open descriptor, so nothing can be swapped in between check and use.

    Raises:
        OSError: cannot be opened (``ELOOP``: a symlink), or is of another type.
    """
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
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


def open_child_output(fifo_path: Path) -> int:
    """The descriptor to give the child as stdout and stderr (``O_RDWR``: see the module docstring)."""
    fd = open_checked(fifo_path, os.O_RDWR, stat.S_IFIFO)
    os.set_blocking(fd, True)  # the child's writes wait for room, as on any pipe
    return fd


class LogCapture:
    """The service's reading end of one Attempt's FIFO and the capped log file it fills.

    Open it only while a writer exists (the child, or the service's own ``O_RDWR`` copy before
    the spawn): a FIFO with no writer reads as end-of-file at once.
    """

    __slots__ = ("attempt_id", "log_path", "fifo_path", "cap_bytes", "received", "_fd", "_log_fd", "_written",
                 "_truncated")

    def __init__(self, attempt_id: str, log_path: Path, fifo_path: Path, cap_bytes: int = DEFAULT_LOG_CAP_BYTES):
        self.attempt_id = attempt_id
        self.log_path = log_path
        self.fifo_path = fifo_path
        self.cap_bytes = cap_bytes
        #: Bytes read from the FIFO since this capture was opened (kept or not).
        self.received = 0
        self._fd: int | None = None
        self._log_fd: int | None = None
        self._written = 0
        self._truncated = False

    def open(self) -> None:
        """Open the FIFO for non-blocking reads and the log file for appending.

        A log file left by an earlier service keeps counting against the same cap.

        Raises:
            OSError: the FIFO or the log file cannot be opened (e.g. the FIFO is gone).
        """
        fd = open_checked(self.fifo_path, os.O_RDONLY, stat.S_IFIFO)
        try:
            log_fd = open_checked(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, stat.S_IFREG)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._log_fd = fd, log_fd
        size = os.fstat(log_fd).st_size
        self._written = min(size, self.cap_bytes)
        self._truncated = size > self.cap_bytes  # only the marker takes a file past the cap

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def fileno(self) -> int:
        if self._fd is None:
            raise ValueError("log capture is closed")
        return self._fd

    def pump(self) -> bool:
        """Move what the FIFO holds into the log file; False once every writer has closed it."""
        if self._fd is None:
            return False
        for _ in range(_MAX_READS_PER_PUMP):
            try:
                data = os.read(self._fd, _CHUNK)
            except BlockingIOError:
                return True
            except InterruptedError:
                continue
            if not data:
                return False
            self.received += len(data)
            self._keep(data)
        return True

    @property
    def truncated(self) -> bool:
        return self._truncated

    def note(self, text: str) -> None:
        """Append an ``[edge-runtime: ...]`` line, unless the log is already at its cap."""
        if not self._truncated:
            _write_all(self._log_fd, f"\n[edge-runtime: {text}]\n".encode())

    def _keep(self, data: bytes) -> None:
        room = self.cap_bytes - self._written
        if room > 0:
            kept = data[:room]
            _write_all(self._log_fd, kept)
            self._written += len(kept)
            data = data[room:]
        if data and not self._truncated:
            _write_all(self._log_fd, truncation_marker(self.cap_bytes))
            self._truncated = True

    def close(self, *, unlink_fifo: bool = False) -> None:
        """Close both descriptors; with ``unlink_fifo`` also remove the FIFO's path."""
        for fd in (self._fd, self._log_fd):
            if fd is not None:
                os.close(fd)
        self._fd = self._log_fd = None
        if unlink_fifo:
            try:
                self.fifo_path.unlink()
            except FileNotFoundError:
                pass

    def abandon(self) -> None:
        """A start that made no process: close, and remove the FIFO and the log file the capture
        created (still empty: nothing could write to it), as if the start had never opened them."""
        created = self._log_fd is not None and os.fstat(self._log_fd).st_size == 0
        self.close(unlink_fifo=True)
        if created:
            try:
                self.log_path.unlink()
            except FileNotFoundError:
                pass


def mark_gap(log_path: Path | str, text: str) -> None:
    """Append an ``[edge-runtime: ...]`` line to an Attempt's log no service is capturing.

    Raises:
        OSError: the log cannot be opened as a regular file (never through a symlink).
    """
    fd = open_checked(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, stat.S_IFREG)
    try:
        _write_all(fd, f"\n[edge-runtime: {text}]\n".encode())
    finally:
        os.close(fd)


def _write_all(fd: int | None, data: bytes) -> None:
    if fd is None:
        raise ValueError("log capture is closed")
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
