"""Where Attempts write (the log directory, held open), and what becomes of a log once its
Attempt has ended: the status file goes, and the log is handed to the store's copies as soon as
its monitor is gone (``LogCaptures`` times that).

A path in the held log directory is always opened by name relative to its descriptor
(``dir_fd_for``), so a symlink swapped onto the directory's path later changes nothing; a log of
an Attempt started under another ``log_dir`` is opened by its path.
"""

from __future__ import annotations

from pathlib import Path

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.ports import AttemptLogStore
from edge_runtime.contract.runs import STORED_LOG_MAX_BYTES
from edge_runtime.service.attempts.running import RunningAttempt
from edge_runtime.service.attempts.tools import Tools
from edge_runtime.service.log_capture import (
    AttemptOutput,
    LogCaptures,
    log_paths,
    read_tail,
    status_path_of,
    unlink_quietly,
)
from edge_runtime.service.monitor import StatusReading, open_status, read_status


class AttemptLogs:
    """The log directory and the ended Attempts whose log is still to be handed over."""

    def __init__(self, tools: Tools, *, log_dir: Path, log_dir_fd: int | None, copies: AttemptLogStore | None) -> None:
        _, self._worker, _, self._journal, _ = tools
        self._log_dir = log_dir
        #: The log directory held open (``hold_trusted_directory``), or None: by path (tests).
        self._log_dir_fd = log_dir_fd
        #: Where a copy of each ended Attempt's log goes (``Store.attempt_logs``), or None (Local).
        self._copies = copies
        #: Ended Attempts whose monitor still writes the log.
        self._captures = LogCaptures(self.copy)

    def paths(self, attempt_id: str) -> tuple[Path, Path]:
        """``(log file, fifo)`` of an Attempt started by this service."""
        return log_paths(self._log_dir, attempt_id)

    def open_output(self, log_path: Path, fifo_path: Path) -> AttemptOutput:
        """Open the files a new Attempt's monitor is handed (see ``AttemptOutput.open``).

        Raises:
            OSError: one cannot be opened; nothing is left open.
        """
        return AttemptOutput.open(log_path, fifo_path, dir_fd=self._log_dir_fd)

    def read_status(self, log_path: Path) -> StatusReading:
        """What the monitor of the Attempt logging to ``log_path`` wrote to its status file.

        Raises:
            OSError, ValueError: the status file cannot be read, or holds no valid line.
        """
        return read_status(status_path_of(log_path), dir_fd=self.dir_fd_for(log_path))

    def dir_fd_for(self, path: Path) -> int | None:
        """The held log directory's descriptor when ``path`` lies in it (so it is opened by name
        there); None for a path elsewhere (an Attempt started under another ``log_dir``)."""
        return self._log_dir_fd if Path(path).parent == self._log_dir else None

    def release(self, running: RunningAttempt) -> None:
        """The end is recorded: the status file has served (its path goes; the monitor, if it
        still drains a descendant's output, keeps its descriptor), and the log is handed to the
        store's copies once its monitor is gone."""
        log_path = running.log_path or self.paths(running.attempt_id)[0]
        status_path = status_path_of(log_path)
        dir_fd = self.dir_fd_for(log_path)
        try:
            status_fd = open_status(status_path, dir_fd=dir_fd)
            unlink_quietly(status_path, dir_fd=dir_fd)
            # left only by a start interrupted before its unlink
            unlink_quietly(log_path.with_suffix(".fifo"), dir_fd=dir_fd)
        except OSError as exc:
            self._journal.warning("attempt.status_not_removed", attempt=running.attempt_id, detail=str(exc))
            status_fd = None
        self._captures.ended(running.attempt_id, log_path, status_fd)

    def copy(self, attempt_id: str, log_path: Path) -> None:
        """Hand the ended Attempt's log tail to the store's copies (``logs`` on other hosts). Best
        effort: the file stays here whatever happens, so a failure is logged, never retried."""
        if self._copies is None:
            return
        try:
            content, size = read_tail(log_path, STORED_LOG_MAX_BYTES, dir_fd=self.dir_fd_for(log_path))
            self._copies.keep(attempt_id, content, size_bytes=size, worker_id=self._worker.worker_id)
        except (OSError, EdgeRuntimeError) as exc:
            self._journal.warning("attempt.log_copy_failed", attempt=attempt_id,
                                  error=getattr(exc, "code", type(exc).__name__), detail=str(exc))

    def check(self) -> None:
        """Hand over the logs completed since the last check (when it is due)."""
        self._captures.check()

    def seconds_to_check(self) -> float | None:
        return self._captures.seconds_to_check()

    def close(self) -> None:
        """The service stops: the monitors finish their logs on their own (only the copies are lost)."""
        self._captures.close()
