"""QingLong's subscriptions in an import: each ``Subscriptions`` row (2.13+) and each old-style
``ql repo``/``ql raw`` cron (before 2.13, still run by QingLong) becomes a subscription here, with
its pull schedule (paused when it was disabled), its folder (QingLong's alias, so the crons it
made, imported as schedules of that folder, are taken over by its first pull rather than made
twice), its filters and its auto-add and auto-remove (QingLong's: an empty one is on).

Not carried, and said so on the row: a private repository (its key or password stays in QingLong),
``proxy`` (a pull uses the proxy variables its Run gets), ``sub_before``/``sub_after`` (shell run as
root around the pull). A subscription is here already when one has its folder and its URL; one
whose folder another URL's subscription has is skipped, saying so.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from edge_runtime.contract.cron import parse_schedule
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.subscriptions import (
    AddSubscriptionCommand,
    SubscriptionKind,
    branch_problem,
    folder_problem,
    pattern_problem,
    url_problem,
)
from edge_runtime.qinglong.import_plan import Action, ImportPlan, Kind, PlanItem
from edge_runtime.qinglong.script_headers import MAX_NAME_LENGTH
from edge_runtime.qinglong.script_scan import SCRIPT_SUFFIXES
from edge_runtime.qinglong.sqlite_reader import QlCron, QlSubscription
from edge_runtime.qinglong.subscription_source import qinglong_folder

#: Old-style subscription crons: ``ql repo URL ...`` and ``ql raw URL``.
OLD_STYLE = re.compile(r"^ql\s+(?:repo|raw)\b")
_KINDS = {"public-repo": SubscriptionKind.GIT, "file": SubscriptionKind.FILE}
_INTERVAL_UNITS = {"days": "d", "hours": "h", "minutes": "m", "seconds": "s"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_PROXY_NOTE = ("its proxy is not carried: a pull uses the https_proxy/http_proxy its Run gets (env set https_proxy "
               "..., or the service's own through pass_env)")


class Wanted:
    """The fields of one subscription to import, as QingLong kept them."""

    def __init__(self, *, source: str, name: str | None, url: str, kind: SubscriptionKind, branch: str,
                 whitelist: str, blacklist: str, dependence: str, extensions: str, expression: str,
                 paused: bool, auto_add: bool, auto_remove: bool, alias: str | None, notes: list[str]) -> None:
        self.source, self.name, self.url, self.kind, self.branch = source, name, url, kind, branch
        self.whitelist, self.blacklist, self.dependence, self.extensions = whitelist, blacklist, dependence, extensions
        self.expression, self.paused, self.auto_add, self.auto_remove = expression, paused, auto_add, auto_remove
        self.alias, self.notes = alias, notes


def from_row(row: QlSubscription) -> Wanted | str:
    """The subscription a ``Subscriptions`` row asks for, or why it cannot be imported."""
    if row.problems:
        return "its cells cannot be read: " + "; ".join(row.problems)
    if row.type == "private-repo":
        return ("a private repository: its key or password stays in QingLong (this device pulls public sources "
                "only)")
    kind = _KINDS.get(row.type or "")
    if kind is None:
        return f"a subscription of type {row.type!r}, which this build does not know"
    notes = list(row.notes)
    if row.schedule_type == "interval" and row.interval is not None:
        unit, value = row.interval
        expression = f"@every {value}{_INTERVAL_UNITS[unit]}"
    else:
        expression = (row.schedule or "").strip()
    if row.proxy:
        notes.append(_PROXY_NOTE)
    if row.sub_before or row.sub_after:
        notes.append("sub_before/sub_after not carried (shell QingLong ran as root around the pull)")
    return Wanted(source=f"Subscriptions id {row.id}", name=row.name, url=(row.url or "").strip(), kind=kind,
                  branch=(row.branch or "").strip(), whitelist=row.whitelist or "", blacklist=row.blacklist or "",
                  dependence=row.dependences or "", extensions=row.extensions or "", expression=expression,
                  paused=row.disabled, auto_add=row.auto_add, auto_remove=row.auto_remove, alias=row.alias,
                  notes=notes)


def from_old_style(cron: QlCron) -> Wanted | str:
    """The subscription an old-style ``ql repo``/``ql raw`` cron asks for, or why it cannot be
    imported: ``ql repo URL WHITELIST BLACKLIST DEPENDENCE BRANCH [EXTENSIONS PROXY AUTOADD
    AUTODEL]`` (QingLong's argument order), ``ql raw URL``."""
    if cron.problems:
        return "its cells cannot be read: " + "; ".join(cron.problems)
    try:
        words = shlex.split(cron.command or "")
    except ValueError as exc:
        return f"its command cannot be split into words: {exc}"
    args = words[2:] + [""] * 9
    if not words[2:]:
        return "an old-style subscription without a URL"
    notes = ["an old-style subscription (a cron running ql repo / ql raw): imported as a subscription"]
    if words[1] == "raw":
        return Wanted(source=f"Crontabs id {cron.id}", name=cron.name, url=args[0], kind=SubscriptionKind.FILE,
                      branch="", whitelist="", blacklist="", dependence="", extensions="",
                      expression=(cron.schedule or "").strip(), paused=cron.disabled, auto_add=True,
                      auto_remove=True, alias=None, notes=notes)
    if args[6]:
        notes.append(_PROXY_NOTE)
    return Wanted(source=f"Crontabs id {cron.id}", name=cron.name, url=args[0], kind=SubscriptionKind.GIT,
                  branch=args[4], whitelist=args[1], blacklist=args[2], dependence=args[3], extensions=args[5],
                  expression=(cron.schedule or "").strip(), paused=cron.disabled, auto_add=args[7] != "false",
                  auto_remove=args[8] != "false", alias=None, notes=notes)


def command_of(wanted: Wanted, *, scripts_dir: str, pull_command: list[str],
               pull_user: str | None = None) -> AddSubscriptionCommand | str:
    """The ``subscription add`` of ``wanted``, or why none can be made (the contract's message)."""
    kind = wanted.kind
    problem = url_problem(kind, wanted.url)
    if problem is not None:
        return f"its URL {wanted.url!r}: {problem}"
    branch = wanted.branch if kind is SubscriptionKind.GIT else ""
    if branch and branch_problem(branch) is not None:
        return f"its branch: {branch_problem(branch)}"
    folder = wanted.alias or ""
    if folder_problem(folder) is not None:
        computed = qinglong_folder(kind, wanted.url, branch or None)
        if folder:
            wanted.notes.append(f"its folder is {computed} (QingLong's alias {folder!r} is not a folder name here)")
        folder = computed
    patterns = {}
    for field, value in (("whitelist", wanted.whitelist), ("blacklist", wanted.blacklist),
                         ("dependence", wanted.dependence)):
        if value:
            problem = pattern_problem(field, value)
            if problem is not None:
                return f"{problem} (QingLong's egrep read it; Python's re does not)"
            patterns[field] = value
    extensions = [word.lstrip(".") for word in wanted.extensions.replace("|", " ").split()] or \
        [suffix.lstrip(".") for suffix in SCRIPT_SUFFIXES]
    try:
        parse_schedule(wanted.expression)
        name = _CONTROL.sub(" ", wanted.name or "").strip()[:MAX_NAME_LENGTH].rstrip() or folder
        return AddSubscriptionCommand(
            kind=kind, url=wanted.url, name=name, folder=folder, scripts_dir=scripts_dir, pull_command=pull_command,
            expression=wanted.expression, extensions=extensions, auto_add=wanted.auto_add,
            auto_remove=wanted.auto_remove, paused=wanted.paused, **({"branch": branch} if branch else {}),
            **({"pull_user": pull_user} if pull_user else {}), **patterns)
    except EdgeRuntimeError as exc:
        return f"a subscription cannot express it: {exc}"


def plan_subscriptions(plan: ImportPlan, rows: tuple[QlSubscription, ...], old_style: list[QlCron], *,
                       here: Mapping[str, str], pull_command: list[str] | str, pull_user: str | None = None) -> None:
    """The subscription rows of ``rows`` and ``old_style`` into ``plan``; ``here`` maps the
    folders of the subscriptions the device has to their URLs; ``pull_command`` is the pull's
    command, or why there is none (every row is skipped with it)."""
    planned: dict[str, str] = {}
    wanted = [from_row(row) for row in rows] + [from_old_style(cron) for cron in old_style]
    sources = [f"Subscriptions id {row.id}" for row in rows] + [f"Crontabs id {cron.id}" for cron in old_style]
    shown = [f"{row.name or '-'}  {row.url or '-'}" for row in rows] + \
        [f"{cron.name or '-'}  {cron.command or '-'}" for cron in old_style]
    for one, source, summary in zip(wanted, sources, shown):
        item = plan.add(PlanItem(kind=Kind.SUBSCRIPTION, action=Action.CREATE, source=source, summary=summary))
        if isinstance(one, str):
            item.action, item.reason = Action.SKIP, one
            continue
        if isinstance(pull_command, str):
            item.action, item.reason = Action.SKIP, pull_command
            continue
        command = command_of(one, scripts_dir=plan.scripts_dir, pull_command=pull_command, pull_user=pull_user)
        item.notes = one.notes
        if isinstance(command, str):
            item.action, item.reason = Action.SKIP, command
            continue
        item.summary = f"{command.name}  {command.url}{' ' + command.branch if one.branch else ''}  -> {command.folder}/"
        item.detail = {"folder": command.folder, "url": command.url, "expression": command.expression,
                       "paused": command.paused, "autoAdd": command.auto_add, "autoRemove": command.auto_remove}
        if command.paused:
            item.notes.insert(0, "its pull schedule is paused: disabled in QingLong")
        if command.auto_add:
            item.notes.append("auto-add on, as in QingLong: its new scripts' schedules will be active at each pull")
        if command.folder in planned:
            item.action, item.reason = Action.SKIP, f"the same folder as {planned[command.folder]}"
            continue
        planned[command.folder] = source
        if here.get(command.folder) == command.url:
            item.action, item.reason = Action.EXISTS, "a subscription of this URL into this folder is here already"
        elif command.folder in here:
            item.action, item.reason = Action.SKIP, (f"the folder {command.folder} is the subscription of "
                                                     f"{here[command.folder]} here: not replaced")
        else:
            plan.subscriptions.append((item, command))
