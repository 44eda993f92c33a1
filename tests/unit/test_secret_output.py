"""Secrets kept out of every output, in-process (docs/environment.md): the minimum length and what
``check`` says of shorter secrets already stored; ``list``, ``events`` and ``show`` masking before
they quote or encode; the service's own log; and every panel answer."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.cli.main import main
from edge_runtime.contract.redaction import MIN_SECRET_LENGTH, Redactor
from edge_runtime.local.database import open_database
from edge_runtime.local.environment import LocalEnvironmentRepository
from edge_runtime.service.journal import Journal, JournalSecrets

QUOTED = "it's \"quoted\" \\ and long"  # a secret shell quoting and JSON both change
ACCOUNTS = ("pt_key=AAQWE123RTY;pt_pin=ALICE99;", "pt_key=ZXCV456BNMQ;pt_pin=BOBBY77;")


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as usage:  # argparse's way out of a usage error
        code = usage.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes, *, tty: bool = False) -> None:
    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    monkeypatch.setattr(stream, "isatty", lambda: tty)
    monkeypatch.setattr(sys, "stdin", stream)


def _secrets(db: Path) -> dict[str, str]:
    with open_database(str(db), create=False) as opened:
        return LocalEnvironmentRepository(opened).task_values()


# ------------------------------------------------------------------ the minimum length


def test_a_secret_too_short_to_mask_is_refused_with_the_minimum(capsys, monkeypatch, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    _stdin(monkeypatch, b"1234\n")
    code, out, err = _cli(capsys, "--db", db, "env", "set", "PIN", "--secret", "--stdin", "--json")
    assert (code, out) == (1, "")
    error = json.loads(err)["error"]
    assert error["code"] == "SECRET_TOO_SHORT" and f"at least {MIN_SECRET_LENGTH}" in error["message"]
    assert "1234" not in err
    assert _secrets(tmp_path / "e.db") == {}


def test_a_secrets_short_parts_are_counted_on_stderr(capsys, monkeypatch, tmp_path) -> None:
    _stdin(monkeypatch, b"https://example.com/hook?token=abcdef123&v=2\n")
    code, _, err = _cli(capsys, "--db", str(tmp_path / "e.db"), "env", "set", "HOOK", "--secret", "--stdin")
    assert code == 0 and err.startswith("Warning: 1 of the 2 parts of HOOK") and "v=2" not in err


def test_check_names_a_secret_stored_before_the_minimum(capsys, tmp_path) -> None:
    db = tmp_path / "e.db"
    assert _cli(capsys, "--db", str(db), "env", "set", "GOOD", "long-enough-value", "--secret")[0] == 0
    code, out, _ = _cli(capsys, "--db", str(db), "check")
    assert "ok   secrets: 1 secrets, each at least 8 characters" in out
    with open_database(str(db), create=False) as opened:  # as an earlier release stored it
        opened.connection.execute("INSERT INTO env_entries (name, value, secret, remarks, enabled, position, pinned, "
                                  "labels, created_at_ms, updated_at_ms) VALUES ('OLD', '1234', 1, '', 1, 2, 0, '[]', "
                                  "1, 1)")
    code, out, _ = _cli(capsys, "--db", str(db), "check")
    assert code == 1 and ("FAIL secrets: 1 of 2 secrets shorter than 8 characters, too short to mask safely: "
                          "OLD (id 2)") in out
    assert "1234" not in out
    code, out, _ = _cli(capsys, "--db", str(db), "env", "list")
    assert "2  OLD  enabled  -  labels=-  remarks=''  value=*** (secret; shorter than 8 characters" in out
    assert json.loads(_cli(capsys, "--db", str(db), "env", "list", "--json")[1])[1] == {
        "id": 2, "name": "OLD", "secret": True, "remarks": "", "enabled": True, "position": 2, "pinned": False,
        "labels": [], "createdAtMs": 1, "updatedAtMs": 1, "tooShort": True}


# ------------------------------------------------------------------ masked before quoted, encoded or cut


def _with_secret(capsys, db: str, value: str) -> None:
    monkeypatch = pytest.MonkeyPatch()
    try:
        _stdin(monkeypatch, value.encode())
        assert _cli(capsys, "--db", db, "env", "set", "TOKEN", "--secret", "--stdin")[0] == 0
    finally:
        monkeypatch.undo()


def test_list_masks_a_command_before_quoting_and_cutting_it(capsys, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    _with_secret(capsys, db, QUOTED)
    assert _cli(capsys, "--db", db, "submit", "--name", QUOTED, "--", "echo", QUOTED)[0] == 0
    code, out, _ = _cli(capsys, "--db", db, "list")
    row = out.splitlines()[1]
    assert code == 0 and "echo '***'" in row and "quoted" not in row and "long" not in row


def test_events_mask_a_payload_before_encoding_it(capsys, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    _with_secret(capsys, db, QUOTED)
    run_id = _cli(capsys, "--db", db, "submit", "--", "true")[1].strip()
    assert _cli(capsys, "--db", db, "cancel", run_id, "--reason", f"because {QUOTED}")[0] == 0
    for extra in ((), ("--json",)):
        code, out, _ = _cli(capsys, "--db", db, "events", run_id, *extra)
        assert code == 0 and "because ***" in out and "quoted" not in out and "long" not in out


def test_show_masks_each_account_of_a_multi_account_secret(capsys, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    _with_secret(capsys, db, "&".join(ACCOUNTS))
    run_id = _cli(capsys, "--db", db, "submit", "--env", f"ONE={ACCOUNTS[0]}", "--", "echo", ACCOUNTS[1])[1].strip()
    for extra in ((), ("--json",)):
        code, out, _ = _cli(capsys, "--db", db, "show", run_id, *extra)
        assert code == 0 and "***" in out and "ALICE" not in out and "BOBBY" not in out


# ------------------------------------------------------------------ the service's own log


def test_the_journal_masks_a_value_before_quoting_it() -> None:
    stream = io.StringIO()
    journal = Journal(stream)
    journal.mask_with(Redactor([QUOTED, "&".join(ACCOUNTS)]))
    journal.warning("attempt.not_started", detail=f"cannot start {QUOTED}", reason=f"x {ACCOUNTS[1]}", n=3)
    line = stream.getvalue()
    assert "quoted" not in line and "BOBBY" not in line
    assert 'detail="cannot start ***" reason="x ***" n=3' in line


class _Environment:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.secrets: list[str] = []
        self.secret_reads = 0

    def task_values(self) -> dict[str, str]:
        return dict(self.values)

    def secret_values(self) -> list[str]:
        self.secret_reads += 1
        return list(self.secrets)


def test_the_services_log_masks_the_secrets_an_attempt_was_given() -> None:
    stream = io.StringIO()
    journal = Journal(stream)
    environment = _Environment()
    secrets = JournalSecrets(journal, lambda: environment)
    secrets.refresh()
    environment.values, environment.secrets = {"TOKEN": "fresh-secret-value"}, ["fresh-secret-value"]
    assert secrets.task_values() == {"TOKEN": "fresh-secret-value"}  # changed since the last read: mask renewed
    reads = environment.secret_reads
    secrets.task_values()
    assert environment.secret_reads == reads  # unchanged: no second read
    journal.info("attempt.finished", reason="printed fresh-secret-value")
    assert "fresh-secret-value" not in stream.getvalue() and 'reason="printed ***"' in stream.getvalue()
    assert JournalSecrets(journal, lambda: None).task_values() == {}


# ------------------------------------------------------------------ the panel's answers


class _Config:
    worker_id = "w"


@pytest.fixture
def api(tmp_path: Path) -> Any:
    from edge_runtime.local.clock import SystemClock
    from edge_runtime.local.store import LocalStore
    from edge_runtime.panel.api import Api

    db = open_database(str(tmp_path / "e.db"))
    store = LocalStore(db, str(tmp_path / "e.db"), SystemClock())
    store.environment.set("TOKEN", "&".join(ACCOUNTS), secret=True)
    yield Api(store, db_path=str(tmp_path / "e.db"), log_dir=tmp_path / "logs", config=_Config())
    store.close()


def test_every_panel_answer_is_masked_whichever_handler_made_it(api) -> None:
    first, second = ACCOUNTS
    body = json.dumps({"command": ["echo", first], "name": second, "env": {"ONE": first}}).encode()
    answers = [api.answer("submit", None, {}, body)]
    run_id = answers[0][1]["id"]
    answers.append(api.answer("cancel", run_id, {}, json.dumps({"reason": f"rotate {second}"}).encode()))
    schedule = json.dumps({"cron": "@daily", "command": ["echo", first], "env": {"TWO": second}}).encode()
    answers.append(api.answer("add_schedule", None, {}, schedule))
    schedule_id = answers[-1][1]["id"]
    for handler, item in (("pause_schedule", schedule_id), ("resume_schedule", schedule_id),
                          ("list_schedules", None), ("list_runs", None), ("run_detail", run_id)):
        answers.append(api.answer(handler, item, {}, b""))
    for status, value in answers:
        shown = json.dumps(value)
        assert status in (200, 201) and "***" in shown and "ALICE" not in shown and "BOBBY" not in shown, value


def test_a_panel_error_message_is_masked_too(api) -> None:
    from edge_runtime.contract.errors import EdgeRuntimeError

    class Quoting(EdgeRuntimeError, code="TEST_QUOTING"):
        pass

    assert api.error_message(Quoting(f"refused: {ACCOUNTS[0]}")) == "refused: ***"
