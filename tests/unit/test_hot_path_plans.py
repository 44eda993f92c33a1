"""Nothing the CLI or the start of ``serve`` does reads the whole history (CLI time independent of history).

Every statement a command runs is recorded (apsw's exec trace, on every connection the command
opens) and its plan asked of SQLite (EXPLAIN QUERY PLAN) on a database holding finished Runs. A
table that grows with history may be reached only through an index: a seek, a walk of a partial
index (which holds live rows only), or an ordered walk that a LIMIT stops. A plain ``SCAN t`` (or
a ``SEARCH t`` without an index: SQLite's wording for an unindexed max()) fails the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from edge_runtime.cli.main import main
from edge_runtime.local.database import open_database
from edge_runtime.local.guarded_clock import OBSERVED_TIME_COLUMNS, observed_floor_ms
from tests.support.history import fill_history

#: The tables that grow with every Run (or clock jump); the others hold a bounded number of rows.
HISTORY_TABLES = frozenset({
    "runs", "run_attempts", "run_events", "run_cancellation_dispatches", "run_dispatch_leases", "device_events",
})
#: Retention's log sweep (edge_runtime/local/retention.py) compares the log directory with every
#: kept Attempt's log: it runs when the service is idle, not at start, and what it reads is what
#: retention keeps (retain_runs), not the whole history.
_RETENTION_SWEEP = "SELECT log_path FROM run_attempts WHERE log_path IS NOT NULL"
_NOT_PLANNED = ("PRAGMA", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "CREATE", "EXPLAIN")

_TRACER = """
import json, sys
import apsw
out = open(sys.argv[1], "a", encoding="utf-8")
def hook(connection):
    def trace(cursor, sql, bindings):
        out.write(json.dumps([sql, bindings if isinstance(bindings, dict) else list(bindings or ())], default=repr) + "\\n")
        out.flush()
        return True
    connection.exec_trace = trace
apsw.connection_hooks.append(hook)
from edge_runtime.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db_path = tmp_path_factory.mktemp("history") / "edge-runtime.db"
    return db_path, fill_history(db_path, 300)


def _partial_indexes(connection: apsw.Connection) -> set[str]:
    return {name for name, sql in connection.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'index'")
            if sql is not None and " WHERE " in sql.upper()}


def _history_scans(db_path: Path, statements: list[tuple[str, object]]) -> list[str]:
    """Each statement that reaches a history table other than through an index, with its plan."""
    problems = []
    with open_database(db_path, create=False, read_only=True) as db:
        connection = db.connection
        partial = _partial_indexes(connection)
        for sql, bindings in statements:
            if sql.lstrip().upper().startswith(_NOT_PLANNED):
                continue
            plan = [row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}", bindings)]
            for step in plan:
                words = step.split()
                if len(words) < 2 or words[0] not in ("SCAN", "SEARCH") or words[1] not in HISTORY_TABLES:
                    continue
                indexed = "USING" in words
                bounded = words[0] == "SEARCH" or any(name in partial for name in words) or " LIMIT " in sql.upper()
                if not (indexed and bounded):
                    problems.append(f"{step}: {' '.join(sql.split())}")
    return problems


def _traced_cli(db_path: Path, *argv: str, exit_codes: tuple[int, ...] = (0,)) -> list[tuple[str, object]]:
    """Run one CLI command in this process with every statement of every connection recorded."""
    recorded: list[tuple[str, object]] = []

    def hook(connection: apsw.Connection) -> None:
        def trace(cursor: apsw.Cursor, sql: str, bindings: object) -> bool:
            recorded.append((sql, bindings))
            return True

        connection.exec_trace = trace

    apsw.connection_hooks.append(hook)
    try:
        assert main(["--db", str(db_path), *argv]) in exit_codes
    finally:
        apsw.connection_hooks.remove(hook)
    return recorded


def test_list_walks_an_index_newest_first_without_sorting(history) -> None:
    db_path, _ = history
    with open_database(db_path, create=False, read_only=True) as db:
        for sql, args in (
            ("SELECT id FROM runs ORDER BY created_at_ms DESC, rowid DESC LIMIT ?", (50,)),
            ("SELECT id FROM runs WHERE status = ? ORDER BY created_at_ms DESC, rowid DESC LIMIT ?", ("succeeded", 50)),
        ):
            plan = " / ".join(row[3] for row in db.connection.execute(f"EXPLAIN QUERY PLAN {sql}", args))
            assert "TEMP B-TREE" not in plan and "USING INDEX runs_" in plan, plan


