"""The plan of a QingLong import: for every cron, env, script and table, what will be created,
what is here already, and what is skipped and why. Nothing here writes; the plan is applied by
:mod:`edge_runtime.qinglong.import_apply`, or only printed (``--dry-run``).

Identity (what "here already" means, so importing the same data twice creates nothing new):

- a schedule is the same schedule when its name, its command (the argv) and its expression
  (canonical text) are the same: QingLong's own unique key (name, command, schedule); whether it
  is paused, its zone and its options are not part of it;
- a shared variable is here already when one of that name holds the same value; one of that
  name with another value is never replaced (skipped, saying so);
- a script is here already when the file at its path in the scripts directory has the same
  bytes (SHA-256); another file at that path is never replaced (skipped, saying so).

Crons (``Crontabs`` rows) become schedules:

- the name, the command as QingLong stores it split into words (``task jd_bean.js`` is argv
  ``["task", "jd_bean.js"]``: the form ``schedule add ... -- task jd_bean.js`` stores), the
  schedule (5 or 6 fields, ``@boot``) and each of its ``extra_schedules`` (a schedule each);
  a disabled cron comes paused;
- a command QingLong runs through ``task`` without saying so (``jd_bean.js``) gets its ``task``;
  another program's (``python3 x.py``) runs as it is, and one with shell syntax (``a && b``,
  ``>``, ``$X``) with ``sh -c``, both in the scripts directory, as QingLong runs them; QingLong's
  old absolute paths (``/ql/scripts/``, ``/ql/data/scripts/``) are made relative to the scripts
  directory;
- overlap ``replace`` where QingLong killed a still-running previous run
  (``allow_multiple_instances`` 0, its default since 2.20), else ``skip``;
- the zone: :func:`choose_zone`;
- skipped, with the reason: QingLong's own system crons (:func:`system_cron`), old-style
  subscriptions (``ql repo``/``ql raw``: subscriptions, edge_runtime/qinglong/import_subscriptions.py),
  ``@once`` (run by hand only), a schedule or command
  the contract refuses (its message), a row whose cells cannot be read, a duplicate of an
  earlier row. Not carried, and said so on the row: ``task_before``/``task_after``
  (shell run around the task), ``work_dir``, the subscription it belonged to.

Envs go to an :class:`EnvTarget` (see there); scripts are copied with their folders.
"""

from __future__ import annotations

import enum
import re
import shlex
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import msgspec

from edge_runtime.contract.cron import parse_schedule
from edge_runtime.contract.env_entries import NewEnvEntry, plan_add
from edge_runtime.contract.environment import InvalidVariableError, secret_problem
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.schedules import AddScheduleCommand, Overlap, labels_problem
from edge_runtime.contract.time_zones import InvalidTimeZoneError, time_zone, time_zone_text
from edge_runtime.qinglong.data_folder import QingLongSource, ScriptFile
from edge_runtime.qinglong.script_headers import MAX_NAME_LENGTH
from edge_runtime.qinglong.sqlite_reader import OTHER_TABLES, QlCron, QlDatabase, QlEnv


class Action(enum.StrEnum):
    CREATE = "create"  # will be created (dry run: would be)
    EXISTS = "exists"  # here already: nothing to do
    SKIP = "skip"  # not imported: ``reason`` says why
    CREATED = "created"  # applied
    FAILED = "failed"  # applying it failed: ``reason`` says why


class Kind(enum.StrEnum):
    SCHEDULE = "schedule"
    ENV = "env"
    SCRIPT = "script"
    SUBSCRIPTION = "subscription"
    TABLE = "table"
    COLUMN = "column"
    CONFIG = "config"


class PlanItem(msgspec.Struct, rename="camel", kw_only=True):
    """One row of the plan: what QingLong had (``source``), what it becomes (``summary``), and
    ``reason``/``notes`` where something is skipped or not carried. ``detail``: the fields a
    script reads (no secret's value: an env's value is never part of a plan)."""

    kind: Kind
    action: Action
    source: str
    summary: str
    reason: str = ""
    notes: list[str] = msgspec.field(default_factory=list)
    detail: dict[str, Any] = msgspec.field(default_factory=dict)


