"""A schedule as QingLong's cron object, and a cron request as the schedule's own commands.

A QingLong cron is a schedule: its integer ``id`` is the schedule's ``number`` (QingLong's
clients need an integer from 1: they send it back as a JSON number, in paths and bodies), its
``schedule`` the expression, its ``command`` the text QingLong stores (``task dir/x.js``, or any
shell command), its ``isDisabled`` whether it is paused, its ``labels`` its labels. The rest is
read from the schedule's Runs, as QingLong fills it from its runs:

- ``status``: 0 while a Run of it is running, 3 while one waits to start (queued, or a slot
  waiting for the previous Run), else 2 while it is paused and 1 otherwise: QingLong's own
  values (``CrontabStatus``), with 2 ("disabled") beside ``isDisabled: 1``, so that a client that
  reads only ``status`` sees a paused cron as disabled;
- ``pid``: the running Attempt's process, ``null`` otherwise (QingLong leaves the last one there
  for ever: a stale pid, not copied);
- ``log_path``: the newest Run that has a log, ``<directory>/<file>`` (:mod:`.logs`), ``""`` before
  any; ``last_execution_time``: that Run's start, unix seconds (0 before any);
  ``last_running_time``: the newest finished Run's duration in whole seconds (at least 1; 0 before any).

A command text becomes the schedule's argv as QingLong runs it: ``task dir/x.js now`` becomes its
words (``["task", "dir/x.js", "now"]``, the form ``import qinglong`` and a subscription's pull
make, so one script is one schedule whoever added it) when they read back as that very text;
any other ``task ...`` text is kept as the one string QingLong stores (the ``task`` runner splits
it, and refuses shell syntax in it); any other command runs in a shell (``["sh", "-c", TEXT]``),
as QingLong runs it through bash. Read back, each gives the text it was made from.
"""

from __future__ import annotations

import datetime as dt
import math
import shlex
from typing import Any, NamedTuple

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.runs import ACTIVE_ATTEMPT_STATUSES, TERMINAL_RUN_STATUSES, AttemptRecord, RunRecord, RunStatus
from edge_runtime.contract.schedules import ScheduleRecord
from edge_runtime.qinglong.logs import directory_name, file_name
from edge_runtime.qinglong.open_routes import MAX_ID

#: QingLong's cron status values.
RUNNING, IDLE, DISABLED, QUEUED = 0, 1, 2, 3
#: A Run in one of these has a process (LOST: its worker went away; the process may run on).
_RUNNING_RUNS = frozenset({RunStatus.RUNNING, RunStatus.LOST})
#: The newest Runs of a schedule read for its cron object (a finished one is among them unless a
#: schedule had this many unfinished Runs in a row).
RECENT_RUNS = 8
#: Ids one bulk request may name.
MAX_IDS = 1000
TASK_PREFIX = "task "


class OpenRequestError(EdgeRuntimeError, code="OPENAPI_INVALID_REQUEST"):
    """The request's body or query is not what QingLong's API takes (HTTP 400)."""


class OpenRefusedError(EdgeRuntimeError, code="OPENAPI_REFUSED"):
    """Refused on purpose: a field whose value would run as root outside the task (HTTP 403)."""


class CronBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``POST /open/crons``: QingLong's fields (a closed object, as QingLong's schema)."""

    command: str
    schedule: str
    name: str | None = None
    labels: list[str] | None = None
    sub_id: int | None = None
    extra_schedules: list[Any] | None = None
    task_before: str | None = None
    task_after: str | None = None
    log_name: str | None = None
    allow_multiple_instances: int | None = None
    work_dir: str | None = None


class CronEditBody(CronBody, kw_only=True):
    """``PUT /open/crons``: the same with the cron's ``id`` (a number, or a numeric string as
    QingLong's own shell sends it)."""

    id: int | str


class CronState(NamedTuple):
    status: int
    pid: int | None
    log_path: str
    last_execution_time: int
    last_running_time: int


NEVER_RAN = CronState(IDLE, None, "", 0, 0)


def decode(body: bytes, kind: type) -> Any:
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.DecodeError as exc:
        raise OpenRequestError(f"the request body: {exc}") from None


