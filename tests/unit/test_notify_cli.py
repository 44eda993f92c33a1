"""``edge-runtime notify``: secret parameters kept out of argv (stdin, the terminal) and out of
every output; rules given to schedules and the device; the outbox listed."""

from __future__ import annotations

import io
import json
import sys

import pytest

from edge_runtime.cli.main import main

TOKEN = "bot-token-0123456789-abcdef"


@pytest.fixture
def db(tmp_path) -> str:
    path = str(tmp_path / "e.db")
    assert main(["--db", path, "migrate"]) == 0
    return path


def _run(capsys, *argv: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_a_secret_from_stdin_is_stored_unshown_and_without_a_warning(db, capsys, monkeypatch) -> None:
    capsys.readouterr()
    code, out, err = _run(capsys, "--db", db, "notify", "channel", "add", "telegram", "--name", "tg", "--param",
                          "chat_id=42", "--secret-param", "token", "--stdin", stdin=f"token={TOKEN}\n",
                          monkeypatch=monkeypatch)
    assert (code, out, err) == (0, "channel tg added (telegram)\n", "")
    for argv in (["notify", "channel", "list"], ["notify", "channel", "list", "--json"]):
        code, out, _ = _run(capsys, "--db", db, *argv)
        assert code == 0 and TOKEN not in out and "tg" in out
    assert json.loads(_run(capsys, "--db", db, "notify", "channel", "list", "--json")[1])[0]["secretParams"] == ["token"]


def test_a_secret_in_argv_is_taken_with_a_warning(db, capsys) -> None:
    code, _, err = _run(capsys, "--db", db, "notify", "channel", "add", "telegram", "--name", "tg", "--param",
                        "chat_id=1", "--param", f"token={TOKEN}")
    assert code == 0 and "visible to every local user" in err


def test_a_secret_without_a_value_and_without_a_terminal_is_a_usage_error(db, capsys, monkeypatch) -> None:
    code, _, err = _run(capsys, "--db", db, "notify", "channel", "add", "telegram", "--name", "tg", "--param",
                        "chat_id=1", "--secret-param", "token", stdin="", monkeypatch=monkeypatch)
    assert code == 2 and "no value" in err
    assert _run(capsys, "--db", db, "notify", "channel", "list")[1] == ""  # nothing stored


def test_rules_for_the_device_and_a_schedule(db, capsys) -> None:
    _run(capsys, "--db", db, "notify", "channel", "add", "ntfy", "--name", "n", "--secret-param", "topic=alerts-123")
    assert _run(capsys, "--db", db, "notify", "default", "n")[1] == "n:on=failed,timeout,lost\n"
    code, out, _ = _run(capsys, "--db", db, "schedule", "add", "--notify", "n:on=all", "@daily", "--", "true")
    schedule_id = out.strip()
    assert code == 0
    assert "notify     n:on=all" in _run(capsys, "--db", db, "schedule", "show", schedule_id)[1]
    code, _, err = _run(capsys, "--db", db, "schedule", "add", "--notify", "n:on=sometimes", "@daily", "--", "true")
    assert code == 1 and "NOTIFY_INVALID_RULE" in err
    assert len(_run(capsys, "--db", db, "schedule", "list", "--json")[1].split('"id"')) == 2  # nothing added
    assert _run(capsys, "--db", db, "notify", "default", "--none")[1] == "no default rule\n"


def test_notify_send_queues_and_lists(db, capsys) -> None:
    _run(capsys, "--db", db, "notify", "channel", "add", "ntfy", "--name", "n", "--secret-param", "topic=alerts-123")
    code, out, err = _run(capsys, "--db", db, "notify", "send", "hello", "world", "--channel", "n")
    assert code == 0 and out.endswith("queued for n\n") and "no service is running" in err
    listed = _run(capsys, "--db", db, "notify", "list", "--json")[1]
    [row] = json.loads(listed)
    assert (row["channel"], row["status"], row["title"], row["tries"]) == ("n", "pending", "hello", 0)
    code, _, err = _run(capsys, "--db", db, "notify", "send", "hello")
    assert code == 1 and "NOTIFY_CHANNEL_NOT_FOUND" in err  # no channel named, no default rule
