"""Hardening (docs/storage.md, opening a database): hostile or foreign database files, read
commands that never write, a ``-wal`` of another database, and private file modes. Through
the real CLI where it can be (``main`` in-process, the same code path as the executable)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import apsw
import pytest

from edge_runtime.cli.main import main
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.migrations import apply_pending, known_migrations

READ_COMMANDS = (
    ["list"], ["show", "r1"], ["events", "r1"], ["logs", "r1"], ["dispatch", "show", "r1"], ["check"],
    ["schedule", "list"], ["schedule", "show", "s1"],
)
WRITE_COMMANDS = (["submit", "--", "true"], ["cancel", "r1"], ["migrate"], ["schedule", "add", "@daily", "--", "true"],
                  ["schedule", "pause", "s1"])


def _cli(capsys: pytest.CaptureFixture[str], db_path: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--db", str(db_path), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _files(db_path: Path) -> dict[str, str]:
    """Every file of the database (main, -wal, -shm, -journal) with the hash of its bytes."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(db_path.parent.iterdir())
        if p.name.startswith(db_path.name)
    }


def _wal_files(db_path: Path) -> dict[str, str]:
    """:func:`_files` for a WAL database: a read-only open may add an empty ``-wal`` and a ``-shm``
    index beside it (SQLite needs them to read; README), never a byte of the database."""
    return {
        name: digest for name, digest in _files(db_path).items()
        if not name.endswith("-shm") and not (name.endswith("-wal") and digest == hashlib.sha256(b"").hexdigest())
    }


def _raw(db_path: Path, *statements: str) -> None:
    connection = apsw.Connection(str(db_path))
    try:
        for statement in statements:
            connection.execute(statement)
    finally:
        connection.close()


def _migrated(db_path: Path) -> None:
    open_database(db_path, clock=ManualClock(1_700_000_000_000)).close()


# ------------------------------------------------------------------ point 6: reads never write


def test_read_commands_refuse_another_applications_database_leaving_it_byte_for_byte(capsys, db_path) -> None:
    _raw(db_path, "CREATE TABLE contacts (name TEXT, phone TEXT)", "INSERT INTO contacts VALUES ('a', '1')")
    before = _files(db_path)
    for argv in (*READ_COMMANDS, *WRITE_COMMANDS):
        code, out, err = _cli(capsys, db_path, *argv)
        assert (code, out) == (1, ""), argv
        assert err.startswith(f"Error: database {db_path} is not an edge-runtime database"), (argv, err)
        assert err.count("\n") == 1 and "table contacts" in err
        assert _files(db_path) == before, argv  # no byte changed, no -wal or -shm left beside it


def test_check_reports_pending_migrations_without_applying_them_and_reads_refuse(capsys, db_path) -> None:
    known = known_migrations()
    connection = apsw.Connection(str(db_path))
    apply_pending(connection, str(db_path), list(known[:-1]), ManualClock(1_700_000_000_000))
    connection.close()
    before = _wal_files(db_path)
    code, out, _ = _cli(capsys, db_path, "check")
    assert code == 1
    assert f"FAIL migrations: pending: {known[-1].id} (run `edge-runtime migrate`)" in out
    assert out.endswith("NOT READY\n")
    code, out, err = _cli(capsys, db_path, "list")
    assert (code, out) == (1, "")
    assert f"needs migration {known[-1].id}" in err and "run `edge-runtime migrate` first" in err
    assert _wal_files(db_path) == before
    assert _cli(capsys, db_path, "migrate")[0] == 0
    code, out, _ = _cli(capsys, db_path, "check")
    assert code == 0 and out.endswith("ready\n")


def test_read_commands_neither_create_nor_initialise_an_empty_file(capsys, db_path) -> None:
    db_path.touch()
    for argv in READ_COMMANDS:
        code, _, err = _cli(capsys, db_path, *argv)
        assert code == 1 and "holds no edge-runtime data yet" in err, argv
    assert _files(db_path) == {db_path.name: hashlib.sha256(b"").hexdigest()}


# ------------------------------------------------------------------ point 5: hostile schema

_TAMPERING = {
    "trigger rewriting a submitted command": (
        "CREATE TRIGGER evil AFTER INSERT ON runs BEGIN "
        "UPDATE runs SET command = '[\"sh\",\"-c\",\"id > /tmp/pwned\"]' WHERE id = new.id; END"
    ),
    "endless recursive trigger": "CREATE TRIGGER loop BEFORE INSERT ON run_events BEGIN "
    "INSERT INTO run_events SELECT * FROM run_events; END",
    "view": "CREATE VIEW slow AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i FROM n",
    "index": "CREATE INDEX extra ON runs (name)",
    "dropped column": "ALTER TABLE run_attempts DROP COLUMN exit_code",
    "dropped table": "DROP TABLE device_events",
}


@pytest.mark.parametrize("change", list(_TAMPERING), ids=list(_TAMPERING))
def test_a_schema_the_migrations_did_not_produce_is_refused_by_every_command(capsys, db_path, change) -> None:
    _migrated(db_path)
    _raw(db_path, _TAMPERING[change])
    before = _wal_files(db_path)
    for argv in (*READ_COMMANDS, *WRITE_COMMANDS):
        code, out, err = _cli(capsys, db_path, *argv)
        assert (code, out) == (1, ""), argv
        assert "does not have the schema its migrations produce" in err, (argv, err)
        assert _wal_files(db_path) == before, argv


