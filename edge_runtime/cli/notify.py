"""``edge-runtime notify``: notification channels, the device's default rule, the outbox, and a
script's own message (docs/notifications.md).

A channel's secret parameters given as ``--secret-param K=V`` are in the process list
(``/proc/PID/cmdline``) while the command runs, where every local user can read them: give
``--secret-param K`` without a value to be asked for it (no echo), or ``--stdin`` to read
``K=V`` lines from stdin.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import msgspec

from edge_runtime.cli.common import (
    LOCAL_STORES, READ, WRITE, add_json_flag, format_ms, print_done, print_json, read_hidden_line,
)
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.notifications import (
    CHANNEL_PARAMS,
    MAX_BODY_BYTES,
    MAX_PARAM_BYTES,
    ChannelKind,
    InvalidNotifyChannelError,
    NotifyMessageError,
    NotifyTokenInvalidError,
    OutboxStatus,
    check_message,
    parse_rule,
    rule_text,
)
from edge_runtime.contract.redaction import store_redactor
from edge_runtime.contract.task_notify import NOTIFY_VARIABLE, Capability
from edge_runtime.operations import notifications, printable, resolve_run_id, wake_service

#: What ``--secret-param K=V`` (or a secret given with ``--param``) says on stderr; stored all the same.
ARGV_SECRET_WARNING = ("Warning: a secret given as an argument is visible to every local user in the process list "
                       "(/proc/PID/cmdline) while the command runs; give --secret-param NAME without a value to be "
                       "asked for it, or --stdin with NAME=VALUE lines\n")


class SecretEntryError(EdgeRuntimeError, code="VALUE_ENTRY"):
    """A secret parameter could not be read from the terminal or stdin."""


def _kinds_help() -> str:
    lines = []
    for kind, params in CHANNEL_PARAMS.items():
        names = ", ".join(f"{p.name}{'*' if p.required else ''}{' (secret)' if p.secret else ''}" for p in params)
        lines.append(f"{kind.value}: {names}")
    return "; ".join(lines)


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = subparsers.add_parser(
        "notify", help=help_text,
        description="Notifications: channels (where a message goes), the device's default rule (which ends of a "
        "Run send one; a schedule's own --notify rules replace it), the outbox (each message, sent, pending or "
        "given up with the reason) and a script's own message. See docs/notifications.md.")
    commands = parser.add_subparsers(dest="notify_command", metavar="COMMAND", required=True)

    channel = commands.add_parser("channel", help="add, list, remove or test channels")
    channel_commands = channel.add_subparsers(dest="channel_command", metavar="COMMAND", required=True)
    adder = channel_commands.add_parser(
        "add", help="add a channel",
        description="Parameters of each kind (* required; secret ones are stored like a secret env entry and never "
        "shown): " + _kinds_help() + ". Every kind also takes ca_file.")
    adder.add_argument("kind", metavar="KIND", help=", ".join(k.value for k in ChannelKind))
    adder.add_argument("--name", required=True, metavar="N", help="its name (letters, digits, . _ -)")
    adder.add_argument("--param", metavar="K=V", action="append", default=[], help="a parameter (repeatable)")
    adder.add_argument("--secret-param", dest="secret_param", metavar="K[=V]", action="append", default=[],
                       help="a secret parameter; without =V asked for on the terminal (no echo)")
    adder.add_argument("--stdin", action="store_true", help="read secret parameters from stdin, one K=V a line")
    add_json_flag(adder)
    adder.set_defaults(usage_error=adder.error)
    lister = channel_commands.add_parser("list", help="the channels (secret parameters by name only)")
    add_json_flag(lister)
    for name, text in (("remove", "remove a channel and its rules"),
                       ("test", "send a test message through a channel now, from this process")):
        sub = channel_commands.add_parser(name, help=text)
        sub.add_argument("name", metavar="N")
        add_json_flag(sub)

    listing = commands.add_parser("list", help="the outbox: each message, sent, pending or given up with the reason")
    listing.add_argument("--run", dest="run_form", metavar="RUN", help="only this Run's")
    listing.add_argument("--status", choices=[s.value for s in OutboxStatus])
    listing.add_argument("--limit", type=int, default=50, metavar="N")
    add_json_flag(listing)

    sender = commands.add_parser(
        "send", help="send a message of your own through the device's channels (as QLAPI.notify)",
        description="Queued in the outbox and delivered by the service (retried, never lost): through the channels "
        "named, else those of the device's default rule.")
    sender.add_argument("title", metavar="TITLE")
    sender.add_argument("body", metavar="BODY", nargs="?", help="the text (or --stdin)")
    sender.add_argument("--stdin", action="store_true", help="read BODY from stdin")
    sender.add_argument("--channel", metavar="N", action="append", default=[], help="a channel (repeatable)")
    add_json_flag(sender)
    sender.set_defaults(usage_error=sender.error, run_without_db=send_from_task)

    default = commands.add_parser(
        "default", help="show or set the device's default rule",
        description="RULE is CHANNEL or CHANNEL:on=OUTCOME[,OUTCOME...] (outcomes: succeeded, failed, timeout, lost, "
        "cancelled, all; default failed,timeout,lost). Every Run follows these rules unless its schedule has rules "
        "of its own (schedule add|edit --notify). Without RULE: show them.")
    default.add_argument("rules", metavar="RULE", nargs="*")
    default.add_argument("--none", action="store_true", help="remove every default rule")
    add_json_flag(default)
    default.set_defaults(usage_error=default.error)
    parser.set_defaults(run=run, stores=stores)


def _pairs(items: list[str], usage_error, *, need_value: bool) -> dict[str, str | None]:
    pairs: dict[str, str | None] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not key or (need_value and not eq):
            usage_error(f"{item!r}: expected K=V")
        if key in pairs:
            usage_error(f"parameter {key!r} given twice")
        pairs[key] = value if eq else None
    return pairs


def _secret_params(args: argparse.Namespace) -> tuple[dict[str, str], bool]:
    """The secret parameters and whether one came as an argument."""
    given = _pairs(args.secret_param, args.usage_error, need_value=False)
    in_argv = any(value is not None for value in given.values())
    if args.stdin:
        data = sys.stdin.buffer.read(64 * MAX_PARAM_BYTES)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidNotifyChannelError("stdin is not valid UTF-8; nothing stored") from None
        for line in text.splitlines():
            if not line.strip():
                continue
            key, eq, value = line.partition("=")
            if not eq or not key:
                raise InvalidNotifyChannelError("stdin: one K=V a line; nothing stored")
            if given.get(key) is not None:
                raise InvalidNotifyChannelError(f"parameter {key!r} given twice")
            given[key] = value
    for key, value in list(given.items()):
        if value is None:
            if not sys.stdin.isatty():
                args.usage_error(f"--secret-param {key}: no value; give --stdin with {key}=VALUE lines, or run on a "
                                 f"terminal to be asked for it")
            given[key] = read_hidden_line(f"{key} (secret): ", MAX_PARAM_BYTES, SecretEntryError)
    return {k: v for k, v in given.items() if v is not None}, in_argv


def run(args: argparse.Namespace) -> int:
    command = args.notify_command
    if command == "channel":
        return _channel(args)
    if command == "send":
        return _send(args)
    if command == "default":
        return _default(args)
    with args.stores.open(args, READ) as store:
        run_id = resolve_run_id(store, args.run_form) if args.run_form else None
        records = notifications(store).list_outbox(
            limit=max(1, min(args.limit, 1000)), run_id=run_id,
            status=None if args.status is None else OutboxStatus(args.status))
        redactor = store_redactor(store)
    if args.json:
        print_json(records, redactor)
        return 0
    for record in records:
        sys.stdout.write(redactor.text(outbox_line(record)) + "\n")
    return 0


def outbox_line(record: Any) -> str:
    """One message of the outbox, as ``notify list`` and ``show`` print it."""
    what = (f"run {record.run_id[-8:]} {record.outcome}" if record.outcome is not None
            else f"message {printable(record.title or '')!r}" + (f" from run {record.run_id[-8:]}" if record.run_id else ""))
    if record.coalesced:
        what += f" (+{record.coalesced} coalesced)"
    if record.status is OutboxStatus.SENT:
        state = f"sent {format_ms(record.sent_at_ms)}"
    elif record.status is OutboxStatus.GIVEN_UP:
        state = f"given up: {printable(record.last_error or '')}"
    elif record.status is OutboxStatus.SENDING:
        state = "sending"
    else:
        state = f"pending, next try {format_ms(record.next_at_ms)}" + (
            f" (last: {printable(record.last_error)})" if record.last_error else "")
    return f"{record.id[-8:]}  {record.channel}  {what}  tries={record.tries}  {state}"


def _channel(args: argparse.Namespace) -> int:
    command = args.channel_command
    if command == "add":
        params = {k: v for k, v in _pairs(args.param, args.usage_error, need_value=True).items() if v is not None}
        secrets, in_argv = _secret_params(args)
        with args.stores.open(args, WRITE) as store:
            record = notifications(store).add_channel(args.name, args.kind, params, secrets)
        declared_secret = {p.name for p in CHANNEL_PARAMS.get(record.kind, ()) if p.secret}
        if in_argv or declared_secret & set(params):
            sys.stderr.write(ARGV_SECRET_WARNING)
        return print_done(args, record, f"channel {record.name} added ({record.kind})")
    if command == "list":
        with args.stores.open(args, READ) as store:
            records = notifications(store).list_channels()
            redactor = store_redactor(store)
        if args.json:
            print_json(records, redactor)
            return 0
        for record in records:
            plain = " ".join(f"{k}={printable(v)}" for k, v in sorted(record.params.items()))
            secret = " ".join(f"{k}=***" for k in record.secret_params)
            default = f"  default on={','.join(record.default_on)}" if record.default_on else ""
            sys.stdout.write(redactor.text(f"{record.name}  {record.kind}  {plain} {secret}".rstrip() + default) + "\n")
        return 0
    if command == "remove":
        with args.stores.open(args, WRITE) as store:
            notifications(store).remove_channel(args.name)
        return print_done(args, {"name": args.name, "removed": True}, f"channel {args.name} removed")
    return _test(args)


def _test(args: argparse.Namespace) -> int:
    """Send a test message now, from this process, through the same code the service sends with."""
    from edge_runtime.contract.ids import new_id
    from edge_runtime.contract.notify_channels import MessageText
    from edge_runtime.service.notify_sender import send_message
    from edge_runtime.service.notify_transport import detect

    with args.stores.open(args, READ) as store:
        channel = notifications(store).channel(args.name)
        redactor = store_redactor(store)
        now = store.now_ms()
    transports = detect()
    key = f"edge-runtime-test-{new_id()}"
    try:
        send_message(transports, channel, MessageText(title="edge-runtime test",
                                                      head=f"A test message through channel {channel.name}."),
                     key=key, now_ms=now)
    except EdgeRuntimeError as exc:
        exc.message = redactor.text(exc.message)  # a provider's answer may quote the token it refused
        exc.args = (exc.message,)
        raise
    return print_done(args, {"name": channel.name, "sent": True, "transport": transports.describe()},
                 f"sent through {channel.name} (transports: {transports.describe()})")


def _message_of(args: argparse.Namespace) -> tuple[str, str]:
    """``notify send``'s title and body (from BODY or stdin), checked."""
    if args.body is not None and args.stdin:
        args.usage_error("give BODY or --stdin, not both")
    body = args.body
    if args.stdin:
        data = sys.stdin.buffer.read(MAX_BODY_BYTES + 1)
        try:
            body = data.decode("utf-8")
        except UnicodeDecodeError:
            raise NotifyMessageError("the body on stdin is not valid UTF-8; nothing queued") from None
    body = body or ""
    check_message(args.title, body)
    return args.title, body


