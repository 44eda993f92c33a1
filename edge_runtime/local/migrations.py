"""The migrations runner: ``local_migrations/NNNN_name.sql`` applied in order, one transaction each.

Each applied migration is recorded in ``schema_migrations`` with the SHA-256 of its file. At open
the runner refuses a database whose applied migrations this build cannot vouch for: a file edited
after it was applied, or an id this build does not know (a database from a newer release). Those
checks only read; nothing is written to a refused database.

Files numbered from :data:`OPT_IN_FIRST_NUMBER` (9000) up are opt-in layout steps, not automatic
migrations: opening never applies them; a command the user runs does (``9001``: ``migrate
--scrub-legacy-tokens``). Once recorded they are verified like any migration, so a build that does
not know one refuses the file with the error above. The automatic migrations keep counting from
0005 below them, on scrubbed and unscrubbed databases alike.
"""

from __future__ import annotations

import hashlib
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import apsw
import msgspec

from edge_runtime.local.clock import read_now_ms
from edge_runtime.local.errors import MigrationError
from edge_runtime.local.schema_digests import SCHEMA_DIGESTS

if TYPE_CHECKING:  # the port, for annotations only
    from edge_runtime.contract.ports import Clock

_FILE_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")

#: The first number of an opt-in layout step (see the module docstring).
OPT_IN_FIRST_NUMBER = 9000

# Wheels and the PyInstaller artifact carry the files inside the package; a source checkout keeps
# them at the top level, next to edge_runtime/ (spec §1).
_PACKAGED_DIR = Path(__file__).resolve().parents[1] / "_migrations"
_SOURCE_DIR = Path(__file__).resolve().parents[2] / "local_migrations"


# A msgspec Struct, not a dataclass: dataclasses pulls in inspect, ast and dis, which the
# executable leaves out to stay within its byte budget (build/excludes.toml).
class Migration(msgspec.Struct, frozen=True):
    id: str
    checksum: str
    sql: str


def migrations_dir() -> Path:
    """Where this build's migration files live."""
    return _PACKAGED_DIR if _PACKAGED_DIR.is_dir() else _SOURCE_DIR


def _migration_files(directory: Path) -> tuple[Migration, ...]:
    """Every migration file of ``directory`` (automatic and opt-in), in number order."""
    if not directory.is_dir():
        raise MigrationError(f"migration directory {directory} is missing from this build")
    found = []
    for path in sorted(directory.iterdir()):
        if path.suffix != ".sql":
            continue
        if not _FILE_NAME.match(path.name):
            raise MigrationError(f"migration file {path.name} does not match NNNN_name.sql")
        data = path.read_bytes()
        found.append(Migration(path.stem, hashlib.sha256(data).hexdigest(), data.decode("utf-8")))
    numbers = [m.id[:4] for m in found]
    if len(set(numbers)) != len(numbers):
        raise MigrationError(f"two migration files share a number in {directory}")
    return tuple(found)


def is_opt_in(migration_id: str) -> bool:
    """Whether ``migration_id`` names an opt-in layout step rather than an automatic migration."""
    return int(migration_id[:4]) >= OPT_IN_FIRST_NUMBER


@cache
def known_migrations(directory: Path | None = None) -> tuple[Migration, ...]:
    """This build's automatic migrations in apply order (read once per process)."""
    return tuple(m for m in _migration_files(directory or migrations_dir()) if not is_opt_in(m.id))


@cache
def opt_in_migrations(directory: Path | None = None) -> tuple[Migration, ...]:
    """This build's opt-in layout steps: known when applied, never pending."""
    return tuple(m for m in _migration_files(directory or migrations_dir()) if is_opt_in(m.id))


def applied_migrations(connection: apsw.Connection) -> set[str]:
    """The ids of the migrations (and opt-in steps) applied to the database."""
    return set(_applied(connection))


