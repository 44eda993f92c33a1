"""Notifications: channels, rules, the outbox, their limits and errors (docs/notifications.md). Pure.

A *channel* is a place a message goes (a Telegram chat, a webhook, a mailbox): a kind, a name and
its parameters, some of them secret (tokens, keys, passwords: stored like a secret env entry and
masked in every output). A *rule* says when a Run's end is worth a message: on which outcomes,
through which channel; a schedule has its own rules, every other Run (and a schedule without any)
follows the device's default rules. Each message is a row of the *outbox*, written in the very
transaction that ends the Run, so a crash between the end and the send loses nothing; the service
delivers it under a lease, retries with backoff and records it as sent or given up with the reason.

Coalescing keeps a flapping schedule quiet: per rule and source (the schedule, else the Run's
name), the first message is sent at once and opens a window of :data:`COALESCE_WINDOW_MS`; what
matches inside it is counted into one summary row due when the window closes ("5 more failures of
X since ..."), which opens the next window.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from typing import Protocol

import msgspec

from edge_runtime.contract.backoff import capped_backoff
from edge_runtime.contract.errors import EdgeRuntimeError

# ----------------------------------------------------------------------------- errors


class NotifyError(EdgeRuntimeError, code="NOTIFY_ERROR"):
    """A notification command or delivery failed."""


class NotifyStoreError(NotifyError, code="NOTIFY_STORE_ERROR"):
    """The store could not read or write the channels, rules or outbox (a busy database: retryable)."""


class NotifyChannelNotFoundError(NotifyError, code="NOTIFY_CHANNEL_NOT_FOUND"):
    """No channel of that name."""


class NotifyChannelExistsError(NotifyError, code="NOTIFY_CHANNEL_EXISTS"):
    """A channel of that name exists already (remove it first)."""


class InvalidNotifyChannelError(NotifyError, code="NOTIFY_INVALID_CHANNEL"):
    """An unknown kind, an unknown or missing parameter, a bad value."""


class InvalidNotifyRuleError(NotifyError, code="NOTIFY_INVALID_RULE"):
    """A rule that does not parse (``CHANNEL[:on=failed,timeout]``)."""


class NotifyMessageError(NotifyError, code="NOTIFY_INVALID_MESSAGE"):
    """A message of ``notify send`` that is empty or too long."""


class NotifyTokenInvalidError(NotifyError, code="NOTIFY_TOKEN_INVALID"):
    """A task's message was refused: its token (``EDGE_RUNTIME_NOTIFY``) is not one this device
    issued, or its Attempt is no longer running; nothing was queued."""


class NotifyTaskLimitError(NotifyError, code="NOTIFY_TASK_LIMIT"):
    """An Attempt has sent :data:`MAX_TASK_MESSAGES` messages through a channel already; nothing
    was queued."""


class NotifyServiceUnavailableError(NotifyError, code="NOTIFY_SERVICE_UNAVAILABLE"):
    """A task's message could not be handed to the service (none is listening, or it did not
    answer); retryable: whether it was queued is said in the message."""

    retryable = True


class NotifySendError(NotifyError, code="NOTIFY_SEND_FAILED"):
    """The provider refused the message or could not be reached. ``retryable``: a later try may
    succeed (a network error, a 5xx, a 429); otherwise (a 4xx: a bad token) it will not."""


class NotifyTransportUnavailableError(NotifySendError, code="NOTIFY_NO_TRANSPORT"):
    """Nothing on this device can send that request (no ``curl`` for HTTPS or SMTP). Retried like
    an outage: installing curl meanwhile delivers the message."""

    retryable = True


# ----------------------------------------------------------------------------- names and limits


class ChannelKind(enum.StrEnum):
    WEBHOOK = "webhook"
    BARK = "bark"
    TELEGRAM = "telegram"
    WECOM = "wecom"
    DINGTALK = "dingtalk"
    FEISHU = "feishu"
    SERVERCHAN = "serverchan"
    PUSHPLUS = "pushplus"
    NTFY = "ntfy"
    GOTIFY = "gotify"
    EMAIL = "email"


class Outcome(enum.StrEnum):
    """How a Run ended, as a rule reads it: ``timeout`` is a Run cancelled for its timeout,
    ``lost`` one whose last Attempt was lost (its process vanished: a crash, a power cut)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    LOST = "lost"
    CANCELLED = "cancelled"