def parse_id(value: object, what: str = "id") -> int:
    """An id as QingLong takes it: a whole number from 1, or the same as a numeric string."""
    if type(value) is str and value.isascii() and value.isdigit():
        value = int(value)
    if type(value) is not int or not 1 <= value <= MAX_ID:
        raise OpenRequestError(f"{what} must be a whole number from 1 (or one as a string), got {value!r}")
    return value


def parse_ids(body: bytes) -> list[int]:
    """A bulk request's body: a non-empty JSON list of ids (``[1, 2]`` or ``["1", "2"]``)."""
    values = decode(body, list[Any])
    if not values:
        raise OpenRequestError("the request body must list at least one id")
    if len(values) > MAX_IDS:
        raise OpenRequestError(f"at most {MAX_IDS} ids in one request")
    ids = [parse_id(v, "each id") for v in values]
    return list(dict.fromkeys(ids))


def command_argv(text: str) -> list[str]:
    """A QingLong command text as a schedule's argv (see the module's docstring)."""
    text = text.strip()
    if not text:
        raise OpenRequestError("command must not be empty")
    if text.startswith(TASK_PREFIX):
        try:
            words = shlex.split(text)
        except ValueError:
            return [text]  # the task runner names what is wrong with it
        return words if shlex.join(words) == text else [text]
    return ["sh", "-c", text]


def command_text(argv: list[str]) -> str:
    """A schedule's argv as QingLong's command text: the inverse of :func:`command_argv`, and a
    shell-quoted line for an argv the CLI wrote."""
    if len(argv) == 1:
        return argv[0]
    if len(argv) == 3 and argv[:2] == ["sh", "-c"]:
        return argv[2]
    return shlex.join(argv)


def labels_of(labels: list[str] | None) -> list[str] | None:
    """The labels of a request, each once in the order given (QingLong keeps duplicates; a
    schedule's labels are a set)."""
    if labels is None:
        return None
    if not all(type(label) is str for label in labels):
        raise OpenRequestError("labels must be a list of strings")
    return list(dict.fromkeys(labels))


def check_fields(body: CronBody, log_name: str | None) -> None:
    """Refuse what QingLong takes and this device does not do, naming why. ``log_name``: the
    directory the cron already has (a client that sends back what it read is not refused)."""
    for field in ("task_before", "task_after"):
        if (getattr(body, field) or "").strip():
            raise OpenRefusedError(f"{field} is refused: it is shell code QingLong runs as root around the task; "
                                   f"put it in the script itself")
    if body.sub_id is not None:
        raise OpenRequestError("sub_id: a subscription makes its own crons on this device (from its scripts' headers); "
                               "send null or leave it out")
    if body.extra_schedules:
        raise OpenRequestError("extra_schedules: a cron has one schedule here; add another cron for another time")
    if body.log_name not in (None, "", log_name):
        raise OpenRequestError("log_name: the device names a cron's log directory itself; leave it out")
    if body.allow_multiple_instances is not None:
        raise OpenRequestError("allow_multiple_instances: a schedule never runs twice at once here; what a slot "
                               "does while a Run is active is the schedule's overlap (edge-runtime schedule edit "
                               "ID --overlap skip|queue|replace); leave it out")
    if body.work_dir and not body.work_dir.startswith("/"):
        raise OpenRequestError("work_dir must be an absolute path on the device")


def cron_status(active: list[RunRecord], waiting: bool, paused: bool) -> int:
    """A Run in progress says more than the pause: a paused cron's last Run may still run."""
    if any(run.status in _RUNNING_RUNS for run in active):
        return RUNNING
    if active or waiting:
        return QUEUED
    return DISABLED if paused else IDLE


