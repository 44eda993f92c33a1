"""``edge-runtime subscription add|list|run|pause|resume|remove|pull``: script repositories (or one
file) pulled on their own schedule into their own folder of the scripts directory, their scripts
scheduled from their headers (docs/qinglong.md, "Subscriptions").

``add`` stores the subscription and its pull schedule, whose command is this program's own
``subscription pull ID``: the service runs each pull as a Run (its log, its cancel, its timeout),
as the service's user, since a pull writes the scripts directory and the database. ``pull`` is
that Run's command (it can be run by hand too).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from edge_runtime.cli.common import CREATE, LOCAL_STORES, READ, WRITE, add_json_flag, format_ms, print_json, printable
from edge_runtime.cli.pull_command import pull_command
from edge_runtime.operations import DEFAULT_PULL_TIMEOUT

_ID_HELP = "the subscription id, or a unique prefix or suffix of it (12 characters at most)"


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    from edge_runtime.cli.import_qinglong import SCRIPTS_DIR_DEFAULT

    parser = subparsers.add_parser(
        "subscription", help=help_text,
        description="A subscription pulls a public git repository (or one file at an http(s) URL) on its own "
        "schedule into its own folder of the scripts directory; its new scripts get schedules from their headers "
        "(paused unless --auto-add). Each pull is a Run. See docs/qinglong.md.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    add = actions.add_parser("add", help="add a subscription and print its id",
                             description="Add a subscription (QingLong's fields). It is pulled at its --schedule "
                             "(default: a daily time drawn from its URL), or now with subscription run.")
    add.add_argument("url", metavar="URL", help="a public git repository (https://, http://, git://, file:///) or, "
                     "with --kind file, one file's https:// URL")
    add.add_argument("--kind", choices=("git", "file"),
                     help="git (a repository) or file (one file); default: file when the URL ends in a script's "
                     "name (.js .py ...), else git")
    add.add_argument("--name", help="a short label (default: its folder)")
    add.add_argument("--folder", help="its folder in the scripts directory (default: author_repo[_branch] from the "
                     "URL, as QingLong names it)")
    add.add_argument("--branch", help="the branch (or tag) to pull (default: the repository's default branch)")
    add.add_argument("--whitelist", metavar="RE", help="only scripts whose path inside the repository matches RE "
                     "(a regular expression: jd_|jx_)")
    add.add_argument("--blacklist", metavar="RE", help="not the scripts whose path matches RE")
    add.add_argument("--dependence", metavar="RE", help="also copy the files whose path matches RE (any extension; "
                     "they get no schedule): the modules the scripts require")
    add.add_argument("--extensions", metavar="LIST", help="the extensions of its scripts, blank- or |-separated "
                     "(default: js mjs cjs ts py sh)")
    add.add_argument("--schedule", metavar="CRON", help="when it is pulled (quote it; default: a daily time drawn "
                     "from its URL)")
    add.add_argument("--tz", metavar="ZONE", help="the zone of --schedule (default: the device's)")
    add.add_argument("--timeout", metavar="D",
                     help=f"cancel a pull that runs longer than D (default {DEFAULT_PULL_TIMEOUT})")
    add.add_argument("--auto-add", action="store_true", help="new scripts' schedules are made active (default: "
                     "paused, to be resumed one by one)")
    add.add_argument("--auto-remove", action="store_true", help="remove the schedule of a script gone upstream "
                     "(default: its schedule and its file stay)")
    add.add_argument("--user", metavar="U", help="the user its scripts run as: the schedules it makes for them get "
                     "it (default: the service's task_user setting); its pulls run as the service's own user")
    add.add_argument("--scripts-dir", metavar="DIR", help=f"the scripts directory its folder goes in (default: "
                     f"{SCRIPTS_DIR_DEFAULT})")
    add_json_flag(add)
    listing = actions.add_parser("list", help="list the subscriptions, their pull schedule and last pull")
    add_json_flag(listing)
    for action, text in (("run", "pull a subscription now, as a Run (print its id)"),
                         ("pause", "stop pulling a subscription on its schedule"),
                         ("resume", "pull it on its schedule again"),
                         ("remove", "remove a subscription and its pull schedule (its scripts' schedules and "
                                    "folder stay unless --purge)"),
                         ("pull", "pull a subscription now, in this process, printing its log (the command of "
                                  "its pull Runs)")):
        sub = actions.add_parser(action, help=text)
        sub.add_argument("subscription_id", metavar="ID", help=_ID_HELP)
        if action == "remove":
            sub.add_argument("--purge", action="store_true",
                             help="also remove the schedules it made and its folder")
        add_json_flag(sub)
    parser.set_defaults(run=run, stores=stores)


def run(args: argparse.Namespace) -> int:
    if args.action == "add":
        return _add(args)
    if args.action == "list":
        return _list(args)
    if args.action == "pull":
        return _pull(args)
    with args.stores.open(args, WRITE) as store:
        record = store.subscriptions.get(resolve_subscription_id(store, args.subscription_id))
        if args.action == "run":
            return _run_now(args, store, record)
        if args.action == "remove":
            return _remove(args, store, record)
        return _pause(args, store, record, args.action == "pause")


def resolve_subscription_id(store: Any, form: str) -> str:
    """The full id of the subscription ``form`` names (a unique prefix or suffix is enough)."""
    from edge_runtime import operations

    return operations.resolve_subscription_id(store, form)


# ----------------------------------------------------------------------------------- add


def _kind(url: str, given: str | None) -> str:
    if given:
        return given
    from edge_runtime.qinglong.script_scan import SCRIPT_SUFFIXES

    path = url.split("?", 1)[0].split("#", 1)[0]
    return "file" if path.endswith(SCRIPT_SUFFIXES) and url.lower().startswith(("http://", "https://")) else "git"


def _extensions(text: str | None) -> list[str]:
    from edge_runtime.qinglong.script_scan import SCRIPT_SUFFIXES

    if text is None:
        return [suffix.lstrip(".") for suffix in SCRIPT_SUFFIXES]
    return [word.lstrip(".") for word in text.replace("|", " ").replace(",", " ").split()]


def _scripts_dir(args: argparse.Namespace) -> str:
    """``--scripts-dir``, else the scripts directory ``serve`` resolves (the ``scripts_dir``
    setting, else ``scripts/`` beside the database): where ``task`` finds the scripts."""
    return os.path.abspath(args.scripts_dir or args.stores.scripts_dir(args))


class SubscriptionFields(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """What a new subscription is given (``subscription add``'s options; the panel's form)."""

    url: str
    kind: str | None = None
    name: str | None = None
    folder: str | None = None
    branch: str | None = None
    whitelist: str | None = None
    blacklist: str | None = None
    dependence: str | None = None
    extensions: str | None = None
    schedule: str | None = None
    tz: str | None = None
    timeout: str | None = None
    auto_add: bool = False
    auto_remove: bool = False
    user: str | None = None


def subscription_command(given: SubscriptionFields, *, scripts_dir: str, pull_argv: list[str]) -> tuple[Any, list[str]]:
    """The validated command of a new subscription (nothing touched yet) and the notes on it.

    Raises:
        InvalidSubscriptionError, InvalidCronExpressionError, ScriptsDirectoryError, ...: refused.
    """
    from edge_runtime.cli.import_qinglong import require_scripts_directory
    from edge_runtime.contract.durations import parse_duration_ms
    from edge_runtime.contract.subscriptions import (
        UNENCRYPTED_SCHEMES, AddSubscriptionCommand, InvalidSubscriptionError, SubscriptionKind, url_problem,
    )
    from edge_runtime.service.task_user import service_user_name, task_user_exists
    from edge_runtime.qinglong.script_headers import random_daily_expression
    from edge_runtime.qinglong.subscription_source import qinglong_folder

    if given.kind not in (None, "git", "file"):
        AddSubscriptionCommand.reject(f"kind must be git or file, not {given.kind!r}")
    kind = SubscriptionKind(_kind(given.url, given.kind))
    AddSubscriptionCommand.reject(url_problem(kind, given.url))  # before the URL is split for its folder
    folder = given.folder or qinglong_folder(kind, given.url, given.branch)
    fields = {"branch": given.branch, "whitelist": given.whitelist, "blacklist": given.blacklist,
              "dependence": given.dependence, "task_user": given.user, "time_zone": given.tz,
              "pull_user": service_user_name()}
    command = AddSubscriptionCommand(  # validated whole before anything is touched
        kind=kind, url=given.url, name=given.name or folder, folder=folder, scripts_dir=scripts_dir,
        pull_command=pull_argv, expression=given.schedule or random_daily_expression("subscription", given.url),
        timeout_ms=parse_duration_ms(given.timeout or DEFAULT_PULL_TIMEOUT), extensions=_extensions(given.extensions),
        auto_add=given.auto_add, auto_remove=given.auto_remove, **{k: v for k, v in fields.items() if v is not None})
    require_scripts_directory(scripts_dir)
    notes = []
    if given.url.split(":", 1)[0].lower() in UNENCRYPTED_SCHEMES:
        notes.append(f"{given.url.split(':', 1)[0]}:// is not encrypted: anyone on the network path can change the "
                     f"code this pulls; prefer https://")
    if os.path.lexists(os.path.join(scripts_dir, folder)):
        notes.append(f"{os.path.join(scripts_dir, folder)} exists already: the first pull replaces what is in it (its "
                     f"schedules with the same name, command and expression are taken over, not made twice)")
    if given.user and not task_user_exists(given.user):
        raise InvalidSubscriptionError(
            f"--user {given.user!r}: no such user on this device (create it first; docs/operating.md, \"Task user\")")
    return command, notes


def add_to_store(store: Any, command: Any, notes: list[str]) -> dict[str, Any]:
    """Store the subscription ``command`` and its pull schedule, wake the service: what
    ``add --json`` prints (the subscription, its pull schedule, the notes)."""
    record = store.subscriptions.add(command)
    schedule = store.schedules.get(record.schedule_id)
    _wake(store)
    return {"subscription": record, "pullSchedule": schedule, "notes": notes}


def panel_subscription_add(*, scripts_dir: Callable[[], Any], db_path: str) -> Callable[[Any, bytes], Any]:
    """The panel's "add a subscription" (handed to it by ``serve``, its composition root: the
    panel never imports QingLong's folder naming nor this program's path): a JSON body of
    :class:`SubscriptionFields` -> what ``add --json`` prints."""
    from edge_runtime.cli.pull_command import this_program

    def add(store: Any, body: bytes) -> dict[str, Any]:
        from edge_runtime.contract.subscriptions import InvalidSubscriptionError

        try:
            given = msgspec.json.decode(body or b"{}", type=SubscriptionFields)
        except msgspec.DecodeError as exc:
            raise InvalidSubscriptionError(f"the request body: {exc}") from None
        pull_argv = [*this_program(), "--db", os.path.abspath(db_path), "subscription", "pull"]
        command, notes = subscription_command(given, scripts_dir=os.path.abspath(str(scripts_dir())),
                                              pull_argv=pull_argv)
        return add_to_store(store, command, notes)

    return add


def _add(args: argparse.Namespace) -> int:
    given = SubscriptionFields(
        url=args.url, kind=args.kind, name=args.name, folder=args.folder, branch=args.branch, whitelist=args.whitelist,
        blacklist=args.blacklist, dependence=args.dependence, extensions=args.extensions, schedule=args.schedule,
        tz=args.tz, timeout=args.timeout, auto_add=args.auto_add, auto_remove=args.auto_remove, user=args.user)
    command, notes = subscription_command(given, scripts_dir=_scripts_dir(args), pull_argv=pull_command(args))
    with args.stores.open(args, CREATE) as store:
        added = add_to_store(store, command, notes)
    record, schedule = added["subscription"], added["pullSchedule"]
    if args.json:
        print_json(added)
        return 0
    out = sys.stdout
    out.write(f"{record.id}\n")
    for note in notes:
        sys.stderr.write(f"Note: {note}\n")
    sys.stderr.write(
        f"{record.kind.value} {printable(record.url)}"
        f"{'' if record.branch is msgspec.UNSET else ' branch ' + printable(record.branch)} into "
        f"{printable(os.path.join(record.scripts_dir, record.folder))}/, pulled at {schedule.expression!r} "
        f"(schedule {schedule.id[-8:]}); new scripts' schedules are made "
        f"{'active (--auto-add)' if record.auto_add else 'paused'}. Pull it now: edge-runtime subscription run "
        f"{record.id[-8:]}\n")
    return 0


def _wake(store: Any) -> None:
    from edge_runtime import operations

    operations.wake_schedules(store)


# ----------------------------------------------------------------------------------- list


def _list(args: argparse.Namespace) -> int:
    from edge_runtime import operations

    with args.stores.open(args, READ) as store:
        views = operations.subscription_views(store)
    if args.json:
        print_json(views)
        return 0
    for view in views:
        r, s = view.subscription, view.pull_schedule
        if s is msgspec.UNSET:
            state = "no-schedule"
        else:
            state = ("paused " if s.paused else "") + f"{s.expression!r}"
        pulled = "never pulled" if r.revision is msgspec.UNSET else \
            f"pulled {format_ms(r.pulled_at_ms)} {short_revision(r.revision)}"
        sys.stdout.write(f"{r.id[-8:]}  {r.kind.value:4}  {printable(state)}  {printable(r.folder)}  "
                         f"{printable(r.name)}  {pulled}  scripts={view.scripts} schedules={view.schedules}  "
                         f"{printable(r.url)}\n")
    return 0


def short_revision(revision: str) -> str:
    """A commit's first 12 hex digits; a file's ``sha256:`` and its first 12."""
    return revision[:19] if revision.startswith("sha256:") else revision[:12]


# ----------------------------------------------------------------------------------- run, pause, remove


def _run_now(args: argparse.Namespace, store: Any, record: Any) -> int:
    from edge_runtime import operations

    pulled = operations.run_subscription_now(store, record, pull_argv=lambda: pull_command(args))
    if pulled.run_id is msgspec.UNSET:
        sys.stdout.write(f"waiting: the pull starts once {', '.join(pulled.waiting_for)} ended\n")
        return 0
    if args.json:
        print_json({"subscriptionId": record.id, "runId": pulled.run_id})
    else:
        sys.stdout.write(f"{pulled.run_id}\n")
        sys.stderr.write(f"its log: edge-runtime logs -f {pulled.run_id[-8:]}\n")
    return 0


def _pause(args: argparse.Namespace, store: Any, record: Any, paused: bool) -> int:
    from edge_runtime import operations

    schedule = operations.pause_subscription(store, record, paused)
    if args.json:
        print_json({"subscription": record, "pullSchedule": schedule})
    else:
        sys.stdout.write(f"subscription {record.id} {'paused' if paused else 'resumed'}\n")
    return 0


def _remove(args: argparse.Namespace, store: Any, record: Any) -> int:
    from edge_runtime import operations
    from edge_runtime.cli.import_qinglong import require_scripts_directory, scripts_directory
    from edge_runtime.qinglong.errors import ScriptsDirectoryError
    from edge_runtime.qinglong.subscription_pull import remove_folder

    folder_problem = None
    if args.purge:  # the folder is removed only from a trusted scripts directory
        try:
            require_scripts_directory(record.scripts_dir)
        except ScriptsDirectoryError as exc:  # said; the subscription and its schedules still go
            folder_problem = str(exc)
    removed = operations.remove_subscription(store, record, purge=args.purge)
    if args.purge and folder_problem is None and os.path.isdir(record.scripts_dir):
        with scripts_directory(record.scripts_dir, create=False) as scripts_fd:
            remove_folder(scripts_fd, record.folder)
    if args.json:
        print_json({"removed": removed, **({"folderNotRemoved": folder_problem} if folder_problem else {})})
        return 0
    sys.stdout.write(f"subscription {record.id} removed, with {len(removed.removed_schedule_ids)} schedules\n")
    if removed.kept_schedule_ids:
        sys.stdout.write(f"its {len(removed.kept_schedule_ids)} scripts' schedules and its folder "
                         f"{printable(os.path.join(record.scripts_dir, record.folder))}/ stay (remove them with "
                         f"--purge next time, or schedule remove ID)\n")
    if folder_problem:
        sys.stderr.write(f"Warning: its folder was not removed: {printable(folder_problem)}\n")
    return 0


# ----------------------------------------------------------------------------------- pull


def _pull(args: argparse.Namespace) -> int:
    from edge_runtime.cli.import_qinglong import require_scripts_directory, scripts_directory
    from edge_runtime.contract.errors import EdgeRuntimeError
    from edge_runtime.contract.subscriptions import PullError
    from edge_runtime.qinglong.subscription_pull import PullGuard, pull

    log = sys.stderr if args.json else sys.stdout  # --json: stdout holds the one JSON document

    def say(line: str) -> None:
        log.write(printable(line) + "\n")
        log.flush()  # the Run's log, read live by logs -f

    # First: a cancel (the Run's, its timeout) from here on leaves everything as it was.
    with PullGuard().installed() as guard, args.stores.open(args, WRITE) as store:
        record = store.subscriptions.get(resolve_subscription_id(store, args.subscription_id))
        say(f"pull of subscription {record.id} ({record.name}): {record.kind.value} {record.url}"
            f"{'' if record.branch is msgspec.UNSET else ' branch ' + record.branch} into "
            f"{os.path.join(record.scripts_dir, record.folder)}/")
        try:
            require_scripts_directory(record.scripts_dir)
            with scripts_directory(record.scripts_dir, create=True) as scripts_fd:
                outcome = pull(store, record, scripts_fd, say=say, guard=guard)
        except PullError:
            raise
        except EdgeRuntimeError as exc:
            raise PullError(f"{exc}; nothing changed") from None
        if outcome.changes:
            _wake(store)
    if args.json:
        print_json(outcome)
    else:
        _say_outcome(say, record, outcome)
    if guard.held is not None:
        say("note: the cancel came while the pull was being stored: it is stored whole")
    return 0


def _say_outcome(say: Any, record: Any, outcome: Any) -> None:
    from edge_runtime.contract.subscriptions import ChangeKind

    if outcome.up_to_date:
        return
    for path, reason in outcome.skipped:
        say(f"skip    {path}: {reason}")
    problems = dict(outcome.problems)
    counts: dict[str, int] = {}
    paused: list[str] = []
    for change in outcome.changes:
        short = "" if change.schedule_id is None else change.schedule_id[-8:]
        kind = change.kind
        if kind is ChangeKind.ADD:
            key = "added paused" if change.paused else "added and enabled"
            if change.paused:
                paused.append(short)
                say(f"new     {change.path}  {change.name}  {change.expression}  paused, schedule {short}")
            else:
                say(f"enabled {change.path}  {change.name}  {change.expression}  schedule {short} (auto-add)")
        elif kind is ChangeKind.ADOPT:
            key = "taken over"
            say(f"adopted {change.path}  {change.name}  {change.expression}  schedule {short} (here already with the "
                f"same name, command and expression)")
        elif kind is ChangeKind.CHANGE:
            key = "changed"
            was = []
            if change.before_expression != change.expression:
                was.append(f"{change.before_expression} -> {change.expression}")
            if change.before_name != change.name:
                was.append(f"name {change.before_name} -> {change.name}")
            say(f"changed {change.path}  {'; '.join(was)}  schedule {short}")
        elif kind is ChangeKind.REMOVE:
            key = "removed"
            say(f"removed {change.path}  gone upstream: schedule {short} removed (auto-remove)")
        elif kind is ChangeKind.KEEP:
            key = "kept"
            say(f"kept    {change.path}  gone upstream; its schedule {short} and its file stay (no auto-remove)")
        elif kind is ChangeKind.FORGET:
            key = "forgotten"
            say(f"gone    {change.path}")
        else:
            key = "without a schedule"
            why = problems.get(change.path, "its header's schedule is gone: its schedule stays as it is"
                               if change.before_expression else "no schedule in its header")
            say(f"noted   {change.path}  {change.name}: {why}")
        counts[key] = counts.get(key, 0) + 1
    shown = ", ".join(f"{n} {key}" for key, n in counts.items()) or "none changed"
    say(f"done: {record.folder}/ holds {short_revision(outcome.revision)} ({outcome.copied} files, "
        f"{outcome.copied_bytes // 1024} KiB); schedules: {shown}")
    if paused:
        say(f"the new schedules are paused: edge-runtime schedule resume ID starts one ({' '.join(paused[:8])}"
            f"{' ...' if len(paused) > 8 else ''})")
