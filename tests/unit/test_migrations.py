"""The migrations runner: checksums, refusals that write nothing, atomic migrations, concurrent opens."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from edge_runtime.local import database as database_module
from edge_runtime.local import migrations as migrations_module
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import MigrationError, open_database
from edge_runtime.local.migrations import known_migrations, migrations_dir

FIRST = "0001_legacy_layout"


def _next_id(name: str) -> str:
    """An id after every migration of this build, so the tests keep working as migrations are added."""
    return f"{int(known_migrations()[-1].id[:4]) + 1:04d}_{name}"


FUTURE = _next_id("from_the_future")
NOTES = _next_id("add_notes")


@pytest.fixture
def use_migrations(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], None]:
    """Make ``open_database`` use the migrations in a given directory (read afresh every open)."""

    def use(directory: Path) -> None:
        monkeypatch.setattr(database_module, "known_migrations", lambda: known_migrations.__wrapped__(directory))

    return use


@pytest.fixture
def migration_copy(tmp_path: Path) -> Path:
    """A private copy of this build's migrations directory."""
    directory = tmp_path / "migrations"
    shutil.copytree(migrations_dir(), directory)
    return directory


def _snapshot(db_path: Path) -> tuple[bytes, int]:
    """The database file's bytes and the WAL's size: a refused open must change neither.

    (The ``-wal``/``-shm`` files themselves may come and go with connections; a WAL that has no
    frames holds no write.)
    """
    wal = Path(f"{db_path}-wal")
    return db_path.read_bytes(), wal.stat().st_size if wal.exists() else 0


def _applied(db_path: Path) -> dict[str, str]:
    connection = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return dict(connection.execute("SELECT id, checksum FROM schema_migrations ORDER BY id").fetchall())
    finally:
        connection.close()


