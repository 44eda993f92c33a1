"""Retention (docs/storage.md): whole finished Runs deleted oldest first in small batches, never an
unfinished one; the event log append-only while its Run lives; log cap, empty and orphan logs;
symlinks in the log directory never followed; auto_vacuum on new and existing files."""

from __future__ import annotations

import os
from pathlib import Path

import apsw
import pytest

from edge_runtime.contract.ids import new_id
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.retention import (
    BATCH_RUNS,
    FREE_BYTES_RESERVE,
    VACUUM_BYTES_PER_STEP,
    LOG_MIN_AGE_MS,
    LocalRetention,
    RetentionError,
    RetentionPolicy,
    plan,
)
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.config import ServiceConfig
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.worker import WorkerSession

from tests.support.retention import finished_run, start_run

DAY_MS = 86_400_000
TABLES = ("runs", "run_attempts", "run_events", "run_dispatch_leases", "run_cancellation_dispatches")


@pytest.fixture
def runs(db: LocalDatabase) -> LocalRunRepository:
    return LocalRunRepository(db)


@pytest.fixture
def worker(db: LocalDatabase) -> WorkerSession:
    worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=4, session_lease_ms=120_000, run_lease_ms=60_000)
    worker.register()
    return worker


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    path.mkdir(mode=0o700)
    return path


def policy(runs: int = 1000, days: int = 7, log_bytes: int = 1 << 20) -> RetentionPolicy:
    return RetentionPolicy(retain_runs=runs, retain_days=days, log_total_max_bytes=log_bytes)


def rows_of(db: LocalDatabase, run_id: str) -> dict[str, int]:
    return {t: db.connection.execute(f"SELECT count(*) FROM {t} WHERE {'id' if t == 'runs' else 'run_id'} = ?",
                                     (run_id,)).fetchone()[0] for t in TABLES}


def prune_all(retention: LocalRetention) -> int:
    steps = 1
    while retention.prune_step():
        steps += 1
    return steps


def test_defaults_are_the_documented_ones() -> None:
    config = ServiceConfig()
    assert (config.retain_runs, config.retain_days) == (1000, 7)
    assert config.log_total_max_bytes > 0


def test_oldest_finished_runs_beyond_the_count_go_whole_and_unfinished_ones_stay(
    db: LocalDatabase, runs: LocalRunRepository, worker: WorkerSession, clock: ManualClock, log_dir: Path
) -> None:
    finished = []
    for _ in range(6):
        finished.append(finished_run(runs, worker, log_dir, b"out\n"))
        clock.advance(1_000)
    running_id, running_attempt = start_run(runs, worker, log_dir, b"")
    queued_id = runs.submit(__import__("edge_runtime.contract.runs", fromlist=["x"]).SubmitRunCommand(argv=["x"])).id
    running_before = rows_of(db, running_id)
    retention = LocalRetention(db, policy(runs=2), log_dir)
    prune_all(retention)
    for run_id, attempt_id in finished[:4]:
        assert rows_of(db, run_id) == dict.fromkeys(TABLES, 0)
        assert not (log_dir / f"{attempt_id}.log").exists()
    for run_id, attempt_id in finished[4:]:
        assert rows_of(db, run_id)["run_events"] > 0 and (log_dir / f"{attempt_id}.log").exists()
    assert rows_of(db, running_id) == running_before and (log_dir / f"{running_attempt}.log").exists()
    assert runs.get(queued_id).status.value == "queued"


def test_runs_finished_longer_ago_than_retain_days_go_whatever_the_count(
    db: LocalDatabase, runs: LocalRunRepository, worker: WorkerSession, clock: ManualClock
) -> None:
    old, _ = finished_run(runs, worker, clock=clock)
    clock.advance(8 * DAY_MS)
    worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w2", slots=4, session_lease_ms=120_000, run_lease_ms=60_000)
    worker.register()  # the first session's lease lapsed over the week
    new, _ = finished_run(runs, worker, clock=clock)
    retention = LocalRetention(db, policy(runs=100, days=7), None)
    assert plan(db, policy(runs=100, days=7), clock.now_ms()).runs_to_remove == 1
    prune_all(retention)
    assert rows_of(db, old)["runs"] == 0 and rows_of(db, new)["runs"] == 1


