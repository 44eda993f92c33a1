"""Checksummed migrations of schema ``ql3`` (cluster-profile.md §3).

Files ``NNNN_name.sql`` beside this module are applied in order, one transaction each, under a
transaction-level advisory lock, so concurrent ``migrate`` calls serialize. An applied migration
whose file changed since, or one this release does not know (written by a newer release), is
refused before anything is applied. Only ``ql3_migration_owner`` may run them: it owns every object.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, NamedTuple

import psycopg

from cluster_postgres.errors import ClusterMigrationRefusedError

OWNER_ROLE = "ql3_migration_owner"
#: Arbitrary but fixed: one advisory lock key for every migration of this schema.
MIGRATION_LOCK_KEY = 0x716C_3300_0001
_FILE = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")

_BOOTSTRAP = (
    "CREATE SCHEMA IF NOT EXISTS ql3; "
    "CREATE TABLE IF NOT EXISTS ql3.schema_migrations ("
    " id text PRIMARY KEY, checksum text NOT NULL CHECK (checksum ~ '^[0-9a-f]{64}$'),"
    " applied_at_ms bigint NOT NULL CHECK (applied_at_ms >= 0))"
)


class Migration(NamedTuple):
    id: str
    sql: str
    checksum: str


def known_migrations() -> list[Migration]:
    """Every migration file of this release, in order."""
    found = []
    for path in sorted(Path(__file__).parent.glob("*.sql")):
        if not _FILE.fullmatch(path.name):
            raise ClusterMigrationRefusedError(f"migration file name {path.name!r} is not NNNN_name.sql")
        data = path.read_bytes()
        found.append(Migration(path.stem, data.decode("utf-8"), hashlib.sha256(data).hexdigest()))
    return found


def migration_problems(applied: dict[str, str], known: list[Migration]) -> list[str]:
    """Why the applied migrations (id -> checksum) do not belong to this release's files."""
    by_id = {m.id: m.checksum for m in known}
    problems = [f"migration {i} is applied but unknown to this release (newer release?)" for i in applied if i not in by_id]
    problems += [f"migration {i} was edited after it was applied (checksum differs)"
                 for i, checksum in applied.items() if i in by_id and by_id[i] != checksum]
    return problems


def read_applied(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """Applied migrations (id -> checksum); empty when the table does not exist yet."""
    if conn.execute("SELECT to_regclass('ql3.schema_migrations')").fetchone()[0] is None:
        return {}
    return dict(conn.execute("SELECT id, checksum FROM ql3.schema_migrations ORDER BY id").fetchall())


def migrate(dsn: str) -> list[str]:
    """Apply pending migrations as ``ql3_migration_owner``; returns the ids applied now.

    Raises:
        ClusterMigrationRefusedError: wrong role, or an edited or unknown applied migration.
        psycopg.Error: the database failed (the failing migration is rolled back).
    """
    known = known_migrations()
    applied_now: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        user = conn.execute("SELECT current_user").fetchone()[0]
        if user != OWNER_ROLE:
            raise ClusterMigrationRefusedError(f"migrate must run as {OWNER_ROLE}, not {user!r} (it owns schema ql3)")
        for migration in known:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
                conn.execute(_BOOTSTRAP)
                applied = read_applied(conn)
                problems = migration_problems(applied, known)
                if problems:
                    raise ClusterMigrationRefusedError("; ".join(problems))
                if migration.id in applied:
                    continue
                conn.execute(migration.sql)
                conn.execute(
                    "INSERT INTO ql3.schema_migrations (id, checksum, applied_at_ms) VALUES (%s, %s, ql3.now_ms())",
                    (migration.id, migration.checksum),
                )
            applied_now.append(migration.id)
    return applied_now
