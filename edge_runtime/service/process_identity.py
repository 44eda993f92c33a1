"""Who a pid is: its start time, process group, session and the boot it belongs to.

A pid alone is not an identity: after a process exits the kernel hands its number to the next
process it creates. ``(boot_id, pid, start_time)`` is: the start time (``/proc/<pid>/stat`` field
22, clock ticks since boot) never repeats for one pid within a boot, and the boot id
(``/proc/sys/kernel/random/boot_id``) changes on every boot, so a record written before a power
cut can never match a process of the next boot.

The comm field (field 2) is in parentheses and may itself contain spaces and parentheses, so the
remaining fields are counted after the *last* ``)`` of the line, never by a plain split.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import msgspec

from edge_runtime.contract.runs import ProcessIdentity
from edge_runtime.service.errors import ProcfsUnavailableError

PROC_ROOT = "/proc"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"

# Fields counted from 1 as in proc(5); after the comm's closing paren the next field is number 3.
_FIRST_FIELD_AFTER_COMM = 3
_STATE_FIELD = 3
_PPID_FIELD = 4
_PGRP_FIELD = 5
_SESSION_FIELD = 6
_STARTTIME_FIELD = 22


class ProcStat(msgspec.Struct, frozen=True, kw_only=True):
    """The few ``/proc/<pid>/stat`` fields the service relies on."""

    pid: int
    state: str
    pgid: int
    session: int
    start_ticks: int
    ppid: int = 0

    @property
    def is_zombie(self) -> bool:
        return self.state in ("Z", "X")


def parse_stat(pid: int, text: str) -> ProcStat:
    """Parse the text of ``/proc/<pid>/stat``.

    Raises:
        ValueError: the text does not have the documented layout.
    """
    close = text.rfind(")")
    if close < 0:
        raise ValueError(f"/proc/{pid}/stat has no comm field")
    fields = text[close + 1 :].split()

    def field(number: int) -> str:
        return fields[number - _FIRST_FIELD_AFTER_COMM]

    try:
        return ProcStat(
            pid=pid,
            state=field(_STATE_FIELD),
            pgid=int(field(_PGRP_FIELD)),
            session=int(field(_SESSION_FIELD)),
            start_ticks=int(field(_STARTTIME_FIELD)),
            ppid=int(field(_PPID_FIELD)),
        )
    except IndexError:
        raise ValueError(f"/proc/{pid}/stat has too few fields") from None


def read_stat(pid: int, proc_root: str = PROC_ROOT) -> ProcStat | None:
    """The process's stat fields, or None when no process has that pid now.

    Raises:
        ProcfsUnavailableError: ``/proc`` exists but the file is unreadable or malformed.
    """
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError as exc:
        # ESRCH surfaces as ProcessLookupError on some kernels when the process dies mid-read.
        raise ProcfsUnavailableError(f"cannot read /proc/{pid}/stat: {exc}") from exc
    if not text:
        return None  # the process exited between open and read
    try:
        return parse_stat(pid, text)
    except ValueError as exc:
        raise ProcfsUnavailableError(str(exc)) from None


def read_boot_id(path: str = BOOT_ID_PATH) -> str:
    """The kernel's id of the current boot.

    Raises:
        ProcfsUnavailableError: the file cannot be read.
    """
    try:
        with open(path, encoding="ascii") as handle:
            boot_id = handle.read().strip()
    except OSError as exc:
        raise ProcfsUnavailableError(f"cannot read the boot id from {path}: {exc}") from exc
    if not boot_id:
        raise ProcfsUnavailableError(f"{path} is empty")
    return boot_id


def read_identity(pid: int, *, boot_id: str | None = None, proc_root: str = PROC_ROOT) -> ProcessIdentity | None:
    """The identity of the process that has ``pid`` now, or None when there is none.

    Raises:
        ProcfsUnavailableError: ``/proc`` cannot be read.
    """
    stat = read_stat(pid, proc_root)
    if stat is None:
        return None
    return ProcessIdentity(
        pid=pid, pgid=stat.pgid, start_ticks=stat.start_ticks, boot_id=boot_id if boot_id is not None else read_boot_id()
    )


def _live_processes(proc_root: str) -> Iterator[ProcStat]:
    try:
        names = os.listdir(proc_root)
    except OSError as exc:
        raise ProcfsUnavailableError(f"cannot list {proc_root}: {exc}") from exc
    for name in names:
        if not name.isdigit():
            continue
        try:
            stat = read_stat(int(name), proc_root)
        except ProcfsUnavailableError:
            continue  # a process in another user's namespace or one that vanished: not evidence
        if stat is not None and not stat.is_zombie:
            yield stat


def escaped_descendants(identity: ProcessIdentity, proc_root: str = PROC_ROOT) -> list[int]:
    """Live descendants of an Attempt's group that left it (``setsid``, ``setpgid``): a signal to
    the group misses them. Sorted pids; one ``/proc`` scan.

    Only what still descends from the group now is found: a process whose parent already exited
    was re-parented to init (or a subreaper) and no longer shows where it came from.

    Raises:
        ProcfsUnavailableError: ``/proc`` cannot be listed.
    """
    children: dict[int, list[ProcStat]] = {}
    roots = []
    for stat in _live_processes(proc_root):
        children.setdefault(stat.ppid, []).append(stat)
        if stat.pgid == identity.pgid and stat.session == identity.pgid:
            roots.append(stat.pid)
    escaped, seen, todo = [], set(roots), list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child.pid not in seen:
                seen.add(child.pid)
                todo.append(child.pid)
                if child.pgid != identity.pgid:
                    escaped.append(child.pid)
    return sorted(escaped)


def group_members(pgid: int, *, session: int | None = None, proc_root: str = PROC_ROOT) -> Iterator[ProcStat]:
    """Live (non-zombie) processes whose process group is ``pgid`` (and session, when given).

    Scans ``/proc``; a few hundred entries on a router. Processes that exit mid-scan are skipped.
    """
    for stat in _live_processes(proc_root):
        if stat.pgid == pgid and (session is None or stat.session == session):
            yield stat