def test_each_step_is_one_small_batch(db: LocalDatabase, runs: LocalRunRepository, worker: WorkerSession, clock: ManualClock) -> None:
    for _ in range(BATCH_RUNS * 2 + 3):
        finished_run(runs, worker, clock=clock)
    retention = LocalRetention(db, policy(runs=1), None)
    counts = []
    while True:
        before = db.connection.execute("SELECT count(*) FROM runs").fetchone()[0]
        more = retention.prune_step()
        counts.append(before - db.connection.execute("SELECT count(*) FROM runs").fetchone()[0])
        if not more:
            break
    assert max(counts) == BATCH_RUNS and sum(counts) == BATCH_RUNS * 2 + 2


def test_the_event_log_stays_append_only_while_its_run_lives(
    db: LocalDatabase, runs: LocalRunRepository, worker: WorkerSession
, clock: ManualClock) -> None:
    done, _ = finished_run(runs, worker, clock=clock)
    live, _ = start_run(runs, worker)
    c = db.connection
    for run_id in (done, live):
        with pytest.raises(apsw.ConstraintError, match="append-only"):
            c.execute("DELETE FROM run_events WHERE run_id = ?", (run_id,))
    with pytest.raises(apsw.ConstraintError, match="only a finished run"):
        c.execute("DELETE FROM runs WHERE id = ?", (live,))
    # A finished Run deleted without all its rows cannot commit (deferred foreign keys).
    c.execute("BEGIN IMMEDIATE")
    c.execute("PRAGMA defer_foreign_keys = ON")
    c.execute("DELETE FROM runs WHERE id = ?", (done,))
    c.execute("DELETE FROM run_events WHERE run_id = ?", (done,))
    with pytest.raises(apsw.ConstraintError):
        c.execute("COMMIT")
    c.execute("ROLLBACK")
    assert rows_of(db, done)["run_events"] > 0 and rows_of(db, done)["runs"] == 1


def test_a_live_lease_or_dispatch_keeps_a_finished_run(
    db: LocalDatabase, runs: LocalRunRepository, worker: WorkerSession
, clock: ManualClock) -> None:
    run_id, attempt_id = start_run(runs, worker)
    # Ended as an older release left it: the Attempt and Run ended, the grant still held
    # (finish_attempt now completes it in the same commit).
    with db.write() as now:
        db.connection.execute("UPDATE run_attempts SET status = 'failed', exit_code = 1, finished_at_ms = ?1, "
                              "updated_at_ms = ?1 WHERE id = ?2", (now, attempt_id))
        db.connection.execute("UPDATE runs SET status = 'failed', finished_at_ms = ?1, updated_at_ms = ?1 "
                              "WHERE id = ?2", (now, run_id))
    assert worker.lease_of(attempt_id).status.value == "leased"
    assert runs.get(run_id).status.value == "failed"
    LocalRetention(db, policy(runs=1, days=1), None).prune_step()
    finished_run(runs, worker, clock=clock)
    newer, _ = finished_run(runs, worker, clock=clock)
    prune_all(LocalRetention(db, policy(runs=1), None))
    assert rows_of(db, run_id)["runs"] == 1 and rows_of(db, newer)["runs"] == 1  # never a newer one instead
    worker.complete(attempt_id)
    prune_all(LocalRetention(db, policy(runs=1), None))
    assert rows_of(db, run_id)["runs"] == 0


def _log(log_dir: Path, name: str, size: int, age_s: float) -> Path:
    path = log_dir / name
    path.write_bytes(b"x" * size)
    when = os.path.getmtime(path) - age_s
    os.utime(path, (when, when))
    return path


def test_logs_beyond_the_cap_go_oldest_first_and_empty_ones_are_not_kept(
    db: LocalDatabase, runs: LocalRunRepository, worker: WorkerSession, log_dir: Path
) -> None:
    attempts = [finished_run(runs, worker, log_dir, b"")[1] for _ in range(5)]
    for age, attempt_id in zip((500, 400, 300, 200, 100), attempts):
        _log(log_dir, f"{attempt_id}.log", 1000, age)
    empty_old = _log(log_dir, f"{new_id()}.log", 0, LOG_MIN_AGE_MS / 1000 + 60)
    empty_young = _log(log_dir, "young.log", 0, 1)
    kept = LocalRetention(db, policy(log_bytes=2500), log_dir).sweep_logs()
    assert [(log_dir / f"{a}.log").exists() for a in attempts] == [False, False, False, True, True]
    assert kept == 2000 and not empty_old.exists() and empty_young.exists()