#: ``on=all`` in a rule.
ALL_OUTCOMES = frozenset(Outcome)
#: What a rule given without ``:on=`` fires on.
DEFAULT_ON = frozenset({Outcome.FAILED, Outcome.TIMEOUT, Outcome.LOST})


class OutboxStatus(enum.StrEnum):
    PENDING = "pending"  # waiting for its next try (next_at_ms)
    SENDING = "sending"  # leased by a sender until lease_expires_at_ms
    SENT = "sent"
    GIVEN_UP = "given_up"


#: A channel's name: what ``--channel``, ``--notify`` and ``channel remove`` name it by.
CHANNEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_CHANNELS = 64
#: A parameter's value (a URL, a header list, a body template).
MAX_PARAM_BYTES = 4096
#: Rules of one schedule (or the device's default).
MAX_RULES_PER_OWNER = 16
#: ``notify send``: a title and a body.
MAX_TITLE_CHARS = 256
MAX_BODY_BYTES = 16 * 1024
#: A task's own messages (``notify send`` in a task, through the service) per Attempt through
#: each channel: a task in a loop cannot make a storm of the owner's phone.
MAX_TASK_MESSAGES = 10

#: One try at a provider: past this the send fails (retryable). Also curl's --max-time.
SEND_TIMEOUT_S = 30
#: How long a claimed outbox row belongs to its sender: longer than one send, so a live sender is
#: never overtaken; a sender killed mid-send leaves a lease that another takes after it expires.
OUTBOX_LEASE_MS = 120_000
#: The first retry after a failed try, doubling up to the cap (contract.backoff).
RETRY_FIRST_MS = 30_000
RETRY_MAX_MS = 30 * 60_000
#: Tries before a message is given up (about 2 h of backoff: a router's uplink drops for minutes).
MAX_TRIES = 8
#: The coalescing window: after a message of a rule and source, further matches within this are
#: summed into one message sent when it closes.
COALESCE_WINDOW_MS = 15 * 60_000
#: The end of a Run's log a message quotes (masked first, then cut to this and the channel's limit).
LOG_TAIL_BYTES = 2048
#: The longest reason kept for a failed try.
MAX_ERROR_CHARS = 512


def retry_delay_ms(tries: int) -> int:
    """The wait after the ``tries``-th failed try."""
    return capped_backoff(RETRY_FIRST_MS, tries, RETRY_MAX_MS)


# ----------------------------------------------------------------------------- channel parameters


class Param(msgspec.Struct, frozen=True, gc=False):
    name: str
    secret: bool = False
    required: bool = False
    help: str = ""


_CA = Param("ca_file", help="a PEM file of CA certificates to trust instead of the system's (self-signed servers)")

