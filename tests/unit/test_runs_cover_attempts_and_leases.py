"""Migration 0009: every stored time of an Attempt or a Run Lease is covered by its Run's
``updated_at_ms``, so the clock floor at ``serve`` start reads them through ``runs_observed``
(``DOMINATED_BY``) and those tables need no index of their own (fewer flash writes: two pages fewer
per commit)."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from edge_runtime.local import migrations
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.guarded_clock import (
    DOMINATED_BY,
    OBSERVED_TIME_COLUMNS,
    full_observed_floor_ms,
    observed_floor_ms,
)

T0 = 1_700_000_000_000
_COVERED = [(table, column) for table, column in OBSERVED_TIME_COLUMNS
            if table in ("run_attempts", "run_dispatch_leases")]


def _seed(connection: apsw.Connection) -> None:
    """A finished Run with one Attempt and its completed grant, every time at T0."""
    connection.execute(
        "INSERT INTO worker_sessions (worker_id, session_id, generation, status, version, capabilities, "
        "capabilities_hash, max_concurrent_runs, available_slots, heartbeat_at_ms, lease_expires_at_ms, "
        "created_at_ms, updated_at_ms) VALUES ('w', 's', 1, 'offline', 0, '{}', ?2, 1, 0, ?1, ?1, ?1, ?1)",
        (T0, "0" * 64))
    connection.execute("INSERT INTO runs (id, status, version, event_sequence, created_at_ms, updated_at_ms, "
                       "finished_at_ms) VALUES ('r', 'succeeded', 1, 1, ?1, ?1, ?1)", (T0,))
    connection.execute("INSERT INTO run_attempts (id, run_id, attempt, status, executor_type, created_at_ms, "
                       "updated_at_ms, finished_at_ms) VALUES ('a', 'r', 1, 'succeeded', 'local_process', ?1, ?1, ?1)",
                       (T0,))
    connection.execute(
        "INSERT INTO run_dispatch_leases (attempt_id, run_id, worker_id, session_id, session_generation, "
        "lease_generation, version, token_digest, offer_id, status, expires_at_ms, acquired_at_ms, started_at_ms, "
        "completed_at_ms, updated_at_ms) VALUES ('a', 'r', 'w', 's', 1, 1, 3, ?2, 'o', 'completed', ?3, ?1, ?1, ?1, ?1)",
        (T0, "0" * 64, T0 + 60_000))


def _run_updated(connection: apsw.Connection) -> int:
    return connection.execute("SELECT updated_at_ms FROM runs WHERE id = 'r'").fetchone()[0]


def test_the_floor_reads_attempts_and_leases_through_their_run() -> None:
    assert {DOMINATED_BY[column] for column in _COVERED} == {("runs", "updated_at_ms")}
    assert len(_COVERED) == 12  # six observed times on each table


@pytest.mark.parametrize(("table", "column"), _COVERED)
def test_each_observed_time_alone_raises_its_runs_updated_time(db: LocalDatabase, table: str, column: str) -> None:
    connection = db.connection
    _seed(connection)
    key = "id" if table == "run_attempts" else "attempt_id"
    later = T0 + 86_400_000
    # One column alone, whatever the row's shape rules say of it: the trigger must cover each.
    connection.execute("PRAGMA ignore_check_constraints = ON")
    connection.execute(f'UPDATE {table} SET "{column}" = ? WHERE {key} = ?', (later, "a"))
    assert _run_updated(connection) == later
    assert observed_floor_ms(db) == full_observed_floor_ms(db) == later


def test_an_inserted_attempt_or_lease_newer_than_its_run_raises_it(db: LocalDatabase) -> None:
    connection = db.connection
    _seed(connection)
    connection.execute("INSERT INTO run_attempts (id, run_id, attempt, status, executor_type, created_at_ms, "
                       "updated_at_ms) VALUES ('a2', 'r', 2, 'claimed', 'local_process', ?1, ?1)", (T0 + 5,))
    assert _run_updated(connection) == T0 + 5
    connection.execute(
        "INSERT INTO run_dispatch_leases (attempt_id, run_id, worker_id, session_id, session_generation, "
        "lease_generation, version, token_digest, offer_id, status, expires_at_ms, acquired_at_ms, updated_at_ms) "
        "VALUES ('a2', 'r', 'w', 's', 1, 1, 1, ?2, 'o', 'leased', ?3, ?1, ?1)", (T0 + 9, "0" * 64, T0 + 60_000))
    assert _run_updated(connection) == T0 + 9
    assert observed_floor_ms(db) == full_observed_floor_ms(db) == T0 + 9


def test_an_older_time_never_lowers_the_runs_updated_time(db: LocalDatabase) -> None:
    connection = db.connection
    _seed(connection)
    connection.execute("UPDATE runs SET updated_at_ms = ? WHERE id = 'r'", (T0 + 100,))
    connection.execute("UPDATE run_attempts SET updated_at_ms = ? WHERE id = 'a'", (T0 + 50,))
    connection.execute("UPDATE run_dispatch_leases SET updated_at_ms = ? WHERE attempt_id = 'a'", (T0 + 60,))
    assert _run_updated(connection) == T0 + 100


def test_0009_brings_rows_written_before_it_up_to_the_rule(tmp_path: Path) -> None:
    db_path = tmp_path / "edge-runtime.db"
    earlier = [m for m in migrations.known_migrations() if m.id < "0009"]
    connection = apsw.Connection(str(db_path))
    connection.execute("PRAGMA journal_mode = WAL")
    migrations.apply_pending(connection, str(db_path), earlier, ManualClock(T0))
    _seed(connection)
    # Written before 0009: the grant's and the Attempt's last times are newer than the Run's.
    connection.execute("UPDATE run_attempts SET killed_at_ms = ? WHERE id = 'a'", (T0 + 7,))
    connection.execute("UPDATE run_dispatch_leases SET completed_at_ms = ? WHERE attempt_id = 'a'", (T0 + 11,))
    assert _run_updated(connection) == T0
    connection.close()

    with open_database(db_path, create=False, clock=ManualClock(T0)) as db:
        assert db.pending == ()
        assert _run_updated(db.connection) == T0 + 11
        names = {row[0] for row in db.connection.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")}
        assert not {"run_attempts_observed", "run_dispatch_leases_observed"} & names
        assert observed_floor_ms(db) == full_observed_floor_ms(db)