def _tables(db_path: Path) -> set[str]:
    connection = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {row[0] for row in connection.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    finally:
        connection.close()


def test_known_migrations_are_checksummed_files_in_order() -> None:
    known = known_migrations()
    assert [m.id for m in known][0] == FIRST
    assert [m.id for m in known] == sorted(m.id for m in known)
    for migration in known:
        data = (migrations_dir() / f"{migration.id}.sql").read_bytes()
        assert migration.checksum == hashlib.sha256(data).hexdigest()


def test_an_edited_applied_migration_is_refused_and_nothing_is_written(
    db_path: Path, clock: ManualClock, migration_copy: Path, use_migrations: Callable[[Path], None]
) -> None:
    open_database(db_path, clock=clock).close()
    stored = _applied(db_path)[FIRST]
    edited = migration_copy / f"{FIRST}.sql"
    edited.write_bytes(edited.read_bytes() + b"\n-- edited after release\n")
    new_checksum = hashlib.sha256(edited.read_bytes()).hexdigest()
    assert new_checksum != stored
    before = _snapshot(db_path)

    use_migrations(migration_copy)
    with pytest.raises(MigrationError) as caught:
        open_database(db_path, clock=clock)
    assert caught.value.code == "LOCAL_MIGRATION_REFUSED"
    message = str(caught.value)
    assert message == (
        f"migration {FIRST} applied to database {db_path} has checksum {stored}, but this build's file has "
        f"checksum {new_checksum}; applied migrations must never be edited."
    )
    assert _snapshot(db_path) == before


def test_a_database_from_a_newer_release_is_refused_and_nothing_is_written(
    db_path: Path, clock: ManualClock, migration_copy: Path, use_migrations: Callable[[Path], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (migration_copy / f"{FUTURE}.sql").write_text("CREATE TABLE future_things (id TEXT) STRICT;\n")
    use_migrations(migration_copy)
    open_database(db_path, clock=clock).close()
    assert set(_applied(db_path)) == {m.id for m in known_migrations()} | {FUTURE}
    before = _snapshot(db_path)

    monkeypatch.undo()  # back to this build's migrations
    with pytest.raises(MigrationError) as caught:
        open_database(db_path, clock=clock)
    message = str(caught.value)
    assert FUTURE in message and str(db_path) in message
    assert message.startswith(f"database {db_path} has migration {FUTURE} applied, which this build does not know")
    assert _snapshot(db_path) == before


def test_a_failing_migration_stays_pending_and_nothing_is_half_applied(
    db_path: Path, clock: ManualClock, migration_copy: Path, use_migrations: Callable[[Path], None]
) -> None:
    broken = migration_copy / f"{NOTES}.sql"
    broken.write_text(
        "CREATE TABLE run_notes (id TEXT PRIMARY KEY NOT NULL, note TEXT NOT NULL) STRICT;\n"
        "INSERT INTO run_notes (id, note) VALUES ('n1', 'first');\n"
        "INSERT INTO no_such_table VALUES (1);\n"
    )
    use_migrations(migration_copy)
    with pytest.raises(MigrationError) as caught:
        open_database(db_path, clock=clock)
    message = str(caught.value)
    assert message.startswith(f"migration {NOTES} failed on database {db_path}: ")
    assert "no_such_table" in message
    # The earlier migrations committed on their own; the failing one left no trace and stays pending.
    assert set(_applied(db_path)) == {m.id for m in known_migrations()}
    assert "run_notes" not in _tables(db_path)
    assert "runs" in _tables(db_path)

    # Fixed (it was never applied, so changing it is allowed), it applies on the next open.
    broken.write_text(
        "CREATE TABLE run_notes (id TEXT PRIMARY KEY NOT NULL, note TEXT NOT NULL) STRICT;\n"
        "INSERT INTO run_notes (id, note) VALUES ('n1', 'first');\n"
    )
    db = open_database(db_path, clock=clock)
    try:
        assert db.connection.execute("SELECT note FROM run_notes").fetchall() == [("first",)]
    finally:
        db.close()
    applied = _applied(db_path)
    assert set(applied) == {m.id for m in known_migrations()} | {NOTES}
    assert applied[NOTES] == hashlib.sha256(broken.read_bytes()).hexdigest()


def test_a_migration_with_row_returning_statements_runs_to_its_end(
    db_path: Path, clock: ManualClock, migration_copy: Path, use_migrations: Callable[[Path], None]
) -> None:
    (migration_copy / f"{NOTES}.sql").write_text(
        "CREATE TABLE run_notes (id TEXT PRIMARY KEY NOT NULL) STRICT;\n"
        "SELECT count(*) FROM runs;\n"
        "PRAGMA table_info(run_notes);\n"
        "CREATE TABLE run_note_tags (note_id TEXT NOT NULL REFERENCES run_notes (id)) STRICT;\n"
        "INSERT INTO run_notes (id) VALUES ('n1');\n"
    )
    use_migrations(migration_copy)
    open_database(db_path, clock=clock).close()
    assert {"run_notes", "run_note_tags"} <= _tables(db_path)
    connection = apsw.Connection(str(db_path))
    try:
        assert connection.execute("SELECT id FROM run_notes").fetchall() == [("n1",)]
    finally:
        connection.close()


def test_migrations_are_recorded_with_the_injected_clock(db_path: Path) -> None:
    open_database(db_path, clock=ManualClock(42)).close()
    connection = apsw.Connection(str(db_path))
    try:
        rows = connection.execute("SELECT applied_at_ms FROM schema_migrations").fetchall()
        assert rows == [(42,)] * len(known_migrations())
    finally:
        connection.close()


def test_reopening_applies_nothing_twice(db_path: Path, clock: ManualClock) -> None:
    open_database(db_path, clock=clock).close()
    first = _applied(db_path)
    clock.advance(1_000)
    open_database(db_path, clock=clock).close()
    assert _applied(db_path) == first


def test_misnamed_or_duplicate_migration_files_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "1_x.sql").write_text("")
    with pytest.raises(MigrationError, match=r"migration file 1_x.sql does not match NNNN_name.sql"):
        migrations_module.known_migrations.__wrapped__(bad)
    dup = tmp_path / "dup"
    dup.mkdir()
    (dup / "0001_a.sql").write_text("")
    (dup / "0001_b.sql").write_text("")
    with pytest.raises(MigrationError, match="two migration files share a number"):
        migrations_module.known_migrations.__wrapped__(dup)


_OPENER = textwrap.dedent(
    """
    import sys
    from edge_runtime.local.database import open_database
    path = sys.argv[1]
    print("ready", flush=True)  # imported: wait at the barrier until both children are here
    sys.stdin.readline()
    db = open_database(path)
    db.close()
    print("opened")
    """
)


@pytest.mark.parametrize("round_", range(4))
def test_two_processes_opening_a_fresh_file_concurrently_both_succeed(tmp_path: Path, round_: int) -> None:
    db_path = tmp_path / f"fresh-{round_}.db"
    procs = [
        subprocess.Popen([sys.executable, "-c", _OPENER, str(db_path)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    # A pipe barrier, not a wall-clock instant: both have imported before either opens the file.
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    for proc in procs:  # release both before waiting for either
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = [proc.communicate(timeout=60) for proc in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err
        assert out.strip() == "opened"
    assert set(_applied(db_path)) == {m.id for m in known_migrations()}


@pytest.mark.parametrize("status", ["dispatched", "blocked", "retry_wait"])
def test_a_terminal_dispatch_row_without_its_result_is_refused(db, status: str) -> None:
    """0005: the 0001 CHECKs let a NULL last_result through; the triggers do not."""
    sql = db.connection
    sql.execute("INSERT INTO runs (id, status, version, event_sequence, created_at_ms) VALUES ('r', 'running', 0, 0, 1)")
    sql.execute("INSERT INTO run_attempts (id, run_id, attempt, status, executor_type, created_at_ms) "
                "VALUES ('a', 'r', 1, 'running', 'local_process', 1)")
    next_at = 5 if status == "retry_wait" else None
    insert = ("INSERT INTO run_cancellation_dispatches (run_id, attempt_id, status, version, dispatch_count, "
              "next_attempt_at_ms, last_result, created_at_ms, updated_at_ms) VALUES ('r', 'a', ?, 1, 1, ?, ?, 1, 1)")
    with pytest.raises(apsw.ConstraintError, match="needs its last_result"):
        sql.execute(insert, (status, next_at, None))
    result = "termination_requested" if status == "dispatched" else "unsupported"
    sql.execute(insert, (status, next_at, result))
    with pytest.raises(apsw.ConstraintError, match="needs its last_result"):
        sql.execute("UPDATE run_cancellation_dispatches SET last_result = NULL WHERE run_id = 'r'")