#: Every kind's parameters, declared once: which exist, which are secret, which are required.
#: A secret is stored like a secret env entry and shown only as ``***``.
CHANNEL_PARAMS: dict[ChannelKind, tuple[Param, ...]] = {
    ChannelKind.WEBHOOK: (
        Param("url", secret=True, required=True, help="where to send; may hold a token, so it is secret"),
        Param("method", help="POST (default) or PUT"),
        Param("headers", secret=True, help="extra headers, one 'Name: value' a line"),
        Param("body", help="body template; $title, $content, $status, $run, $id are replaced (JSON-escaped "
                           "for application/json); default a JSON object of them"),
        Param("content_type", help="default application/json"),
    ),
    ChannelKind.BARK: (
        Param("key", secret=True, required=True, help="the device key"),
        Param("server", help="default https://api.day.app"),
        Param("sound"), Param("group"), Param("icon"), Param("level", help="active, timeSensitive or passive"),
        Param("url", help="opened when the notification is tapped"),
    ),
    ChannelKind.TELEGRAM: (
        Param("token", secret=True, required=True, help="the bot token"),
        Param("chat_id", required=True),
        Param("api_host", help="default https://api.telegram.org (a reverse proxy where it is blocked)"),
    ),
    ChannelKind.WECOM: (
        Param("key", secret=True, required=True, help="the group robot's webhook key"),
        Param("origin", help="default https://qyapi.weixin.qq.com"),
    ),
    ChannelKind.DINGTALK: (
        Param("token", secret=True, required=True, help="the robot's access_token"),
        Param("secret", secret=True, help="the signing secret (SEC...), when the robot signs"),
        Param("origin", help="default https://oapi.dingtalk.com"),
    ),
    ChannelKind.FEISHU: (
        Param("key", secret=True, required=True, help="the bot's hook id (or its whole hook URL)"),
        Param("secret", secret=True, help="the signing secret, when the bot checks signatures"),
        Param("origin", help="default https://open.feishu.cn (Lark: https://open.larksuite.com)"),
    ),
    ChannelKind.SERVERCHAN: (
        Param("key", secret=True, required=True, help="the SendKey (SCT... or sctp<uid>t...)"),
        Param("server", help="default: from the key, https://sctapi.ftqq.com or https://<uid>.push.ft07.com"),
    ),
    ChannelKind.PUSHPLUS: (
        Param("token", secret=True, required=True),
        Param("topic", help="a group code, to send to a group"),
        Param("template", help="txt (default), html, markdown"),
        Param("channel", help="wechat (default), webhook, mail, ..."),
        Param("server", help="default https://www.pushplus.plus"),
    ),
    ChannelKind.NTFY: (
        Param("topic", secret=True, required=True, help="on a public server the topic name is the password"),
        Param("server", help="default https://ntfy.sh"),
        Param("priority", help="1..5, default 3"),
        Param("token", secret=True, help="an access token (Bearer)"),
        Param("username"), Param("password", secret=True),
    ),
    ChannelKind.GOTIFY: (
        Param("server", required=True, help="the Gotify server's URL"),
        Param("token", secret=True, required=True, help="an application token"),
        Param("priority", help="default 5"),
    ),
    ChannelKind.EMAIL: (
        Param("host", required=True, help="the SMTP server"),
        Param("port", help="default 465 for tls, 587 for starttls, 25 for none"),
        Param("security", help="tls (default: SMTPS), starttls, or none (only for a local relay)"),
        Param("user", help="the login (default: none)"),
        Param("password", secret=True),
        Param("from", required=True, help="the sender address"),
        Param("to", required=True, help="recipients, comma-separated"),
    ),
}
for _kind in CHANNEL_PARAMS:
    CHANNEL_PARAMS[_kind] = (*CHANNEL_PARAMS[_kind], _CA)

#: How much of a message each provider takes (its documented limit, with room for the title),
#: in UTF-8 bytes: the body is cut to it after masking.
BODY_LIMIT_BYTES: dict[ChannelKind, int] = {
    ChannelKind.WEBHOOK: 16_384,
    ChannelKind.BARK: 3_000,  # an APNs payload is at most 4 KB
    ChannelKind.TELEGRAM: 3_800,  # sendMessage: 4096 characters
    ChannelKind.WECOM: 1_800,  # text content: 2048 bytes
    ChannelKind.DINGTALK: 15_000,  # 20000 bytes
    ChannelKind.FEISHU: 15_000,  # request body: 20 KB
    ChannelKind.SERVERCHAN: 16_000,  # desp: 32 KB
    ChannelKind.PUSHPLUS: 16_000,
    ChannelKind.NTFY: 3_800,  # larger messages become attachments: 4096 bytes
    ChannelKind.GOTIFY: 16_000,
    ChannelKind.EMAIL: 16_000,
}