def cron_state(record: ScheduleRecord, runs: list[RunRecord], attempts_of: Any, utc_offset: Any) -> CronState:
    """The Run-derived fields of ``record``'s cron object. ``runs``: its newest Runs, newest
    first; ``attempts_of(run_id)``: a Run's Attempts; ``utc_offset(ms)``: the device's offset."""
    active = [run for run in runs if run.status not in TERMINAL_RUN_STATUSES]
    status = cron_status(active, record.waiting_fire_at_ms is not msgspec.UNSET, record.paused)
    if not runs:
        return CronState(status, None, "", 0, 0)
    pid, log_path, last_execution, last_running = None, "", 0, 0
    started = None
    for run in runs:
        attempts = attempts_of(run.id)
        latest = attempts[-1] if attempts else None
        if latest is None or latest.started_at_ms is msgspec.UNSET:
            continue
        if started is None:
            started = run
            last_execution = latest.started_at_ms // 1000
            log_path = f"{directory_name(record)}/{file_name(run, utc_offset(run.created_at_ms))}"
            if status == RUNNING and latest.status in ACTIVE_ATTEMPT_STATUSES and latest.pid is not msgspec.UNSET:
                pid = latest.pid
        if run.status in TERMINAL_RUN_STATUSES and latest.finished_at_ms is not msgspec.UNSET:
            last_running = max(1, math.ceil((latest.finished_at_ms - latest.started_at_ms) / 1000))
            break
    return CronState(status, pid, log_path, last_execution, last_running)


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def js_date(ms: int, offset_s: int) -> str:
    """JavaScript's ``Date.toString()`` form QingLong's ``timestamp`` has
    (``Sat Jul 18 2026 10:27:53 GMT+0800``; the zone's name in parentheses is left out)."""
    local = dt.datetime.fromtimestamp(ms / 1000, dt.timezone(dt.timedelta(seconds=offset_s)))
    sign = "+" if offset_s >= 0 else "-"
    hours, minutes = divmod(abs(offset_s) // 60, 60)
    return f"{local:%a %b %d %Y %H:%M:%S} GMT{sign}{hours:02d}{minutes:02d}"


def cron_object(record: ScheduleRecord, state: CronState, updated_offset_s: int) -> dict[str, Any]:
    """QingLong's cron object of a schedule (every field QingLong 2.21 returns)."""
    return {
        "id": record.number,
        "name": None if record.name is msgspec.UNSET else record.name,
        "command": command_text(record.command),
        "schedule": record.expression,
        "timestamp": js_date(record.updated_at_ms, updated_offset_s),
        "saved": True,
        "status": state.status,
        "isSystem": 0,
        "pid": state.pid,
        "isDisabled": int(record.paused),
        "isPinned": 0,
        "log_path": state.log_path,
        "labels": list(record.labels),
        "last_running_time": state.last_running_time,
        "last_execution_time": state.last_execution_time,
        "sub_id": None,
        "extra_schedules": None,
        "task_before": None,
        "task_after": None,
        "log_name": directory_name(record),
        "allow_multiple_instances": None,
        "work_dir": None if record.cwd is msgspec.UNSET else record.cwd,
        "createdAt": iso(record.created_at_ms),
        "updatedAt": iso(record.updated_at_ms),
    }


def matches(record: ScheduleRecord, search: str) -> bool:
    """QingLong's ``searchValue``: ``name:x``, ``command:x``, ``schedule:x``, ``label:x``, or a
    text found in any of them (case-insensitive, as SQLite's ``LIKE``)."""
    key, sep, value = search.partition(":")
    fields = {"name": [] if record.name is msgspec.UNSET else [record.name],
              "command": [command_text(record.command)], "schedule": [record.expression],
              "label": list(record.labels)}
    if sep and key in fields:
        texts, wanted = fields[key], value
    else:
        texts, wanted = [t for group in fields.values() for t in group], search
    wanted = wanted.casefold()
    return any(wanted in text.casefold() for text in texts)


def page_of(items: list[Any], query: dict[str, str]) -> list[Any]:
    """The page ``page`` (from 1) of ``size`` items, or all of them without both (QingLong)."""
    if "page" not in query or "size" not in query:
        return items
    page, size = (_whole(query, name, 1, MAX_ID) for name in ("page", "size"))
    start = (page - 1) * size
    return items[start:start + size]


def _whole(query: dict[str, str], name: str, low: int, high: int) -> int:
    text = query[name]
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        raise OpenRequestError(f"{name} must be a whole number from {low}")
    return int(text)