def test_connections_distrust_the_schema_and_run_defensive(db_path) -> None:
    with open_database(db_path, clock=ManualClock(1)) as db:
        assert db.connection.execute("PRAGMA trusted_schema").fetchone()[0] == 0
        assert db.connection.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, -1) == 1
        db.connection.execute("PRAGMA writable_schema = ON")  # ignored in defensive mode
        with pytest.raises(apsw.Error):
            db.connection.execute("UPDATE sqlite_schema SET sql = 'x' WHERE name = 'runs'")


def test_the_expected_schema_is_derived_from_the_migration_files(tmp_path, monkeypatch) -> None:
    """A migration added later needs no hand-kept list: its objects are expected once applied."""
    from edge_runtime.local import database as database_module

    directory = tmp_path / "migrations"
    directory.mkdir()
    for migration in known_migrations():
        (directory / f"{migration.id}.sql").write_text(migration.sql)
    # Numbered after this build's last automatic migration (9000 and up are opt-in layout steps).
    later = f"{int(known_migrations()[-1].id[:4]) + 1:04d}_later.sql"
    (directory / later).write_text("CREATE TABLE later (id INTEGER PRIMARY KEY) STRICT;")
    monkeypatch.setattr(database_module, "known_migrations", lambda: known_migrations.__wrapped__(directory))
    db_path = tmp_path / "edge-runtime.db"
    _migrated(db_path)
    _migrated(db_path)  # reopened: the new table is expected, not refused
    _raw(db_path, "DROP TABLE later")
    with pytest.raises(Exception, match=r"missing: table later"):
        _migrated(db_path)


# ------------------------------------------------------------------ point 7: a foreign -wal


def test_a_wal_of_another_database_is_refused_before_it_is_merged(capsys, tmp_path) -> None:
    other = tmp_path / "other.db"
    connection = apsw.Connection(str(other))
    # A page size other than the one edge-runtime gives a new file (NEW_FILE_PAGE_SIZE, 512 B).
    connection.execute("PRAGMA page_size = 4096").fetchall()
    connection.execute("PRAGMA journal_mode = WAL").fetchall()
    connection.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    connection.execute("CREATE TABLE x (y); INSERT INTO x VALUES (1)")
    foreign_wal = Path(f"{other}-wal").read_bytes()
    connection.close()
    db_path = tmp_path / "edge-runtime.db"  # restored from a backup, beside the old -wal
    _migrated(db_path)
    Path(f"{db_path}-wal").write_bytes(foreign_wal)
    before = _wal_files(db_path)
    for argv in (["check"], ["list"], ["submit", "--", "true"]):
        code, _, err = _cli(capsys, db_path, *argv)
        assert code == 1 and f"{db_path}-wal belongs to another database (page size 4096" in err, argv
        assert _wal_files(db_path) == before


# ------------------------------------------------------------------ point 9: private files


def test_the_database_and_its_wal_and_shm_are_created_0600_whatever_the_umask(capsys, tmp_path) -> None:
    db_path = tmp_path / "state" / "edge-runtime.db"
    old = os.umask(0)
    try:
        assert _cli(capsys, db_path, "submit", "--", "true")[0] == 0
        with open_database(db_path, create=False) as db:
            with db.write():  # -wal and -shm exist while a connection is open
                pass
            modes = {
                name: stat.S_IMODE(os.stat(f"{db_path}{name}").st_mode) for name in ("", "-wal", "-shm")
            }
    finally:
        os.umask(old)
    assert modes == {"": 0o600, "-wal": 0o600, "-shm": 0o600}
    assert stat.S_IMODE(db_path.parent.stat().st_mode) == 0o700


def test_a_database_path_that_is_not_a_regular_file_is_refused(capsys, tmp_path) -> None:
    journal = Path("/dev/null-journal")
    existed = journal.exists()
    for argv in (["submit", "--", "true"], ["migrate"], ["list"]):
        code, _, err = _cli(capsys, Path("/dev/null"), *argv)
        assert code == 1 and err == "Error: /dev/null is not a regular file; it was not modified [LOCAL_DATABASE_UNUSABLE]\n"
    assert journal.exists() == existed
    code, _, err = _cli(capsys, tmp_path, "migrate")  # a directory
    assert code == 1 and "is not a regular file" in err


# ------------------------------------------------------------------ point 12: a hot journal

_INTERRUPTED_WRITER = """
import apsw, os, sys
c = apsw.Connection(sys.argv[1])
c.execute("CREATE TABLE t (x); INSERT INTO t VALUES (1)")
c.execute("PRAGMA cache_size = 1")
c.execute("BEGIN")
for _ in range(300):
    c.execute("INSERT INTO t VALUES (randomblob(5000))")
os._exit(0)  # dies mid-transaction: the -journal left behind is hot
"""


def test_a_hot_journal_blocks_reads_and_is_rolled_back_by_a_refused_write(capsys, db_path) -> None:
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", _INTERRUPTED_WRITER, str(db_path)], check=True, timeout=60)
    assert Path(f"{db_path}-journal").stat().st_size > 0
    before = _files(db_path)
    code, _, err = _cli(capsys, db_path, "list")
    assert code == 1 and "has an interrupted transaction in" in err and "it was not modified" in err
    assert _files(db_path) == before  # a read command cannot roll it back
    code, _, err = _cli(capsys, db_path, "migrate")
    assert code == 1 and "is not an edge-runtime database" in err
    assert "SQLite first rolled back the interrupted transaction" in err  # as the README says
    assert not Path(f"{db_path}-journal").exists()