class ImportPlan:
    """The rows, and what applying them needs (each payload points at its row)."""

    def __init__(self, *, where: str, layout: str, version: str, scripts_dir: str, time_zone: str,
                 zone_note: str) -> None:
        self.where = where
        self.layout = layout
        self.version = version
        self.scripts_dir = scripts_dir
        self.time_zone = time_zone
        self.zone_note = zone_note
        self.items: list[PlanItem] = []
        self.schedules: list[tuple[PlanItem, AddScheduleCommand]] = []
        self.envs: list[tuple[PlanItem, Any]] = []
        self.scripts: list[tuple[PlanItem, ScriptFile]] = []
        #: ``subscription add`` commands (edge_runtime/qinglong/import_subscriptions.py).
        self.subscriptions: list[tuple[PlanItem, Any]] = []
        self.warnings: list[str] = []

    def add(self, item: PlanItem) -> PlanItem:
        self.items.append(item)
        return item

    def counts(self) -> dict[str, dict[str, int]]:
        """Per action, the number of rows of each kind."""
        counts: dict[str, dict[str, int]] = {}
        for item in self.items:
            by_kind = counts.setdefault(item.action.value, {})
            by_kind[item.kind.value] = by_kind.get(item.kind.value, 0) + 1
        return counts

    def script_bytes_to_create(self) -> int:
        return sum(file.size for item, file in self.scripts if item.action is Action.CREATE)


class ScriptHere(msgspec.Struct, frozen=True):
    """What is at a script's path in the scripts directory: a file (its SHA-256), or something
    that cannot take the file (``problem``: a folder, a link)."""

    sha256: str | None = None
    problem: str | None = None


class Existing(msgspec.Struct, frozen=True):
    """What the device holds already, for the identity checks: the schedules' identities and a
    lookup of a script path in the scripts directory (None when nothing is there)."""

    schedules: frozenset[tuple[str | None, tuple[str, ...], str]]
    script: Callable[[str], ScriptHere | None]


def schedule_identity(name: str | None, argv: Iterable[str], expression: str) -> tuple[str | None, tuple[str, ...], str]:
    """The identity of a schedule (module docstring): its name, argv and canonical expression."""
    return name, tuple(argv), parse_schedule(expression).text


# ----------------------------------------------------------------------------------- envs


class EnvTarget(Protocol):
    """Where QingLong's envs go. ``plan`` gets every ``Envs`` row in QingLong's list order
    (pinned first, then larger ``position`` first, then older first) and returns one
    ``(row, payload)`` per row of the plan; ``apply`` is given each payload whose row is to be
    created (it raises an EdgeRuntimeError to fail that row). A payload never appears in the
    printed plan, so it may hold values."""

    def plan(self, entries: list[QlEnv]) -> list[tuple[PlanItem, Any]]: ...

    def apply(self, payload: Any) -> None: ...


#: Names a task's interpreter or shell reads at start: imported only by hand (``env set``), never
#: from a backup (a hostile one would run its code in every task).
LOADER_NAMES = frozenset({
    "PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "NODE_OPTIONS", "NODE_PATH", "PYTHONPATH", "PYTHONSTARTUP",
    "PYTHONHOME", "PYTHONINSPECT", "BASH_ENV", "ENV", "PERL5OPT", "PERL5LIB", "RUBYOPT", "SHELLOPTS", "IFS", "HOME",
})
#: A name that marks a credential: its value is stored as a secret (never shown, masked in logs).
SECRET_NAME = re.compile(r"COOKIE|TOKEN|SECRET|PASS|PWD|KEY|AUTH|SESSION|TICKET|CK$", re.IGNORECASE)
_QINGLONG_NAME = re.compile(r"[a-zA-Z_][0-9a-zA-Z_]*")


def qinglong_order(entries: Iterable[QlEnv]) -> list[QlEnv]:
    """QingLong's list order: pinned first, larger ``position`` first (none last), older first."""
    listed = list(entries)
    return sorted(listed, key=lambda e: (not e.pinned, e.position is None, -(e.position or 0.0), e.created_at, e.id))


