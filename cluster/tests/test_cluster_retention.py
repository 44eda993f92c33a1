"""Retention on the cluster: the history bounded by the policy kept in the database, by database time.

The prune function itself (its batches, the Runs it keeps, locks it never waits for, a retention
role that may delete only finished history, a runtime role that still has no DELETE), the
``retention`` and ``check`` commands, and three real workers pruning 200 Runs while two live Runs
and their history stay untouched and each worker's log directory stays under its bound.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cluster_postgres import cli as cluster_cli
from cluster_postgres.retention import BATCH_RUNS, PostgresRetentionRepository
from cluster_postgres.store import PostgresStore
from edge_runtime.contract.retention import DEFAULT_RETAIN_DAYS, DEFAULT_RETAIN_RUNS
from edge_runtime.contract.runs import SubmitRunCommand
from tests.support.cluster_serve_harness import Worker, kill_attempt_groups, private_root, wait_for

DAY_MS = 86_400_000
HISTORY = ("runs", "run_attempts", "run_events", "attempt_logs", "run_dispatch_leases", "run_cancellation_dispatches")


def _finished_run(owner: Any, run_id: str, finished_at_ms: int, *, log_bytes: int = 1024) -> None:
    """A finished Run as the runtime leaves it: an Attempt, two events, a stored log copy."""
    owner.execute("INSERT INTO runs (id, status, version, event_sequence, created_at_ms, finished_at_ms) "
                  "VALUES (%s, 'succeeded', 2, 2, %s, %s)", (run_id, finished_at_ms - 10, finished_at_ms))
    owner.execute("INSERT INTO run_attempts (id, run_id, attempt, status, created_at_ms, finished_at_ms) "
                  "VALUES (%s, %s, 1, 'succeeded', %s, %s)", (f"a-{run_id}", run_id, finished_at_ms - 10,
                                                              finished_at_ms))
    for sequence, kind in ((1, "run.created"), (2, "run.succeeded")):
        owner.execute("INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, payload, "
                      "created_at_ms) VALUES (%s, %s, %s, %s, %s, 'worker', 'w', '{}', %s)",
                      (f"e{sequence}-{run_id}", run_id, sequence, kind, kind, finished_at_ms))
    owner.execute("INSERT INTO attempt_logs (attempt_id, content, size_bytes, worker_id, stored_at_ms) "
                  "VALUES (%s, %s, %s, 'w', %s)", (f"a-{run_id}", os.urandom(log_bytes), log_bytes, finished_at_ms))


def _live_run(owner: Any, run_id: str) -> None:
    owner.execute("INSERT INTO runs (id, status, created_at_ms) VALUES (%s, 'running', 0)", (run_id,))
    owner.execute("INSERT INTO run_attempts (id, run_id, attempt, status, created_at_ms) "
                  "VALUES (%s, %s, 1, 'running', 0)", (f"a-{run_id}", run_id))


def _count(owner: Any, table: str, where: str = "true") -> int:
    return owner.execute(f"SELECT count(*) FROM ql3.{table} WHERE {where}").fetchone()[0]


def test_the_default_policy_the_migration_writes_is_the_devices() -> None:
    import re

    from cluster_postgres.migrations import known_migrations

    [sql_text] = [m.sql for m in known_migrations() if m.id == "0006_retention"]
    written = re.search(r"INSERT INTO ql3\.retention_settings VALUES \(1, (\d+), (\d+),", sql_text)
    assert written is not None
    assert (int(written[1]), int(written[2])) == (DEFAULT_RETAIN_RUNS, DEFAULT_RETAIN_DAYS)


def test_prune_keeps_the_newest_finished_runs_and_every_live_one_in_small_batches(
        pg_database: Any, owner: Any, runtime: Any) -> None:
    now = owner.execute("SELECT ql3.now_ms()").fetchone()[0]
    for i in range(40):
        _finished_run(owner, f"f{i:02}", now - 40_000 + i * 1000)
    _finished_run(owner, "ancient", now - 30 * DAY_MS)  # beyond retain_days, whatever the count
    for i in range(3):
        _live_run(owner, f"live{i}")
    live_before = {t: owner.execute(f"SELECT row_to_json(x)::text FROM ql3.{t} x WHERE "
                                    f"{'id' if t == 'runs' else 'run_id'} LIKE 'live%%' ORDER BY 1").fetchall()
                   for t in ("runs", "run_attempts")}
    repository = PostgresRetentionRepository(runtime())
    settings = repository.set_policy(retain_runs=10, retain_days=None)
    assert (settings.retain_runs, settings.finished_runs, settings.runs_beyond_policy, settings.active_runs) == (
        10, 41, 31, 3)
    batches = []
    while True:
        deleted, attempts, more = repository.prune(BATCH_RUNS)
        if not deleted:
            break
        assert deleted <= BATCH_RUNS and len(attempts) == deleted
        batches.append(deleted)
    assert sum(batches) == 31 and len(batches) >= 2 and not more
    kept = [r[0] for r in owner.execute("SELECT id FROM ql3.runs WHERE status = 'succeeded' ORDER BY id").fetchall()]
    assert kept == [f"f{i:02}" for i in range(30, 40)]  # the newest ten; "ancient" went first
    assert _count(owner, "attempt_logs") == 10 and _count(owner, "run_events", "run_id LIKE 'f%%'") == 20
    assert {t: owner.execute(f"SELECT row_to_json(x)::text FROM ql3.{t} x WHERE "
                             f"{'id' if t == 'runs' else 'run_id'} LIKE 'live%%' ORDER BY 1").fetchall()
            for t in ("runs", "run_attempts")} == live_before
    repository.set_policy(retain_runs=None, retain_days=1)
    assert repository.prune(BATCH_RUNS)[0] == 0  # ten finished within a day: nothing more is due


def test_a_run_another_transaction_holds_is_skipped_never_waited_for(
        pg_database: Any, owner: Any, runtime: Any) -> None:
    now = owner.execute("SELECT ql3.now_ms()").fetchone()[0]
    for i in range(3):
        _finished_run(owner, f"h{i}", now - 10_000 + i)
    repository = PostgresRetentionRepository(runtime())
    repository.set_policy(retain_runs=1, retain_days=None)
    holder = runtime()
    with holder.transaction():
        holder.execute("SELECT 1 FROM ql3.runs WHERE id = 'h0' FOR NO KEY UPDATE")  # a worker appending an event
        started = time.monotonic()
        deleted, _, _ = repository.prune(BATCH_RUNS)
        assert time.monotonic() - started < 1.0  # no lock wait (lock_timeout is 1 s: a wait would fail)
        assert deleted == 1 and _count(owner, "runs", "id = 'h0'") == 1
    assert repository.prune(BATCH_RUNS)[0] == 1  # released: its turn comes
    assert [r[0] for r in owner.execute("SELECT id FROM ql3.runs").fetchall()] == ["h2"]


def test_the_runtime_role_has_no_delete_and_the_retention_role_deletes_only_finished_history(
        pg_database: Any, owner: Any, runtime: Any) -> None:
    now = owner.execute("SELECT ql3.now_ms()").fetchone()[0]
    _finished_run(owner, "done", now - 1000)
    _live_run(owner, "live")
    conn = runtime()
    for table in (*HISTORY, "schedule_fires", "schedules", "retention_settings"):
        assert conn.execute("SELECT has_table_privilege(current_user, %s, 'DELETE')", (f"ql3.{table}",)).fetchone()[0] \
            is False
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f"DELETE FROM ql3.{table}")
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute("SELECT * FROM ql3.prune_history(100000)")  # small batches only
    with psycopg.connect(pg_database.superuser_dsn, autocommit=True) as admin:
        admin.execute("SET ROLE ql3_retention")
        assert admin.execute("DELETE FROM ql3.run_attempts WHERE run_id = 'live'").rowcount == 0
        assert admin.execute("DELETE FROM ql3.runs WHERE id = 'live'").rowcount == 0
        assert admin.execute("UPDATE ql3.runs SET id = id WHERE id = 'live'").rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # any UPDATE fails its row check
            admin.execute("UPDATE ql3.runs SET id = id WHERE id = 'done'")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            admin.execute("INSERT INTO ql3.runs (id, status, created_at_ms) VALUES ('x', 'queued', 0)")
    owner_of = owner.execute("SELECT proowner::regrole::text, prosecdef FROM pg_proc "
                             "WHERE oid = 'ql3.prune_history(integer)'::regprocedure").fetchone()
    assert owner_of == ("ql3_retention", True)
    assert _count(owner, "runs", "id = 'live'") == 1 and _count(owner, "run_attempts", "run_id = 'live'") == 1


def test_retention_set_show_and_check_report_the_policy_and_what_is_kept(
        pg_database: Any, owner: Any, capsys: pytest.CaptureFixture[str]) -> None:
    dsn = pg_database.runtime_dsn
    assert cluster_cli.main(["retention", "set", "--runs", "25", "--dsn", dsn]) == 0
    assert "retain runs  25 (finished Runs kept at most)" in capsys.readouterr().out
    assert cluster_cli.main(["retention", "set", "--days", "3", "--json", "--dsn", dsn]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["retainRuns"], shown["retainDays"], shown["finishedRuns"]) == (25, 3, 0)
    assert set(shown["tableBytes"]) == {"runs", "run_events", "run_attempts", "attempt_logs"}
    assert cluster_cli.main(["retention", "show", "--dsn", dsn]) == 0
    assert "retain days  3" in capsys.readouterr().out
    assert cluster_cli.main(["retention", "set", "--runs", "0", "--dsn", dsn]) == 1
    assert "CONFIG_INVALID" in capsys.readouterr().err
    assert cluster_cli.main(["retention", "set", "--dsn", dsn]) == 1
    assert cluster_cli.main(["check", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert "ok   retention: keeps at most 25 finished Runs, none older than 3 days" in out
    owner.execute(f"UPDATE ql3.retention_settings SET retain_runs = {DEFAULT_RETAIN_RUNS}, "
                  f"retain_days = {DEFAULT_RETAIN_DAYS}")


def test_three_workers_bound_200_runs_history_and_their_logs_and_leave_live_runs_alone(
        pg_database: Any, owner: Any) -> None:
    pg_database.reset(owner, None)  # real database time
    db = owner
    store = PostgresStore(pg_database.runtime_dsn)
    retain = 40
    log_max = 8192
    env = {"EDGE_RUNTIME_SESSION_LEASE_MS": "5000", "EDGE_RUNTIME_RUN_LEASE_MS": "6000",
           "EDGE_RUNTIME_LOG_TOTAL_MAX_BYTES": str(log_max)}
    store.retention.set_policy(retain_runs=retain, retain_days=None)
    with private_root() as root:
        workers = [Worker(root, name, pg_database.runtime_dsn, slots=3, env=env) for name in ("r1", "r2", "r3")]
        try:
            for worker in workers:
                worker.start()
            live = [store.runs.submit(SubmitRunCommand(argv=["sleep", "600"], name="live")).id for _ in range(2)]
            wait_for(lambda: _count(db, "runs", "status = 'running'") == 2, 60, "the live runs running")
            live_events = {r: _count(db, "run_events", f"run_id = '{r}'") for r in live}
            short = [store.runs.submit(SubmitRunCommand(argv=["sh", "-c", "printf '%0500d' 0"])).id
                     for _ in range(200)]
            wait_for(lambda: _count(db, "runs", "status IN ('queued', 'dispatching')") == 0
                     and _count(db, "runs", "status = 'running'") == 2, 240, "the 200 runs ended")
            wait_for(lambda: _count(db, "runs", "status IN ('succeeded', 'failed', 'cancelled')") <= retain, 120,
                     "the workers pruned the history to the policy")
            finished = _count(db, "runs", "status IN ('succeeded', 'failed', 'cancelled')")
            assert finished == retain  # pruned to the policy, not below it
            assert _count(db, "attempt_logs") <= retain + 2  # the copies of the finished ones (and none more)
            assert _count(db, "run_events", "run_id <> ALL(%s)" % _array(live)) <= retain * 8
            for run_id in live:  # untouched: still running, every event kept
                assert db.execute("SELECT status FROM ql3.runs WHERE id = %s", (run_id,)).fetchone()[0] == "running"
                assert _count(db, "run_events", f"run_id = '{run_id}'") == live_events[run_id]
            assert db.execute("SELECT count(*) FROM ql3.runs WHERE id = ANY(%s)", (short,)).fetchone()[0] == retain
            with psycopg.connect(pg_database.runtime_dsn, autocommit=True) as conn:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute("DELETE FROM ql3.runs WHERE id = %s", (short[-1],))
            # Each worker's log directory: within its bound (the live Attempts' logs aside).
            live_logs = {f"{a}.log" for (a,) in db.execute(
                "SELECT id FROM ql3.run_attempts WHERE run_id = ANY(%s)", (live,)).fetchall()}
            for worker in workers:
                wait_for(lambda w=worker: _log_bytes(w.log_dir, live_logs) <= log_max, 60,
                         f"{worker.worker_id}'s log directory within log_total_max_bytes")
        finally:
            for worker in workers:
                worker.stop()
            kill_attempt_groups(db)
            store.close()
            owner.execute(f"UPDATE ql3.retention_settings SET retain_runs = {DEFAULT_RETAIN_RUNS}, "
                          f"retain_days = {DEFAULT_RETAIN_DAYS}")


def _array(ids: list[str]) -> str:
    return "ARRAY[" + ", ".join(f"'{i}'" for i in ids) + "]"


def _log_bytes(log_dir: Path, excluded: set[str]) -> int:
    if not log_dir.exists():
        return 0
    return sum(p.stat().st_size for p in log_dir.glob("*.log") if p.name not in excluded and not p.is_symlink())