def _applied(connection: apsw.Connection) -> dict[str, str]:
    has_table = connection.execute(
        "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    if has_table is None:
        return {}
    return dict(connection.execute("SELECT id, checksum FROM schema_migrations").fetchall())


def verify_applied(connection: apsw.Connection, db_path: str, known: tuple[Migration, ...]) -> list[Migration]:
    """Refuse a database this build cannot vouch for; return the migrations still pending.

    Reads only.

    Raises:
        MigrationError: an applied migration's file changed, or the database holds a migration
            this build does not know.
    """
    applied = _applied(connection)
    by_id = {m.id: m for m in (*known, *opt_in_migrations())}
    for migration_id, checksum in sorted(applied.items()):
        migration = by_id.get(migration_id)
        if migration is None:
            raise MigrationError(
                f"database {db_path} has migration {migration_id} applied, which this build does not know; "
                f"it was written by a newer release of edge-runtime. Run that release, or restore a backup."
            )
        if migration.checksum != checksum:
            raise MigrationError(
                f"migration {migration_id} applied to database {db_path} has checksum {checksum}, "
                f"but this build's file has checksum {migration.checksum}; applied migrations must never be edited."
            )
    return [m for m in known if m.id not in applied and not is_opt_in(m.id)]


def _schema_rows(connection: apsw.Connection) -> frozenset[tuple[str, str, str, str | None]]:
    return frozenset(connection.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema").fetchall())


@cache
def expected_schema(applied: tuple[Migration, ...]) -> frozenset[tuple[str, str, str, str | None]]:
    """The ``sqlite_schema`` rows that applying exactly ``applied`` (in order) produces.

    Derived from the migration files themselves, on an in-memory database, once per process and
    set of migrations: a later migration needs no list of objects kept up to date by hand.
    """
    memory = apsw.Connection(":memory:")
    try:
        for migration in applied:
            memory.execute(_SCHEMA_MIGRATIONS_DDL)
            for _ in memory.execute(migration.sql):
                pass
        return _schema_rows(memory)
    finally:
        memory.close()


def migrations_key(applied: tuple[Migration, ...]) -> str:
    """Names exactly this sequence of migration files (ids and contents)."""
    return hashlib.sha256("\n".join(f"{m.id}:{m.checksum}" for m in applied).encode()).hexdigest()


def schema_digest(rows: frozenset[tuple[str, str, str, str | None]]) -> str:
    """One digest of a set of ``sqlite_schema`` rows (names are unique, so they order the rows)."""
    return hashlib.sha256(msgspec.json.encode(sorted(rows, key=lambda row: (row[0], row[1])))).hexdigest()


def schema_digests(known: tuple[Migration, ...]) -> dict[str, str]:
    """:func:`migrations_key` -> :func:`schema_digest` of :func:`expected_schema`, for every
    prefix of ``known``: what build/schema_digests.py writes into schema_digests.py."""
    return {migrations_key(known[:n]): schema_digest(expected_schema(known[:n])) for n in range(len(known) + 1)}


def verify_schema(connection: apsw.Connection, db_path: str, applied: tuple[Migration, ...]) -> None:
    """Refuse a database whose schema is not exactly what its applied migrations produce.

    A trigger, view or index added by hand (or by a hostile user) would run inside our own
    statements, as root: an extra trigger on ``runs`` can rewrite a submitted command, a recursive
    one can hang every write, a view can hang a read; a dropped or altered column breaks the
    contract silently. Only ``sqlite_schema`` is read (a few dozen rows: the cost does not grow
    with the database), before any statement touches a table.

    The expected schema comes from replaying the migrations into an in-memory database (~10 ms,
    once per process); each CLI call is one process, so the digest of that schema is kept in
    :mod:`edge_runtime.local.schema_digests`, shipped with the code, keyed by the migration files'
    own checksums: a digest is only ever used for the very files it was computed from, and any
    other set of files (or a schema that differs) takes the replay, which also names what differs.

    Raises:
        MigrationError: an object is missing, extra or defined differently; nothing was written.
    """
    found = _schema_rows(connection)
    if SCHEMA_DIGESTS.get(migrations_key(applied)) == schema_digest(found):
        return
    expected = expected_schema(applied)
    if found == expected:
        return
    extra = sorted(f"{kind} {name}" for kind, name, _, _ in found - expected)
    missing = sorted(f"{kind} {name}" for kind, name, _, _ in expected - found)
    changed = sorted(set(extra) & set(missing))
    parts = [
        f"{label}: {', '.join(items[:5])}{' ...' if len(items) > 5 else ''}"
        for label, items in (
            ("changed", changed),
            ("not created by any migration", [x for x in extra if x not in changed]),
            ("missing", [x for x in missing if x not in changed]),
        )
        if items
    ]
    if applied:
        what, advice = "does not have the schema its migrations produce", "a schema edited by hand is refused: restore a backup"
    else:
        what, advice = "is not an edge-runtime database", "point --db at an edge-runtime database"
    raise MigrationError(f"database {db_path} {what} ({'; '.join(parts)}); it was not modified: {advice}")


_SCHEMA_MIGRATIONS_DDL = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    id TEXT PRIMARY KEY NOT NULL,
    checksum TEXT NOT NULL CHECK (length(checksum) = 64),
    applied_at_ms INTEGER NOT NULL CHECK (applied_at_ms >= 0)
) STRICT;
"""


def record_applied(connection: apsw.Connection, migration: Migration, applied_at_ms: int) -> None:
    """Record ``migration`` as applied, inside the caller's transaction (the one that applied it)."""
    connection.execute(
        "INSERT INTO schema_migrations (id, checksum, applied_at_ms) VALUES (?, ?, ?)",
        (migration.id, migration.checksum, applied_at_ms),
    )


def apply_pending(connection: apsw.Connection, db_path: str, pending: list[Migration], clock: Clock) -> list[str]:
    """Apply each pending migration and record it, in one ``BEGIN IMMEDIATE`` transaction each.

    Another process may migrate the same file concurrently, so each transaction re-reads what is
    applied under the write lock and skips what is already there. A migration that fails is
    rolled back whole and stays pending.

    Returns the ids applied by this call.
    """
    done = []
    for migration in pending:
        connection.execute("BEGIN IMMEDIATE")
        try:
            if migration.id in _applied(connection):
                connection.execute("ROLLBACK")
                continue
            connection.execute(_SCHEMA_MIGRATIONS_DDL)
            # apsw runs a multi-statement script lazily: it stops at the first statement that
            # returns rows (a SELECT, a PRAGMA) and runs the rest only as the cursor is read.
            # Read it to the end, or a script with such a statement would be recorded as applied
            # with its later statements never run.
            for _ in connection.execute(migration.sql):
                pass
            record_applied(connection, migration, read_now_ms(clock))
            connection.execute("COMMIT")
        except BaseException as exc:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            if isinstance(exc, apsw.Error):
                raise MigrationError(f"migration {migration.id} failed on database {db_path}: {exc}") from exc
            raise
        done.append(migration.id)
    return done