class EnvEntries:
    """QingLong's envs as env entries, one entry per ``Envs`` row in QingLong's list order:
    name, value, remarks, enabled, pinned and labels carried, so a task sees what a QingLong task
    saw (each name's enabled values joined with ``&``). An entry is here already when an entry of
    the same name has exactly its value (searched by the store, never printed); it is never
    replaced. A name marked by :data:`SECRET_NAME` is stored as a secret (one whose value is too
    short to mask is not imported, saying so: a secret shown in clear would be worse than none).
    Each entry is checked by the contract's own rule for a new entry before the plan is shown."""

    def __init__(self, environment: Any) -> None:
        #: None: a device without a database yet (a dry run), so nothing is here already.
        self._environment = environment

    def plan(self, entries: list[QlEnv]) -> list[tuple[PlanItem, Any]]:
        planned: dict[tuple[str, str], int] = {}
        return [self._plan_entry(entry, planned) for entry in qinglong_order(entries)]

    def _plan_entry(self, entry: QlEnv, planned: dict[tuple[str, str], int]) -> tuple[PlanItem, Any]:
        if entry.problems or entry.name is None or entry.value is None:
            return _skip(PlanItem(kind=Kind.ENV, action=Action.CREATE, source=f"Envs id {entry.id}",
                                  summary=entry.name or "?"), "its cells cannot be read: "
                         + "; ".join(entry.problems or ("no name or value",))), None
        name, value = entry.name, entry.value
        secret = bool(SECRET_NAME.search(name))
        state = "enabled" if entry.enabled else "disabled"
        item = PlanItem(kind=Kind.ENV, action=Action.CREATE, source=f"Envs id {entry.id}",
                        summary=f"{name} ({state}{', pinned' if entry.pinned else ''}{', secret' if secret else ''})",
                        detail={"name": name, "enabled": entry.enabled, "pinned": entry.pinned, "secret": secret})
        if entry.remarks:
            item.detail["remarks"] = entry.remarks
        if not _QINGLONG_NAME.fullmatch(name):
            return _skip(item, "not a variable name (QingLong never exports it to a task either)"), None
        if name in LOADER_NAMES:
            return _skip(item, f"{name} changes how every task's program starts: never imported from a backup; "
                               f"add it by hand (env add) if you mean it"), None
        if secret and secret_problem(name, value) is not None:
            return _skip(item, f"its name marks a secret, and its value has {len(value)} characters, too few to "
                               f"mask safely: not imported (env add {name} stores it if it is no secret)"), None
        new = NewEnvEntry(name=name, value=value, secret=secret, remarks=entry.remarks or "", enabled=entry.enabled,
                          pinned=entry.pinned, labels=tuple(entry.labels or ()))
        try:
            plan_add((), [new], 0)  # the contract's own check of one new entry, before anything is shown
        except InvalidVariableError as exc:
            return _skip(item, str(exc)), None
        earlier = planned.get((name, value))
        if earlier is not None:
            item.action, item.reason = Action.EXISTS, f"the same account as Envs id {earlier}"
            return item, None
        planned[(name, value)] = entry.id
        here = [] if self._environment is None else self._environment.list(name=name, value=value)
        if here:
            item.action, item.reason = Action.EXISTS, f"here already (entry {here[0].id})"
            return item, None
        return item, new

    def apply(self, payload: Any) -> None:
        self._environment.add([payload])


def _skip(item: PlanItem, reason: str) -> PlanItem:
    item.action, item.reason = Action.SKIP, reason
    return item


# ----------------------------------------------------------------------------------- crons

#: Commands of the crons QingLong made itself (docs/qinglong.md): after an optional ``sleep N &&``.
_SYSTEM_COMMAND = re.compile(
    r"^(?:sleep\s+\d+\s*&&\s*)?(?:ql\s+(?:update|rmlog|bot|check|reset|extra|reload)\b|git_pull\b|diy\s|"
    r"export_sharecodes\b|rebuild\b|rm_log\b|js\s+(?:resetpwd|runall)\b)")
_SUBSCRIPTION_COMMAND = re.compile(r"^ql\s+(?:repo|raw)\b")
#: Characters that make a command shell syntax rather than words (quotes are words' business).
_SHELL_SYNTAX = re.compile(r"[|&;<>()$`\\*?\[\]{}~\n#!]")
_SCRIPT_SUFFIXES = (".js", ".mjs", ".cjs", ".ts", ".py", ".pyc", ".sh")
#: QingLong's absolute scripts paths (before 2.11.3: /ql/scripts; after: /ql/data/scripts).
_QINGLONG_SCRIPTS = ("/ql/data/scripts/", "/ql/scripts/")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def system_cron(cron: QlCron) -> bool:
    """Whether QingLong made this cron itself (its update, its log cleaning, its old helpers)."""
    return cron.is_system or bool(_SYSTEM_COMMAND.match((cron.command or "").strip()))


