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


def test_an_event_time_is_covered_by_its_runs_updated_time_even_from_a_clock_behind(db: LocalDatabase, clock) -> None:
    """The floor reads the event log through runs.updated_at_ms (DOMINATED_BY): an append by a
    writer whose clock is behind must not lower it below an earlier event's time."""
    from edge_runtime.contract.runs import SubmitRunCommand
    from edge_runtime.local.guarded_clock import DOMINATED_BY, full_observed_floor_ms
    from edge_runtime.local.run_events import append_run_event
    from edge_runtime.local.runs import LocalRunRepository

    assert all(column in OBSERVED_TIME_COLUMNS and by in OBSERVED_TIME_COLUMNS for column, by in DOMINATED_BY.items())
    run = LocalRunRepository(db).submit(SubmitRunCommand(argv=["true"]))
    newest = clock.now_ms() + 60_000
    for number, now in enumerate((newest, newest - 30_000)):  # the second writer's clock is behind
        with db.write():
            append_run_event(db.connection, run_id=run.id, event_id=f"e{number}", event_type="test.note",
                             dedupe_key=f"k{number}", actor_type="user", actor_id="test", payload={}, now_ms=now)
    events = db.connection.execute("SELECT max(created_at_ms) FROM run_events WHERE run_id = ?", (run.id,)).fetchone()[0]
    updated = db.connection.execute("SELECT updated_at_ms FROM runs WHERE id = ?", (run.id,)).fetchone()[0]
    assert updated == events == newest
    assert observed_floor_ms(db) == full_observed_floor_ms(db) == newest


def test_check_reports_an_event_time_the_indexed_floor_would_miss(db: LocalDatabase, clock) -> None:
    from edge_runtime.contract.runs import SubmitRunCommand
    from edge_runtime.local.health import check_health
    from edge_runtime.local.runs import LocalRunRepository

    clock.advance(60_000)  # the Run and its event are the newest times stored
    run = LocalRunRepository(db).submit(SubmitRunCommand(argv=["true"]))
    assert next(c for c in check_health(db).checks if c.name == "clock_floor").ok
    # Only a writer that bypasses run_events.py (an older build, a hand edit) can do this.
    db.connection.execute("UPDATE runs SET updated_at_ms = 1, created_at_ms = 1 WHERE id = ?", (run.id,))
    db.connection.execute("DELETE FROM clock_watermark")
    floor = next(c for c in check_health(db).checks if c.name == "clock_floor")
    assert not floor.ok and "below a stored time" in floor.detail
