"""A task's notify capability (docs/notifications.md, "A script's own message"): its layout read
as hostile input, the token derived per Attempt under the device key, the key file's rules, the
request's bounds, the variable reserved, and the token masked by its shape in every output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edge_runtime.contract.environment import name_problem
from edge_runtime.contract.redaction import MASK, Redactor
from edge_runtime.contract.task_notify import NOTIFY_VARIABLE, TOKEN_CHARS, TOKEN_PREFIX, Capability, is_token
from edge_runtime.local import notify_handoff as wire

ATTEMPT = "01a24b11-7189-7b9c-9bac-001425f1defb"
MARKER = (b"\n[edge-runtime: output truncated: 4242 bytes left out between the first 2048 bytes "
          b"and the last 2048 bytes]\n")


def _token(attempt: str = ATTEMPT, key: bytes = b"k" * wire.KEY_BYTES) -> str:
    return wire.derive_token(key, attempt)


def test_a_token_is_one_attempts_under_one_key_and_has_the_masked_shape() -> None:
    token = _token()
    assert is_token(token) and len(token) == TOKEN_CHARS and token.startswith(TOKEN_PREFIX)
    assert _token("another-attempt") != token
    assert _token(key=b"j" * wire.KEY_BYTES) != token


def test_the_variable_round_trips_and_anything_else_is_refused_without_showing_the_token() -> None:
    token = _token()
    capability = Capability("@edge-runtime-notify.abc", ATTEMPT, token)
    parsed = Capability.parse(capability.text())
    assert parsed is not None and (parsed.address, parsed.attempt_id, parsed.token) == (capability.address, ATTEMPT, token)
    assert token not in repr(parsed)
    for text in ("", capability.text() + ";x", "2" + capability.text()[1:],
                 capability.text().replace("@edge", "/tmp/edge"),  # only an abstract name
                 capability.text().replace(ATTEMPT, "../../x"),
                 capability.text()[:-1]):  # a token one character short
        assert Capability.parse(text) is None, text


def test_the_device_key_is_made_once_0600_and_an_unsafe_file_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "edge-runtime.db"
    key = wire.load_or_create_key(db)
    path = Path(wire.key_path(db))
    assert len(key) == wire.KEY_BYTES and (path.stat().st_mode & 0o777) == 0o600
    assert wire.load_or_create_key(db) == key  # a restart derives the same tokens
    capabilities = wire.TaskCapabilities(db)
    parsed = Capability.parse(capabilities.variable(ATTEMPT))
    assert parsed is not None and capabilities.opens(ATTEMPT, parsed.token)
    assert not capabilities.opens(ATTEMPT, TOKEN_PREFIX + "A" * 43) and not capabilities.opens("other", parsed.token)
    path.chmod(0o644)
    with pytest.raises(wire.NotifyKeyError, match="readable by it alone"):
        wire.load_or_create_key(db)
    path.chmod(0o600)
    path.write_bytes(b"short")
    with pytest.raises(wire.NotifyKeyError, match="not 32"):
        wire.load_or_create_key(db)
    path.unlink()
    os.symlink(tmp_path / "elsewhere", path)
    with pytest.raises(wire.NotifyKeyError):
        wire.load_or_create_key(db)


def test_a_request_is_bounded_and_only_one_of_this_layout_is_read() -> None:
    message = wire.TaskMessage(ATTEMPT, _token(), "t", "b", ["hook"])
    decoded = wire.TaskMessage.decode(message.encode())
    assert decoded is not None and (decoded.title, decoded.body, decoded.channels) == ("t", "b", ["hook"])
    with pytest.raises(wire.NotifyError, match="larger than"):
        wire.TaskMessage(ATTEMPT, _token(), "t", "x" * wire.MAX_REQUEST_BYTES, []).encode()
    assert wire.TaskMessage.decode(b"edge-runtime-submit/1\0a\0b\0c\0d") is None
    assert wire.TaskMessage.decode(message.encode().replace(b"\0t\0", b"\0\xff\0")) is None
    for attempt, token in (("x" * 37, _token()), ("a\nb", _token()), (ATTEMPT, "not-a-token")):
        assert wire.TaskMessage.decode(wire.TaskMessage(attempt, token, "t", "b", []).encode()) is None


def test_the_variable_is_the_services_own() -> None:
    assert name_problem(NOTIFY_VARIABLE) is not None


def test_a_token_is_masked_in_text_values_and_a_log_split_across_reads() -> None:
    token = _token()
    redactor = Redactor([])
    assert redactor.text(f"cap=1;@x;{ATTEMPT};{token}!") == f"cap=1;@x;{ATTEMPT};{MASK}!"
    assert redactor.value({"env": [token]}) == {"env": [MASK]}
    data = f"before {token} after\n".encode()
    for split in range(1, len(data)):
        masker = redactor.log()
        assert masker.feed(data[:split]) + masker.feed(data[split:]) + masker.flush() == f"before {MASK} after\n".encode()


def test_neither_side_of_a_token_a_cut_split_shows_more_than_a_few_characters() -> None:
    token = _token().encode()
    body = len(token) - len(TOKEN_PREFIX)
    for before in range(0, body + 1):  # body characters before the cut
        at = len(TOKEN_PREFIX) + before
        masker = Redactor([]).log()
        shown = masker.feed(b"line " + token[:at] + MARKER + token[at:] + b" end\n") + masker.flush()
        head, _, tail = shown.partition(MARKER)
        head_shown = before if token[len(TOKEN_PREFIX):at] and head.endswith(token[len(TOKEN_PREFIX):at]) else 0
        tail_shown = body - before if token[at:] and tail.startswith(token[at:]) else 0
        assert head_shown + tail_shown <= 14, (before, shown)  # of 43: at least 29 characters (174 bits) unknown
        assert tail.endswith(b" end\n")
    masker = Redactor([]).log(cut_at_start=True)  # a stored copy that kept only the end
    shown = masker.feed(token[20:] + b" end\n") + masker.flush()
    assert token[20:] not in shown and shown.endswith(b" end\n")