def test_a_schedules_runs_are_sought_through_its_index_not_walked_from_the_newest(history) -> None:
    """The QingLong crons list reads every schedule's newest Runs: walking the whole history from
    the newest Run per schedule (a LIMIT that no row of a quiet schedule ever stops) costs
    schedules x history."""
    from edge_runtime.local.runs import LocalRunRepository

    db_path, _ = history
    recorded: list[tuple[str, tuple]] = []
    with open_database(db_path, create=False, read_only=True) as db:
        db.connection.exec_trace = lambda _cursor, sql, bindings: recorded.append((sql, tuple(bindings or ()))) or True
        runs = LocalRunRepository(db)
        runs.list_runs(schedule_id="00000000-0000-4000-8000-000000000000", limit=5)
        runs.list_runs(schedule_id="00000000-0000-4000-8000-000000000000", limit=5, before_ms=1 << 50)
        db.connection.exec_trace = None
        plans = [" / ".join(row[3] for row in db.connection.execute(f"EXPLAIN QUERY PLAN {sql}", bindings))
                 for sql, bindings in recorded if "FROM runs" in sql]
    assert len(plans) == 2
    for plan in plans:
        assert "SEARCH runs USING INDEX runs_schedule_slot (schedule_id=?)" in plan, plan


def test_the_list_command_itself_sorts_nothing(history, capsys) -> None:
    db_path, _ = history
    statements = _traced_cli(db_path, "list")
    with open_database(db_path, create=False, read_only=True) as db:
        plans = [row[3] for sql, bindings in statements if "FROM runs" in sql and "ORDER BY" in sql
                 for row in db.connection.execute(f"EXPLAIN QUERY PLAN {sql}", bindings)]
    assert plans and not [p for p in plans if "TEMP B-TREE" in p]


@pytest.mark.parametrize("command", [
    ("show", "{newest}"), ("show", "--json", "{newest}"), ("list",), ("list", "--status", "succeeded"),
    ("list", "--status", "running"), ("events", "{newest}"), ("dispatch", "show", "{newest}"),
    ("submit", "--", "true"), ("cancel", "{queued}"), ("schedule", "list"), ("logs", "{newest}"),
], ids=lambda command: "-".join(c for c in command if not c.startswith("{")))
def test_cli_commands_reach_history_only_through_indexes(history, capsys, command) -> None:
    db_path, newest = history
    queued = ""
    if "{queued}" in command:
        assert main(["--db", str(db_path), "submit", "--", "true"]) == 0
        queued = capsys.readouterr().out.split()[0]
    argv = [part.format(newest=newest, queued=queued) for part in command]
    # logs: the copied Runs' log files do not exist, a clean error (exit 1) after the same queries.
    statements = _traced_cli(db_path, *argv, exit_codes=(0, 1) if command[0] == "logs" else (0,))
    assert any(" FROM " in sql or "INSERT" in sql for sql, _ in statements), "nothing was recorded"
    assert _history_scans(db_path, statements) == []


def test_the_check_finds_a_scan_of_history(history) -> None:
    """The rule above can fail: an unindexed max() and a filter on an unindexed column are found."""
    db_path, _ = history
    assert len(_history_scans(db_path, [("SELECT max(finished_at_ms) FROM runs", ()),
                                        ("SELECT id FROM run_events WHERE type = ?", ("x",)),
                                        ("SELECT id FROM runs WHERE id = ?", ("x",))])) == 2


def test_the_clock_floor_at_serve_start_is_one_index_seek_per_history_table(history) -> None:
    db_path, _ = history
    with open_database(db_path, create=False, read_only=True) as db:
        statements: list[tuple[str, object]] = []
        db.connection.exec_trace = lambda cursor, sql, bindings: statements.append((sql, bindings)) or True
        floor = observed_floor_ms(db)
        db.connection.exec_trace = None
        newest = max(db.connection.execute(f'SELECT max("{column}") FROM "{table}"').fetchone()[0] or 0
                     for table, column in OBSERVED_TIME_COLUMNS)
    assert floor == newest > 0
    assert _history_scans(db_path, statements) == []


def test_serve_start_reaches_history_only_through_indexes(tmp_path, history) -> None:
    source, _ = history
    db_path = tmp_path / "serve" / "edge-runtime.db"
    db_path.parent.mkdir(mode=0o700)
    with open_database(source, create=False, read_only=True) as db:  # a private copy: serve writes
        db.connection.execute("VACUUM INTO ?", (str(db_path),))
    trace_file = tmp_path / "statements.jsonl"
    env = {**os.environ, "EDGE_RUNTIME_CONFIG": str(tmp_path / "none.toml"), "HOME": str(tmp_path)}
    (tmp_path / "none.toml").write_text("")
    service = subprocess.Popen(
        [sys.executable, "-c", _TRACER, str(trace_file), "--db", str(db_path), "serve", "--worker-id", "plans"],
        env=env, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        for line in service.stderr:
            if "recovery.done" in line or time.monotonic() > deadline:
                break
        time.sleep(0.5)  # the first ticks of the loop
    finally:
        service.send_signal(signal.SIGTERM)
        _, rest = service.communicate(timeout=30)
    assert service.returncode == 0, rest
    statements = [(sql, bindings) for sql, bindings in map(json.loads, trace_file.read_text().splitlines())
                  if " ".join(sql.split()) != _RETENTION_SWEEP]
    assert any("runs" in sql for sql, _ in statements)
    assert _history_scans(db_path, statements) == []
