"""Opening checks only what costs the same at any size (docs/storage.md): the header, the page count
against the file, the schema against a digest shipped with the migrations; damage inside a page
is reported by the query that meets it, clearly, and by `check` (which reads every page)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from edge_runtime.cli.main import main
from edge_runtime.local import migrations
from edge_runtime.local.database import open_database
from edge_runtime.local.errors import DatabaseUnusableError, MigrationError
from tests.support.history import fill_history



@pytest.fixture
def filled(tmp_path: Path) -> Path:
    db_path = tmp_path / "edge-runtime.db"
    fill_history(db_path, 200)
    return db_path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _page_size(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[16:18], "big")


@pytest.mark.parametrize("read_only", [False, True], ids=["write", "read-only"])
def test_a_file_cut_short_on_a_page_boundary_is_refused_unmodified(filled: Path, read_only: bool) -> None:
    data = filled.read_bytes()
    filled.write_bytes(data[: len(data) - 3 * _page_size(filled)])
    before = _digest(filled)
    with pytest.raises(DatabaseUnusableError, match=r"is corrupt \(.*\); it was not modified. Run `edge-runtime check`"):
        open_database(filled, create=False, read_only=read_only)
    assert _digest(filled) == before


def test_a_file_that_is_not_whole_pages_is_refused(filled: Path) -> None:
    filled.write_bytes(filled.read_bytes()[:-100])
    with pytest.raises(DatabaseUnusableError, match="not a whole number of"):
        open_database(filled, create=False)


@pytest.mark.parametrize("offset, value", [(0, b"SQLite format 4\x00"), (16, b"\x03\x00")], ids=["magic", "page-size"])
def test_a_damaged_header_is_refused_unmodified(filled: Path, offset: int, value: bytes) -> None:
    data = bytearray(filled.read_bytes())
    data[offset:offset + len(value)] = value
    filled.write_bytes(bytes(data))
    before = _digest(filled)
    with pytest.raises(DatabaseUnusableError, match="not a usable edge-runtime database"):
        open_database(filled, create=False)
    assert _digest(filled) == before


def test_the_shipped_schema_digests_match_the_migration_files() -> None:
    from edge_runtime.local.schema_digests import SCHEMA_DIGESTS

    assert SCHEMA_DIGESTS == migrations.schema_digests(migrations.known_migrations()), (
        "run `.venv/bin/python build/schema_digests.py` after changing local_migrations/")


def test_an_intact_schema_is_verified_without_replaying_the_migrations(filled: Path, monkeypatch) -> None:
    def no_replay(applied):
        raise AssertionError("the migrations were replayed although the digest matched")

    monkeypatch.setattr(migrations, "expected_schema", no_replay)
    open_database(filled, create=False, read_only=True).close()
    open_database(filled, create=False).close()


def test_a_tampered_schema_is_refused_and_named(filled: Path) -> None:
    import apsw

    connection = apsw.Connection(str(filled))
    connection.execute("CREATE INDEX sneaky ON runs (name)")
    connection.close()
    with pytest.raises(MigrationError, match="not created by any migration: index sneaky"):
        open_database(filled, create=False, read_only=True)


def test_without_a_digest_for_its_migrations_the_schema_is_replayed_and_still_checked(filled: Path, monkeypatch) -> None:
    """A digest is only a shortcut: a file set it was not computed for (or none) replays."""
    monkeypatch.setattr(migrations, "SCHEMA_DIGESTS", {})
    open_database(filled, create=False, read_only=True).close()
    import apsw

    connection = apsw.Connection(str(filled))
    connection.execute("DROP INDEX runs_created")
    connection.close()
    with pytest.raises(MigrationError, match="missing: index runs_created"):
        open_database(filled, create=False, read_only=True)


def _damage_page(path: Path, table: str) -> None:
    with open_database(path, create=False, read_only=True) as db:
        root = db.connection.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,)).fetchone()[0]
    page = _page_size(path)
    data = bytearray(path.read_bytes())
    data[(root - 1) * page:(root - 1) * page + 64] = b"\xa5" * 64
    path.write_bytes(bytes(data))


def test_a_damaged_page_met_by_a_query_is_a_clear_error_pointing_to_check(filled: Path, capsys) -> None:
    _damage_page(filled, "runs")
    before = _digest(filled)
    assert main(["--db", str(filled), "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "damaged" in err and "edge-runtime check" in err, err
    assert "Traceback" not in err
    assert main(["--db", str(filled), "check"]) == 1
    out = capsys.readouterr().out
    assert "FAIL integrity" in out and "NOT READY" in out, out
    assert _digest(filled) == before


def test_a_database_at_the_latest_earlier_migration_is_upgraded_by_0008(tmp_path: Path) -> None:
    import apsw

    from edge_runtime.local.clock import ManualClock

    db_path = tmp_path / "edge-runtime.db"
    earlier = tuple(m for m in migrations.known_migrations() if m.id < "0008")
    assert earlier and earlier[-1].id < "0008" <= migrations.known_migrations()[-1].id
    connection = apsw.Connection(str(db_path))
    connection.execute("PRAGMA journal_mode = WAL")
    migrations.apply_pending(connection, str(db_path), list(earlier), ManualClock(1_700_000_000_000))
    connection.execute("INSERT INTO runs (id, status, created_at_ms, updated_at_ms, finished_at_ms) "
                       "VALUES ('old', 'succeeded', 5, 7, 9)")
    # An event newer than its Run's updated_at_ms (a writer whose clock was behind, before 0008).
    connection.execute("INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, "
                       "payload, created_at_ms) VALUES ('e', 'old', 1, 'run.created', 'k', 'user', 'cli', '{}', 12)")
    connection.close()

    with open_database(db_path, create=False, clock=ManualClock(1_700_000_000_000)) as db:
        assert db.pending == ()
        names = {row[0] for row in db.connection.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")}
        assert {"runs_created", "runs_status_created", "runs_observed"} <= names
        assert "run_attempts_observed" not in names  # 0009: the Run covers its Attempts' times
        assert db.connection.execute("SELECT updated_at_ms FROM runs WHERE id = 'old'").fetchone() == (12,)
        plan = db.connection.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM runs ORDER BY created_at_ms DESC, rowid DESC LIMIT 5").fetchall()
        assert "runs_created" in plan[-1][3]
        assert db.connection.execute("SELECT id FROM runs").fetchall() == [("old",)]
    open_database(db_path, create=False, read_only=True).close()  # its schema is what every migration produces
