"""The user operations, one implementation for the CLI commands, the web panel and the QingLong
face.

Each takes an open store (the ``UserStore`` port: the part of ``Store`` they use) and the values
a user gave, validates them with the contract's commands and the same checks as the CLI (so a
refusal has the same error code either way), does the work in the store's own short transactions
and wakes the service after the commit. Printing, argument parsing, HTTP and another product's
shapes stay with their callers (``edge_runtime.cli.*``, ``edge_runtime.panel``,
``edge_runtime.qinglong``).

Dependency direction: operations -> contract, and the service's ``log_capture`` (a log file is
opened as the service names it); the faces (cli, panel, qinglong) call it, never the other way.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from edge_runtime.contract.durations import parse_duration_ms
from edge_runtime.contract.environment import InvalidVariableError, parse_assignments
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.redaction import Redactor, store_redactor
from edge_runtime.contract.runs import (
    ACTIVE_ATTEMPT_STATUSES, AttemptRecord, CancelRunCommand, InvalidRunCommandError, RunStateConflictError,
    SubmitRunCommand, task_user_problem,
)

if TYPE_CHECKING:  # the ports import the whole contract; ``submit`` loads only what it uses
    from edge_runtime.contract.ports import UserStore


def _unset(value: Any) -> Any:
    return msgspec.UNSET if value is None else value


# ------------------------------------------------------------------------------------ shared


#: C0 controls, DEL and C1 controls: a stored name or reason could otherwise move the cursor,
#: rewrite the terminal's title or hide text when printed. Escaped as JSON escapes them.
_CONTROL_ESCAPES = {c: f"\\u{c:04x}" for c in (*range(0x20), *range(0x7F, 0xA0))} | {
    0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"
}


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\u001b``), for plain-text output."""
    return text.translate(_CONTROL_ESCAPES)


def resolve_run_id(store: UserStore, form: str) -> str:
    """The full id of the Run that ``form`` names: a full id as it is, else a unique prefix or
    suffix of at most ``MAX_SHORT_ID_LENGTH`` characters (as ``list`` shows it).

    Raises:
        RunNotFoundError: no Run matches. AmbiguousRunIdError: several do (named).
    """
    from edge_runtime.contract.runs import AmbiguousRunIdError, RunNotFoundError

    return _resolve_id(form, store.runs.find_run_ids, "run", RunNotFoundError, AmbiguousRunIdError)


def resolve_schedule_id(store: UserStore, form: str) -> str:
    """The full id of the schedule that ``form`` names, by the rule of :func:`resolve_run_id`.

    Raises:
        ScheduleNotFoundError: no schedule matches. AmbiguousScheduleIdError: several do (named).
    """
    from edge_runtime.contract.schedules import AmbiguousScheduleIdError, ScheduleNotFoundError

    return _resolve_id(form, store.schedules.find_schedule_ids, "schedule", ScheduleNotFoundError,
                       AmbiguousScheduleIdError)


def _resolve_id(form: str, find: Callable[[str, int], list[str]], kind: str, not_found: type[EdgeRuntimeError],
                ambiguous: type[EdgeRuntimeError]) -> str:
    from edge_runtime.contract.runs import MAX_SHORT_ID_LENGTH

    if not isinstance(form, str) or len(form) > MAX_SHORT_ID_LENGTH or not form:
        return form  # a full id (or no id at all): the command's own lookup judges it
    found = find(form, 6)
    if not found:
        raise not_found(f"no {kind} with id {form!r} (nor one whose id begins or ends with it)")
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise ambiguous(f"{form!r} names several {kind}s: {shown}; give more characters")
    return found[0]


#: What ``submit`` and ``schedule add`` say on stderr when no service took the wake-up (exit 0).
NO_SERVICE_NOTE = "Note: no service is running for this database; the Run will wait until one starts\n"


