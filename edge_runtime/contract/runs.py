"""Runs and Attempts: vocabularies, exact-shape commands, read records and errors (spec §4).

A Run is one requested execution of a user command; an Attempt is one try at running it as a local
process. These structs are what the CLI prints with ``--json`` and what the service reads; the
command line itself is stored with the Run but never copied into an event.
"""

from __future__ import annotations

import enum
import re

import msgspec

from edge_runtime.contract.backoff import capped_backoff
from edge_runtime.contract.cancellation_dispatch import DispatchRecord
from edge_runtime.contract.durations import MAX_DURATION_MS, MIN_DURATION_MS
from edge_runtime.contract.environment import env_problem
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.script_task import task_problem
from edge_runtime.contract.validation import (  # noqa: F401 (RunId: re-exported)
    RunId,
    Command,
    SafeInt,
    bounded_int_type,
    identifier_type,
)

# --------------------------------------------------------------------------- vocabularies


class RunStatus(enum.StrEnum):
    CREATED = "created"
    QUEUED = "queued"
    DISPATCHING = "dispatching"
    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    RETRY_WAIT = "retry_wait"
    LOST = "lost"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class AttemptStatus(enum.StrEnum):
    CLAIMED = "claimed"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"


ACTIVE_RUN_STATUSES = frozenset(
    {
        RunStatus.CREATED,
        RunStatus.QUEUED,
        RunStatus.DISPATCHING,
        RunStatus.RUNNING,
        RunStatus.WAITING_APPROVAL,
        RunStatus.RETRY_WAIT,
        RunStatus.LOST,
    }
)
TERMINAL_RUN_STATUSES = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})
#: A Run with no Attempt under way that waits to start one: what a broken stored row of it (an
#: event log another program appended to) sets aside, failed (``RunStore.set_aside``).
WAITING_TO_START_STATUSES = frozenset({RunStatus.QUEUED, RunStatus.RETRY_WAIT})
ACTIVE_ATTEMPT_STATUSES = frozenset({AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.RUNNING})
TERMINAL_ATTEMPT_STATUSES = frozenset(
    {AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.CANCELLED, AttemptStatus.LOST}
)

#: The Run status an Attempt's end leads to. A lost Attempt ends its Run as failed (or cancelled
#: when a cancel was requested), unless the Run has retries left (``retry_wait_ms``).
RUN_STATUS_AFTER_ATTEMPT = {
    AttemptStatus.SUCCEEDED: RunStatus.SUCCEEDED,
    AttemptStatus.FAILED: RunStatus.FAILED,
    AttemptStatus.CANCELLED: RunStatus.CANCELLED,
    AttemptStatus.LOST: RunStatus.FAILED,
}

#: Event types of the Run/Attempt operations (docs/runs.md). A Run's end is ``run.<status>``.
EVENT_RUN_CREATED = "run.created"
EVENT_CANCEL_REQUESTED = "run.cancel_requested"
EVENT_RUN_STARTED = "run.started"
EVENT_RUN_REQUEUED = "run.requeued"
EVENT_KILL_SENT = "run.kill_sent"
EVENT_CANCEL_ESCAPED = "run.cancel_escaped"
#: A failed or lost Attempt left retries: the Run waits (``retry_wait``) until ``retry_at_ms``.
EVENT_RETRY_SCHEDULED = "run.retry_scheduled"
#: The wait is over: the Run is queued again for its next Attempt.
EVENT_RETRY_QUEUED = "run.retry_queued"
#: A worker saw an Attempt end that was no longer its to record (already ended, e.g. ``lost``).
EVENT_FENCED_END = "run.fenced_end"


def attempt_event_key(attempt: int, step: str) -> str:
    """The dedupe key of one step (``start``, ``running``, ``requeued``, ...) of the Run's Attempt
    number ``attempt``, the same on every store.

    Unique within the Run (a key is unique per Run, and so is an Attempt's number) and short: the
    key is stored with its Run's id in the event row and again in the ``(run_id, dedupe_key)``
    index (fewer, smaller writes). The Run Lease port's own events keep their grant's key
    (``edge_runtime.contract.run_lease.dedupe_key_for``); stores written before that rule hold
    keys with the Attempt's id, which never collide with these.
    """
    return f"a{attempt}:{step}"