def test_the_log_of_an_active_attempt_is_never_removed(
    db: LocalDatabase, runs: LocalRunRepository, worker: WorkerSession, log_dir: Path
) -> None:
    _, attempt_id = start_run(runs, worker, log_dir, b"")
    live = _log(log_dir, f"{attempt_id}.log", 5000, 3600)
    LocalRetention(db, policy(log_bytes=4096), log_dir).sweep_logs()
    assert live.exists()


def test_orphan_logs_are_swept(db: LocalDatabase, log_dir: Path) -> None:
    orphan = _log(log_dir, f"{new_id()}.log", 10, LOG_MIN_AGE_MS / 1000 + 60)
    LocalRetention(db, policy(), log_dir).sweep_logs()
    assert not orphan.exists()


def test_a_symlink_in_the_log_directory_is_not_followed(
    db: LocalDatabase, runs: LocalRunRepository, worker: WorkerSession, log_dir: Path, tmp_path: Path
, clock: ManualClock) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious" * 10_000)
    run_id, attempt_id = finished_run(runs, worker, log_dir, clock=clock)
    (log_dir / f"{attempt_id}.log").symlink_to(victim)
    (log_dir / "planted.log").symlink_to(victim)
    old = os.lstat(log_dir / "planted.log").st_mtime - LOG_MIN_AGE_MS
    os.utime(log_dir / "planted.log", (old, old), follow_symlinks=False)
    finished_run(runs, worker, clock=clock)
    prune_all(LocalRetention(db, policy(runs=1, log_bytes=4096), log_dir))
    assert rows_of(db, run_id)["runs"] == 0
    assert victim.read_bytes() == b"precious" * 10_000
    assert (log_dir / "planted.log").is_symlink()


def test_a_stored_log_path_outside_the_log_directory_is_not_removed(
    db: LocalDatabase, runs: LocalRunRepository, worker: WorkerSession, log_dir: Path, tmp_path: Path
, clock: ManualClock) -> None:
    outside = tmp_path / "outside.log"
    outside.write_bytes(b"keep")
    run_id, attempt_id = finished_run(runs, worker, log_dir, clock=clock)
    db.connection.execute("UPDATE run_attempts SET log_path = ? WHERE id = ?", (str(outside), attempt_id))
    finished_run(runs, worker, clock=clock)
    prune_all(LocalRetention(db, policy(runs=1), log_dir))
    assert rows_of(db, run_id)["runs"] == 0 and outside.read_bytes() == b"keep"


def test_a_new_file_is_incremental_and_an_existing_one_is_converted(db_path: Path, clock: ManualClock) -> None:
    with open_database(db_path, clock=clock) as db:
        assert db.connection.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        runs = LocalRunRepository(db)
        worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=2, session_lease_ms=120_000, run_lease_ms=60_000)
        worker.register()
        ids = [finished_run(runs, worker, clock=clock)[0] for _ in range(40)]
        db.connection.execute("PRAGMA auto_vacuum = NONE")
        db.connection.execute("VACUUM")  # the layout of a file from before migration 0006
        assert db.connection.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    with open_database(db_path, clock=clock) as db:
        assert db.connection.execute("PRAGMA auto_vacuum").fetchone()[0] == 0  # opening alone never rewrites
        retention = LocalRetention(db, policy(runs=5), None)
        prune_all(retention)
        assert db.connection.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        assert db.connection.execute("SELECT count(*) FROM runs").fetchone()[0] == 5
        assert db.connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert LocalRunRepository(db).get(ids[-1]).status.value == "succeeded"


