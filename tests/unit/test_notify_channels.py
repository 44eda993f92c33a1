"""Every channel's request, sent to a local receiver standing in for its provider: the request's
shape and signature as the provider documents them, certificates checked against a CA the
channel names, secrets kept out of argv and out of the message."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import subprocess
import threading
import time
import urllib.parse

import pytest

from edge_runtime.contract.notifications import BODY_LIMIT_BYTES, Channel, ChannelKind, NotifySendError, Outcome
from edge_runtime.contract.notify_channels import (
    MessageText,
    dingtalk_sign,
    feishu_sign,
    fit,
    run_message,
)
from edge_runtime.contract.redaction import Redactor
from edge_runtime.service import notify_transport
from edge_runtime.service.notify_sender import read_log_tail, send_message
from edge_runtime.service.notify_transport import Transports, detect
from tests.support.notify_receiver import Receiver, self_signed

SECRET = "s3cret-token-0123456789"
NOW_MS = 1_765_000_000_123
TEXT = MessageText(title="nightly: failed", head="Task: nightly\nStatus: failed\nExit: 2", log_tail="boom\n")
CURL = detect()
BUILTIN = Transports(curl=None, curl_protocols=[], curl_tls=None, uclient_fetch=None, python_ssl=True)
needs_curl = pytest.mark.skipif(CURL.curl is None, reason="needs curl")


def _channel(kind: ChannelKind, params: dict[str, str], secrets: dict[str, str]) -> Channel:
    return Channel(id="c1", name="c", kind=kind, params=params, secret_params=secrets)


def _send(transports, kind, params, secrets, *, text=TEXT, key="edge-runtime-key-1"):
    with Receiver(kind.value) as receiver:
        filled = {k: v.replace("{url}", receiver.url) for k, v in params.items()}
        secrets = {k: v.replace("{url}", receiver.url) for k, v in secrets.items()}
        send_message(transports, _channel(kind, filled, secrets), text, key=key, now_ms=NOW_MS, status="failed",
                     run_id="run-1")
    [request] = receiver.received
    return request


@pytest.fixture(params=[pytest.param("curl", marks=needs_curl), "builtin"])
def transports(request):
    return CURL if request.param == "curl" else BUILTIN


def test_telegram_posts_sendmessage_with_the_token_in_the_path(transports) -> None:
    request = _send(transports, ChannelKind.TELEGRAM, {"api_host": "{url}", "chat_id": "42"}, {"token": SECRET})
    assert (request.method, request.path) == ("POST", f"/bot{SECRET}/sendMessage")
    body = request.json()
    assert body["chat_id"] == "42" and body["text"].startswith("nightly: failed\n\nTask: nightly")
    assert request.headers["Idempotency-Key"] == "edge-runtime-key-1"


def test_dingtalk_signs_as_its_documentation_shows(transports) -> None:
    request = _send(transports, ChannelKind.DINGTALK, {"origin": "{url}"}, {"token": "acc", "secret": "SECabc"})
    path, _, query = request.path.partition("?")
    params = urllib.parse.parse_qs(query)
    assert path == "/robot/send" and params["access_token"] == ["acc"] and params["timestamp"] == [str(NOW_MS)]
    # DingTalk's documented recipe: HmacSHA256(key=secret, "timestamp\nsecret"), base64, quote_plus
    string_to_sign = f"{NOW_MS}\nSECabc"
    expected = base64.b64encode(hmac.new(b"SECabc", string_to_sign.encode(), hashlib.sha256).digest())
    assert params["sign"] == [expected.decode()]  # parse_qs undid the URL-encoding
    assert urllib.parse.quote_plus(expected) in query
    assert request.json() == {"msgtype": "text", "text": {"content": "nightly: failed\n\nTask: nightly\nStatus: "
                                                                     "failed\nExit: 2\n\n--- end of log ---\nboom\n"}}


def test_feishu_signs_as_its_documentation_shows(transports) -> None:
    request = _send(transports, ChannelKind.FEISHU, {"origin": "{url}"}, {"key": "hook-id", "secret": "fs-secret"})
    assert request.path == "/open-apis/bot/v2/hook/hook-id"
    body = request.json()
    timestamp = str(NOW_MS // 1000)
    # Feishu's documented recipe: HMAC-SHA256 keyed with "timestamp\nsecret" over nothing, base64
    expected = base64.b64encode(hmac.new(f"{timestamp}\nfs-secret".encode(), digestmod=hashlib.sha256).digest())
    assert (body["timestamp"], body["sign"]) == (timestamp, expected.decode())
    assert body["msg_type"] == "text" and body["content"]["text"].startswith("nightly: failed")


def test_the_signatures_match_independent_vectors() -> None:
    assert dingtalk_sign("SEC1", 1600000000000) == urllib.parse.quote_plus(base64.b64encode(
        hmac.new(b"SEC1", b"1600000000000\nSEC1", hashlib.sha256).digest()))
    assert feishu_sign("k", 1600000000) == base64.b64encode(
        hmac.new(b"1600000000\nk", b"", hashlib.sha256).digest()).decode()


@pytest.mark.parametrize("kind, params, secrets, path, check", [
    (ChannelKind.BARK, {"server": "{url}", "group": "edge"}, {"key": SECRET}, "/push",
     lambda b: b["device_key"] == SECRET and b["title"] == "nightly: failed" and b["group"] == "edge"),
    (ChannelKind.WECOM, {"origin": "{url}"}, {"key": SECRET}, f"/cgi-bin/webhook/send?key={SECRET}",
     lambda b: b["msgtype"] == "text" and b["text"]["content"].startswith("nightly: failed")),
    (ChannelKind.PUSHPLUS, {"server": "{url}"}, {"token": SECRET}, "/send",
     lambda b: b["token"] == SECRET and b["template"] == "txt" and b["content"].startswith("Task: nightly")),
    (ChannelKind.NTFY, {"server": "{url}", "priority": "4"}, {"topic": "alerts-x", "token": "tk_abc"}, "/",
     lambda b: b == {"topic": "alerts-x", "title": "nightly: failed", "priority": 4,
                     "message": "Task: nightly\nStatus: failed\nExit: 2\n\n--- end of log ---\nboom\n"}),
    (ChannelKind.GOTIFY, {"server": "{url}"}, {"token": SECRET}, "/message",
     lambda b: b["title"] == "nightly: failed" and b["priority"] == 5),
])
def test_json_channels(transports, kind, params, secrets, path, check) -> None:
    request = _send(transports, kind, params, secrets)
    assert request.method == "POST" and request.path == path
    assert request.headers["Content-Type"].startswith("application/json")
    assert check(request.json())
    if kind is ChannelKind.NTFY:
        assert request.headers["Authorization"] == "Bearer tk_abc"
    if kind is ChannelKind.GOTIFY:
        assert request.headers["X-Gotify-Key"] == SECRET  # the token in a header, not in the URL


def test_serverchan_posts_a_form_to_its_key_url(transports) -> None:
    request = _send(transports, ChannelKind.SERVERCHAN, {"server": "{url}"}, {"key": "SCT123abc"})
    assert request.path == "/SCT123abc.send"
    form = urllib.parse.parse_qs(request.body.decode())
    assert form["title"] == ["nightly: failed"] and form["desp"][0].startswith("Task: nightly")
    numbered = _send(transports, ChannelKind.SERVERCHAN, {"server": "{url}"}, {"key": "sctp42tABC"})
    assert numbered.path == "/send/sctp42tABC.send"


def test_webhook_template_headers_and_idempotency_key(transports) -> None:
    template = '{"text": "$title", "detail": "$content", "state": "$status"}'
    request = _send(transports, ChannelKind.WEBHOOK, {"body": template, "method": "PUT"},
                    {"url": "{url}/hook?token=" + SECRET, "headers": "Authorization: Bearer xyz\nX-Extra: 1"})
    assert (request.method, request.path) == ("PUT", f"/hook?token={SECRET}")
    body = request.json()  # $content holds line breaks: escaped for JSON, so the body still parses
    assert body["text"] == "nightly: failed" and body["state"] == "failed" and "\nExit: 2" in body["detail"]
    assert request.headers["Authorization"] == "Bearer xyz" and request.headers["X-Extra"] == "1"
    assert request.headers["Idempotency-Key"] == request.headers["X-Edge-Runtime-Message-Id"] == "edge-runtime-key-1"


def test_a_refusal_is_final_and_an_outage_is_retryable(transports) -> None:
    with Receiver("telegram") as receiver:
        channel = _channel(ChannelKind.TELEGRAM, {"api_host": receiver.url, "chat_id": "1"}, {"token": SECRET})
        receiver.answers = [(401, b'{"ok":false,"description":"Unauthorized"}'), (502, b"bad gateway"),
                            (200, b'{"ok":false}')]
        outcomes = []
        for _ in range(3):
            with pytest.raises(NotifySendError) as caught:
                send_message(transports, channel, TEXT, key="k", now_ms=NOW_MS)
            outcomes.append(caught.value.retryable)
    assert outcomes == [False, True, False]
    with pytest.raises(NotifySendError) as refused:  # nobody listens: worth another try later
        send_message(transports, channel, TEXT, key="k", now_ms=NOW_MS)
    assert refused.value.retryable


def test_https_checks_the_certificate_against_the_channels_ca(tmp_path, transports) -> None:
    cert, key = self_signed(tmp_path)
    with Receiver("gotify", tls=(cert, key)) as receiver:
        trusted = _channel(ChannelKind.GOTIFY, {"server": receiver.url, "ca_file": str(cert)}, {"token": SECRET})
        send_message(transports, trusted, TEXT, key="k", now_ms=NOW_MS)
        untrusted = _channel(ChannelKind.GOTIFY, {"server": receiver.url}, {"token": SECRET})
        with pytest.raises(NotifySendError, match="certificate") as caught:
            send_message(transports, untrusted, TEXT, key="k", now_ms=NOW_MS)
    assert len(receiver.received) == 1 and not caught.value.retryable


def test_without_any_https_transport_a_channel_fails_with_the_reason() -> None:
    bare = Transports(curl=None, curl_protocols=[], curl_tls=None, uclient_fetch="/bin/uclient-fetch", python_ssl=False)
    channel = _channel(ChannelKind.TELEGRAM, {"chat_id": "1"}, {"token": SECRET})
    with pytest.raises(NotifySendError, match="install curl") as caught:
        send_message(bare, channel, TEXT, key="k", now_ms=NOW_MS)
    assert caught.value.code == "NOTIFY_NO_TRANSPORT"
    assert "uclient-fetch" in bare.describe() and "no TLS" in bare.describe()


@needs_curl
def test_curls_argv_never_holds_a_secret(monkeypatch) -> None:
    seen: list[list[str]] = []
    real_run = subprocess.run

    def spy(argv, *args, **kwargs):
        seen.append(list(argv))
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(notify_transport.subprocess, "run", spy)
    request = _send(CURL, ChannelKind.TELEGRAM, {"api_host": "{url}", "chat_id": "42"}, {"token": SECRET})
    assert request.path == f"/bot{SECRET}/sendMessage"
    assert seen == [[CURL.curl, "-q", "-K", "-"]]


@needs_curl
def test_the_process_list_never_shows_a_secret_during_a_send() -> None:
    """Read /proc while curl waits for a provider that does not answer yet."""
    with Receiver("telegram") as receiver:
        hold = threading.Event()
        original = receiver.server.RequestHandlerClass.do_POST

        def slow(handler):
            hold.wait(10)
            original(handler)

        receiver.server.RequestHandlerClass.do_POST = slow
        channel = _channel(ChannelKind.TELEGRAM, {"api_host": receiver.url, "chat_id": "1"}, {"token": SECRET})
        sender = threading.Thread(target=send_message, args=(CURL, channel, TEXT), kwargs={"key": "k", "now_ms": 1})
        sender.start()
        try:
            command_lines = []
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not any(b"curl" in c for c in command_lines):
                command_lines = []
                for pid in os.listdir("/proc"):
                    if pid.isdigit():
                        try:
                            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                                command_lines.append(handle.read())
                        except OSError:
                            continue
                time.sleep(0.05)
        finally:
            hold.set()
            sender.join()
    assert any(b"curl" in c for c in command_lines)
    assert not any(SECRET.encode() in c for c in command_lines)


def test_masking_comes_before_cutting() -> None:
    log_secret = "ZZ-account-secret-value-1234"
    redactor = Redactor([log_secret])
    tail = "x" * 3000 + f"token={log_secret}\n" + "y" * 10
    text = run_message(task="t", outcome=Outcome.FAILED, exit_code=1, duration_ms=61_000, run_id="r",
                       log_tail=redactor.text(tail))
    for kind in ChannelKind:
        title, body = fit(text, kind)
        assert log_secret[:8] not in body and "Duration: 1m01s" in body
        assert len(body.encode()) <= BODY_LIMIT_BYTES[kind]


def test_the_log_tail_is_masked_even_where_the_read_cut_a_secret(tmp_path) -> None:
    secret = "abcdefghijklmnop-SECRET"
    log = tmp_path / "log"
    # the secret straddles the point where the tail read starts: its end must not show
    log.write_bytes(b"a" * 100 + secret.encode() + b"\n" + b"b" * 8100)
    tail = read_log_tail(str(log), Redactor([secret]), limit=2048)
    assert "SECRET" not in tail and len(tail) <= 2048


@needs_curl
@pytest.mark.parametrize("security", ["none", "starttls"])
def test_email_goes_through_curls_smtp(tmp_path, security) -> None:
    from tests.support.notify_receiver import SmtpReceiver

    cert, key = self_signed(tmp_path)
    with SmtpReceiver(tls=(cert, key) if security == "starttls" else None) as server:
        channel = _channel(ChannelKind.EMAIL, {"host": "127.0.0.1", "port": str(server.port), "security": security,
                                               "from": "router@example.com", "to": "me@example.com, you@example.com",
                                               "user": "router", "ca_file": str(cert)}, {"password": SECRET})
        send_message(CURL, channel, TEXT, key="edge-runtime-key-9", now_ms=NOW_MS)
    [mail] = server.mails
    assert mail["from"] == "<router@example.com>" and mail["rcpt"] == ["<me@example.com>", "<you@example.com>"]
    assert mail["login"] == [b"router", SECRET.encode()] and mail["tls"] is (security == "starttls")
    headers, _, body = mail["message"].partition(b"\r\n\r\n")
    assert b"Subject: nightly: failed" in headers and b"Message-ID: <edge-runtime-key-9@edge-runtime>" in headers
    assert base64.b64decode(body).decode().startswith("Task: nightly")


@needs_curl
def test_email_starttls_is_required_not_hoped_for(tmp_path) -> None:
    """A server that offers no STARTTLS gets no mail (and no password) when the channel asks for it."""
    from tests.support.notify_receiver import SmtpReceiver

    with SmtpReceiver() as server:
        channel = _channel(ChannelKind.EMAIL, {"host": "127.0.0.1", "port": str(server.port), "security": "starttls",
                                               "from": "a@b.c", "to": "d@e.f", "user": "u"}, {"password": SECRET})
        with pytest.raises(NotifySendError):
            send_message(CURL, channel, TEXT, key="k", now_ms=NOW_MS)
    assert server.mails == []


def test_check_names_the_transports_and_is_not_ready_without_https_for_a_channel(tmp_path, capsys, monkeypatch) -> None:
    import json

    from edge_runtime.cli.main import main

    db = str(tmp_path / "e.db")
    assert main(["--db", db, "migrate"]) == 0
    capsys.readouterr()
    main(["--db", db, "check", "--json"])
    [line] = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == "notify_transport"]
    assert line["ok"] and "built-in HTTP" in line["detail"]
    from edge_runtime.local.database import open_database
    from edge_runtime.local.notifications import LocalNotificationRepository

    with open_database(db) as opened:
        LocalNotificationRepository(opened).add_channel("tg", "telegram", {"chat_id": "1"}, {"token": SECRET})
    bare = Transports(curl=None, curl_protocols=[], curl_tls=None, uclient_fetch="/usr/bin/uclient-fetch",
                      python_ssl=False)
    monkeypatch.setattr(notify_transport, "detect", lambda path=None: bare)
    capsys.readouterr()
    assert main(["--db", db, "check", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    [line] = [c for c in report["checks"] if c["name"] == "notify_transport"]
    assert not line["ok"] and "install curl" in line["detail"] and "uclient-fetch" in line["detail"]
    assert not report["ok"]
