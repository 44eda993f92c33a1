"""``edge-runtime scripts scan DIR [--add] [--paused] [--random-time SEED] [--scripts-dir DIR] [--json]``:
what each script of a folder would be scheduled as, read from its header as QingLong's
subscriptions read it (docs/qinglong.md, "Scripts and their headers"), and with ``--add`` the
schedules themselves (one already here, same name, command and expression, is not added again).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import msgspec

from edge_runtime.cli.common import CREATE, LOCAL_STORES, add_json_flag, print_json, printable


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    from edge_runtime.cli.import_qinglong import SCRIPTS_DIR_DEFAULT

    parser = subparsers.add_parser(
        "scripts", help=help_text,
        description="Scripts and the schedules their headers ask for. See docs/qinglong.md.",
    )
    actions = parser.add_subparsers(dest="scripts_action", metavar="ACTION", required=True, parser_class=type(parser))
    scan = actions.add_parser(
        "scan", help="show what each script would be scheduled as (and add it with --add)",
        description="Read every script (.js .mjs .cjs .ts .py .sh) under DIR: its name from new Env('NAME'), "
        "else a name: line, else its file name; its schedule from a line with 5 or 6 cron fields followed by its "
        "file name, else cron: EXPR, else cron \"EXPR\". A script without one gets none, unless --random-time.")
    scan.add_argument("dir", metavar="DIR", help="the folder of scripts")
    scan.add_argument("--add", action="store_true", help="add a schedule for each script that has one")
    scan.add_argument("--paused", action="store_true", help="with --add: add them paused (resume each to start it)")
    scan.add_argument("--random-time", metavar="SEED",
                      help="a script without a schedule in its header gets a daily time drawn from SEED and its "
                      "path (the same every time for the same SEED)")
    scan.add_argument("--scripts-dir", metavar="DIR",
                      help=f"the scripts directory task commands are relative to (default: {SCRIPTS_DIR_DEFAULT}); "
                      "a script outside it is run by its absolute path")
    add_json_flag(scan)
    parser.set_defaults(run=run, stores=stores)


def run(args: argparse.Namespace) -> int:
    from edge_runtime.qinglong.errors import QingLongSourceError
    from edge_runtime.qinglong.script_scan import scan_folder

    scripts_dir = os.path.realpath(args.scripts_dir or args.stores.scripts_dir(args))
    top = os.path.realpath(args.dir)
    try:
        top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise QingLongSourceError(f"cannot read the folder {args.dir}: {exc.strerror or exc}") from None
    inside = os.path.commonpath([top, scripts_dir]) == scripts_dir

    def command(path: str) -> list[str]:
        full = os.path.join(top, path)
        return ["task", os.path.relpath(full, scripts_dir) if inside else full]

    try:
        scanned, skipped = scan_folder(top_fd, command, random_seed=args.random_time,
                                       progress=lambda m: None if args.json else sys.stderr.write(m + "\n"))
    finally:
        os.close(top_fd)
    if args.add:
        _add(args, scanned)
    if args.json:
        print_json({"scripts": msgspec.to_builtins(scanned), "skipped": msgspec.to_builtins(skipped)})
    else:
        _print(scanned, skipped, args.add)
    return 1 if any(s.action == "failed" for s in scanned) else 0


def _add(args: argparse.Namespace, scanned: list) -> None:
    from edge_runtime import operations
    from edge_runtime.contract.errors import EdgeRuntimeError
    from edge_runtime.contract.schedules import AddScheduleCommand
    from edge_runtime.qinglong.import_plan import schedule_identity

    with args.stores.open(args, CREATE) as store:
        here = {(None if r.name is msgspec.UNSET else r.name, tuple(r.command), r.expression)
                for r in store.schedules.list()}
        added = False
        for script in scanned:
            if script.expression is None:
                continue
            identity = schedule_identity(script.name, script.command, script.expression)
            if identity in here:
                script.action, script.reason = "exists", "a schedule with this name, command and expression is here"
                continue
            try:
                record = store.schedules.add(AddScheduleCommand(
                    expression=script.expression, argv=script.command, name=script.name, paused=args.paused))
            except EdgeRuntimeError as exc:
                script.action, script.reason = "failed", str(exc)
                continue
            here.add(identity)
            script.action, script.schedule_id, added = "created", record.id, True
        if added:
            operations.wake_schedules(store)


def _print(scanned: list, skipped: list, add: bool) -> None:
    out = sys.stdout
    for script in scanned:
        if script.expression is not None:
            where = "random daily time" if script.rule == "random" else f"{script.rule}, line {script.line}"
            schedule = f"{script.expression}  ({where})"
        else:
            schedule = f"-  ({script.problem})"
        action = f"{script.action or '-':8}" if add else ""
        out.write(f"{action}{printable(script.path)}  {printable(script.name)}  {printable(schedule)}\n")
        if script.reason and script.action == "failed":
            out.write(f"    why: {printable(script.reason)}\n")
    for entry in skipped:
        out.write(f"{'skip    ' if add else ''}{printable(entry.path)}  not read: {printable(entry.reason)}\n")
    with_schedule = sum(1 for s in scanned if s.expression is not None)
    summary = f"{len(scanned)} scripts, {with_schedule} with a schedule"
    if add:
        created = sum(1 for s in scanned if s.action == "created")
        here = sum(1 for s in scanned if s.action == "exists")
        summary += f"; {created} added, {here} here already"
    out.write(summary + "\n")