def test_free_pages_are_returned_beyond_the_reserve(db: LocalDatabase, runs: LocalRunRepository,
                                                    worker: WorkerSession, clock: ManualClock) -> None:
    for _ in range(600):
        finished_run(runs, worker, clock=clock)
    pages_before = db.connection.execute("PRAGMA page_count").fetchone()[0]
    prune_all(LocalRetention(db, policy(runs=1), None))
    free = db.connection.execute("PRAGMA freelist_count").fetchone()[0]
    pages = db.connection.execute("PRAGMA page_count").fetchone()[0]
    page_size = db.connection.execute("PRAGMA page_size").fetchone()[0]
    reserve, step = FREE_BYTES_RESERVE // page_size, VACUUM_BYTES_PER_STEP // page_size
    assert pages < pages_before and free <= max(reserve, pages // 4) + step


def test_an_unusable_log_directory_is_a_retention_error_not_a_crash(
    db: LocalDatabase, runs: LocalRunRepository, worker: WorkerSession, tmp_path: Path, clock: ManualClock
) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_bytes(b"")
    run_id, _ = finished_run(runs, worker, clock=clock)
    finished_run(runs, worker, clock=clock)
    retention = LocalRetention(db, policy(runs=1), not_a_dir)
    with pytest.raises(RetentionError, match="cannot remove logs of pruned runs"):
        retention.prune_step()
    assert rows_of(db, run_id)["runs"] == 0  # the Run went whole; its log is the sweep's to retry
    with pytest.raises(RetentionError, match="log directory"):
        retention.prune_step()


def test_check_reports_sizes_and_what_retention_removes_next(
    db: LocalDatabase, db_path: Path, runs: LocalRunRepository, worker: WorkerSession, clock: ManualClock,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from edge_runtime.cli.main import main

    for _ in range(5):
        finished_run(runs, worker, clock=clock)
    monkeypatch.delenv("EDGE_RUNTIME_CONFIG", raising=False)
    monkeypatch.setenv("EDGE_RUNTIME_RETAIN_RUNS", "2")
    # check reads the system clock: the injected clock's Runs finished in 2023, beyond 7 days.
    assert main(["--db", str(db_path), "check"]) == 0
    assert "5 finished runs kept (retain_runs=2, retain_days=7); next to remove: 5" in capsys.readouterr().out
    monkeypatch.setenv("EDGE_RUNTIME_RETAIN_DAYS", "36500")
    assert main(["--db", str(db_path), "check"]) == 0
    out = capsys.readouterr().out
    assert "auto_vacuum=INCREMENTAL" in out and "WAL " in out
    assert "5 finished runs kept (retain_runs=2, retain_days=36500); next to remove: 3" in out, out
    monkeypatch.setenv("EDGE_RUNTIME_RETAIN_RUNS", "zero")
    assert main(["--db", str(db_path), "check"]) == 1
    assert "FAIL retention: not checked" in capsys.readouterr().out


def test_the_wal_is_truncated_once_the_readers_that_pinned_it_are_gone(
    db: LocalDatabase, db_path: Path, runs: LocalRunRepository, worker: WorkerSession, clock: ManualClock
) -> None:
    wal = Path(f"{db_path}-wal")
    reader = open_database(db_path, create=False, read_only=True)
    try:
        reader.connection.execute("BEGIN")
        reader.connection.execute("SELECT count(*) FROM runs").fetchall()  # pins the WAL's start
        while wal.stat().st_size <= 1 << 20:
            finished_run(runs, worker, clock=clock)
        retention = LocalRetention(db, policy(), None)
        assert retention.prune_step() is False
        assert wal.stat().st_size > 1 << 20  # cannot reset under a reader: waited briefly, gave up
        reader.connection.execute("COMMIT")
        assert retention.prune_step() is False
        assert wal.stat().st_size == 0
    finally:
        reader.close()


def test_the_sweep_removes_only_files_named_as_attempt_logs_and_check_lists_the_others(
    capsys: pytest.CaptureFixture[str], db: LocalDatabase, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edge_runtime.cli.main import main

    shared = db_path.parent / "logs"  # the default log_dir beside the database, shared like /var/log
    shared.mkdir(mode=0o700)
    old = LOG_MIN_AGE_MS / 1000 + 60
    others = [_log(shared, name, size, old) for name, size in
              (("syslog.log", 4000), ("auth.log", 0), ("daemon.1.log", 10), ("ABCDEF0123456789ABCDEF0123456789.log", 5))]
    orphan = _log(shared, f"{new_id()}.log", 10, old)
    kept = LocalRetention(db, policy(log_bytes=1000), shared).sweep_logs()
    assert all(path.exists() for path in others) and not orphan.exists() and kept == 0
    monkeypatch.delenv("EDGE_RUNTIME_CONFIG", raising=False)
    monkeypatch.delenv("EDGE_RUNTIME_LOG_DIR", raising=False)
    assert main(["--db", str(db_path), "check"]) == 0
    out = capsys.readouterr().out
    assert f"logs 0 of " in out  # the others are not counted against the cap
    assert "4 other entries there are not Attempt logs, never counted or removed" in out
    assert "syslog.log" in out and "auth.log" in out
