"""The user a task runs as (docs/operating.md, "Task user").

A Run names one (``--user``, or its schedule's, or a subscription's for the schedules of its
scripts); else the service's ``task_user`` setting applies; else the task runs as the service's
own user, as before. The name is looked up in the device's user database when each Attempt
starts (the service runs as root: ``/etc/passwd`` is root's file, not input from the Run), and
the Attempt's monitor switches to the user's groups, group and user, in that order, in the
task's process just before the exec (``native/monitor.c``). The monitor itself stays root: the
task can neither signal it, trace it, nor change what it writes (the log, the exit status), and
it can still end every process the task leaves behind.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from typing import NamedTuple

from edge_runtime.service.errors import ServiceError

#: The supplementary groups handed to the monitor, at most (its own table's size).
MAX_GROUPS = 256


class TaskUserUnknownError(ServiceError, code="SERVICE_TASK_USER_UNKNOWN"):
    """The task user named by the Run (or the ``task_user`` setting) has no entry in this device's
    user database: no task is started as a user that does not exist."""


class TaskUser(NamedTuple):
    """A task user as the device's user database gives it."""

    name: str
    uid: int
    gid: int
    #: Every group the user is in (its own group first), as ``initgroups`` would set them.
    groups: tuple[int, ...]
    #: Its home directory, the task's ``HOME``.
    home: str

    def monitor_arguments(self) -> list[str]:
        """The monitor's ``--user UID GID GROUPS`` (``-``: no supplementary group)."""
        return ["--user", str(self.uid), str(self.gid), ",".join(map(str, self.groups)) or "-"]

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with the user's ``HOME``, ``USER`` and ``LOGNAME`` (never the service's)."""
        return {**env, "HOME": self.home, "USER": self.name, "LOGNAME": self.name}


def resolve_task_user(name: str) -> TaskUser:
    """The user called ``name`` on this device.

    Raises:
        TaskUserUnknownError: there is none (or its group list cannot be read).
    """
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise TaskUserUnknownError(
            f"the task user {name!r} does not exist on this device (no entry in its user database, "
            f"/etc/passwd): create it, or name another with --user (docs/operating.md, \"Task user\")") from None
    try:
        groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
    except OSError as exc:
        raise TaskUserUnknownError(f"the groups of the task user {name!r} cannot be read: {exc}") from None
    ordered = tuple(dict.fromkeys([entry.pw_gid, *groups]))[:MAX_GROUPS]
    return TaskUser(entry.pw_name, entry.pw_uid, entry.pw_gid, ordered, entry.pw_dir or "/")


def task_user_exists(name: str) -> bool:
    """Whether this device has a user called ``name`` (``schedule add --user`` checks it at once)."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def service_user_name() -> str:
    """The name of the user this process runs as (the service's, for a subscription's pulls)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        raise TaskUserUnknownError(f"this process's user (uid {os.geteuid()}) has no name on this device") from None