def run_ended_event(status: RunStatus) -> str:
    """The event type of a Run's end in ``status``."""
    return f"run.{status.value}"


# --------------------------------------------------------------------------- limits

MAX_ARGV_ITEMS = 256
MAX_ARG_LENGTH = 4096
MAX_NAME_LENGTH = 128
MAX_REASON_LENGTH = 256
#: How much of an Attempt's log a store keeps as its copy (``AttemptLogStore``): the tail, so the
#: end of the output (where errors are) survives. The cluster schema's CHECK repeats it (tested).
STORED_LOG_MAX_BYTES = 64 * 1024
#: A restarted worker looks for the processes of at most this many of its Attempts that were
#: ended ``lost`` elsewhere on this boot and have no recorded fenced end (``lost_with_process``).
FENCE_SCAN_LIMIT = 32

#: ``submit --batch``: at most this many Runs in one batch. A batch is one transaction, which holds
#: the database's write lock while it inserts and commits (the service's own writes wait for it),
#: so it stays short: on a router's flash a full batch commits in well under a second.
MAX_BATCH_RUNS = 1000

#: Retries (``--retries N --retry-delay D``): at most this many; the delay doubles after each
#: failed Attempt, up to the cap.
MAX_RETRIES = 100
DEFAULT_RETRY_DELAY_MS = 10_000
MAX_RETRY_DELAY_MS = 3_600_000

Name = identifier_type(MAX_NAME_LENGTH)
TimeoutMs = bounded_int_type(MIN_DURATION_MS, MAX_DURATION_MS)
Retries = bounded_int_type(0, MAX_RETRIES)
RetryDelayMs = bounded_int_type(MIN_DURATION_MS, MAX_RETRY_DELAY_MS)
Reason = identifier_type(MAX_REASON_LENGTH)

# --------------------------------------------------------------------------- errors


class RunError(EdgeRuntimeError, code="RUN_ERROR"):
    """Base of every Run/Attempt error."""


class InvalidRunCommandError(RunError, code="INVALID_RUN_COMMAND"):
    """The request is malformed: fix the input."""


class InvalidRunNameError(InvalidRunCommandError, code="INVALID_NAME"):
    """A Run's name (``--name``) is empty, too long or holds a control character."""


class RunNotFoundError(RunError, code="RUN_NOT_FOUND"):
    """No Run has this id."""


class AmbiguousRunIdError(RunError, code="RUN_ID_AMBIGUOUS"):
    """A short id form matches several Runs; the message names them."""


#: Every command about one Run (or one schedule) accepts its full id or a short form: a unique
#: prefix or suffix of at most this many characters. ``list`` and ``schedule list`` show the suffix
#: of ``SHORT_ID_LENGTH`` (Run ids are UUIDv7: their beginning is the creation time, the same for
#: Runs created close together).
MAX_SHORT_ID_LENGTH = 12
SHORT_ID_LENGTH = 8


def short_id(record_id: str) -> str:
    """The short form of a Run's or a schedule's id that ``list`` and ``schedule list`` show."""
    return record_id[-SHORT_ID_LENGTH:]


class RunStateConflictError(RunError, code="RUN_STATE_CONFLICT"):
    """The Run or Attempt is not in a state that allows the operation (e.g. it already ended)."""


class RunRepositoryError(RunError, code="RUN_REPOSITORY_FAILED"):
    """The store failed or holds a broken row; ``retryable`` when the database was busy."""


# --------------------------------------------------------------------------- commands


class _Command(Command):
    error = InvalidRunCommandError
    field_errors = {"name": InvalidRunNameError}


def argv_problem(argv: object) -> str | None:
    """Why ``argv`` is not a runnable command line, or None."""
    if type(argv) is not list or not argv:
        return "the command must be a non-empty list of arguments"
    if len(argv) > MAX_ARGV_ITEMS:
        return f"the command has {len(argv)} arguments; at most {MAX_ARGV_ITEMS} are allowed"
    for index, arg in enumerate(argv):
        if type(arg) is not str:
            return f"argument {index} must be a string"
        if len(arg) > MAX_ARG_LENGTH:
            return f"argument {index} is longer than {MAX_ARG_LENGTH} characters"
        if "\x00" in arg:
            return f"argument {index} contains a NUL character"
    if not argv[0]:
        return "the program (first argument) must not be empty"
    return task_problem(argv)


