"""Schedules: commands, records, the overlap rule and the port the service fires them through.

A schedule runs a command at the fire times of its expression (:mod:`edge_runtime.contract.cron`).
The one decision of a fire, :func:`plan_fire`, is a pure function here, so the adapter that applies
it in a transaction and the tests that model it read the same rule.

Fire times are searched before a store's write transaction, never first inside it: the stores
keep a :class:`~edge_runtime.contract.cron.KnownFireTimes`, ask it before ``BEGIN`` (a schedule
that never fires in its zone is refused there) and look the answer up inside. A stored schedule
that cannot fire (:data:`UNFIREABLE_ERRORS`: its expression or zone is not one this version
reads, or it never fires in its zone) is paused by its fire with the reason, never retried.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Annotated, Protocol

import msgspec

from edge_runtime.contract.cron import DueFire, InvalidCronExpressionError, KnownFireTimes, due_fire, parse_schedule
from edge_runtime.contract.errors import EdgeRuntimeError, StoredRowError
from edge_runtime.contract.time_zones import InvalidTimeZoneError, TimeZone, time_zone_text
from edge_runtime.contract.runs import RunOptions, argv_problem
from edge_runtime.contract.validation import (
    MAX_SAFE_INTEGER, SafeInt, bounded_int_type, identifier_problem, identifier_type, int_problem,
)

SCHEDULE_ID_MAX_LENGTH = 36
#: Longest reason kept with a schedule its fire paused (a longer one is cut, marked with ``...``).
PAUSE_REASON_MAX_LENGTH = 1024
#: What computing a stored schedule's fire times refuses when the schedule itself cannot fire:
#: an expression or a zone this version does not read (written by another version or program,
#: or an IANA zone this system no longer has), or one that never fires in its zone.
UNFIREABLE_ERRORS = (InvalidCronExpressionError, InvalidTimeZoneError)
#: A schedule's labels (``--label``): at most MAX_LABELS, each 1..LABEL_MAX_LENGTH characters
#: without control characters, no two equal. Short tags to find schedules by (QingLong's crons
#: carry them: docs/qinglong.md), never given to the Runs.
MAX_LABELS = 32
LABEL_MAX_LENGTH = 64
#: Reason of the cancel request a timeout makes (shown by ``show`` and in the events).
TIMEOUT_REASON = "timeout"


#: A schedule's number (:attr:`ScheduleRecord.number`): 1 for the first schedule a store holds.
ScheduleNumber = bounded_int_type(1, MAX_SAFE_INTEGER)
#: A stored schedule's labels, as :func:`labels_problem` admits them (a hostile row fails closed).
Labels = Annotated[list[identifier_type(LABEL_MAX_LENGTH)], msgspec.Meta(max_length=MAX_LABELS)]


class Overlap(enum.StrEnum):
    """What a slot does while the schedule's previous Run is still active."""

    SKIP = "skip"  # record the slot as skipped
    QUEUE = "queue"  # start it when the previous Run ends (at most one waits; later slots join it)
    REPLACE = "replace"  # cancel the previous Run through the CancellationDispatch, then start it


class FireOutcome(enum.StrEnum):
    STARTED = "started"
    SKIPPED = "skipped"
    WAITING = "waiting"


class ScheduleError(EdgeRuntimeError, code="SCHEDULE_ERROR"):
    """Base of every schedule error."""


class ScheduleOverlapError(ScheduleError, code="SCHEDULE_RUN_SKIPPED"):
    """``schedule run`` started nothing: a Run of the schedule is active and its overlap is skip."""


class InvalidScheduleCommandError(ScheduleError, code="INVALID_SCHEDULE_COMMAND"):
    """The schedule request is malformed (bad expression, time zone, overlap or field): fix the input."""


class InvalidScheduleNameError(InvalidScheduleCommandError, code="INVALID_NAME"):
    """A schedule's name (``--name``) is empty, too long or holds a control character (the code
    of a Run's bad name: the same input, the same fix)."""


class ScheduleNotFoundError(ScheduleError, code="SCHEDULE_NOT_FOUND"):
    """No schedule has this id."""