def send_from_task(args: argparse.Namespace) -> int | None:
    """``notify send`` in a task (``EDGE_RUNTIME_NOTIFY`` set, no ``--db``): handed to the service
    with the Attempt's capability; None when the variable is not set (the command opens the
    database as always)."""
    if args.notify_command != "send":
        return None
    text = os.environ.get(NOTIFY_VARIABLE)
    if text is None:
        return None
    from edge_runtime.local.notify_handoff import send_to_service

    capability = Capability.parse(text)
    if capability is None:
        raise NotifyTokenInvalidError(f"${NOTIFY_VARIABLE} does not hold a capability of this version; nothing sent")
    title, body = _message_of(args)
    queued = msgspec.json.decode(send_to_service(capability, title, body, args.channel))
    if args.json:
        print_json(queued)
    else:
        sys.stdout.write("".join(f"{row['id']}  queued for {row['channel']}\n" for row in queued))
    return 0


def _send(args: argparse.Namespace) -> int:
    title, body = _message_of(args)
    with args.stores.open(args, WRITE) as store:
        records = notifications(store).enqueue_message(title, body, args.channel or None)
        redactor = store_redactor(store)
        woken = []
        wake_service(lambda: woken.append(store.wake_workers()) or woken[0])
    if woken == [0]:
        sys.stderr.write("Note: no service is running for this database; the message waits until one starts\n")
    if args.json:
        print_json(records, redactor)
    else:
        sys.stdout.write("".join(f"{r.id}  queued for {r.channel}\n" for r in records))
    return 0


def _default(args: argparse.Namespace) -> int:
    if args.none and args.rules:
        args.usage_error("give RULE... or --none, not both")
    rules = [parse_rule(text) for text in args.rules]
    access = WRITE if args.none or rules else READ
    with args.stores.open(args, access) as store:
        repository = notifications(store)
        result = repository.set_rules(None, rules) if args.none or rules else repository.rules_of(None)
    if args.json:
        print_json(result)
    else:
        sys.stdout.write("".join(rule_text(rule) + "\n" for rule in result) or "no default rule\n")
    return 0
