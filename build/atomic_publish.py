"""Publish a file the way every file we produce outside SQLite is published (standard library only).

Written to a temp file in the destination's directory, fsynced, renamed over the destination,
the directory fsynced: a reader (or a power cut) sees the old file or the whole new one, never
half of one. Used by build/build.py (the artifacts and their stamp), build/cross/package.py
through it, and artifact_audit.py (the report).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(final: Path, write: Callable[[Path], None], *, mode: int = 0o644) -> Path:
    """Call ``write(temp)`` on a fresh temp file beside ``final``, give it ``mode``, fsync it,
    rename it over ``final`` and fsync the directory; returns ``final``.

    A failed write (or an interrupt) removes the temp file, so nothing half-written is left behind.
    """
    directory = final.resolve().parent
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=directory)
    os.close(fd)
    temp = Path(name)
    try:
        write(temp)
        os.chmod(temp, mode)
        with open(temp, "rb+") as file:
            os.fsync(file.fileno())
        os.replace(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_directory(directory)
    return final