class AmbiguousScheduleIdError(ScheduleError, code="SCHEDULE_ID_AMBIGUOUS"):
    """A short id form matches several schedules; the message names them."""


class ScheduleRepositoryError(ScheduleError, code="SCHEDULE_REPOSITORY_FAILED"):
    """The store could not read or write the schedule."""


class MalformedScheduleError(ScheduleRepositoryError, StoredRowError, code="SCHEDULE_STORED_MALFORMED"):
    """A stored schedule row makes no schedule (a command that is no list of strings, variables
    that are no strings, labels no list): another program wrote it. Its fire pauses it with this
    reason, and the schedules behind it fire on; ``check`` names it."""


class AddScheduleCommand(RunOptions):
    """A new schedule; ``expression`` is parsed (and refused whole) before anything is stored. Its
    Run options (:class:`~edge_runtime.contract.runs.RunOptions`) are given to each Run it fires."""

    error = InvalidScheduleCommandError
    field_errors = {"name": InvalidScheduleNameError}

    expression: str
    argv: list[str]
    overlap: Overlap = Overlap.SKIP
    #: The zone its fire times are computed in (docs/schedules.md); unset: the device's zone,
    #: which the store resolves and stores when it adds the schedule.
    time_zone: str | msgspec.UnsetType = msgspec.UNSET
    #: Added paused, in the same transaction as the add: it never fires until resumed (an import
    #: brings a disabled cron this way; added and then paused, it could fire in between).
    paused: bool = False
    labels: list[str] | msgspec.UnsetType = msgspec.UNSET

    def rule_problem(self) -> str | None:
        parse_schedule(self.expression)  # InvalidCronExpressionError names the field and the reason
        if self.time_zone is not msgspec.UNSET:
            time_zone_text(self.time_zone)  # InvalidTimeZoneError says what to write instead
        if self.labels is not msgspec.UNSET:
            problem = labels_problem(self.labels)
            if problem is not None:
                return problem
        return argv_problem(self.argv) or super().rule_problem()


class EditScheduleCommand(RunOptions):
    """Change a schedule in place (``schedule edit``): only the given fields change; its id, its
    counts and its Runs stay. A new expression moves the next fire to its first slot after now.
    ``env`` replaces the schedule's own variables as a whole."""

    error = InvalidScheduleCommandError
    field_errors = {"name": InvalidScheduleNameError}

    schedule_id: str
    expression: str | msgspec.UnsetType = msgspec.UNSET
    argv: list[str] | msgspec.UnsetType = msgspec.UNSET
    overlap: Overlap | msgspec.UnsetType = msgspec.UNSET
    #: Replaces the labels as a whole (an empty list removes them).
    labels: list[str] | msgspec.UnsetType = msgspec.UNSET
    #: A new zone for its fire times: the next fire moves to the expression's first slot after
    #: now in that zone, as for a new expression.
    time_zone: str | msgspec.UnsetType = msgspec.UNSET

    def rule_problem(self) -> str | None:
        problem = identifier_problem("schedule_id", self.schedule_id, SCHEDULE_ID_MAX_LENGTH)
        if problem is not None:
            return problem
        if self.time_zone is not msgspec.UNSET:
            time_zone_text(self.time_zone)  # InvalidTimeZoneError says what to write instead
        if self.expression is not msgspec.UNSET:
            parse_schedule(self.expression)
        if self.argv is not msgspec.UNSET:
            problem = argv_problem(self.argv)
            if problem is not None:
                return problem
        if self.labels is not msgspec.UNSET:
            problem = labels_problem(self.labels)
            if problem is not None:
                return problem
        if all(getattr(self, f) is msgspec.UNSET for f in self.__struct_fields__ if f != "schedule_id"):
            return "nothing to change: give at least one of --cron, --tz, --name, --timeout, --overlap, --env, --cwd, " \
                   "--retries, --retry-delay, --user, --label, --no-labels or -- CMD ARGS"
        return super().rule_problem()

    def changes(self) -> dict[str, object]:
        """The given fields by name (``argv`` as ``command``), for the adapter's UPDATE."""
        given = {f: getattr(self, f) for f in self.__struct_fields__
                 if f != "schedule_id" and getattr(self, f) is not msgspec.UNSET}
        if "argv" in given:
            given["command"] = given.pop("argv")
        if "time_zone" in given:
            given["time_zone"] = time_zone_text(given["time_zone"])
        return given