#: A user name as ``useradd`` and busybox ``adduser`` accept it (POSIX portable characters, not
#: starting with ``-``), at most 32 bytes as glibc's and musl's utmp keep it.
TASK_USER_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")


def task_user_problem(name: object) -> str | None:
    """Why ``name`` cannot be a task user's name, or None (whether it exists is the device's)."""
    if type(name) is not str or TASK_USER_PATTERN.fullmatch(name) is None:
        return (f"the task user {str(name)[:40]!r} is not a user name (letters, digits, '_', '.', '-', "
                f"at most 32, not starting with '-' or '.')")
    return None


class RunOptions(Command, kw_only=True):
    """The options a Run is given: by ``submit``, or by its schedule, which carries them and gives
    them to each Run it fires (``schedule add`` / ``edit``). The commands that set them derive from
    this one declaration and name their family's errors; these fields are keyword-only, so a
    command's own fields come first.
    """

    name: Name | msgspec.UnsetType = msgspec.UNSET
    #: Cancel the Run (reason ``timeout``) once its Attempt has run this long (docs/schedules.md: timeouts).
    timeout_ms: TimeoutMs | msgspec.UnsetType = msgspec.UNSET
    #: The Run's own variables, over the shared ones (docs/environment.md).
    env: dict[str, str] | msgspec.UnsetType = msgspec.UNSET
    #: The working directory of its Attempts (absolute); default: the service's ``work_dir``.
    cwd: str | msgspec.UnsetType = msgspec.UNSET
    #: New Attempts after a failed or lost one, at most; the first after ``retry_delay_ms``.
    retries: Retries | msgspec.UnsetType = msgspec.UNSET
    retry_delay_ms: RetryDelayMs | msgspec.UnsetType = msgspec.UNSET
    #: The device user its Attempts run as (a name in its passwd); default: the service's
    #: ``task_user`` setting, else the service's own user (docs/operating.md: task user).
    task_user: str | msgspec.UnsetType = msgspec.UNSET

    def rule_problem(self) -> str | None:
        """Why the Run's own variables, working directory or user are invalid, or None."""
        if self.task_user is not msgspec.UNSET:
            problem = task_user_problem(self.task_user)
            if problem is not None:
                return problem
        env, cwd = self.env, self.cwd
        if env is not msgspec.UNSET:
            problem = env_problem(env)
            if problem is not None:
                return problem
        if cwd is not msgspec.UNSET:
            if type(cwd) is not str or not cwd.startswith("/") or "\x00" in cwd or len(cwd) > MAX_ARG_LENGTH:
                return "the working directory must be an absolute path"
        return None


class SubmitRunCommand(_Command, RunOptions):
    """Run ``argv`` (no shell unless argv says so) as a new queued Run."""

    argv: list[str]

    def rule_problem(self) -> str | None:
        return argv_problem(self.argv) or super().rule_problem()


def require_submit_batch(cmds: object, operation: str = "submit_batch") -> None:
    """Refuse a batch that is not a non-empty list of at most ``MAX_BATCH_RUNS``
    ``SubmitRunCommand``s; a store checks this before it opens the batch's one transaction.

    Raises:
        InvalidRunCommandError: the batch is empty, too long, or holds something else than a
            ``SubmitRunCommand`` (named by its position, from 1).
    """
    if type(cmds) is not list or not cmds:
        raise InvalidRunCommandError(f"{operation} expects a non-empty list of SubmitRunCommand")
    if len(cmds) > MAX_BATCH_RUNS:
        raise InvalidRunCommandError(f"a batch holds at most {MAX_BATCH_RUNS} Runs, got {len(cmds)}; split it")
    for position, cmd in enumerate(cmds, 1):
        if not isinstance(cmd, SubmitRunCommand):
            raise InvalidRunCommandError(
                f"{operation}: item {position} is a {type(cmd).__name__}, not a SubmitRunCommand")


def retry_wait_ms(retries: int | None, retry_delay_ms: int | None, failed_attempt: int) -> int | None:
    """How long a Run waits before its next Attempt after its Attempt number ``failed_attempt``
    failed (or was lost), or None when its retries are spent. The delay doubles per Attempt,
    capped at ``MAX_RETRY_DELAY_MS``. Never called for a cancelled Run (a timeout is a cancel)."""
    if not retries or failed_attempt > retries:
        return None
    delay = DEFAULT_RETRY_DELAY_MS if retry_delay_ms is None else retry_delay_ms
    return capped_backoff(delay, failed_attempt, MAX_RETRY_DELAY_MS)