def wake_service(wake: Callable[[], int | None], *, note_when_none: bool = False,
                 warn: Callable[[str], object] | None = None) -> None:
    """Tell a running service that new work was committed, so it acts now instead of at its next poll.

    Best effort by design: when no service runs, the committed work simply waits for one (with
    ``note_when_none``, the user is told so when ``wake`` says 0 services took it). It runs
    after the commit, so a failure is at most a warning: the command has succeeded either way.
    The warning goes to ``warn`` (default: stderr; the service's own threads pass their journal).
    """
    try:
        woken = wake()
    except (OSError, EdgeRuntimeError) as exc:
        (warn or sys.stderr.write)(f"Warning: committed, but could not wake the service ({exc}); it acts at its next poll\n")
        return
    if note_when_none and woken == 0:
        sys.stderr.write(NO_SERVICE_NOTE)


# ------------------------------------------------------------------------------------ Runs


def run_options(*, env: Iterable[str] | None = None, cwd: str | None = None, retries: int | None = None,
                retry_delay: str | None = None, cwd_name: str = "--cwd", task_user: str | None = None,
                user_exists: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """A Run's (or schedule's) own options as command fields: ``env`` as ``K=V`` texts, ``cwd``
    (must be a directory now: refused at submit, not when an Attempt fails to start in it),
    ``retries`` and ``retry_delay`` (a duration, only with ``retries``), ``task_user`` (checked
    with ``user_exists`` where the tasks run on this host: refused now, not when its Attempt
    starts; None: they run elsewhere, whose worker checks it at each start).

    Raises:
        InvalidRunCommandError: a malformed ``K=V``, a missing directory, a delay without retries,
            a user this host does not have.
    """
    options: dict[str, Any] = {}
    if task_user is not None:
        problem = task_user_problem(task_user)
        if problem is not None:
            raise InvalidRunCommandError(problem)
        if user_exists is not None and not user_exists(task_user):
            raise InvalidRunCommandError(
                f"--user {task_user!r}: no such user on this device (create it first, e.g. `useradd --system "
                f"--no-create-home {task_user}`, or an entry in /etc/passwd; docs/operating.md, \"Task user\")")
        options["task_user"] = task_user
    if env:
        try:
            options["env"] = parse_assignments(list(env))
        except InvalidVariableError as exc:
            raise InvalidRunCommandError(str(exc)) from None
    if cwd is not None:
        resolved = os.path.abspath(os.path.expanduser(cwd))
        if not os.path.isdir(resolved):
            raise InvalidRunCommandError(f"{cwd_name} {cwd!r}: no such directory")
        options["cwd"] = resolved
    if retries is not None:
        options["retries"] = retries
    if retry_delay is not None:
        if retries is None:
            raise InvalidRunCommandError("--retry-delay needs --retries N")
        options["retry_delay_ms"] = parse_duration_ms(retry_delay)
    return options


def device_user_exists(name: str) -> bool:
    """Whether this device has a user called ``name`` (a ``--user`` of its own tasks, checked at once)."""
    from edge_runtime.service.task_user import task_user_exists  # only when a user is named

    return task_user_exists(name)


def submit_command(argv: list[str], *, name: str | None = None, timeout: str | None = None,
                   options: dict[str, Any] | None = None) -> SubmitRunCommand:
    """The validated command of a new Run (before any store is touched)."""
    return SubmitRunCommand(argv=argv, name=_unset(name),
                            timeout_ms=msgspec.UNSET if timeout is None else parse_duration_ms(timeout),
                            **(options or {}))


#: Where this device's scripts are (``scripts_dir``, as its service resolves it), asked only for
#: a ``task`` command; None (or a callable giving None): the scripts are on another host (the
#: cluster's workers), so nothing is checked at submit.
ScriptsDir = Callable[[], "Path | None"] | None


def require_runnable_task(argv: list[str], own_env: Any, scripts_dir: ScriptsDir,
                          shared: Callable[[], Mapping[str, str]] = dict) -> None:
    """Refuse a ``task`` command whose script or program is missing on this device (docs/qinglong.md,
    "task"), before anything is stored. The program is looked up on the ``PATH`` the task would get
    as far as this side knows it: the command's own (``own_env``), else the shared one (``shared``:
    the store's variables, read only for a ``task`` command), else this process's (the service's
    own when it takes the submit: the hand-off, the panel).

    Raises:
        TaskUnavailableError: the script or its program is missing or refused (nothing stored).
    """
    from edge_runtime.contract.script_task import is_task

    if scripts_dir is None or not is_task(argv):
        return
    where = scripts_dir()
    if where is None:
        return
    from edge_runtime.contract.environment import DEFAULT_PATH
    from edge_runtime.service.script_task import check_task

    # Later wins, as compose_environment composes it; a PATH given empty is empty, not absent.
    path = os.environ.get("PATH", DEFAULT_PATH)
    for layer in (shared(), own_env if isinstance(own_env, dict) else {}):
        path = layer.get("PATH", path)
    check_task(argv, scripts_dir=str(where), path=path)


def shared_variables(store: UserStore) -> Callable[[], Mapping[str, str]]:
    """The store's shared variables as a task gets them, read when called (none for a store that keeps none)."""
    environment = store.environment
    return dict if environment is None else environment.task_values


def submit(store: UserStore, command: SubmitRunCommand, *, actor_id: str = "cli", note_when_none: bool = False,
           warn: Callable[[str], object] | None = None, scripts_dir: ScriptsDir = None):
    """Queue ``command`` as a new Run and wake the service; the new Run's record. A ``task``
    command is checked first where ``scripts_dir`` says the scripts are here
    (:func:`require_runnable_task`)."""
    require_runnable_task(command.argv, command.env, scripts_dir, shared_variables(store))
    record = store.runs.submit(command, actor_id=actor_id)
    wake_service(store.wake_workers, note_when_none=note_when_none, warn=warn)
    return record


def cancel(store: UserStore, run_id: str, *, reason: str | None = None, actor_id: str = "cli"):
    """Durably request the Run's cancellation (``run_id``: a full id or a unique short form)."""
    CancelRunCommand(run_id=run_id, reason=_unset(reason))  # validated before the store is read
    command = CancelRunCommand(run_id=resolve_run_id(store, run_id), reason=_unset(reason))
    record = store.runs.request_cancel(command, actor_id=actor_id)
    wake_service(store.wake_workers)
    return record


def masked_detail(store: UserStore, run_id: str):
    """The Run with its Attempts and dispatch; a secret's value never shown, even where the Run's
    own command, variables or reason repeat it."""
    return store_redactor(store).record(store.runs.detail(run_id))


# ------------------------------------------------------------------------------------ logs


class LogUnreadableError(EdgeRuntimeError, code="LOG_UNREADABLE"):
    """The Attempt's log path is not a readable regular file (a symlink, FIFO or directory)."""


class HostileLogPathError(EdgeRuntimeError, code="LOG_PATH_REFUSED"):
    """The database names, as an Attempt's log, a file that is not that Attempt's log in the log
    directory: the row is hostile (or the log directory given is not the service's) and is refused."""


class CommandNotStartedError(RunStateConflictError, code="COMMAND_NOT_STARTED"):
    """There is no log because the command never started (yet): the message says why (the Run
    waits for a service or a slot, was cancelled first, or its start failed, and with what)."""


def attempt_of(store: UserStore, run_id: str, number: int | None) -> AttemptRecord:
    """The Run's latest Attempt, or its Attempt ``number``.

    Raises:
        CommandNotStartedError: the Run has no Attempt (saying why). RunStateConflictError: it
            has Attempts, none numbered ``number``.
    """
    attempts = store.runs.attempts(run_id)
    if not attempts:
        raise CommandNotStartedError(never_started(store.runs.get(run_id), store_redactor(store)))
    if number is not None:
        attempts = [a for a in attempts if a.attempt == number]
        if not attempts:
            raise RunStateConflictError(f"run {run_id} has no attempt {number}")
    return attempts[-1]


def never_started(run: Any, redactor: Redactor) -> str:
    """Why a Run that has no Attempt has no log (its cancel reason masked with ``redactor``)."""
    from edge_runtime.contract.runs import ACTIVE_RUN_STATUSES

    if run.status in ACTIVE_RUN_STATUSES:
        return (f"run {run.id} is {run.status.value}: its command has not started yet, so there is no log yet (it "
                f"starts when a service for this database has a free slot)")
    reason = "" if run.cancel_reason is msgspec.UNSET else f" ({printable(redactor.text(run.cancel_reason))})"
    return f"run {run.id} ended {run.status.value}{reason} before its command started; no log"


def require_log(attempt: AttemptRecord, run_id: str, redactor: Redactor) -> None:
    """Refuse an Attempt that has no log (yet), saying why (``CommandNotStartedError``; its reason
    masked with ``redactor``)."""
    if attempt.log_path is not msgspec.UNSET:
        return
    if attempt.status not in ACTIVE_ATTEMPT_STATUSES:
        reason = "" if attempt.end_reason is msgspec.UNSET else f": {printable(redactor.text(attempt.end_reason))}"
        raise CommandNotStartedError(f"attempt {attempt.attempt} of run {run_id} ended "
                                     f"{attempt.status.value} before its command started{reason}; no log")
    raise CommandNotStartedError(f"attempt {attempt.attempt} of run {run_id} is {attempt.status.value}: its command "
                                 f"has not started yet; no log yet")


def open_log(attempt: AttemptRecord, run_id: str, log_dir: Path) -> int:
    """The Attempt's log file on this device, opened read-only. A log path comes from the
    database, which is hostile input: only ``<log dir>/<attempt file stem>.log`` is ever opened,
    relative to the opened directory, without following a symlink, and only a regular file."""
    from edge_runtime.service.log_capture import file_stem, open_checked_in

    name = f"{file_stem(attempt.id)}.log"
    expected = log_dir / name
    if os.path.normpath(str(attempt.log_path)) != os.path.normpath(str(expected)):
        raise HostileLogPathError(f"attempt {attempt.attempt} of run {run_id} names {attempt.log_path!r} as its log, "
                                  f"but its log can only be {expected}: refused, nothing read (a database naming "
                                  f"other files is hostile; give --log-dir if the service used another directory)")
    try:
        return open_checked_in(log_dir, name, os.O_RDONLY, stat.S_IFREG)
    except FileNotFoundError:
        raise RunStateConflictError(f"log file {attempt.log_path} of run {run_id} no longer exists (an empty log is not kept, "
                                    f"and log_total_max_bytes removes the oldest logs first)") from None
    except OSError as exc:
        raise LogUnreadableError(f"cannot read the log file {attempt.log_path}: {exc.strerror or exc}") from None


class LogChunk(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """Bytes of an Attempt's log from ``offset`` (secrets masked), for a live tail: ask again
    from ``next_offset``; ``done`` once the Attempt ended and everything was read."""

    run_id: str
    attempt: int
    status: str
    offset: int
    next_offset: int
    text: str
    done: bool


def read_log_chunk(store: UserStore, run_id: str, log_dir: Path, *, attempt: int | None, offset: int,
                   max_bytes: int) -> LogChunk:
    """At most ``max_bytes`` of the Attempt's log from byte ``offset`` (more only when the
    secrets are so long that the masker could hold back that much). The end of a piece that could
    begin a secret's value or a truncation marker is held back (``next_offset`` stops before it)
    until the next read, so a value split across two reads, or cut by the marker, is still masked."""
    if offset < 0:
        raise InvalidRunCommandError("offset must be 0 or more")
    store.runs.get(run_id)
    record = attempt_of(store, run_id, attempt)
    if record.log_path is msgspec.UNSET and record.status in ACTIVE_ATTEMPT_STATUSES:
        return LogChunk(run_id=run_id, attempt=record.attempt, status=record.status.value, offset=offset,
                        next_offset=offset, text="", done=False)
    redactor = store_redactor(store)
    require_log(record, run_id, redactor)
    active = record.status in ACTIVE_ATTEMPT_STATUSES
    masker = redactor.log()
    size = max(max_bytes, masker.most_held + 1)  # a read that can hold back all it read never advances
    fd = open_log(record, run_id, log_dir)
    try:
        data = os.pread(fd, size, offset)
        at_end = len(data) < size and os.fstat(fd).st_size <= offset + len(data)
    finally:
        os.close(fd)
    shown = masker.feed(data)
    held = masker.held
    if not active and at_end:
        shown += masker.flush()
        held = 0
    return LogChunk(run_id=run_id, attempt=record.attempt, status=record.status.value, offset=offset,
                    next_offset=offset + len(data) - held, text=shown.decode("utf-8", "replace"),
                    done=not active and at_end)


def read_log_tail(store: UserStore, run_id: str, log_dir: Path, *, max_bytes: int) -> tuple[str, int] | None:
    """The Run's latest Attempt's log as text, every secret's value masked: the whole of it, or
    its last ``max_bytes``, with how many bytes before them were left out (read as a log cut at its
    start: a secret the cut split shows on neither side). None when it has no log (not yet
    started, ended before its command started, or its file was removed by the log cap)."""
    attempts = store.runs.attempts(run_id)
    if not attempts or attempts[-1].log_path is msgspec.UNSET:
        return None
    try:
        fd = open_log(attempts[-1], run_id, log_dir)
    except RunStateConflictError:
        return None
    try:
        skipped = max(0, os.fstat(fd).st_size - max_bytes)
        masker = store_redactor(store).log(cut_at_start=skipped > 0)
        shown = bytearray()
        offset = skipped
        while len(shown) < 2 * max_bytes:  # a log still growing is read up to twice the tail, no more
            data = os.pread(fd, 64 * 1024, offset)
            if not data:
                break
            offset += len(data)
            shown += masker.feed(data)
    finally:
        os.close(fd)
    shown += masker.flush()
    return shown.decode("utf-8", "replace"), skipped


# ------------------------------------------------------------------------------------ schedules


def add_schedule_command(expression: str, argv: list[str], *, name: str | None = None, overlap: str = "skip",
                         timeout: str | None = None, time_zone: str | None = None, labels: list[str] | None = None,
                         options: dict[str, Any] | None = None):
    """The validated command of a new schedule (before any store is touched)."""
    from edge_runtime.contract.schedules import AddScheduleCommand, InvalidScheduleCommandError, Overlap

    try:
        chosen = Overlap(overlap)
    except ValueError:
        raise InvalidScheduleCommandError(f"overlap must be one of {', '.join(o.value for o in Overlap)}") from None
    return AddScheduleCommand(expression=expression, argv=argv, name=_unset(name), overlap=chosen,
                              timeout_ms=msgspec.UNSET if timeout is None else parse_duration_ms(timeout),
                              time_zone=_unset(time_zone), labels=_unset(labels), **(options or {}))


def add_schedule(store: UserStore, command: Any, *, scripts_dir: ScriptsDir = None, note_when_none: bool = False):
    """Add the schedule ``command`` (a ``task`` command checked first: :func:`require_runnable_task`)
    and wake the service; its record."""
    require_runnable_task(command.argv, command.env, scripts_dir, shared_variables(store))
    record = store.schedules.add(command)
    wake_schedules(store, note_when_none=note_when_none)
    return record


def edit_schedule(store: UserStore, command: Any, *, scripts_dir: ScriptsDir = None):
    """Change a schedule in place (a new ``task`` command checked first, with the variables the
    schedule will have) and wake the service; its record."""
    if command.argv is not msgspec.UNSET:
        env = command.env if command.env is not msgspec.UNSET else store.schedules.get(command.schedule_id).env
        require_runnable_task(command.argv, env, scripts_dir, shared_variables(store))
    record = store.schedules.edit(command)
    wake_schedules(store)
    return record


def wake_schedules(store: UserStore, *, note_when_none: bool = False) -> None:
    """After a schedule changed: the service recomputes its sleep at once."""
    wake_service(store.wake_workers, note_when_none=note_when_none)


def run_schedule_now(store: UserStore, schedule_id: str, *, actor_id: str = "cli"):
    """Start a Run of the schedule now (overlap applies).

    Raises:
        ScheduleOverlapError: a Run of it is active and its overlap is skip: nothing started.
    """
    from edge_runtime.contract.schedules import FireOutcome, ScheduleOverlapError

    outcome = store.schedules.run_now(schedule_id, actor_id=actor_id)
    if outcome.outcome is FireOutcome.SKIPPED:
        raise ScheduleOverlapError(
            f"schedule {outcome.schedule_id} has an active Run ({', '.join(outcome.active_run_ids)}) and its overlap "
            f"is skip: no Run started")
    wake_schedules(store, note_when_none=True)
    return outcome


# ------------------------------------------------------------------------------------ env entries
#
# The env entries (docs/environment.md) through the store's port (``EnvironmentStore``): the CLI's
# ``env`` commands and QingLong's OpenAPI call these, so both get the same checks, the same errors
# and entries masked the same way. Ids are integers; a command naming several ids is one
# transaction and changes nothing when one of them names no entry. Every entry returned leaves
# out a secret's value, and its other texts are masked with the store's secrets as they are after
# the change (remarks that quote a secret show ``***``).


def environment(store: UserStore):
    """The store's env entries (``EnvironmentStore``).

    Raises:
        VariableError: the store keeps none.
    """
    from edge_runtime.contract.environment import VariableError

    found = getattr(store, "environment", None)
    if found is None:
        raise VariableError("this store keeps no env entries")
    return found


def _masked(store: UserStore, entries: Any) -> Any:
    redactor = store_redactor(store)
    return redactor.records(entries) if isinstance(entries, list) else redactor.record(entries)


def env_list(store: UserStore, *, name: str | None = None, search: str | list[str] | None = None) -> list[Any]:
    """The entries in list order (pinned first, then position, then id), of ``name`` and/or
    matching ``search`` (name, value or remarks contain it, case ignored; a secret's value is
    searched, never returned)."""
    return _masked(store, environment(store).list(name=name, search=search))


def env_get(store: UserStore, entry_id: int) -> Any:
    """One entry. Raises EnvEntryNotFoundError."""
    return _masked(store, environment(store).get(entry_id))


def env_add(store: UserStore, entries: list[Any]) -> list[Any]:
    """Append ``entries`` (``NewEnvEntry``: name, value, secret, remarks, enabled, pinned, labels)
    at the end of the list in their order, in one transaction (all or none); the new entries with
    their ids, in that order."""
    return _masked(store, environment(store).add(entries))


def env_update(store: UserStore, entry_id: int, *, name: str | None = None, value: str | None = None,
               secret: bool | None = None, remarks: str | None = None, labels: list[str] | None = None) -> Any:
    """Change the fields given of one entry (None: unchanged; ``labels`` replaces them)."""
    return _masked(store, environment(store).update(entry_id, name=name, value=value, secret=secret,
                                                    remarks=remarks, labels=labels))


def env_remove(store: UserStore, ids: list[int]) -> list[int]:
    """Remove the entries; their ids."""
    return environment(store).remove(ids)


def env_remove_name(store: UserStore, name: str) -> list[int]:
    """Remove every entry of ``name``; their ids. Raises VariableNotFoundError (none)."""
    return environment(store).remove_name(name)


def env_enable(store: UserStore, ids: list[int], enabled: bool = True) -> list[Any]:
    """Enable (or disable) the entries; them, in list order."""
    entries = environment(store)
    return _masked(store, entries.enable(ids) if enabled else entries.disable(ids))


def env_pin(store: UserStore, ids: list[int], pinned: bool = True) -> list[Any]:
    """Pin (or unpin) the entries; them, in list order."""
    entries = environment(store)
    return _masked(store, entries.pin(ids) if pinned else entries.unpin(ids))


def env_rename(store: UserStore, ids: list[int], name: str) -> list[Any]:
    """Give the entries the name ``name``; them, in list order."""
    return _masked(store, environment(store).rename(ids, name))


def env_move(store: UserStore, entry_id: int, *, before: int | None) -> Any:
    """Move the entry just before the entry ``before`` in the list (None: to its end)."""
    return _masked(store, environment(store).move(entry_id, before=before))


def env_set(store: UserStore, name: str, value: str, *, secret: bool) -> Any:
    """Make ``value`` the one value of ``name`` (its first entry kept, the others removed)."""
    return _masked(store, environment(store).set(name, value, secret=secret))


# ------------------------------------------------------------------------------------ subscriptions
#
# The subscriptions (docs/qinglong.md, "Subscriptions") through the store's ``subscriptions``
# repository: the CLI's ``subscription list|run|pause|resume|remove`` and the panel call these.
# Adding one and pulling one need QingLong's folder naming and this program's own path, which the
# CLI (and the composition root that serves the panel) supply.


def subscriptions(store: UserStore) -> Any:
    """The store's subscriptions.

    Raises:
        SubscriptionError: the store keeps none (only the Local store does).
    """
    from edge_runtime.contract.subscriptions import SubscriptionError

    found = getattr(store, "subscriptions", None)
    if found is None:
        raise SubscriptionError("this store keeps no subscriptions")
    return found


def resolve_subscription_id(store: UserStore, form: str) -> str:
    """The full id of the subscription ``form`` names, by the rule of :func:`resolve_run_id`.

    Raises:
        SubscriptionNotFoundError: no subscription matches. AmbiguousSubscriptionIdError: several do.
    """
    from edge_runtime.contract.subscriptions import AmbiguousSubscriptionIdError, SubscriptionNotFoundError

    return _resolve_id(form, subscriptions(store).find_subscription_ids, "subscription", SubscriptionNotFoundError,
                       AmbiguousSubscriptionIdError)


class SubscriptionView(msgspec.Struct, rename="camel", kw_only=True):
    """A subscription as ``subscription list --json`` and the panel show it: the record, its pull
    schedule (unset once removed by hand) and how many scripts it knows and schedules it made."""

    subscription: Any
    pull_schedule: Any = msgspec.UNSET
    scripts: int
    schedules: int


def subscription_views(store: UserStore) -> list[SubscriptionView]:
    """Every subscription with its pull schedule and counts, in the repository's order."""
    from edge_runtime.contract.schedules import ScheduleNotFoundError

    repository = subscriptions(store)
    views = []
    for record in repository.list():
        scripts = repository.scripts(record.id)
        schedule = msgspec.UNSET
        if record.schedule_id is not msgspec.UNSET:
            try:
                schedule = store.schedules.get(record.schedule_id)
            except ScheduleNotFoundError:  # removed by hand: the view says it has none
                schedule = msgspec.UNSET
        views.append(SubscriptionView(subscription=record, pull_schedule=schedule, scripts=len(scripts),
                                      schedules=sum(s.schedule_id is not msgspec.UNSET for s in scripts)))
    return views


def pause_subscription(store: UserStore, record: Any, paused: bool) -> Any:
    """Stop (or start again) pulling ``record`` on its schedule; its pull schedule's record.

    Raises:
        SubscriptionError: its pull schedule was removed by hand (nothing to pause or resume).
    """
    from edge_runtime.contract.subscriptions import SubscriptionError

    if record.schedule_id is msgspec.UNSET:
        raise SubscriptionError(f"subscription {record.id} has no pull schedule (it was removed by hand): nothing to "
                                f"{'pause' if paused else 'resume'}; pull it with subscription run")
    schedule = store.schedules.set_paused(record.schedule_id, paused)
    wake_schedules(store)
    return schedule


def remove_subscription(store: UserStore, record: Any, *, purge: bool) -> Any:
    """Remove ``record`` and its pull schedule (with ``purge``, the schedules its pulls made too;
    its folder is the caller's to remove) and wake the service; what was removed."""
    removed = subscriptions(store).remove(record.id, purge=purge)
    wake_schedules(store)
    return removed


class SubscriptionPull(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """A pull asked for now: its Run, or the Runs of its pull schedule it waits for (overlap)."""

    subscription_id: str
    run_id: str | msgspec.UnsetType = msgspec.UNSET
    waiting_for: list[str] = msgspec.field(default_factory=list)


def run_subscription_now(store: UserStore, record: Any, *, actor_id: str = "cli",
                         pull_argv: Callable[[], list[str]] | None = None) -> SubscriptionPull:
    """Pull ``record`` now, as a Run of its pull schedule (its overlap applies: a pull under way
    is waited for). Its pull schedule removed by hand, the pull is a Run of its own, whose command
    ``pull_argv()`` gives (before the subscription's id).

    Raises:
        SubscriptionError: no pull schedule and no ``pull_argv``.
    """
    from edge_runtime.contract.subscriptions import SubscriptionError

    if record.schedule_id is not msgspec.UNSET:
        outcome = run_schedule_now(store, record.schedule_id, actor_id=actor_id)
        return SubscriptionPull(subscription_id=record.id, run_id=outcome.run_id, waiting_for=outcome.active_run_ids)
    if pull_argv is None:
        raise SubscriptionError(f"subscription {record.id} has no pull schedule (it was removed by hand); pull it "
                                f"with edge-runtime subscription run")
    command = submit_command([*pull_argv(), record.id], name=f"pull {record.name}"[:128], timeout=DEFAULT_PULL_TIMEOUT)
    return SubscriptionPull(subscription_id=record.id,
                            run_id=submit(store, command, actor_id=actor_id, note_when_none=True).id)


#: A pull's timeout when none is given: a shallow clone of a scripts repository over a router's
#: link takes seconds to a few minutes.
DEFAULT_PULL_TIMEOUT = "10m"


# ------------------------------------------------------------------------------------ notifications
#
# Notification channels, rules and the outbox (docs/notifications.md) through the store's
# ``notifications`` port, for the panel; what it answers is masked as every output is.


def notifications(store: UserStore) -> Any:
    """The store's channels, rules and outbox.

    Raises:
        NotifyError: the store keeps none.
    """
    from edge_runtime.contract.notifications import NotifyError

    found = getattr(store, "notifications", None)
    if found is None:
        raise NotifyError("this store keeps no notification channels")
    return found


def notify_rules(texts: list[str]) -> list[Any]:
    """The rules ``CHANNEL[:on=OUTCOME,...]`` texts give, checked together (``--notify``).

    Raises:
        InvalidNotifyRuleError: one does not parse, a channel is named twice, too many.
    """
    from edge_runtime.contract.notifications import check_rules, parse_rule

    rules = [parse_rule(text) for text in texts]
    check_rules(rules)
    return rules


def require_channels(store: UserStore, rules: list[Any]) -> None:
    """Every channel ``rules`` name exists (before anything changes). Raises NotifyChannelNotFoundError."""
    for rule in rules:
        notifications(store).channel(rule.channel)


def queue_test_message(store: UserStore, channel: str) -> list[Any]:
    """A test message for ``channel`` in the outbox, sent by the service as any other (its
    retries, its lease); the outbox rows. Raises NotifyChannelNotFoundError."""
    repository = notifications(store)
    repository.channel(channel)
    records = repository.enqueue_message("edge-runtime test", f"A test message through channel {channel}.", [channel])
    wake_service(store.wake_workers)
    return _masked(store, records)