class RunNowOutcome(msgspec.Struct, rename="camel", frozen=True, gc=False, kw_only=True):
    """What ``schedule run ID`` did: ``started`` (``run_id``), ``skipped`` (overlap ``skip``, a Run
    of the schedule is active: ``active_run_ids``) or ``waiting`` (overlap ``queue``/``replace``:
    it starts when the active Run ends; ``replace`` requested its cancel)."""

    schedule_id: str
    outcome: FireOutcome
    run_id: str | msgspec.UnsetType = msgspec.UNSET
    active_run_ids: list[str] = msgspec.field(default_factory=list)


def labels_problem(labels: object) -> str | None:
    """Why ``labels`` is not a schedule's list of labels, or None."""
    if type(labels) is not list:
        return "labels must be a list of strings"
    if len(labels) > MAX_LABELS:
        return f"a schedule has at most {MAX_LABELS} labels, got {len(labels)}"
    for label in labels:
        problem = identifier_problem("a label", label, LABEL_MAX_LENGTH)
        if problem is not None:
            return problem
    if len(set(labels)) != len(labels):
        return "a label is given twice"
    return None


def check_schedule_id(schedule_id: object) -> None:
    problem = identifier_problem("schedule_id", schedule_id, SCHEDULE_ID_MAX_LENGTH)
    if problem is not None:
        raise InvalidScheduleCommandError(problem)


def check_schedule_number(number: object) -> None:
    problem = int_problem("a schedule's number", number, 1, MAX_SAFE_INTEGER)
    if problem is not None:
        raise InvalidScheduleCommandError(problem)


class ScheduleRecord(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, kw_only=True):
    id: str
    #: A small whole number the store gives each schedule when it is added (1, 2, 3, ...), never
    #: changed and never given to another schedule, even once this one is removed: a short handle
    #: for people and for clients that name schedules by number (QingLong's cron ids).
    number: ScheduleNumber
    name: str | msgspec.UnsetType = msgspec.UNSET
    expression: str
    command: list[str]
    overlap: Overlap
    timeout_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    env: dict[str, str] | msgspec.UnsetType = msgspec.UNSET
    cwd: str | msgspec.UnsetType = msgspec.UNSET
    retries: int | msgspec.UnsetType = msgspec.UNSET
    retry_delay_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    #: The user the Runs it fires run as (unset: the service's ``task_user``).
    task_user: str | msgspec.UnsetType = msgspec.UNSET
    paused: bool
    next_fire_at_ms: SafeInt
    waiting_fire_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    last_fire_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    last_outcome: FireOutcome | msgspec.UnsetType = msgspec.UNSET
    last_run_id: str | msgspec.UnsetType = msgspec.UNSET
    fired_count: int
    skipped_count: int
    coalesced_count: int
    created_at_ms: SafeInt
    updated_at_ms: SafeInt
    #: The zone the schedule fires in; unset only for a schedule stored before zones were kept
    #: (it fires in the device's zone).
    time_zone: str | msgspec.UnsetType = msgspec.UNSET
    #: Why the service paused it: it cannot fire (:func:`unfireable_reason`). Unset for a schedule
    #: paused by its user, and cleared by ``resume`` and by a new expression.
    pause_reason: Annotated[str, msgspec.Meta(min_length=1, max_length=PAUSE_REASON_MAX_LENGTH)] | msgspec.UnsetType = \
        msgspec.UNSET
    labels: Labels = msgspec.field(default_factory=list)


class PausedUnfireable(msgspec.Struct, frozen=True, gc=False):
    """What a fire did instead of firing: the stored schedule cannot fire (:data:`UNFIREABLE_ERRORS`),
    so it is now paused with ``reason`` (its ``pause_reason``) and fires no more until edited or
    resumed; every other schedule fires on."""

    reason: str


def unfireable_reason(error: EdgeRuntimeError) -> str:
    """The pause reason of a schedule that cannot fire because of ``error``: its message and code,
    cut to :data:`PAUSE_REASON_MAX_LENGTH`."""
    reason = f"{error.message} [{error.code}]"
    return reason if len(reason) <= PAUSE_REASON_MAX_LENGTH else reason[:PAUSE_REASON_MAX_LENGTH - 3] + "..."


