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
