"""What each notification channel sends: the message's text, the provider's request, and what its
answer means (docs/notifications.md). Pure: no I/O; the sender (``service/notify_sender.py``)
sends what this builds through a transport (``service/notify_transport.py``).

Each request follows the provider's documented API (the parameters QingLong's notify.py and
notify.ts use), with its base URL overridable (``server``, ``origin``, ``api_host``) so that a
self-hosted server and the tests' local receivers work. A message is masked first, then cut to
the channel's limit, then quoted into the request: masking after quoting would miss a value that
quoting changed, and a cut first could leave a fragment of a secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Callable
from urllib.parse import quote, urlencode

import msgspec

from edge_runtime.contract.notifications import (
    BODY_LIMIT_BYTES,
    Channel,
    ChannelKind,
    InvalidNotifyChannelError,
    Outcome,
)

_json = msgspec.json.encode
_json_decode = msgspec.json.decode

#: Sent with every HTTP request: the outbox row's key, the same on every try, so a receiver that
#: honours it drops a repeat (a try whose answer was lost to a crash or a dropped uplink).
IDEMPOTENCY_HEADER = "Idempotency-Key"
USER_AGENT = "edge-runtime-notify"


class HttpRequest(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes


class MailRequest(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    #: ``smtps://host:port`` (TLS from the start) or ``smtp://host:port``.
    url: str
    #: STARTTLS required (``smtp://`` upgraded); False only for ``security=none``.
    require_tls: bool
    user: str
    password: str
    mail_from: str
    recipients: list[str]
    message: bytes


Request = HttpRequest | MailRequest


# ----------------------------------------------------------------------------- the message


def cut_utf8(text: str, limit: int, *, keep_end: bool = False) -> str:
    """``text`` in at most ``limit`` UTF-8 bytes, never splitting a character; its end when
    ``keep_end`` (a log's last lines matter most)."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    piece = data[len(data) - limit:] if keep_end else data[:limit]
    return piece.decode("utf-8", "ignore")


def duration_text(ms: int) -> str:
    seconds = max(0, ms) // 1000
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def local_time_text(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


class MessageText(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    title: str
    #: The lines before the log (task, status, exit, duration).
    head: str
    #: The end of the log, already masked.
    log_tail: str = ""


def run_message(*, task: str, outcome: Outcome, exit_code: int | None, duration_ms: int | None, run_id: str,
                log_tail: str, coalesced: int = 0, since_ms: int | None = None) -> MessageText:
    """A Run's end as a message; a summary (``coalesced`` > 0) says how many more there were since when."""
    if coalesced:
        plural = "s" if coalesced > 1 else ""
        title = f"{task}: {coalesced} more notification{plural} ({outcome.value})"
        head = (f"{coalesced} more end{plural} of {task} matched since {local_time_text(since_ms or 0)}; "
                f"the latest: {outcome.value}")
    else:
        title = f"{task}: {outcome.value}"
        head = f"Task: {task}\nStatus: {outcome.value}"
    lines = [head]
    if exit_code is not None:
        lines.append(f"Exit: {exit_code}")
    if duration_ms is not None:
        lines.append(f"Duration: {duration_text(duration_ms)}")
    lines.append(f"Run: {run_id}")
    return MessageText(title=title, head="\n".join(lines), log_tail=log_tail)


def fit(message: MessageText, kind: ChannelKind) -> tuple[str, str]:
    """The title and body cut to the channel's limit: the head whole where it fits, then as much
    of the log's end as is left."""
    limit = BODY_LIMIT_BYTES[kind]
    title = cut_utf8(message.title, 200)
    head = cut_utf8(message.head, limit)
    if not message.log_tail:
        return title, head
    room = limit - len(head.encode()) - len("\n\n--- end of log ---\n")
    if room <= 0:
        return title, head
    return title, f"{head}\n\n--- end of log ---\n{cut_utf8(message.log_tail, room, keep_end=True)}"


# ----------------------------------------------------------------------------- signatures


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """DingTalk's robot signature: HMAC-SHA256 keyed with the secret over ``timestamp\\nsecret``,
    base64, then URL-encoded (the ``sign`` query parameter)."""
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return quote(base64.b64encode(digest).decode(), safe="")


def feishu_sign(secret: str, timestamp_s: int) -> str:
    """Feishu's bot signature: HMAC-SHA256 keyed with ``timestamp\\nsecret`` over an empty
    message, base64 (the ``sign`` field of the body, beside ``timestamp`` in seconds)."""
    digest = hmac.new(f"{timestamp_s}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


# ----------------------------------------------------------------------------- requests


def _base(value: str, default: str) -> str:
    return (value or default).rstrip("/")


def _json_post(url: str, payload: object, key: str, *, extra: list[tuple[str, str]] | None = None) -> HttpRequest:
    headers = [("Content-Type", "application/json; charset=utf-8"), (IDEMPOTENCY_HEADER, key), *(extra or [])]
    return HttpRequest(method="POST", url=url, headers=headers, body=_json(payload))


def _form_post(url: str, fields: dict[str, str], key: str) -> HttpRequest:
    return HttpRequest(method="POST", url=url, headers=[("Content-Type", "application/x-www-form-urlencoded"),
                                                        (IDEMPOTENCY_HEADER, key)],
                       body=urlencode(fields).encode())


def _webhook(ch: Channel, title: str, body: str, key: str, now_ms: int, status: str, run_id: str) -> HttpRequest:
    method = (ch.param("method") or "POST").upper()
    if method not in ("POST", "PUT"):
        raise InvalidNotifyChannelError(f"webhook method {method!r}: POST or PUT")
    content_type = ch.param("content_type", "application/json")
    values = {"title": title, "content": body, "status": status, "run": run_id, "id": key}
    template = ch.param("body")
    if template:
        is_json = "json" in content_type
        quoted = (lambda v: _json(v).decode()[1:-1]) if is_json else (lambda v: v)
        text = re.sub(r"\$(title|content|status|run|id)", lambda m: quoted(values[m.group(1)]), template)
        data = text.encode()
    else:
        data = _json(values)
    headers = [("Content-Type", content_type), (IDEMPOTENCY_HEADER, key), ("X-Edge-Runtime-Message-Id", key)]
    for line in ch.param("headers").splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep or not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", name.strip()):
            raise InvalidNotifyChannelError("webhook headers: one 'Name: value' a line")
        headers.append((name.strip(), value.strip()))
    return HttpRequest(method=method, url=ch.param("url"), headers=headers, body=data)


def _serverchan_url(ch: Channel) -> str:
    key = ch.param("key")
    numbered = re.match(r"^sctp(\d+)t", key, re.IGNORECASE)
    if numbered:
        return f"{_base(ch.param('server'), f'https://{numbered.group(1)}.push.ft07.com')}/send/{key}.send"
    return f"{_base(ch.param('server'), 'https://sctapi.ftqq.com')}/{key}.send"


def _feishu_url(ch: Channel) -> str:
    key = ch.param("key")
    if key.startswith(("http://", "https://")):
        return key
    return f"{_base(ch.param('origin'), 'https://open.feishu.cn')}/open-apis/bot/v2/hook/{key}"


def _ntfy(ch: Channel, title: str, body: str, key: str) -> HttpRequest:
    extra: list[tuple[str, str]] = []
    if ch.param("token"):
        extra.append(("Authorization", f"Bearer {ch.param('token')}"))
    elif ch.param("username"):
        pair = f"{ch.param('username')}:{ch.param('password')}".encode()
        extra.append(("Authorization", f"Basic {base64.b64encode(pair).decode()}"))
    payload = {"topic": ch.param("topic"), "title": title, "message": body,
               "priority": int(ch.param("priority") or 3)}
    # ntfy's JSON publishing: POST to the server's root, the topic in the body (never in the URL).
    return _json_post(_base(ch.param("server"), "https://ntfy.sh"), payload, key, extra=extra)


def _int_param(ch: Channel, name: str, default: int, low: int, high: int) -> int:
    text = ch.param(name)
    if not text:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise InvalidNotifyChannelError(f"{ch.kind.value} {name} must be {low}..{high}")
    return int(text)


def mail_date(now_ms: int) -> str:
    """An RFC 5322 date, in UTC (English day and month names, whatever the locale)."""
    t = time.gmtime(now_ms / 1000)
    days = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
    months = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
    return f"{days[t.tm_wday]}, {t.tm_mday:02d} {months[t.tm_mon - 1]} {t.tm_year} {t.tm_hour:02d}:{t.tm_min:02d}:" \
           f"{t.tm_sec:02d} +0000"


def _header_word(text: str) -> str:
    """A header value, RFC 2047-encoded when it is not plain ASCII."""
    if text.isascii() and "\n" not in text and "\r" not in text:
        return text
    return f"=?UTF-8?B?{base64.b64encode(text.encode()).decode()}?="


_ADDRESS = re.compile(r"[^\s<>,;\"]+@[^\s<>,;\"]+")


def _email(ch: Channel, title: str, body: str, key: str, now_ms: int) -> MailRequest:
    security = ch.param("security", "tls")
    if security not in ("tls", "starttls", "none"):
        raise InvalidNotifyChannelError("email security: tls, starttls or none")
    port = _int_param(ch, "port", {"tls": 465, "starttls": 587, "none": 25}[security], 1, 65535)
    sender = ch.param("from")
    recipients = [r.strip() for r in ch.param("to").split(",") if r.strip()]
    for address in (sender, *recipients):
        if not _ADDRESS.fullmatch(address):
            raise InvalidNotifyChannelError(f"email address {address!r} is not user@host")
    encoded = base64.encodebytes(body.encode()).decode().replace("\n", "\r\n")
    message = (f"From: {sender}\r\nTo: {', '.join(recipients)}\r\nSubject: {_header_word(title)}\r\n"
               f"Date: {mail_date(now_ms)}\r\nMessage-ID: <{key}@edge-runtime>\r\nMIME-Version: 1.0\r\n"
               f"Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n{encoded}")
    scheme = "smtps" if security == "tls" else "smtp"
    return MailRequest(url=f"{scheme}://{ch.param('host')}:{port}", require_tls=security == "starttls",
                       user=ch.param("user"), password=ch.param("password"), mail_from=sender,
                       recipients=recipients, message=message.encode())


def build_request(ch: Channel, title: str, body: str, *, key: str, now_ms: int, status: str = "",
                  run_id: str = "") -> Request:
    """The provider's request for one message (``title`` and ``body`` already masked and cut).

    Raises:
        InvalidNotifyChannelError: a parameter the provider cannot take.
    """
    kind = ch.kind
    text = f"{title}\n\n{body}"
    if kind is ChannelKind.WEBHOOK:
        return _webhook(ch, title, body, key, now_ms, status, run_id)
    if kind is ChannelKind.BARK:
        payload = {"device_key": ch.param("key"), "title": title, "body": body}
        for name in ("sound", "group", "icon", "level", "url"):
            if ch.param(name):
                payload[name] = ch.param(name)
        return _json_post(f"{_base(ch.param('server'), 'https://api.day.app')}/push", payload, key)
    if kind is ChannelKind.TELEGRAM:
        url = f"{_base(ch.param('api_host'), 'https://api.telegram.org')}/bot{ch.param('token')}/sendMessage"
        return _json_post(url, {"chat_id": ch.param("chat_id"), "text": text, "disable_web_page_preview": True}, key)
    if kind is ChannelKind.WECOM:
        origin = _base(ch.param("origin"), "https://qyapi.weixin.qq.com")
        url = f"{origin}/cgi-bin/webhook/send?key={quote(ch.param('key'), safe='')}"
        return _json_post(url, {"msgtype": "text", "text": {"content": text}}, key)
    if kind is ChannelKind.DINGTALK:
        origin = _base(ch.param("origin"), "https://oapi.dingtalk.com")
        url = f"{origin}/robot/send?access_token={quote(ch.param('token'), safe='')}"
        if ch.param("secret"):
            url += f"&timestamp={now_ms}&sign={dingtalk_sign(ch.param('secret'), now_ms)}"
        return _json_post(url, {"msgtype": "text", "text": {"content": text}}, key)
    if kind is ChannelKind.FEISHU:
        payload: dict[str, object] = {"msg_type": "text", "content": {"text": text}}
        if ch.param("secret"):
            seconds = now_ms // 1000
            payload = {"timestamp": str(seconds), "sign": feishu_sign(ch.param("secret"), seconds), **payload}
        return _json_post(_feishu_url(ch), payload, key)
    if kind is ChannelKind.SERVERCHAN:
        return _form_post(_serverchan_url(ch), {"title": title, "desp": body}, key)
    if kind is ChannelKind.PUSHPLUS:
        payload = {"token": ch.param("token"), "title": title, "content": body,
                   "template": ch.param("template", "txt")}
        for name in ("topic", "channel"):
            if ch.param(name):
                payload[name] = ch.param(name)
        return _json_post(f"{_base(ch.param('server'), 'https://www.pushplus.plus')}/send", payload, key)
    if kind is ChannelKind.NTFY:
        return _ntfy(ch, title, body, key)
    if kind is ChannelKind.GOTIFY:
        payload = {"title": title, "message": body, "priority": _int_param(ch, "priority", 5, 0, 10)}
        return _json_post(f"{_base(ch.param('server'), '')}/message", payload, key,
                          extra=[("X-Gotify-Key", ch.param("token"))])
    if kind is ChannelKind.EMAIL:
        return _email(ch, title, body, key, now_ms)
    raise InvalidNotifyChannelError(f"no request for {kind.value}")


# ----------------------------------------------------------------------------- answers


class Verdict(msgspec.Struct, frozen=True, gc=False):
    ok: bool
    retryable: bool = False
    reason: str = ""


def _json_field(body: bytes) -> dict:
    try:
        value = _json_decode(body)
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


_ACCEPTS: dict[ChannelKind, Callable[[dict], bool]] = {
    ChannelKind.BARK: lambda a: a.get("code") == 200,
    ChannelKind.TELEGRAM: lambda a: a.get("ok") is True,
    ChannelKind.WECOM: lambda a: a.get("errcode") == 0,
    ChannelKind.DINGTALK: lambda a: a.get("errcode") == 0,
    ChannelKind.FEISHU: lambda a: a.get("code") == 0 or a.get("StatusCode") == 0,
    ChannelKind.SERVERCHAN: lambda a: a.get("code") == 0 or (isinstance(a.get("data"), dict)
                                                             and a["data"].get("errno") == 0),
    ChannelKind.PUSHPLUS: lambda a: a.get("code") == 200,
    ChannelKind.GOTIFY: lambda a: isinstance(a.get("id"), int),
}


def judge(kind: ChannelKind, status: int, body: bytes) -> Verdict:
    """What the provider's answer means: taken, worth another try (429, 5xx), or refused for good
    (any other 4xx, or a 2xx whose body says it was not taken: a bad token)."""
    snippet = body[:200].decode("utf-8", "replace")
    if status == 429 or status >= 500:
        return Verdict(False, True, f"HTTP {status}: {snippet}")
    if not 200 <= status < 300:
        return Verdict(False, False, f"HTTP {status}: {snippet}")
    accepts = _ACCEPTS.get(kind)
    if accepts is not None and not accepts(_json_field(body)):
        return Verdict(False, False, f"HTTP {status} but not accepted: {snippet}")
    return Verdict(True)

