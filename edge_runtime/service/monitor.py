"""The per-Attempt monitor: where its program is, and what it leaves in an Attempt's status file.

The monitor (``native/monitor.c``, docs/monitor.md) is a small C program started for every
Attempt. It forks the task, so the task's exit status reaches it, not the service; it outlives the
service, owns the log file and its cap, and writes one line to the status file when the task ends:
``exit N MS`` or ``signal N MS`` (MS: the wall-clock end as it observed it, Unix ms). It is the
task's subreaper: the processes the task left behind (also those that double-forked into a
session of their own) are its children once their parents ended, and it ends and reaps every one
of them before it writes that line, followed then by ``left L K PIDS`` (L leftovers, K of them
needed SIGKILL, PIDS the first few, comma-separated). A service,
this one or the next after a restart, reads that line: the end recorded is the true one whatever
happened to the services in between.

Its program ships beside the Python code: ``native/edge-runtime-monitor`` in a source checkout
(built by ``make``), and at the same path under the bundle directory in a PyInstaller build. It is
found from the code's own location only, never from ``$PATH`` or another environment variable
(the service runs as root and its environment is not trusted).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import NamedTuple

from edge_runtime.service.errors import ServiceError
from edge_runtime.service.log_capture import monitor_lock_free, open_checked

import stat as _stat

#: The program's path relative to the ``edge_runtime`` package directory (the PyInstaller spec
#: puts it at the same relative path under the bundle).
MONITOR_RELATIVE_PATH = Path("service") / "native" / "edge-runtime-monitor"
#: How long a spawn waits for the monitor's report that the task runs (or could not be started).
REPORT_TIMEOUT_S = 10.0


class MonitorMissingError(ServiceError, code="SERVICE_MONITOR_MISSING"):
    """This installation has no monitor program (a source checkout that was not built)."""


def monitor_path() -> Path:
    """The monitor program of this installation.

    Raises:
        MonitorMissingError: it is not there or not executable.
    """
    if getattr(sys, "frozen", False) and getattr(sys, "_MEIPASS", None):
        path = Path(sys._MEIPASS) / "edge_runtime" / MONITOR_RELATIVE_PATH
    else:
        path = Path(__file__).resolve().parent.parent / MONITOR_RELATIVE_PATH
    if not os.access(path, os.X_OK):
        raise MonitorMissingError(
            f"the task monitor program {path} is missing or not executable; build it with `make monitor` (in a "
            f"clone, `pip install -e .` builds it too; both need a C compiler)")
    return path


class MonitorEnd(NamedTuple):
    """How a task ended, as its monitor saw it."""

    #: ``os.waitstatus_to_exitcode`` style: the exit code, or minus the number of the signal.
    status: int
    #: When the monitor saw it end (Unix ms, the device's wall clock).
    ended_at_ms: int
    #: Processes the task left running when it ended, which its monitor then ended (SIGTERM, and
    #: SIGKILL after the grace); ``killed`` of them needed the SIGKILL; ``pids``: the first few.
    leftovers: int = 0
    killed: int = 0
    pids: tuple[int, ...] = ()

    @property
    def leftover_note(self) -> str | None:
        """What the Attempt's reason says of the processes it left behind; None: it left none."""
        if not self.leftovers:
            return None
        shown = ", ".join(map(str, self.pids))
        more = ", ..." if len(self.pids) < self.leftovers else ""
        forced = f"; {self.killed} ignored SIGTERM and were killed" if self.killed else ""
        return (f"{self.leftovers} process(es) it left running were ended with it "
                f"(pids {shown}{more}){forced}")

    @property
    def signal_name(self) -> str | None:
        if self.status >= 0:
            return None
        try:
            return signal.Signals(-self.status).name
        except ValueError:
            return f"signal {-self.status}"


def parse_status(text: str) -> MonitorEnd | None:
    """The end a status file's text holds; None while it holds no complete line."""
    if not text.endswith("\n"):
        return None
    parts = text.split()
    if (len(parts) not in (3, 7) or parts[0] not in ("exit", "signal") or not parts[1].isdigit()
            or not parts[2].isdigit()):
        raise ValueError(f"not a monitor status line: {text[:80]!r}")
    number = int(parts[1])
    end = MonitorEnd(number if parts[0] == "exit" else -number, int(parts[2]))
    if len(parts) == 3:
        return end
    pids = parts[6].split(",")
    if parts[3] != "left" or not parts[4].isdigit() or not parts[5].isdigit() or not all(p.isdigit() for p in pids):
        raise ValueError(f"not a monitor status line: {text[:80]!r}")
    return end._replace(leftovers=int(parts[4]), killed=int(parts[5]), pids=tuple(map(int, pids)))


class StatusReading(NamedTuple):
    """What an Attempt's status file says now."""

    #: The task's end, once its monitor wrote it.
    end: MonitorEnd | None
    #: Whether the monitor still runs (holds its lock): an end not written yet will still come.
    monitor_alive: bool
    #: False when there is no status file at all (an Attempt started before monitors existed).
    exists: bool = True


def read_status(status_path: Path | str, *, dir_fd: int | None = None) -> StatusReading:
    """Read an Attempt's status file (never through a symlink; ``dir_fd``: see ``open_checked``).

    Raises:
        OSError: it cannot be read for another reason than not existing.
        ValueError: it holds something no monitor writes.
    """
    try:
        fd = open_checked(status_path, os.O_RDONLY, _stat.S_IFREG, dir_fd=dir_fd)
    except FileNotFoundError:
        return StatusReading(None, False, exists=False)
    try:
        alive = not monitor_lock_free(fd)
        text = os.pread(fd, 256, 0).decode("ascii", "replace")
    finally:
        os.close(fd)
    return StatusReading(parse_status(text), alive)


def open_status(status_path: Path | str, *, dir_fd: int | None = None) -> int | None:
    """A descriptor of the status file for watching the monitor's lock; None if it is gone."""
    try:
        return open_checked(status_path, os.O_RDONLY, _stat.S_IFREG, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