def params_of(kind: ChannelKind) -> dict[str, Param]:
    return {param.name: param for param in CHANNEL_PARAMS[kind]}


def check_channel(name: str, kind_text: str, params: Mapping[str, str],
                  secret_params: Mapping[str, str]) -> tuple[ChannelKind, dict[str, str], dict[str, str]]:
    """The channel's kind and its parameters split into plain and secret, as declared; a
    parameter given as plain that is declared secret is kept as a secret (never shown).

    Raises:
        InvalidNotifyChannelError: a bad name, an unknown kind or parameter, a missing required
            one, a value too long or with a control character.
    """
    if not isinstance(name, str) or not CHANNEL_NAME.fullmatch(name):
        raise InvalidNotifyChannelError(
            f"channel name {name!r} must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    try:
        kind = ChannelKind(kind_text)
    except ValueError:
        raise InvalidNotifyChannelError(
            f"unknown channel kind {kind_text!r}; one of {', '.join(k.value for k in ChannelKind)}") from None
    declared = params_of(kind)
    plain: dict[str, str] = {}
    secret: dict[str, str] = {}
    for given, as_secret in ((params, False), (secret_params, True)):
        for key, value in given.items():
            param = declared.get(key)
            if param is None:
                raise InvalidNotifyChannelError(
                    f"{kind.value} has no parameter {key!r}; it takes {', '.join(declared)}")
            if key in plain or key in secret:
                raise InvalidNotifyChannelError(f"parameter {key!r} given twice")
            _check_value(key, value, multiline=key in ("headers", "body"))
            (secret if param.secret or as_secret else plain)[key] = value
    missing = [p.name for p in declared.values() if p.required and not (plain.get(p.name) or secret.get(p.name))]
    if missing:
        raise InvalidNotifyChannelError(f"{kind.value} needs {', '.join(missing)}")
    return kind, plain, secret


def _check_value(key: str, value: object, *, multiline: bool) -> None:
    if not isinstance(value, str):
        raise InvalidNotifyChannelError(f"parameter {key!r} must be text")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_PARAM_BYTES:
        raise InvalidNotifyChannelError(f"parameter {key!r} is longer than {MAX_PARAM_BYTES} bytes")
    allowed = "\n\t" if multiline else ""
    if any((ord(c) < 32 and c not in allowed) or ord(c) == 127 for c in value):
        raise InvalidNotifyChannelError(f"parameter {key!r} holds a control character")


def secret_forms(value: str) -> list[str]:
    """What of one secret parameter's value is masked: the value, and where it is a URL or a list
    of headers, the pieces a task or a provider's error may quote alone (a URL's path segments and
    query values, a header's value and its last word: ``Bearer TOKEN``), each of at least
    ``MIN_SECRET_LENGTH`` characters (shorter ones would mask common words)."""
    from edge_runtime.contract.redaction import MIN_SECRET_LENGTH

    forms = [value]
    pieces: list[str] = []
    if "://" in value:
        rest = value.split("://", 1)[1]
        path, _, query = rest.partition("?")
        # A path segment that looks like a key (letters and digits, or long), never a word such as
        # "services" or "webhook" that would mask every occurrence of the word.
        pieces += [segment for segment in path.split("/")[1:]
                   if len(segment) >= 20 or (any(c.isdigit() for c in segment) and any(c.isalpha() for c in segment))]
        pieces += [pair.partition("=")[2] for pair in query.split("&")]
    for line in value.splitlines():
        if ":" in line and "://" not in line:
            header_value = line.partition(":")[2].strip()
            pieces += [header_value, header_value.split(" ")[-1]]
    forms += [piece for piece in pieces if len(piece) >= MIN_SECRET_LENGTH]
    return forms


# ----------------------------------------------------------------------------- rules


class NotifyRule(msgspec.Struct, rename="camel", frozen=True, forbid_unknown_fields=True, kw_only=True,
                 gc=False):
    """When ``channel`` gets a message: a Run of its owner ended with one of ``on``."""

    channel: str
    on: list[Outcome]


def parse_rule(text: str) -> NotifyRule:
    """``CHANNEL`` or ``CHANNEL:on=failed,timeout`` (``on=all``: every end).

    Raises:
        InvalidNotifyRuleError: it does not parse.
    """
    name, sep, rest = text.partition(":")
    if not CHANNEL_NAME.fullmatch(name):
        raise InvalidNotifyRuleError(f"rule {text!r}: {name!r} is not a channel name (CHANNEL[:on=failed,timeout])")
    if not sep:
        return NotifyRule(channel=name, on=ordered(DEFAULT_ON))
    key, eq, values = rest.partition("=")
    if key != "on" or not eq or not values:
        raise InvalidNotifyRuleError(f"rule {text!r}: expected CHANNEL:on=OUTCOME[,OUTCOME...]")
    outcomes: set[Outcome] = set()
    for value in values.split(","):
        if value == "all":
            outcomes |= ALL_OUTCOMES
            continue
        try:
            outcomes.add(Outcome(value))
        except ValueError:
            raise InvalidNotifyRuleError(
                f"rule {text!r}: unknown outcome {value!r}; one of all, {', '.join(o.value for o in Outcome)}"
            ) from None
    return NotifyRule(channel=name, on=ordered(outcomes))


def ordered(outcomes: Iterable[Outcome]) -> list[Outcome]:
    chosen = set(outcomes)
    return [o for o in Outcome if o in chosen]


def rule_text(rule: NotifyRule) -> str:
    on = "all" if set(rule.on) == ALL_OUTCOMES else ",".join(rule.on)
    return f"{rule.channel}:on={on}"


def check_rules(rules: list[NotifyRule]) -> None:
    if len(rules) > MAX_RULES_PER_OWNER:
        raise InvalidNotifyRuleError(f"at most {MAX_RULES_PER_OWNER} rules")
    names = [rule.channel for rule in rules]
    if len(set(names)) != len(names):
        raise InvalidNotifyRuleError("a channel is named twice")


def run_outcome(status: str, *, cancel_reason: str | None, last_attempt_status: str | None) -> Outcome:
    """The outcome a Run's terminal ``status`` is, for a rule: a timeout's cancel, a lost last Attempt."""
    from edge_runtime.contract.runs import AttemptStatus, RunStatus
    from edge_runtime.contract.schedules import TIMEOUT_REASON

    if status == RunStatus.CANCELLED:
        return Outcome.TIMEOUT if cancel_reason == TIMEOUT_REASON else Outcome.CANCELLED
    if status == RunStatus.FAILED and last_attempt_status == AttemptStatus.LOST:
        return Outcome.LOST
    return Outcome(status)


# ----------------------------------------------------------------------------- coalescing


class CoalesceStep(enum.Enum):
    SEND_NOW = "send_now"  # no window open: a message of its own, due now, opening a window
    COUNT = "count"  # a summary is waiting: one more in its count
    OPEN_SUMMARY = "open_summary"  # inside a window with no summary yet: a summary due at its end


def coalesce_step(now_ms: int, *, window_ends_at_ms: int | None, summary_waiting: bool) -> CoalesceStep:
    """What a match does, given the newest row of its rule and source: the window it opened
    (None: no row yet) and whether a summary is still unsent and untried."""
    if window_ends_at_ms is None or now_ms >= window_ends_at_ms:
        return CoalesceStep.SEND_NOW
    return CoalesceStep.COUNT if summary_waiting else CoalesceStep.OPEN_SUMMARY


# ----------------------------------------------------------------------------- records

class Channel(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A channel with its secret parameters: for the sender only, never printed."""

    id: str
    name: str
    kind: ChannelKind
    params: dict[str, str]
    secret_params: dict[str, str]

    def param(self, key: str, default: str = "") -> str:
        return self.secret_params.get(key) or self.params.get(key) or default


class ClaimedMessage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An outbox row a sender holds the lease of (its owner and ``tries`` fence the result)."""

    id: str
    idempotency_key: str
    tries: int
    channel_id: str
    channel_name: str
    run_id: str | None
    outcome: Outcome | None
    title: str | None
    body: str | None
    coalesced: int
    since_ms: int | None
    created_at_ms: int






class ChannelRecord(msgspec.Struct, rename="camel", frozen=True, kw_only=True, omit_defaults=True,
                    gc=False):
    name: str
    kind: ChannelKind
    #: Plain parameters as given; secret ones by name only, their values as ``***``.
    params: dict[str, str]
    secret_params: list[str]
    created_at_ms: int
    default_on: list[Outcome] | None = None


class OutboxRecord(msgspec.Struct, rename="camel", frozen=True, kw_only=True, omit_defaults=True,
                   gc=False):
    id: str
    channel: str
    status: OutboxStatus
    tries: int
    created_at_ms: int
    next_at_ms: int
    run_id: str | None = None
    outcome: Outcome | None = None
    title: str | None = None
    #: A summary's count: the matches since ``since_ms`` it stands for.
    coalesced: int = 0
    since_ms: int | None = None
    sent_at_ms: int | None = None
    last_error: str | None = None
    lease_owner: str | None = None
    lease_expires_at_ms: int | None = None


class NotificationStore(Protocol):
    """Channels, rules and the outbox, as both stores keep them (``Store.notifications``): the
    ``notify`` commands, ``schedule add|edit --notify``, ``show`` and the service's sender use it.
    The rows of a Run's end are written by the store itself, inside the transaction that ends it."""

    def add_channel(self, name: str, kind: str, params: dict[str, str],
                    secret_params: dict[str, str]) -> ChannelRecord: ...
    def remove_channel(self, name: str) -> None: ...
    def channel(self, name: str) -> Channel:
        """With its secrets: for sending only, never printed."""
        ...
    def channel_by_id(self, channel_id: str) -> Channel | None: ...
    def list_channels(self) -> list[ChannelRecord]: ...
    def secret_values(self) -> list[str]:
        """What every output masks (``secret_forms`` of every secret parameter)."""
        ...
    def rules_of(self, schedule_id: str | None) -> list[NotifyRule]: ...
    def set_rules(self, schedule_id: str | None, new_rules: list[NotifyRule]) -> list[NotifyRule]: ...
    def enqueue_message(self, title: str, body: str, channel_names: list[str] | None, *,
                        attempt_id: str | None = None) -> list[OutboxRecord]:
        """``attempt_id``: a task's own message, taken only while that Attempt runs, as its Run's,
        at most ``MAX_TASK_MESSAGES`` per channel (the Local store; the cluster refuses it)."""
        ...
    def outbox_row(self, outbox_id: str) -> OutboxRecord: ...
    def list_outbox(self, *, limit: int = 50, run_id: str | None = None,
                    status: OutboxStatus | None = None) -> list[OutboxRecord]: ...
    def next_due_at_ms(self) -> int | None: ...
    def claim_due(self, owner: str, *, limit: int = 4) -> list[ClaimedMessage]: ...
    def record_sent(self, message: ClaimedMessage, owner: str) -> bool: ...
    def record_failure(self, message: ClaimedMessage, owner: str, error: str, *,
                       retryable: bool) -> OutboxStatus | None: ...


def check_message(title: str, body: str) -> None:
    """A message of its own (``notify send``, from the CLI or a task through the service).

    Raises:
        NotifyMessageError: the title is empty, too long or holds a control character, or the body is too long.
    """
    if not title.strip() or len(title) > MAX_TITLE_CHARS:
        raise NotifyMessageError(f"the title must be 1..{MAX_TITLE_CHARS} characters; nothing queued")
    if len(body.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        raise NotifyMessageError(f"the body is longer than {MAX_BODY_BYTES} bytes; nothing queued")
    if any(ord(c) < 32 for c in title):
        raise NotifyMessageError("the title holds a control character; nothing queued")
