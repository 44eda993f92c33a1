"""``edge-runtime env`` on env entries (docs/environment.md): ``add`` prints the new id, ``list``
shows id, name, enabled, pinned, labels, remarks and the value or ``(secret)``, entries are named
by id (digits only) and variables by name, and a refused command writes nothing."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from edge_runtime.cli.main import main
from edge_runtime.contract.env_entries import MAX_ENV_STRING_BYTES, NewEnvEntry
from edge_runtime.local.database import open_database
from edge_runtime.local.environment import LocalEnvironmentRepository

COOKIE = "pt_key=AAQWE123RTY;pt_pin=ALICE99;"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as usage:
        code = usage.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def env(capsys, tmp_path):
    db = str(tmp_path / "e.db")

    def run(*argv: str) -> tuple[int, str, str]:
        return _cli(capsys, "--db", db, "env", *argv)

    run.db = db  # type: ignore[attr-defined]
    return run


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    monkeypatch.setattr(stream, "isatty", lambda: False)
    monkeypatch.setattr(sys, "stdin", stream)


def _rows(db: str) -> list[tuple]:
    with open_database(db, create=False) as opened:
        return opened.connection.execute("SELECT * FROM env_entries ORDER BY id").fetchall()


def test_add_prints_the_new_id_and_list_shows_every_field(env, monkeypatch) -> None:
    assert env("add", "JD_COOKIE", "it's \"1\" 值", "--remarks", "account 1", "--label", "jd", "--label", "main") == (
        0, "1\n", "")
    assert env("add", "JD_COOKIE", "two", "--disabled")[1] == "2\n"
    _stdin(monkeypatch, f"{COOKIE}\n".encode())
    assert env("add", "JD_COOKIE", "--secret", "--stdin")[1:] == ("3\n", "")
    assert env("pin", "3") == (0, "entry 3 pinned\n", "")
    code, out, _ = env("list")
    assert code == 0 and out.splitlines() == [
        "3  JD_COOKIE  enabled  pinned  labels=-  remarks=''  value=*** (secret)",
        "1  JD_COOKIE  enabled  -  labels=jd,main  remarks='account 1'  value='it\\'s \"1\" 值'",
        "2  JD_COOKIE  disabled  -  labels=-  remarks=''  value='two'",
    ]
    assert COOKIE not in out
    listed = json.loads(env("list", "--json")[1])
    assert [(e["id"], e.get("value")) for e in listed] == [(3, None), (1, "it's \"1\" 值"), (2, "two")]
    assert json.loads(env("list", "--search", "alice99", "--json")[1])[0]["id"] == 3  # found, not shown
    assert COOKIE not in env("list", "--search", "alice99")[1]
    assert [e["id"] for e in json.loads(env("list", "--name", "JD_COOKIE", "--json")[1])] == [3, 1, 2]
    with open_database(env.db, create=False) as opened:
        assert LocalEnvironmentRepository(opened).task_values() == {"JD_COOKIE": f"{COOKIE}&it's \"1\" 值"}


def test_add_json_prints_the_entry(env) -> None:
    code, out, _ = env("add", "A", "v", "--json", "--label", "x")
    entry = json.loads(out)
    assert code == 0 and (entry["id"], entry["name"], entry["value"], entry["labels"], entry["enabled"]) == (
        1, "A", "v", ["x"], True)


def test_edit_enable_disable_move_and_remove_by_id_or_name(env, monkeypatch) -> None:
    for value in ("1", "2", "3"):
        env("add", "A", value)
    assert env("edit", "2", "two", "--remarks", "r", "--label", "l") == (0, "entry 2 changed\n", "")
    assert env("edit", "2", "--no-labels", "--name", "B")[0] == 0
    _stdin(monkeypatch, b"now-a-secret\n")
    assert env("edit", "2", "--stdin", "--secret")[0] == 0
    edited = json.loads(env("list", "--name", "B", "--json")[1])[0]
    assert (edited["name"], edited["secret"], edited["remarks"], edited["labels"]) == ("B", True, "r", [])
    assert env("disable", "1", "3") == (0, "entry 1 disabled\nentry 3 disabled\n", "")
    assert env("enable", "3")[1] == "entry 3 enabled\n"
    assert env("move", "3", "--before", "1") == (0, "entry 3 moved before 1\n", "")
    assert env("move", "3", "--end")[1] == "entry 3 moved to the end\n"
    assert [e["id"] for e in json.loads(env("list", "--json")[1])] == [1, 2, 3]
    assert env("remove", "1", "3") == (0, "entry 1 removed\nentry 3 removed\n", "")
    assert json.loads(env("remove", "B", "--json")[1]) == {"name": "B", "removed": [2]}
    assert env("list") == (0, "", "")


def test_ids_and_names_are_told_apart_and_a_bad_id_is_a_usage_error(env) -> None:
    env("add", "A", "1")
    for argv in (("remove", "A", "B"), ("remove", "1", "A"), ("remove", "1A"), ("edit", "x"), ("enable", "0"), ("move", "1"),
                 ("move", "1", "--before", "1x"), ("edit", "1", "--label", "l", "--no-labels")):
        code, out, err = env(*argv)
        assert (code, out) == (2, ""), argv
        assert err.startswith("Error: ") and "(try: edge-runtime env" in err, argv
    code, _, err = env("remove", "A-B")
    assert code == 1 and "[INVALID_VARIABLE]" in err
    assert len(_rows(env.db)) == 1


def test_a_refused_command_writes_nothing(env) -> None:
    env("add", "A", "1")
    env("add", "A", "2")
    before = _rows(env.db)
    code, _, err = env("disable", "1", "9")
    assert (code, err) == (1, "Error: no env entry with id 9; nothing was changed [ENV_ENTRY_NOT_FOUND]\n")
    big = "x" * (MAX_ENV_STRING_BYTES - len("A=1&2&\0"))
    code, _, err = env("add", "A", big + "x")
    assert code == 1 and err.startswith(f"Error: A would be {MAX_ENV_STRING_BYTES + 1} bytes in a task's environment")
    assert err.rstrip().endswith("[VARIABLE_TOO_LONG]")
    assert json.loads(env("add", "A", big + "x", "--json")[2])["error"]["code"] == "VARIABLE_TOO_LONG"
    assert env("edit", "1", "--secret")[2].endswith("[SECRET_TOO_SHORT]\n")
    assert _rows(env.db) == before
    assert env("add", "A", big)[1] == "3\n"  # exactly the limit


def test_a_secret_in_remarks_is_masked_in_every_output(env) -> None:
    env("add", "TOKEN", "hunter2-secret", "--secret")
    env("add", "NOTE", "x", "--remarks", "copy of hunter2-secret")
    outputs = [env("list")[1], env("list", "--json")[1], env("edit", "2", "--remarks", "hunter2-secret again",
                                                            "--json")[1], env("pin", "2", "--json")[1]]
    for out in outputs:
        assert "hunter2-secret" not in out and "***" in out, out


def test_the_store_at_its_previous_migration_keeps_its_variables(tmp_path: Path) -> None:
    """A database at the migration before env entries, with variables, migrated: one entry each,
    in name order, secrets kept secret."""
    import apsw

    from edge_runtime.local import migrations
    from edge_runtime.local.clock import ManualClock

    db_path = tmp_path / "old.db"
    connection = apsw.Connection(str(db_path))
    connection.execute("PRAGMA journal_mode = WAL")
    earlier = [m for m in migrations.known_migrations() if m.id < "0014"]
    migrations.apply_pending(connection, str(db_path), earlier, ManualClock(1))
    for name, value, secret, at in (("ZED", "z", 0, 5), ("COOKIE", f"{COOKIE}&pt_key=B;pt_pin=b;", 1, 7),
                                    ("ALPHA", "", 0, 9)):
        connection.execute("INSERT INTO shared_env (name, value, secret, updated_at_ms) VALUES (?, ?, ?, ?)",
                           (name, value, secret, at))
    connection.close()
    with open_database(db_path, create=False, clock=ManualClock(100)) as db:
        assert db.pending == ()
        repo = LocalEnvironmentRepository(db)
        listed = repo.list()
        assert [(e.id, e.name, e.position, e.secret, e.enabled, e.created_at_ms) for e in listed] == [
            (1, "ALPHA", 1, False, True, 9), (2, "COOKIE", 2, True, True, 7), (3, "ZED", 3, False, True, 5)]
        assert repo.task_values() == {"ALPHA": "", "COOKIE": f"{COOKIE}&pt_key=B;pt_pin=b;", "ZED": "z"}
        assert repo.secret_values() == [f"{COOKIE}&pt_key=B;pt_pin=b;"]
        tables = {row[0] for row in db.connection.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        assert "shared_env" not in tables and "env_entries" in tables
        assert [e.id for e in repo.add([NewEnvEntry(name="NEW", value="n")])] == [4]
