"""Storage after a simulated week at 14,400 Runs a day (docs/storage.md, storage bounds): database +
WAL + logs, with the clock injected and the default retention settings, against the same load
without retention.

Each Run goes through the real repository sequence (submit, start, running, finish, complete) and
writes a 1 KB log, one every 6 simulated seconds; retention runs in small steps every 10 Runs (a
simulated minute), as the service's idle hook would. The peak also counts database + WAL just
before each retention check (the WAL at its largest, before truncation). The connection runs
with ``synchronous = OFF`` only so a week takes minutes: it changes when bytes are synced, not
which bytes are stored.
"""

from __future__ import annotations

import os
from pathlib import Path

import common

from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.retention import LocalRetention, RetentionPolicy
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.config import ServiceConfig
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.worker import WorkerSession
from tests.support.retention import finished_run

RUNS_PER_DAY = 14_400
STEP_MS = 86_400_000 // RUNS_PER_DAY
OUTPUT = b"x" * 1023 + b"\n"
MIB = 1 << 20


def _bytes(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _footprint(db_path: Path, log_dir: Path) -> tuple[int, int, int]:
    logs = sum(p.stat().st_size for p in log_dir.iterdir() if p.is_file())
    return _bytes(db_path), _bytes(Path(f"{db_path}-wal")), logs


def _simulate(workdir: Path, days: float, retain: bool, samples: int) -> tuple[list[list[str]], float, int]:
    workdir.mkdir(parents=True, exist_ok=True)
    db_path, log_dir = workdir / "edge-runtime.db", workdir / "logs"
    log_dir.mkdir(exist_ok=True)
    clock = ManualClock(1_700_000_000_000)
    defaults = ServiceConfig()
    policy = RetentionPolicy(retain_runs=defaults.retain_runs, retain_days=defaults.retain_days,
                             log_total_max_bytes=defaults.log_total_max_bytes)
    rows, peak, peak_files = [], 0, 0
    with open_database(db_path, clock=clock) as db:
        db.connection.execute("PRAGMA synchronous = OFF")
        runs = LocalRunRepository(db)
        worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="bench", slots=2, session_lease_ms=120_000, run_lease_ms=60_000)
        worker.register()
        retention = LocalRetention(db, policy, log_dir) if retain else None
        total = int(days * RUNS_PER_DAY)
        every = max(1, total // samples)
        for index in range(1, total + 1):
            clock.advance(STEP_MS - 10)
            if index % 10 == 0:
                worker.heartbeat(2)
            finished_run(runs, worker, log_dir, OUTPUT, clock=clock)
            if retention is not None and index % 10 == 0:  # every simulated minute
                peak_files = max(peak_files, _bytes(db_path) + _bytes(Path(f"{db_path}-wal")))  # WAL before truncation
                while retention.prune_step():
                    pass
            if index % every == 0 or index == total:
                size, wal, logs = _footprint(db_path, log_dir)
                peak = max(peak, size + wal + logs, peak_files + logs)
                rows.append([f"{index / RUNS_PER_DAY:.2f}", f"{index:,}", f"{size / MIB:.2f}", f"{wal / MIB:.2f}",
                             f"{logs / MIB:.2f}", f"{(size + wal + logs) / MIB:.2f}"])
        c = db.connection
        page, pages, free = (c.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_size", "page_count", "freelist_count"))
        kept = c.execute("SELECT count(*) FROM runs").fetchone()[0]
    return rows, (pages - free) * page / kept, peak


def run(workdir: Path, quick: bool) -> None:
    days = 0.25 if quick else 7.0
    header = ["day", "runs", "db MiB", "WAL MiB", "logs MiB", "total MiB"]
    rows, per_run, peak = _simulate(workdir / "with-retention", days, True, 14)
    common.print_table(
        f"retention: a simulated {days:g}-day week at {RUNS_PER_DAY:,} Runs/day, 1 KB logs, defaults "
        f"(target: total <= 16 MiB and flat; peak {peak / MIB:.2f} MiB)", header, rows)
    baseline_days = 0.1 if quick else 1.0
    before, before_per_run, _ = _simulate(workdir / "without-retention", baseline_days, False, 4)
    common.print_table(f"retention: the same load without retention, {baseline_days:g} day (before)", header, before)
    week = float(before[-1][-1]) * 7 / baseline_days
    common.print_table(
        "retention: stored bytes per finished Run kept (target <= 1.5 KB; README, Flash writes, says why not)",
        ["figure", "value"],
        [["bytes per Run kept (used pages / Runs), with retention", f"{per_run:,.0f}"],
         ["bytes per Run, without retention", f"{before_per_run:,.0f}"],
         ["week without retention, extrapolated MiB", f"{week:,.0f}"]],
    )
    for path in workdir.rglob("*.log"):
        os.unlink(path)
