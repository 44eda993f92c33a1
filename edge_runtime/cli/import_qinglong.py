"""``edge-runtime import qinglong PATH [--dry-run] [--json] [--scripts-dir DIR] [--tz ZONE]``:
bring a QingLong install's crons, envs and scripts over (docs/qinglong.md).

PATH is QingLong's data folder (``/ql/data``) or the ``data.tgz`` its backup writes. The command
prints the plan, a row per cron, env, script folder and table: what it creates, what is here
already, what it skips and why; ``--dry-run`` stops there and writes nothing (not even the
database or the scripts directory). Importing the same data again creates nothing new.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec

from edge_runtime.cli.common import CREATE, LOCAL_STORES, READ, add_json_flag, print_json, printable

#: Where the scripts go when ``--scripts-dir`` is not given: the service's own (``LocalStores.scripts_dir``).
SCRIPTS_DIR_DEFAULT = "the scripts_dir setting, else scripts/ beside the database"


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = subparsers.add_parser(
        "import", help=help_text,
        description="Bring another scheduler's tasks to this device. See docs/qinglong.md.",
    )
    sources = parser.add_subparsers(dest="import_source", metavar="SOURCE", required=True, parser_class=type(parser))
    qinglong = sources.add_parser(
        "qinglong", help="crons, envs and scripts of a QingLong data folder or its data.tgz backup",
        description="Import a QingLong data folder (/ql/data) or the data.tgz its backup writes: crons become "
        "schedules (disabled ones paused), envs env entries (one per QingLong env), scripts are copied into the scripts directory. "
        "Prints what it creates, what is here already and what it skips and why. Running it again creates "
        "nothing new.")
    qinglong.add_argument("path", metavar="PATH", help="QingLong's data folder, or its data.tgz")
    qinglong.add_argument("--dry-run", action="store_true", help="print the plan only; write nothing")
    qinglong.add_argument("--scripts-dir", metavar="DIR",
                          help=f"where the scripts go (default: {SCRIPTS_DIR_DEFAULT})")
    qinglong.add_argument("--tz", metavar="ZONE", help="the zone the schedules fire in (default: QingLong's own, "
                          "from its settings, else Asia/Shanghai as its image)")
    add_json_flag(qinglong)
    parser.set_defaults(run=run, stores=stores)


def run(args: argparse.Namespace) -> int:
    from edge_runtime.qinglong.data_folder import open_source
    from edge_runtime.qinglong.errors import ScriptsDirectoryError
    from edge_runtime.qinglong.import_apply import apply_plan, check_space
    from edge_runtime.qinglong.import_plan import Action, EnvEntries, choose_zone, make_plan
    from edge_runtime.qinglong.sqlite_reader import read_database

    scripts_dir = os.path.abspath(args.scripts_dir or args.stores.scripts_dir(args))
    progress = _progress(args.json)
    with open_source(args.path, progress=progress) as source:
        # Everything that can refuse the import is asked before the database is opened (or made).
        database = read_database(source.database, shown=f"{source.where}: db/database.sqlite")
        zone = choose_zone(args.tz, database.time_zone, _device_zone())
        require_scripts_directory(scripts_dir)
        with _store(args) as store, scripts_directory(scripts_dir, create=not args.dry_run) as scripts_fd:
            existing = _existing(store, scripts_fd)
            envs = EnvEntries(None if store is None else store.environment)
            plan = make_plan(source, database, existing=existing, envs=envs, scripts_dir=scripts_dir, zone=zone,
                             subscriptions=_subscriptions_planner(args, store, database))
            if args.dry_run:
                if scripts_fd is not None:
                    try:
                        check_space(plan, scripts_fd)
                    except ScriptsDirectoryError as exc:  # the import itself refuses; a dry run says so
                        plan.warnings.append(str(exc))
            else:
                apply_plan(plan, source, store, envs, scripts_fd, progress)
    failed = [item for item in plan.items if item.action is Action.FAILED]
    if args.json:
        print_json(_report(plan, args.dry_run))
    else:
        _print(plan, args.dry_run)
    if failed:
        from edge_runtime.cli.reporting import report_error

        report_error(args.json, "QINGLONG_IMPORT_INCOMPLETE",
                     f"{len(failed)} rows failed (the table says why); what was created stays: run the same import "
                     f"again to finish it")
        return 1
    return 0


def _subscriptions_planner(args: argparse.Namespace, store: Any, database: Any):
    """What plans QingLong's subscriptions (its rows, and the old-style ``ql repo`` crons): their
    pull command is this program's (cli/subscription.py), refused where another user could
    change it; the subscriptions here already are found by folder."""
    from edge_runtime.cli.pull_command import pull_command
    from edge_runtime.contract.subscriptions import InvalidSubscriptionError
    from edge_runtime.qinglong.import_subscriptions import plan_subscriptions
    from edge_runtime.service.task_user import service_user_name

    try:
        command: list[str] | str = pull_command(args)
    except InvalidSubscriptionError as exc:
        command = str(exc)
    here = {} if store is None else {r.folder: r.url for r in store.subscriptions.list()}

    def planner(plan: Any, old_style: list[Any]) -> None:
        plan_subscriptions(plan, database.subscriptions, old_style, here=here, pull_command=command,
                           pull_user=service_user_name())

    return planner


def _progress(quiet: bool):
    def say(message: str) -> None:
        if not quiet:
            sys.stderr.write(f"{message}\n")
            sys.stderr.flush()
    return say


@contextmanager
def _store(args: argparse.Namespace) -> Iterator[Any]:
    """The store: created for an import; for a dry run, read if it exists, else none (a device
    with nothing yet)."""
    if args.dry_run:
        if not os.path.exists(args.db):
            yield None
            return
        with args.stores.open(args, READ) as store:
            yield store
        return
    with args.stores.open(args, CREATE) as store:
        yield store


def require_scripts_directory(path: str) -> None:
    """Refuse a scripts directory that is not trusted, or could not be made trusted (its nearest
    existing folder is another user's), before anything is written."""
    from edge_runtime.qinglong.errors import ScriptsDirectoryError
    from edge_runtime.service.trusted_paths import directory_problem

    existing = path
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    problem = directory_problem(existing, sticky_ok=existing != path)
    if problem is not None:
        raise ScriptsDirectoryError(
            f"refusing the scripts directory {path}: {problem}; another user could change the code root's tasks "
            f"run (make it owned by uid {os.geteuid()} with mode 0755, or give --scripts-dir)")


@contextmanager
def scripts_directory(path: str, *, create: bool) -> Iterator[int | None]:
    """The scripts directory held as a descriptor (a trusted directory: root's tasks run code from
    it), made if ``create``; None for a dry run where it does not exist yet."""
    from edge_runtime.qinglong.errors import ScriptsDirectoryError
    from edge_runtime.service.trusted_paths import UntrustedDirectoryError, hold_trusted_directory

    if not os.path.isdir(path):
        if not create:
            yield None
            return
        try:
            os.makedirs(path, mode=0o755, exist_ok=True)
        except OSError as exc:
            raise ScriptsDirectoryError(f"cannot make the scripts directory {path}: {exc.strerror or exc}") from None
    try:
        fd = hold_trusted_directory(path, "scripts directory")
    except UntrustedDirectoryError as exc:
        raise ScriptsDirectoryError(str(exc)) from None
    try:
        yield fd
    finally:
        os.close(fd)


def _device_zone() -> str:
    from edge_runtime.contract.device import device_time_zone

    return device_time_zone()


def _existing(store: Any, scripts_fd: int | None):
    from edge_runtime.qinglong.data_folder import MAX_SCRIPT_BYTES
    from edge_runtime.qinglong.import_plan import Existing, ScriptHere
    from edge_runtime.qinglong.script_files import file_here

    schedules = frozenset() if store is None else frozenset(
        (None if r.name is msgspec.UNSET else r.name, tuple(r.command), r.expression) for r in store.schedules.list())

    def script(path: str) -> ScriptHere | None:
        found = file_here(scripts_fd, path, MAX_SCRIPT_BYTES)
        return None if found is None else ScriptHere(sha256=found[0], problem=found[1])

    return Existing(schedules=schedules, script=script)


# ----------------------------------------------------------------------------------- output


def _report(plan: Any, dry_run: bool) -> dict[str, Any]:
    return {"source": plan.where, "layout": plan.layout, "qinglongVersion": plan.version,
            "timeZone": plan.time_zone, "timeZoneReason": plan.zone_note, "scriptsDir": plan.scripts_dir,
            "dryRun": dry_run, "counts": plan.counts(), "warnings": plan.warnings,
            "items": msgspec.to_builtins(plan.items)}


def _print(plan: Any, dry_run: bool) -> None:
    from edge_runtime.qinglong.import_plan import Action, Kind

    out = sys.stdout
    out.write(f"QingLong data   {printable(plan.where)} ({plan.layout}; its database is QingLong {plan.version})\n")
    out.write(f"time zone       {printable(plan.time_zone)} ({printable(plan.zone_note)})\n")
    out.write(f"scripts into    {printable(plan.scripts_dir)}\n\n")
    folded: dict[tuple[str, str], list[Any]] = {}
    for item in plan.items:
        if item.kind is Kind.SCRIPT and item.action in (Action.CREATE, Action.CREATED, Action.EXISTS):
            folder = item.summary.split("/", 1)[0] + "/" if "/" in item.summary else "(top level)"
            folded.setdefault((item.action.value, folder), []).append(item)
            continue
        _row(out, item.action.value, item.kind.value, item.source, item.summary)
        if item.reason:
            out.write(f"{'':21}why: {printable(item.reason)}\n")
        for note in item.notes:
            out.write(f"{'':21}note: {printable(note)}\n")
    for (action, folder), items in sorted(folded.items()):
        size = sum(item.detail.get("size", 0) for item in items)
        _row(out, action, "scripts", f"scripts/{folder}", f"{len(items)} file{'s' if len(items) != 1 else ''}, "
                                                          f"{_size(size)}")
    out.write("\n")
    for warning in plan.warnings:
        out.write(f"warning: {printable(warning)}\n")
    parts = []
    for action, kinds in plan.counts().items():
        parts.append(f"{action} " + ", ".join(f"{count} {kind}{'s' if count != 1 else ''}"
                                              for kind, count in sorted(kinds.items())))
    out.write("; ".join(parts) + ("\ndry run: nothing written\n" if dry_run else "\n"))


def _row(out: Any, action: str, kind: str, source: str, summary: str) -> None:
    out.write(f"{action:8}{kind:13}{_pad(printable(source), 26)}{printable(summary)}\n")


#: Code point ranges a terminal shows two columns wide (CJK, Hangul, full-width forms, emoji):
#: the rows' names are Chinese. Not ``unicodedata``: the build leaves its 1.1 MB table out.
_WIDE = ((0x1100, 0x115F), (0x2E80, 0x303E), (0x3041, 0x33FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
         (0xA000, 0xA4CF), (0xAC00, 0xD7A3), (0xF900, 0xFAFF), (0xFE30, 0xFE4F), (0xFF00, 0xFF60),
         (0xFFE0, 0xFFE6), (0x1F300, 0x1F64F), (0x1F900, 0x1F9FF), (0x20000, 0x3FFFD))


def _columns(text: str) -> int:
    return sum(2 if any(low <= ord(c) <= high for low, high in _WIDE) else 1 for c in text)


def _pad(text: str, width: int) -> str:
    """``text`` padded to ``width`` terminal columns (a CJK character takes two)."""
    return text + " " * max(1, width - _columns(text))


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"
