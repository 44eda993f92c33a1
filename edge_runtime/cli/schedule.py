"""``edge-runtime schedule add|edit|run|list|show|pause|resume|remove``: run commands at cron times."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

import msgspec

from edge_runtime.contract.notifications import check_rules, parse_rule, rule_text

from edge_runtime.cli.common import (
    CREATE,
    LOCAL_STORES,
    READ,
    WRITE,
    add_json_flag,
    format_ms,
    present,
    print_json,
    printable,
    schedule_zone,
    write_cwd_and_env,
)
from edge_runtime.contract.redaction import store_redactor
from edge_runtime.contract.cron import NEVER_BY_THE_CLOCK_MS
from edge_runtime.contract.durations import format_duration, parse_duration_ms
from edge_runtime.contract.runs import short_id
from edge_runtime.contract.time_zones import InvalidTimeZoneError
from edge_runtime.cli.submit import add_run_options, check_task_first, run_options
from edge_runtime.contract.schedules import (
    EditScheduleCommand,
    FireOutcome,
    Overlap,
    RunNowOutcome,
    ScheduleRecord,
)
from edge_runtime import operations


_NOTIFY_HELP = ("send a notification through CHANNEL when a Run of it ends with one of the outcomes (succeeded, "
                "failed, timeout, lost, cancelled, all; default failed,timeout,lost); repeat for several; replaces "
                "the device's default rule for this schedule (docs/notifications.md)")
_ID_HELP = "the schedule id, or a unique prefix or suffix of it (12 characters at most)"


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = subparsers.add_parser(
        "schedule", help=help_text,
        description="Schedules fire their command as a Run at each time of a cron expression, in the "
        "schedule's time zone (--tz; default: the device's, from TZ, else /etc/TZ, else /etc/localtime), "
        "e.g. '*/5 * * * *', '0 30 6 * * *' (6 fields: second first), '0 0 L * *', '0 9 * * 1#2', "
        "'@daily', '@every 90s', '@reboot'. After downtime or a forward clock jump missed slots fire once. "
        "See docs/schedules.md.",
    )
    commands = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    add = commands.add_parser("add", help="add a schedule and print its id")
    add.add_argument("--name", help="a short label, given to its Runs too")
    add.add_argument("--timeout", metavar="D", help="cancel a Run that runs longer than D (90s, 5m, 1h30m)")
    add.add_argument("--tz", metavar="ZONE", help="the time zone its times are in, kept with it: a POSIX TZ string "
                     "(CST-8, CET-1CEST,M3.5.0,M10.5.0/3) or an IANA name where the system has zoneinfo "
                     "(default: the device's zone)")
    add.add_argument("--overlap", choices=[o.value for o in Overlap], default="skip",
                     help="while the previous Run is active: skip the slot (default), queue it, or replace "
                     "(cancel the previous Run, then start)")
    add.add_argument("--label", action="append", dest="labels", metavar="L",
                     help="a label to find it by (repeat for several; at most 32 of at most 64 characters)")
    add.add_argument("--notify", action="append", dest="notify", metavar="CHANNEL[:on=O,O]",
                     help=_NOTIFY_HELP)
    add_run_options(add)
    add_json_flag(add)
    add.add_argument("expression", metavar="CRON", help="the schedule expression (quote it)")
    add.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run")
    add.set_defaults(add_parser=add)
    edit = commands.add_parser("edit", help="change a schedule in place (its id, counts and Runs stay)")
    edit.add_argument("schedule_id", metavar="ID", help=_ID_HELP)
    edit.add_argument("--cron", metavar="CRON", help="a new schedule expression (quote it)")
    edit.add_argument("--tz", metavar="ZONE", help="a new time zone for its times (its next fire moves to the first "
                      "slot after now in that zone)")
    edit.add_argument("--name", help="a new label")
    edit.add_argument("--timeout", metavar="D", help="a new timeout of its Runs")
    edit.add_argument("--overlap", choices=[o.value for o in Overlap])
    labels = edit.add_mutually_exclusive_group()
    labels.add_argument("--label", action="append", dest="labels", metavar="L",
                        help="its labels become these (repeat for several)")
    labels.add_argument("--no-labels", action="store_true", help="remove its labels")
    notify = edit.add_mutually_exclusive_group()
    notify.add_argument("--notify", action="append", dest="notify", metavar="CHANNEL[:on=O,O]",
                        help="its notification rules become these (repeat for several)")
    notify.add_argument("--no-notify", action="store_true",
                        help="remove its own rules (its Runs follow the device's default rule again)")
    add_run_options(edit)
    add_json_flag(edit)
    edit.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="a new command")
    edit.set_defaults(edit_parser=edit)
    run_now = commands.add_parser("run", help="start a Run of a schedule now and print its id (overlap applies)")
    run_now.add_argument("schedule_id", metavar="ID", help=_ID_HELP)
    add_json_flag(run_now)
    listing = commands.add_parser("list", help="list the schedules")
    add_json_flag(listing)
    for action, text in (("show", "show a schedule"), ("pause", "stop firing a schedule"),
                         ("resume", "fire a paused schedule again, from its next slot"),
                         ("remove", "delete a schedule (its Runs stay)")):
        sub = commands.add_parser(action, help=text)
        sub.add_argument("schedule_id", metavar="ID", help=_ID_HELP)
        add_json_flag(sub)
    parser.set_defaults(run=run, stores=stores)


def run(args: argparse.Namespace) -> int:
    if args.action == "add":
        argv = list(args.argv)
        if argv[:1] == ["--"]:
            argv = argv[1:]
        elif "--" in argv and argv[0].startswith("-"):
            # Options may follow the expression (`add '@daily' --name N -- CMD`): what comes before
            # `--` is parsed as the options it is, never stored as part of the command. Words that
            # are not options there (`add */5 * * * * -- CMD`: an unquoted expression the shell
            # split) leave the expression one field short, which its error explains.
            split = argv.index("--")
            args.add_parser.parse_args([*argv[:split], args.expression], namespace=args)
            argv = argv[split + 1:]
        command = operations.add_schedule_command(  # validated whole before the database is touched
            args.expression, argv, name=args.name, overlap=args.overlap, timeout=args.timeout, time_zone=args.tz,
            labels=args.labels, options=run_options(args))
        check_task_first(args, command.argv, command.env)
        rules = _notify_rules(args)
        with args.stores.open(args, CREATE) as store:
            if rules:  # every channel named exists before the schedule is added
                for rule in rules:
                    operations.notifications(store).channel(rule.channel)
            record = operations.add_schedule(store, command, scripts_dir=lambda: args.stores.scripts_dir(args),
                                             note_when_none=True)
            if rules:
                operations.notifications(store).set_rules(record.id, rules)
            return _done(args, store, record, record.id, woken=True)
    if args.action == "edit":
        # The options may follow the id (`edit ID --name N -- CMD`): what comes before `--` in the
        # remainder is parsed as the options it is, the rest is the new command.
        rest = list(args.argv)
        split = rest.index("--") if "--" in rest else len(rest)
        rest, argv = rest[:split], rest[split + 1:]
        if rest:
            args.edit_parser.parse_args([*rest, args.schedule_id], namespace=args)
        fields = {"expression": args.cron, "time_zone": args.tz, "name": args.name, "overlap": args.overlap,
                  "timeout_ms": None if args.timeout is None else parse_duration_ms(args.timeout),
                  "argv": argv or None, "labels": [] if args.no_labels else args.labels}
        given = {k: v for k, v in fields.items() if v is not None}
        options = run_options(args)
        rules = _notify_rules(args)
        only_rules = rules is not None and not given and not options
        edit = None if only_rules else EditScheduleCommand(schedule_id=args.schedule_id, **given, **options)
        with args.stores.open(args, WRITE) as store:
            schedule_id = operations.resolve_schedule_id(store, args.schedule_id)
            for rule in rules or ():  # every channel named exists before anything changes
                operations.notifications(store).channel(rule.channel)
            if edit is None:
                record = store.schedules.get(schedule_id)
            else:
                edit = msgspec.structs.replace(edit, schedule_id=schedule_id)
                record = operations.edit_schedule(store, edit, scripts_dir=lambda: args.stores.scripts_dir(args))
            if rules is not None:
                operations.notifications(store).set_rules(schedule_id, rules)
            return _done(args, store, record, f"schedule {record.id} changed", woken=True)
    if args.action == "run":
        with args.stores.open(args, WRITE) as store:
            outcome = operations.run_schedule_now(store, operations.resolve_schedule_id(store, args.schedule_id))
            return _ran(args, outcome)
    if args.action in ("list", "show"):
        with args.stores.open(args, READ) as store:  # open while printing: zones are the repository's
            repository = store.schedules
            records = repository.list() if args.action == "list" else [
                repository.get(operations.resolve_schedule_id(store, args.schedule_id))]
            # A schedule's own command or --env may repeat a secret's value: never shown.
            records = store_redactor(store).records(records)
            if args.json:
                print_json(records if args.action == "list" else records[0])
            elif args.action == "list":
                for r in records:
                    next_text = "-" if r.paused else _next_fire(repository, r)
                    # A schedule the service paused because it cannot fire says why, last.
                    reason = "" if r.pause_reason is msgspec.UNSET else f"  reason={printable(r.pause_reason)!r}"
                    labels = f"  labels={printable(','.join(r.labels))}" if r.labels else ""
                    sys.stdout.write(f"{short_id(r.id)}  {'paused ' if r.paused else ''}next={next_text}  "
                                     f"tz={printable(_zone_text(repository, r))}  {printable(r.expression)!r}  "
                                     f"{present(r.name)}  number={r.number}{labels}{reason}\n")
            else:
                _show(repository, records[0])
                notifications = getattr(store, "notifications", None)
                if notifications is not None:
                    own = notifications.rules_of(records[0].id)
                    sys.stdout.write(f"notify     {', '.join(rule_text(r) for r in own) if own else '- (the default rule)'}\n")
        return 0
    with args.stores.open(args, WRITE) as store:
        repository = store.schedules
        args.schedule_id = operations.resolve_schedule_id(store, args.schedule_id)
        if args.action == "remove":
            repository.remove(args.schedule_id)
            record = None
        else:
            record = repository.set_paused(args.schedule_id, args.action == "pause")
        done = {"pause": "paused", "resume": "resumed", "remove": "removed"}[args.action]
        return _done(args, store, record, f"schedule {args.schedule_id} {done}")


def _notify_rules(args: argparse.Namespace) -> list | None:
    """The rules ``--notify`` gives (parsed before the store is opened), [] for ``--no-notify``,
    None when neither was given."""
    if getattr(args, "no_notify", False):
        return []
    if not args.notify:
        return None
    rules = [parse_rule(text) for text in args.notify]
    check_rules(rules)
    return rules


def _done(args: argparse.Namespace, store: Any, record: ScheduleRecord | None, text: str, *, woken: bool = False) -> int:
    if not woken:
        operations.wake_schedules(store)  # after the commit
    if args.json:
        if record is not None:
            record = store_redactor(store).record(record)
        # Every --json command prints JSON: a removed schedule has no record left, so its id.
        print_json(record if record is not None else {"removed": args.schedule_id})
    else:
        sys.stdout.write(text + "\n")
    return 0


def _ran(args: argparse.Namespace, outcome: RunNowOutcome) -> int:
    if args.json:
        print_json(outcome)
    elif outcome.outcome is FireOutcome.STARTED:
        sys.stdout.write(f"{outcome.run_id}\n")
    else:
        sys.stdout.write(f"waiting: the Run starts once {', '.join(outcome.active_run_ids)} ended\n")
    return 0


def _zone_text(repository: Any, r: ScheduleRecord) -> str:
    """The zone a schedule fires in; one stored without a zone says it follows the device's."""
    if r.time_zone is not msgspec.UNSET:
        return r.time_zone
    try:
        return f"device ({repository.device_zone()})"
    except InvalidTimeZoneError as exc:  # shown, not fatal: `schedule list` still lists
        return f"device (unreadable: {exc.message})"