def qinglong_command(command: str, scripts_dir: str) -> tuple[list[str], str | None, list[str]] | str:
    """The argv (and working directory, or None) a QingLong cron command runs as here, with
    notes; or why it cannot be carried (module docstring)."""
    text = command.strip()
    notes: list[str] = []
    if not text:
        return "its command is empty"
    if _SUBSCRIPTION_COMMAND.match(text):
        return "an old-style subscription (ql repo / ql raw): a subscription, not a schedule"
    for prefix in _QINGLONG_SCRIPTS:
        if prefix in text:
            notes.append(f"QingLong's path {prefix} is the scripts directory here")
    if not _SHELL_SYNTAX.search(text):
        try:
            words = shlex.split(text)
        except ValueError:
            words = []
        if words and "=" in words[0]:
            words = []  # `NAME=value cmd`: an assignment is the shell's
        if words and words[0] == "ql":
            return "a QingLong shell command (ql ...): QingLong's own tool is not on this device"
        if words:
            if words[0] == "task" or words[0].endswith(_SCRIPT_SUFFIXES):
                # QingLong runs anything not starting with `task`/`ql` as `task <command>`.
                argv = [_relative_script(word) for word in (["task", *words] if words[0] != "task" else words)]
                if any("/ql/" in word for word in argv):
                    notes.append("it still names a path under /ql/ (QingLong's own folders): nothing is there on "
                                 "this device")
                return argv, None, notes
            argv = [_absolute_script(word, scripts_dir) for word in words]
            notes.append("not a task command: runs as it is, in the scripts directory (as QingLong runs it)")
            if any("/ql/" in word for word in argv):
                notes.append("it still names a path under /ql/ (QingLong's own folders): nothing is there on this "
                             "device")
            return argv, scripts_dir, notes
    for prefix in _QINGLONG_SCRIPTS:
        text = text.replace(prefix, scripts_dir.rstrip("/") + "/")
    notes.append("shell syntax: runs with sh -c in the scripts directory (QingLong ran it through bash)")
    if "/ql/" in text:
        notes.append("it still names a path under /ql/ (QingLong's own folders): nothing is there on this device")
    return ["sh", "-c", text], scripts_dir, notes


def _relative_script(word: str) -> str:
    for prefix in _QINGLONG_SCRIPTS:
        if word.startswith(prefix):
            return word[len(prefix):]
    return word


def _absolute_script(word: str, scripts_dir: str) -> str:
    for prefix in _QINGLONG_SCRIPTS:
        if word.startswith(prefix):
            return scripts_dir.rstrip("/") + "/" + word[len(prefix):]
    return word


def task_script(argv: list[str]) -> str | None:
    """The script a ``task`` argv runs (its first word that is not an option), or None."""
    if not argv or argv[0] != "task":
        return None
    words = iter(argv[1:])
    for word in words:
        if word == "-m":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _cron_name(name: str | None, notes: list[str]) -> str | None:
    if name is None:
        return None
    cleaned = _CONTROL.sub(" ", name).strip()[:MAX_NAME_LENGTH].rstrip()
    if not cleaned:
        return None
    if cleaned != name:
        notes.append(f"name shortened or cleaned to fit a schedule's ({MAX_NAME_LENGTH} characters, no control "
                     f"characters)")
    return cleaned


def choose_zone(given: str | None, qinglong: str | None, device: str) -> tuple[str, str]:
    """The zone the imported schedules fire in, and a sentence saying why: ``given`` (``--tz``),
    else QingLong's own (from its settings, else its image's ``Asia/Shanghai``) when this system
    can compute it, as the POSIX ``CST-8`` where it has no zoneinfo for China's zone, else the
    device's.

    Raises:
        InvalidTimeZoneError: ``given`` is not a zone this system can compute.
    """
    if given is not None:
        time_zone(given)
        return time_zone_text(given), "given with --tz"
    wanted = qinglong or "Asia/Shanghai"
    origin = "QingLong's setting" if qinglong else "QingLong's default (its image runs in Asia/Shanghai)"
    try:
        time_zone(wanted)
        return time_zone_text(wanted), f"{origin}, so the crons fire at the same clock times"
    except InvalidTimeZoneError:
        pass
    if wanted in _CHINA_ZONES:
        return "CST-8", f"{origin} ({wanted}), written as POSIX CST-8 (this system has no zoneinfo)"
    return device, (f"the device's: {origin} {wanted!r} has no zoneinfo here; give --tz with its POSIX TZ string "
                    f"to keep QingLong's clock times")


#: IANA names of China's one zone (UTC+8, no DST since 1991).
_CHINA_ZONES = frozenset({"Asia/Shanghai", "Asia/Chongqing", "Asia/Chungking", "Asia/Harbin", "PRC"})


