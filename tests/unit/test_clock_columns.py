"""The guarded clock's floor reads an explicit list of observed-time columns: every ``*_at_ms``
column of the schema must be classified as observed or future, or this test fails."""

from __future__ import annotations

from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.guarded_clock import FUTURE_TIME_COLUMNS, OBSERVED_TIME_COLUMNS, observed_floor_ms


def _time_columns(db: LocalDatabase) -> set[tuple[str, str]]:
    connection = db.connection
    tables = [row[0] for row in connection.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    return {(table, row[0]) for table in tables
            for row in connection.execute("SELECT name FROM pragma_table_info(?)", (table,))
            if row[0].endswith("_at_ms")}


def test_every_time_column_of_the_schema_is_classified_once(db: LocalDatabase) -> None:
    observed, future = set(OBSERVED_TIME_COLUMNS), set(FUTURE_TIME_COLUMNS)
    assert not observed & future
    assert _time_columns(db) == observed | future


def test_a_future_time_never_raises_the_floor_and_an_observed_one_does(db: LocalDatabase) -> None:
    before = observed_floor_ms(db)
    far = before + 86_400_000
    db.connection.execute("INSERT INTO runs (id, status, version, event_sequence, created_at_ms) "
                          "VALUES ('r', 'running', 0, 0, ?)", (before,))
    db.connection.execute("INSERT INTO run_attempts (id, run_id, attempt, status, executor_type, created_at_ms, "
                          "kill_deadline_at_ms) VALUES ('a', 'r', 1, 'running', 'local_process', ?, ?)", (before, far))
    assert observed_floor_ms(db) == before
    db.connection.execute("UPDATE runs SET finished_at_ms = ? WHERE id = 'r'", (far,))
    assert observed_floor_ms(db) == far
