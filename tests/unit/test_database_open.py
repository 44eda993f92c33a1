"""Opening a database: pragmas, migrations recorded with checksums."""

from __future__ import annotations

from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.migrations import known_migrations


def test_open_sets_wal_full_sync_and_foreign_keys(db: LocalDatabase) -> None:
    connection = db.connection
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert connection.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert connection.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_every_known_migration_is_recorded_with_its_checksum(db: LocalDatabase) -> None:
    stored = dict(db.connection.execute("SELECT id, checksum FROM schema_migrations").fetchall())
    assert stored == {m.id: m.checksum for m in known_migrations()}


def test_a_read_snapshot_does_not_see_a_commit_made_meanwhile(db: LocalDatabase, db_path) -> None:
    from edge_runtime.local.database import open_database

    count = "SELECT count(*) FROM runs"
    other = open_database(db_path)
    try:
        with db.snapshot():
            assert db.connection.execute(count).fetchone()[0] == 0
            with other.write() as now:
                other.connection.execute(
                    "INSERT INTO runs (id, status, created_at_ms) VALUES ('r1', 'queued', ?)", (now,)
                )
            assert db.connection.execute(count).fetchone()[0] == 0  # still the snapshot's view
        assert not db.connection.in_transaction
        assert db.connection.execute(count).fetchone()[0] == 1
    finally:
        other.close()