def plan_crons(plan: ImportPlan, crons: Iterable[QlCron], existing: Existing, scripts: set[str]) -> None:
    """The schedule rows of ``crons`` into ``plan`` (``scripts``: the script paths the source
    brings, to note a ``task`` whose script is neither brought nor here)."""
    planned: dict[tuple[str | None, tuple[str, ...], str], str] = {}
    for cron in crons:
        source = f"Crontabs id {cron.id}"
        shown = f"{cron.name or '-'}  {cron.schedule or '-'}  {cron.command or '-'}"
        item = PlanItem(kind=Kind.SCHEDULE, action=Action.CREATE, source=source, summary=shown)
        if cron.problems:
            plan.add(_skip(item, "its cells cannot be read: " + "; ".join(cron.problems)))
            continue
        if system_cron(cron):
            plan.add(_skip(item, "QingLong's own system cron: not a task of yours"))
            continue
        converted = qinglong_command(cron.command or "", plan.scripts_dir)
        if isinstance(converted, str):
            plan.add(_skip(item, converted))
            continue
        argv, cwd, command_notes = converted
        notes = list(cron.notes) + command_notes
        name = _cron_name(cron.name, notes)
        notes += _not_carried(cron)
        script = task_script(argv)
        if script is not None and not script.startswith("/") and script not in scripts and existing.script(script) is None:
            notes.append(f"its script {script} is neither in the backup's scripts/ nor in the scripts directory")
        overlap = Overlap.REPLACE if cron.allow_multiple_instances == 0 else Overlap.SKIP
        labels = _carried_labels(cron, notes)
        expressions = [(cron.schedule or "", source)] + [
            (extra, f"{source}, extra schedule {n}") for n, extra in enumerate(cron.extra_schedules, 1)]
        for expression, where in expressions:
            row = PlanItem(kind=Kind.SCHEDULE, action=Action.CREATE, source=where,
                           summary=f"{name or '-'}  {expression}  {shlex.join(argv)}", notes=list(notes))
            plan.add(row)
            _plan_schedule(plan, row, expression.strip(), argv, cwd, name, overlap, cron.disabled, labels, existing,
                           planned)


def _plan_schedule(plan: ImportPlan, row: PlanItem, expression: str, argv: list[str], cwd: str | None,
                   name: str | None, overlap: Overlap, paused: bool, labels: list[str], existing: Existing,
                   planned: dict[tuple[str | None, tuple[str, ...], str], str]) -> None:
    if expression.startswith("@once"):
        _skip(row, "@once: QingLong runs it only when started by hand; no schedule (submit it when needed)")
        return
    if expression.startswith("@boot"):
        expression = "@boot"
    try:
        command = AddScheduleCommand(
            expression=expression, argv=argv, name=msgspec.UNSET if name is None else name, overlap=overlap,
            time_zone=plan.time_zone, paused=paused, **({} if cwd is None else {"cwd": cwd}),
            **({"labels": labels} if labels else {}))
        identity = schedule_identity(name, argv, expression)
    except EdgeRuntimeError as exc:
        _skip(row, f"a schedule cannot express it: {exc}")
        return
    row.detail = {"name": name, "expression": identity[2], "command": argv, "paused": paused,
                  "overlap": overlap.value, "timeZone": plan.time_zone, **({} if cwd is None else {"cwd": cwd}),
                  **({"labels": labels} if labels else {})}
    if paused:
        row.notes.insert(0, "paused: disabled in QingLong")
    if identity in existing.schedules:
        row.action, row.reason = Action.EXISTS, "a schedule with this name, command and expression is here already"
        return
    if identity in planned:
        _skip(row, f"the same schedule as {planned[identity]} (same name, command and expression)")
        return
    planned[identity] = row.source
    plan.schedules.append((row, command))


def _carried_labels(cron: QlCron, notes: list[str]) -> list[str]:
    """The cron's labels as the schedule's, when a schedule can hold them (else noted, none)."""
    labels = list(dict.fromkeys(cron.labels))  # QingLong keeps repeats; a schedule's label is a set
    problem = labels_problem(labels) if labels else None
    if problem is not None:
        notes.append(f"labels not carried ({problem}): {', '.join(labels)}")
        return []
    return labels


