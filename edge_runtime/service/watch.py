"""Noticing that a process exited without polling it: a pidfd turns readable when it does.

``os.pidfd_open`` (Linux 5.3+) works for our own children and for processes re-adopted after a
restart, which are not our children and therefore cannot be waited for. Where pidfds are not
available (older router kernels) the loop falls back to a slow ``/proc`` poll for re-adopted
processes and to SIGCHLD for its own children.
"""

from __future__ import annotations

import errno
import os


def open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``, or None when the kernel has none to give (no support, or no process).

    The caller must re-check the process identity *after* opening, so the pidfd is known to
    refer to the recorded process and not to a later holder of the same pid.
    """
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd = pidfd_open(pid)
    except ProcessLookupError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
            return None
        raise
    os.set_inheritable(fd, False)
    return fd


def pidfds_supported() -> bool:
    """Whether this kernel gives pidfds (checked once, on our own pid)."""
    fd = open_pidfd(os.getpid())
    if fd is None:
        return False
    os.close(fd)
    return True