def _next_fire(repository: Any, r: ScheduleRecord) -> str:
    """The next fire time as the schedule's own clock shows it, with its UTC offset."""
    if r.next_fire_at_ms >= NEVER_BY_THE_CLOCK_MS:
        return "next-boot"
    return format_ms(r.next_fire_at_ms, schedule_zone(repository, r))


def _show(repository: Any, r: ScheduleRecord) -> None:
    out = sys.stdout
    out.write(f"schedule   {r.id}\nnumber     {r.number}\nname       {present(r.name)}\n"
              f"expression {printable(r.expression)}\n")
    if r.labels:
        out.write(f"labels     {printable(', '.join(r.labels))}\n")
    out.write(f"time zone  {printable(_zone_text(repository, r))}\n")
    out.write(f"command    {printable(shlex.join(r.command))}\noverlap    {r.overlap.value}\n")
    out.write(f"timeout    {'-' if r.timeout_ms is msgspec.UNSET else format_duration(r.timeout_ms)}\n")
    write_cwd_and_env(out, r)
    if r.retries is not msgspec.UNSET:
        out.write(f"retries    {r.retries}\n")
    # A paused schedule has no next fire: resuming computes it from the first slot after then.
    next_fire = "- (paused)" if r.paused else _next_fire(repository, r)
    out.write(f"state      {'paused' if r.paused else 'active'}\n")
    if r.pause_reason is not msgspec.UNSET:  # paused by the service: it cannot fire
        out.write(f"reason     {printable(r.pause_reason)}\n")
    out.write(f"next fire  {next_fire}\n")
    zone = schedule_zone(repository, r)  # every time of a schedule in its own zone
    if r.waiting_fire_at_ms is not msgspec.UNSET:
        out.write(f"waiting    slot {format_ms(r.waiting_fire_at_ms, zone)} (for the previous Run to end)\n")
    out.write(f"last fire  {format_ms(r.last_fire_at_ms, zone)} {present(r.last_outcome, '')}  "
              f"run={present(r.last_run_id)}\n")
    out.write(f"counts     started={r.fired_count} skipped={r.skipped_count} coalesced={r.coalesced_count}\n")