#: The variable a task's C library reads its zone from.
ZONE_VARIABLE = "TZ"


def fired_run_env(record: ScheduleRecord) -> dict[str, str] | None:
    """The own variables of a Run that ``record`` fires (or ``schedule run`` starts): the
    schedule's, and ``TZ`` set to the schedule's zone unless they set it, so its task reads the
    clock in the zone its slot was computed in (``date`` prints the slot's wall time). A schedule
    stored without a zone leaves ``TZ`` to the device's, which every task gets."""
    env = {} if record.env is msgspec.UNSET else dict(record.env)
    if record.time_zone is not msgspec.UNSET:
        env.setdefault(ZONE_VARIABLE, record.time_zone)
    return env or None


class FirePlan(msgspec.Struct, frozen=True, gc=False):
    """One fire's decision: store ``due.next_fire_at_ms``, then do ``outcome`` for the slot."""

    due: DueFire
    outcome: FireOutcome
    #: Active Runs of the schedule to cancel (overlap replace) before the slot may start.
    cancel_run_ids: tuple[str, ...] = ()


def plan_fire(
    expression: str, overlap: Overlap, next_fire_at_ms: int, now_ms: int, active: list[tuple[str, bool]],
    zone: TimeZone | None = None, known: KnownFireTimes | None = None,
) -> FirePlan | None:
    """What firing a schedule at ``now_ms`` does, or None when it is not due.

    ``active`` lists the schedule's active Runs as ``(run_id, cancel_requested)``. Missed slots up
    to now fold into this one fire (:func:`~edge_runtime.contract.cron.due_fire`); the next slot
    is computed in ``zone``, the schedule's own, or looked up in ``known`` when
    :func:`search_before_fire` searched it before the transaction.

    Raises:
        InvalidCronExpressionError, InvalidTimeZoneError: (:data:`UNFIREABLE_ERRORS`) the schedule
            cannot fire; the store pauses it with :func:`unfireable_reason`.
    """
    due = due_fire(parse_schedule(expression), next_fire_at_ms, now_ms, zone, known)
    if due is None:
        return None
    return FirePlan(due, *slot_decision(overlap, active))


def search_before_fire(
    record: ScheduleRecord, now_ms: int, zone_of: Callable[[ScheduleRecord], TimeZone], known: KnownFireTimes
) -> None:
    """Search the fire times a fire of ``record`` (as read before its transaction) will ask ``known``
    for, at ``now_ms`` (the store's clock before ``BEGIN``), so that :func:`plan_fire` inside the
    transaction looks them up. A schedule that cannot fire is not decided here: the transaction,
    holding the row, meets the same error again (at once: ``known`` keeps a never-firing pair)
    and pauses it."""
    if record.paused:
        return
    try:
        due_fire(parse_schedule(record.expression), record.next_fire_at_ms, now_ms, zone_of(record), known)
    except UNFIREABLE_ERRORS:
        return  # met again by plan_fire under the row's lock, which pauses the schedule


def slot_decision(overlap: Overlap, active: list[tuple[str, bool]]) -> tuple[FireOutcome, tuple[str, ...]]:
    """What a slot does (a due fire, or ``schedule run``) given the schedule's active Runs as
    ``(run_id, cancel_requested)``: start when none is active; else skip it (overlap skip) or wait
    for them to end, and for overlap replace, the Runs whose cancel is still to be requested (each
    after the slot's commit, in a transaction of its own, with :func:`replaced_reason`)."""
    if not active:
        return FireOutcome.STARTED, ()
    if overlap is Overlap.SKIP:
        return FireOutcome.SKIPPED, ()
    to_cancel = tuple(run_id for run_id, requested in active if not requested) if overlap is Overlap.REPLACE else ()
    return FireOutcome.WAITING, to_cancel


def replaced_reason(schedule_id: str) -> str:
    """The cancel reason of a Run that a slot of its schedule replaces (overlap replace)."""
    return f"replaced by schedule {schedule_id}"


