"""The schedules' Runs as QingLong's log directories and files (``/open/logs``, ``log_path``).

QingLong keeps a directory per cron under ``data/log/`` and a file per run named by its start,
``jd_bean/2026-07-18-08-15-00-123.log``; its clients pass those names back (``GET
/open/logs/detail?path=jd_bean&file=...``). Here the names are derived from the records, never
from the file system: a schedule's directory is its script's name and its number
(``jd_bean_12``: :func:`directory_name`), a Run's file its creation time in the device's zone and
its short id (``2026-07-18-08-15-00-123_1a2b3c4d.log``: :func:`file_name`). A name a client
sends is only ever compared with names made so: no path a client writes reaches the file
system, so there is nothing to traverse. The text is the Run's latest Attempt's log, read as
``edge-runtime logs`` reads it, every secret's value masked.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from edge_runtime.contract.runs import RunRecord, RunStatus, short_id
from edge_runtime.contract.schedules import ScheduleRecord

#: Runs of one schedule a log listing shows (newest first): QingLong's clients read the newest.
LOG_FILES_PER_CRON = 50
#: A Run not yet given to a process has no log (yet).
_NOT_STARTED = frozenset({RunStatus.CREATED, RunStatus.QUEUED, RunStatus.DISPATCHING})
_UNSAFE = re.compile(r"[^0-9A-Za-z_.-]+")
_DIRECTORY = re.compile(r"(?:[0-9A-Za-z_.-]*_)?([1-9][0-9]{0,15})")
_FILE = re.compile(r"\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}-\d{3}_([0-9A-Za-z-]{1,12})\.log")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_SLUG_MAX = 48


def script_slug(argv: list[str]) -> str:
    """QingLong's ``log_name`` of a command: the script without its extension, with its folder
    when it has one (``task jd_bean.js`` -> ``jd_bean``, ``task repo/dir/x.js`` -> ``dir_x``);
    ``cron`` for a command that names no script."""
    words = argv[0].split() if len(argv) == 1 else argv
    if len(words) < 2 or words[0] != "task":
        return "cron"
    parts = [p for p in words[1].split("/") if p not in ("", ".", "..")]
    if not parts:
        return "cron"
    parts[-1] = parts[-1].rsplit(".", 1)[0] if "." in parts[-1].lstrip(".") else parts[-1]
    slug = _UNSAFE.sub("_", "_".join(parts[-2:])).strip("._-")
    return slug[:_SLUG_MAX] or "cron"


def directory_name(record: ScheduleRecord) -> str:
    """The log directory of a schedule: its script's name and its number (``jd_bean_12``)."""
    return f"{script_slug(record.command)}_{record.number}"


def number_of_directory(name: str) -> int | None:
    """The schedule number a directory name ends in, or None for a name no schedule has."""
    found = _DIRECTORY.fullmatch(name)
    return None if found is None else int(found.group(1))


def file_name(run: RunRecord, utc_offset_s: int) -> str:
    """A Run's log file name: its creation time on the device's clock, then its short id."""
    local = dt.datetime.fromtimestamp(run.created_at_ms / 1000, dt.timezone(dt.timedelta(seconds=utc_offset_s)))
    return f"{local:%Y-%m-%d-%H-%M-%S}-{run.created_at_ms % 1000:03d}_{short_id(run.id)}.log"


def short_id_of_file(name: str) -> str | None:
    found = _FILE.fullmatch(name)
    return None if found is None else found.group(1)


def has_log(run: RunRecord) -> bool:
    """Whether a Run may have a log: it was given to a process (QingLong lists no queued run)."""
    return run.status not in _NOT_STARTED


def remove_ansi(text: str) -> str:
    """The text without terminal escapes (``GET /open/logs/detail`` answers it so, as QingLong)."""
    return _ANSI.sub("", text)


def tree(entries: list[tuple[ScheduleRecord, list[tuple[RunRecord, int]]]]) -> list[dict[str, Any]]:
    """QingLong's ``GET /open/logs`` tree: a directory per schedule (by name), its files newest
    first. ``entries``: each schedule with its Runs that have a log, newest first, each with the
    device's UTC offset at its creation."""
    nodes = []
    for record, runs in entries:
        directory = directory_name(record)
        children = [{"title": name, "key": f"{directory}/{name}", "type": "file", "parent": directory,
                     "createTime": run.created_at_ms}
                    for run, offset in runs for name in (file_name(run, offset),)]
        nodes.append({"title": directory, "key": directory, "type": "directory", "parent": "",
                      "createTime": record.created_at_ms, "children": children})
    return sorted(nodes, key=lambda node: node["title"])