class CancelRunCommand(_Command):
    run_id: RunId
    reason: Reason | msgspec.UnsetType = msgspec.UNSET


# --------------------------------------------------------------------------- records


class ProcessIdentity(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False):
    """What proves that a pid still is the process we started: a pid alone is recycled.

    ``start_ticks`` is field 22 of ``/proc/<pid>/stat`` (clock ticks since boot) and ``boot_id``
    names the kernel boot, so a pid reused after a reboot or a wrap-around never matches.
    """

    pid: int
    pgid: int
    start_ticks: int
    boot_id: str


class AttemptRecord(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, kw_only=True):
    id: str
    run_id: str
    attempt: int
    status: AttemptStatus
    executor_type: str
    pid: int | msgspec.UnsetType = msgspec.UNSET
    pgid: int | msgspec.UnsetType = msgspec.UNSET
    process_start_ticks: int | msgspec.UnsetType = msgspec.UNSET
    boot_id: str | msgspec.UnsetType = msgspec.UNSET
    exit_code: int | msgspec.UnsetType = msgspec.UNSET
    end_reason: str | msgspec.UnsetType = msgspec.UNSET
    log_path: str | msgspec.UnsetType = msgspec.UNSET
    started_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    term_sent_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    kill_deadline_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    killed_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    finished_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    created_at_ms: SafeInt

    @property
    def identity(self) -> ProcessIdentity | None:
        """The recorded process identity, or None before the process was started."""
        if self.pid is msgspec.UNSET:
            return None
        return ProcessIdentity(self.pid, self.pgid, self.process_start_ticks, self.boot_id)


class RunRecord(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, kw_only=True):
    id: str
    execution_owner: str
    status: RunStatus
    version: int
    event_sequence: int
    name: str | msgspec.UnsetType = msgspec.UNSET
    command: list[str] | msgspec.UnsetType = msgspec.UNSET
    cancel_requested_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    cancel_reason: str | msgspec.UnsetType = msgspec.UNSET
    created_at_ms: SafeInt
    updated_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    finished_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    # Schedules and timeouts: the schedule and slot that fired this Run, and its timeout.
    schedule_id: str | msgspec.UnsetType = msgspec.UNSET
    scheduled_for_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    timeout_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    #: The Run's own variables and working directory (never a shared variable's value).
    env: dict[str, str] | msgspec.UnsetType = msgspec.UNSET
    cwd: str | msgspec.UnsetType = msgspec.UNSET
    retries: int | msgspec.UnsetType = msgspec.UNSET
    retry_delay_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    #: While ``retry_wait``: when the next Attempt may start.
    retry_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    #: The user its Attempts run as; unset: the service's ``task_user`` setting, else its own user.
    task_user: str | msgspec.UnsetType = msgspec.UNSET


class RunDetail(RunRecord, kw_only=True):
    """A Run (every field of :class:`RunRecord`) with its Attempts and its cancellation dispatch."""

    attempts: list[AttemptRecord]
    #: Absent (not null) when the Run never had a cancellation dispatch.
    dispatch: DispatchRecord | msgspec.UnsetType = msgspec.UNSET


class StoredAttemptLog(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """The copy of an Attempt's log a store keeps when the Attempt ends (``AttemptLogStore``).

    ``content`` is the log's last ``STORED_LOG_MAX_BYTES`` at most; ``size_bytes`` is the whole
    log's size on the worker's host, so ``truncated`` tells the reader that the start is missing.
    """

    attempt_id: str
    content: bytes
    size_bytes: int
    worker_id: str
    stored_at_ms: int

    @property
    def truncated(self) -> bool:
        return self.size_bytes > len(self.content)


class CancellationCandidate(msgspec.Struct, frozen=True, gc=False):
    """A cancel-requested Run whose active Attempt's dispatch is due (or not yet created)."""

    run_id: str
    attempt_id: str
    requested_at_ms: int


class KillCandidate(msgspec.Struct, frozen=True, gc=False):
    """An Attempt still active after its SIGKILL deadline passed."""

    attempt_id: str
    run_id: str
    identity: ProcessIdentity
    kill_deadline_at_ms: int
