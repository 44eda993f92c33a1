"""Stored history made quickly, for the hot-path plan tests and the CLI benchmark: a Run goes
through the real repository sequence (submit, start, running, finish, complete), then its rows
(Run, Attempt, events, Run Lease) are copied under new ids and times in bulk transactions, so
every stored row looks like the service's."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.worker import WorkerSession
from tests.support.retention import finished_run

STEP_MS = 6_000  # one Run every 6 s, as at 14,400 Runs a day
BATCH = 5_000


def _rows(connection, table: str, where: str, args: tuple) -> tuple[list[str], list[tuple]]:
    cursor = connection.execute(f"SELECT * FROM {table} WHERE {where}", args)
    columns = [d[0] for d in cursor.getdescription()]
    return columns, cursor.fetchall()


def fill_history(db_path: Path, total: int) -> str:
    """A database at ``db_path`` with ``total`` finished Runs, the newest a minute old (so the
    default retention keeps them); returns the id of the newest."""
    t0_ms = time.time_ns() // 1_000_000 - total * STEP_MS - 60_000
    clock = ManualClock(t0_ms)
    with open_database(db_path, clock=clock) as db:
        runs = LocalRunRepository(db)
        worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="bench", slots=2,
                               session_lease_ms=120_000, run_lease_ms=60_000)
        worker.register()
        template_run, template_attempt = finished_run(runs, worker, clock=clock)
        connection = db.connection
        tables = {
            "runs": _rows(connection, "runs", "id = ?", (template_run,)),
            "run_attempts": _rows(connection, "run_attempts", "id = ?", (template_attempt,)),
            "run_events": _rows(connection, "run_events", "run_id = ?", (template_run,)),
            "run_dispatch_leases": _rows(connection, "run_dispatch_leases", "attempt_id = ?", (template_attempt,)),
        }
        newest = template_run
        for start in range(1, total, BATCH):
            with db.write():
                for table, (columns, rows) in tables.items():
                    statement = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
                    connection.executemany(statement, (
                        _copy(columns, row, template_run, template_attempt, index, t0_ms)
                        for index in range(start, min(start + BATCH, total)) for row in rows
                    ))
        if total > 1:
            newest = str(uuid.UUID(int=(1 << 64) + total - 1))
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return newest


def _copy(columns: list[str], row: tuple, run_id: str, attempt_id: str, index: int, t0_ms: int) -> tuple:
    """``row`` of the template Run as the ``index``-th Run: new ids, times moved on."""
    new_run, new_attempt = str(uuid.UUID(int=(1 << 64) + index)), str(uuid.UUID(int=(2 << 64) + index))
    shift = index * STEP_MS
    out = []
    for column, value in zip(columns, row):
        if value == run_id:
            value = new_run
        elif value == attempt_id:
            value = new_attempt
        elif column == "id":  # an event id
            value = str(uuid.uuid4())
        elif column.endswith("_ms") and isinstance(value, int) and value >= t0_ms:
            value += shift
        elif column == "log_path" and isinstance(value, str):
            value = value.replace(attempt_id, new_attempt)
        out.append(value)
    return tuple(out)