def next_fire_on_pause_change(
    record: ScheduleRecord, paused: bool, now_ms: int, zone: TimeZone | None, known: KnownFireTimes | None = None,
) -> int:
    """The next fire of ``record`` once paused or resumed: a pause keeps it; resuming restarts from
    the first slot after now, so the slots missed while paused are not fired (a pause means "not
    these"). ``zone``, the schedule's, is read only to resume.

    Raises:
        InvalidCronExpressionError, InvalidTimeZoneError: resuming a schedule that cannot fire
            (it stays paused).
    """
    if paused:
        return record.next_fire_at_ms
    expression = parse_schedule(record.expression)
    if known is None:
        return expression.next_fire_after(now_ms, zone)
    return known.next_fire_after(expression, now_ms, zone)


class ScheduleAdmin(Protocol):
    """The port of the user's schedule commands (``schedule add|edit|run|list|show|pause|resume|
    remove``), one adapter per store (Local: edge_runtime/local/schedules.py; PostgreSQL:
    cluster/cluster_postgres/schedules.py). Each change is one transaction.

    Raises (all): ScheduleNotFoundError; InvalidScheduleCommandError; ScheduleRepositoryError.
    """

    def add(self, cmd: AddScheduleCommand) -> ScheduleRecord:
        """Store a new schedule with the next number of the store (never one used before)."""
        ...

    def get(self, schedule_id: str) -> ScheduleRecord: ...
    def find_schedule_ids(self, form: str, limit: int) -> list[str]:
        """Ids of the schedules whose id begins or ends with ``form`` (a short id form, matched
        literally), newest first, at most ``limit``."""
        ...

    def get_by_number(self, number: int) -> ScheduleRecord:
        """The schedule whose :attr:`ScheduleRecord.number` is ``number``."""
        ...

    def list(self) -> list[ScheduleRecord]: ...
    def set_paused(self, schedule_id: str, paused: bool) -> ScheduleRecord: ...
    def remove(self, schedule_id: str) -> None: ...

    def device_zone(self) -> str:
        """The zone text of a schedule added without one (and shown for one stored without)."""
        ...

    def zone_of(self, record: ScheduleRecord) -> TimeZone:
        """The zone ``record`` fires in."""
        ...

    def edit(self, cmd: EditScheduleCommand) -> ScheduleRecord:
        """Apply the given changes in place; the schedule as it is now."""
        ...

    def run_now(self, schedule_id: str, *, actor_id: str) -> RunNowOutcome:
        """Start a Run of the schedule now (paused or not), its overlap applying as to a fire:
        the Run gets the schedule's command and options, and ``scheduled_for_ms`` = now."""
        ...


class ScheduleStore(Protocol):
    """The port the service fires schedules and enforces timeouts through (one adapter per profile)."""

    def due_schedule_ids(self, limit: int) -> list[str]:
        """Unpaused schedules whose next fire time has come, earliest first (read at the store's now)."""
        ...

    def fire(self, schedule_id: str, *, actor_id: str) -> FirePlan | PausedUnfireable | None:
        """Fire one due schedule in one transaction (compare-and-set on its next fire time); a
        schedule that cannot fire is paused instead, with the reason, in the same transaction.
        None when it is not due (fired, paused or removed since it was listed)."""
        ...

    def start_waiting(self, *, actor_id: str) -> list[str]:
        """Start each waiting slot whose schedule has no active Run left; return the active Runs
        that a still-waiting ``replace`` slot must (still) cancel (after a crash, say)."""
        ...

    def arm_boot_schedules(self, boot_id: str) -> list[str]:
        """Make each ``@reboot`` schedule not yet fired for ``boot_id`` due now, once (one
        transaction); return their ids. A restart within the same boot arms nothing."""
        ...

    def timed_out_run_ids(self) -> list[str]:
        """Runs whose Attempt has run longer than the Run's timeout and that have no cancel request yet."""
        ...

    def request_cancel(self, run_id: str, reason: str, *, actor_id: str) -> None:
        """Request cancellation through the Run repository (the CancellationDispatch delivers it)."""
        ...

    def next_due_at_ms(self) -> int | None:
        """The earliest next fire time or timeout deadline, for the service's sleep."""
        ...
