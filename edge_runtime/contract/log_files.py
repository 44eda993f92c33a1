"""The bound of an Attempt log directory, the same on every store: which files a sweep removes.

A sweep counts and removes only regular files named as Attempt logs (``<attempt id>.log``), by
name inside the directory's descriptor (``unlink`` never follows a symlink), never another
program's file. It removes empty and orphan logs (no stored Attempt) older than a minimum age,
then the oldest logs until the total is under the limit; the log of an active Attempt is never
removed. The store only says which names it knows and which are active.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable

from edge_runtime.contract.ids import is_attempt_log_name

#: An empty or orphan log younger than this may still be written (lingering output, a recovery note).
LOG_MIN_AGE_MS = 5 * 60_000
#: ``classify(names)`` -> (the names the store knows an Attempt of, those whose Attempt is active).
Classify = Callable[[list[str]], tuple[set[str], set[str]]]


def sweep_attempt_logs(dir_fd: int, classify: Classify, *, max_total_bytes: int, min_age_ms: int) -> int:
    """Sweep the directory open as ``dir_fd``; the bytes of Attempt logs kept."""
    logs = []
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            if not is_attempt_log_name(entry.name) or not entry.is_file(follow_symlinks=False):
                continue  # another program's file, a symlink or anything planted: never counted, followed or removed
            info = entry.stat(follow_symlinks=False)
            logs.append((info.st_mtime_ns, entry.name, info.st_size))
    known, active = classify([name for _, name, _ in logs])
    young_after_ns = time.time_ns() - min_age_ms * 1_000_000  # file times are wall-clock times
    logs.sort()
    total = sum(size for _, _, size in logs)
    for mtime_ns, name, size in logs:
        if name in active:
            continue
        if (size == 0 or name not in known) and mtime_ns < young_after_ns or total > max_total_bytes:
            if unlink_regular(dir_fd, name):
                total -= size
    return total


def unlink_regular(dir_fd: int, name: str) -> bool:
    """Unlink ``name`` in the directory if it is a regular file; unlink never follows a symlink."""
    try:
        if not stat.S_ISREG(os.lstat(name, dir_fd=dir_fd).st_mode):
            return False
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True