def _not_carried(cron: QlCron) -> list[str]:
    notes = []
    for field, value in (("task_before", cron.task_before), ("task_after", cron.task_after),
                         ("work_dir", cron.work_dir)):
        if value:
            notes.append(f"{field} not carried: {value[:60]}{'...' if len(value) > 60 else ''}")
    if cron.sub_id is not None:
        notes.append(f"belonged to QingLong subscription {cron.sub_id}: imported as a schedule of its own")
    if cron.allow_multiple_instances == 1:
        notes.append("QingLong let its runs overlap; here a slot is skipped while the previous Run is active")
    return notes


# ----------------------------------------------------------------------------------- the whole


def old_style_subscription(cron: QlCron) -> bool:
    """Whether ``cron`` is an old-style subscription (``ql repo ...``, ``ql raw ...``)."""
    return bool(_SUBSCRIPTION_COMMAND.match((cron.command or "").strip()))


def make_plan(source: QingLongSource, database: QlDatabase, *, existing: Existing, envs: EnvTarget,
              scripts_dir: str, zone: tuple[str, str],
              subscriptions: Callable[[ImportPlan, list[QlCron]], None] | None = None) -> ImportPlan:
    """The plan of importing ``source`` (whose database read as ``database``) into a device
    holding ``existing``; envs go to ``envs``; ``subscriptions`` plans the subscription rows and
    the old-style subscription crons (without it those crons are skipped as schedules)."""
    plan = ImportPlan(where=source.where, layout=source.layout, version=database.version, scripts_dir=scripts_dir,
                      time_zone=zone[0], zone_note=zone[1])
    _plan_scripts(plan, source, existing)
    for item, payload in envs.plan(list(database.envs)):
        plan.add(item)
        if item.action is Action.CREATE:
            plan.envs.append((item, payload))
    crons = list(database.crons)
    if subscriptions is not None:
        old_style = [cron for cron in crons if old_style_subscription(cron)]
        crons = [cron for cron in crons if not old_style_subscription(cron)]
    plan_crons(plan, crons, existing, {f.path for f in source.scripts})
    if subscriptions is not None:
        subscriptions(plan, old_style)
    for table, column in database.unknown_columns:
        plan.add(PlanItem(kind=Kind.COLUMN, action=Action.SKIP, source=f"{table}.{column}", summary=column,
                          reason="a column this build does not know: not read"))
    for table in database.unknown_tables:
        plan.add(PlanItem(kind=Kind.TABLE, action=Action.SKIP, source=table,
                          summary=_rows(database.row_counts.get(table, 0)), reason="not a QingLong table: not read"))
    for table, what in OTHER_TABLES.items():
        rows = database.row_counts.get(table, 0)
        if rows:
            plan.add(PlanItem(kind=Kind.TABLE, action=Action.SKIP, source=table, summary=_rows(rows),
                              reason=f"{what}: {_TABLE_REASONS.get(table, 'not imported')}"))
    if source.config:
        shown = ", ".join(source.config[:6]) + (", ..." if len(source.config) > 6 else "")
        plan.add(PlanItem(kind=Kind.CONFIG, action=Action.SKIP, source="config/", summary=shown,
                          reason="QingLong's shell settings (config.sh, task_before.sh, ...) are not imported: set "
                                 "the variables your scripts need with env set"))
    return plan


def _rows(count: int) -> str:
    return f"{count} row{'s' if count != 1 else ''}"


_TABLE_REASONS = {
    "Apps": "not imported (their secrets stay in QingLong; make new apps on the device)",
    "Auths": "not imported (the device has its own panel password and settings)",
    "Dependences": "not imported (install what your scripts need on the device: opkg, pip, npm)",
    "CrontabViews": "not imported",
    "CrontabStats": "history: not imported",
    "RunningInstances": "history: not imported",
}


def _plan_scripts(plan: ImportPlan, source: QingLongSource, existing: Existing) -> None:
    for file in source.scripts:
        item = PlanItem(kind=Kind.SCRIPT, action=Action.CREATE, source=f"scripts/{file.path}", summary=file.path,
                        detail={"path": file.path, "size": file.size})
        here = existing.script(file.path)
        if here is not None and here.sha256 == file.sha256:
            item.action, item.reason = Action.EXISTS, "the same file is here already"
        elif here is not None:
            _skip(item, here.problem or "another file is at this path in the scripts directory: not replaced")
        else:
            plan.scripts.append((item, file))
        plan.add(item)
    for entry in source.skipped:
        plan.add(PlanItem(kind=Kind.SCRIPT, action=Action.SKIP, source=f"scripts/{entry.path}", summary=entry.path,
                          reason=entry.reason))
