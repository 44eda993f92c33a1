"""What tests read of an Attempt's monitor: the end it wrote to the Attempt's status file."""

from __future__ import annotations

import time
from pathlib import Path

from edge_runtime.service.log_capture import log_paths, status_path_of
from edge_runtime.service.monitor import MonitorEnd, read_status


def status_file(log_dir: Path, attempt_id: str) -> Path:
    return status_path_of(log_paths(log_dir, attempt_id)[0])


def wait_for_monitor_end(status_path: Path, timeout: float = 15.0) -> MonitorEnd:
    """The end the monitor wrote (waiting for it); fails when none came in time."""
    deadline = time.monotonic() + timeout
    while True:
        reading = read_status(status_path)
        if reading.end is not None:
            return reading.end
        assert time.monotonic() < deadline, f"no end in {status_path} (monitor alive: {reading.monitor_alive})"
        time.sleep(0.02)


def spawn_monitored(argv: list[str], log_path: Path, *, cap: int = 1 << 20, linger_ms: int = 0,
                    env: dict[str, str] | None = None, leftover_grace_ms: int = 0, user=None):
    """Start ``argv`` as the service does (under a monitor, its own group), output to ``log_path``."""
    import os

    from edge_runtime.service.executor import spawn
    from edge_runtime.service.log_capture import AttemptOutput
    from edge_runtime.service.process_identity import read_boot_id

    output = AttemptOutput.open(log_path, log_path.with_suffix(".fifo"))
    try:
        identity = spawn(argv, output=output, env=dict(os.environ) if env is None else env, boot_id=read_boot_id(),
                         log_cap_bytes=cap, log_linger_ms=linger_ms, leftover_grace_ms=leftover_grace_ms,
                         **({} if user is None else {"user": user}))
    except BaseException:
        output.abandon()
        raise
    output.close_after_spawn()
    return identity


def exit_status(log_path: Path, timeout: float = 15.0) -> int:
    """The task's end as its monitor wrote it (``os.waitstatus_to_exitcode`` style), waiting for it."""
    return wait_for_monitor_end(status_path_of(log_path), timeout).status


def wait_monitor_gone(log_path: Path, timeout: float = 15.0) -> None:
    """Wait until the monitor of the Attempt logging to ``log_path`` exited (its log is complete)."""
    deadline = time.monotonic() + timeout
    while read_status(status_path_of(log_path)).monitor_alive:
        assert time.monotonic() < deadline, f"the monitor of {log_path} did not exit"
        time.sleep(0.02)
