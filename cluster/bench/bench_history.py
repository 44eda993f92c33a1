"""``make bench-cluster`` (third part): schedule fire latency on 1 and 3 workers; retention at 100k Runs.

Fire latency: an ``@every 2s`` schedule fired by ``--workers`` ``edge-runtime-cluster serve``
processes for ``--fire-seconds``; each fire's latency is its Run's ``created_at_ms`` minus its
slot (``scheduled_for_ms``), both database time. Retention: ``--runs`` finished Runs (each with an
Attempt, two events and a stored log copy of ``--log-bytes`` incompressible bytes) written by the
owner, then ``ql3.prune_history(16)`` called as the runtime role until the default policy holds:
the time of each batch, what the history holds then, and ``attempt_logs`` bytes per Run before
(every Run's copy kept: what the cluster did before retention) and after (on disk after a VACUUM).

Figures are printed, never asserted (the machine is shared and noisy). A private database is
created through ``EDGE_PG_ADMIN_DSN`` and dropped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

CLI = Path(sys.executable).parent / "edge-runtime-cluster"


def _reset(owner: Any) -> None:
    owner.execute("TRUNCATE ql3.schedule_fires, ql3.schedules, ql3.attempt_logs, ql3.run_events, "
                  "ql3.run_cancellation_dispatches, ql3.run_dispatch_leases, ql3.run_attempts, ql3.worker_sessions, "
                  "ql3.runs")


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _quantiles(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(len(values) * 0.95))]
    return f"median {statistics.median(values):.0f}  p95 {p95:.0f}  max {values[-1]:.0f}"


def fire_latency(root: Path, owner: Any, dsn: str, workers_n: int, seconds: float) -> list[int]:
    """Slot-to-Run-created latencies (ms, database time) of an @every 2s schedule on ``workers_n`` workers."""
    from cluster_postgres.store import PostgresStore
    from edge_runtime.contract.schedules import AddScheduleCommand

    _reset(owner)
    env = {**os.environ, "EDGE_RUNTIME_CLUSTER_DSN": dsn, "XDG_STATE_HOME": str(root / "state")}
    procs = []
    for i in range(workers_n):
        with open(root / f"fire-{workers_n}-{i}.log", "wb") as out:
            procs.append(subprocess.Popen(
                [str(CLI), "serve", "--worker-id", f"fire-{workers_n}-{i}", "--slots", "2",
                 "--log-dir", str(root / f"logs-fire-{workers_n}-{i}")],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True))
    store = PostgresStore(dsn)
    try:
        deadline = time.monotonic() + 60
        while owner.execute("SELECT count(*) FROM ql3.worker_sessions WHERE status = 'online'").fetchone()[0] \
                < workers_n:
            if time.monotonic() > deadline:
                raise SystemExit(f"{workers_n} workers not online within 60 s: see {root}")
            time.sleep(0.05)
        time.sleep(1.0)
        record = store.schedules.add(AddScheduleCommand(expression="@every 2s", argv=["true"]))
        time.sleep(seconds)
        store.schedules.set_paused(record.id, True)
        return [row[0] for row in owner.execute(
            "SELECT created_at_ms - scheduled_for_ms FROM ql3.runs WHERE schedule_id = %s ORDER BY 1",
            (record.id,)).fetchall()]
    finally:
        store.close()
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def fill_history(owner: Any, runs: int, log_bytes: int) -> float:
    """``runs`` finished Runs (oldest first), each with an Attempt, two events and a log copy; seconds taken."""
    began = time.perf_counter()
    base = owner.execute("SELECT ql3.now_ms()").fetchone()[0] - runs  # every Run finished within the last days
    chunk = 10_000
    md5s = max(1, log_bytes // 16)
    for start in range(0, runs, chunk):
        end = min(runs, start + chunk)
        with owner.transaction():
            owner.execute("INSERT INTO ql3.runs (id, status, version, event_sequence, created_at_ms, finished_at_ms) "
                          "SELECT 'r' || i, 'succeeded', 2, 2, %(b)s + i, %(b)s + i FROM generate_series(%(s)s::int, %(e)s::int) i",
                          {"s": start, "e": end - 1, "b": base})
            owner.execute("INSERT INTO ql3.run_attempts (id, run_id, attempt, status, created_at_ms, finished_at_ms) "
                          "SELECT 'a' || i, 'r' || i, 1, 'succeeded', %(b)s + i, %(b)s + i FROM generate_series(%(s)s::int, %(e)s::int) i",
                          {"s": start, "e": end - 1, "b": base})
            owner.execute("INSERT INTO ql3.run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, "
                          "payload, created_at_ms) SELECT 'e' || s || '-' || i, 'r' || i, s, "
                          "CASE s WHEN 1 THEN 'run.created' ELSE 'run.succeeded' END, "
                          "CASE s WHEN 1 THEN 'run.created' ELSE 'run.finished' END, 'worker', 'bench', "
                          "'{\"status\": \"succeeded\"}', %(b)s + i FROM generate_series(%(s)s::int, %(e)s::int) i, generate_series(1, 2) s",
                          {"s": start, "e": end - 1, "b": base})
            owner.execute("INSERT INTO ql3.attempt_logs (attempt_id, content, size_bytes, worker_id, stored_at_ms) "
                          "SELECT 'a' || i, c.content, octet_length(c.content), 'bench', %(b)s + i "
                          "FROM generate_series(%(s)s::int, %(e)s::int) i CROSS JOIN LATERAL (SELECT decode(string_agg("
                          "md5(random()::text || i || g), ''), 'hex') AS content FROM generate_series(1, %(m)s::int) g) c",
                          {"s": start, "e": end - 1, "b": base, "m": md5s})
    owner.execute("VACUUM ANALYZE ql3.runs, ql3.run_attempts, ql3.run_events, ql3.attempt_logs")
    return time.perf_counter() - began


def _sizes(owner: Any) -> dict[str, int]:
    return dict(owner.execute(
        "SELECT t, pg_total_relation_size(('ql3.' || t)::regclass) FROM unnest(ARRAY['runs', 'run_events', "
        "'run_attempts', 'attempt_logs']) t").fetchall())


def retention(owner: Any, runtime_dsn: str, runs: int, log_bytes: int, cap_s: float) -> None:
    from cluster_postgres.connection import connect
    from cluster_postgres.retention import BATCH_RUNS, PostgresRetentionRepository

    _reset(owner)
    fill_s = fill_history(owner, runs, log_bytes)
    before = _sizes(owner)
    logical = owner.execute("SELECT coalesce(sum(octet_length(content)), 0) FROM ql3.attempt_logs").fetchone()[0]
    print(f"\nretention at {runs} finished Runs ({log_bytes} B incompressible log copy each; filled in {fill_s:.0f} s)")
    print(f"before: attempt_logs {before['attempt_logs'] / 2**20:.1f} MiB on disk = {before['attempt_logs'] / runs:.0f} "
          f"B per Run ({logical / runs:.0f} B of content); runs {before['runs'] / 2**20:.1f} MiB, run_events "
          f"{before['run_events'] / 2**20:.1f} MiB, run_attempts {before['run_attempts'] / 2**20:.1f} MiB")
    conn = connect(runtime_dsn)
    try:
        repository = PostgresRetentionRepository(conn)
        policy = repository.settings()
        batch_ms: list[float] = []
        deleted_total = 0
        began = time.perf_counter()
        while time.perf_counter() - began < cap_s:
            t0 = time.perf_counter()
            deleted, _, more = repository.prune(BATCH_RUNS)
            batch_ms.append((time.perf_counter() - t0) * 1000)
            deleted_total += deleted
            if not deleted:
                break
        took = time.perf_counter() - began
        held = repository.settings()
    finally:
        conn.close()
    print(f"policy: retain_runs {policy.retain_runs}, retain_days {policy.retain_days} (the defaults); "
          f"{len(batch_ms)} batches of <= {BATCH_RUNS} Runs, ms per batch: {_quantiles(batch_ms)}; "
          f"{deleted_total} Runs pruned in {took:.1f} s ({deleted_total / took:.0f} Runs/s); load avg {_load()}")
    print(f"holds then: {held.finished_runs} finished Runs ({held.runs_beyond_policy} beyond the policy"
          f"{', stopped at the time cap' if held.runs_beyond_policy else ''})")
    owner.execute("VACUUM ql3.runs, ql3.run_attempts, ql3.run_events, ql3.attempt_logs")
    after = _sizes(owner)
    kept, content = owner.execute("SELECT count(*), coalesce(sum(octet_length(content)), 0) "
                                  "FROM ql3.attempt_logs").fetchone()
    print(f"after: attempt_logs holds {kept} copies, {content / 2**20:.2f} MiB of content "
          f"({content / max(kept, 1):.0f} B per Run kept; {content / runs:.0f} B per Run ever run, falling as Runs go "
          f"on); its file stays at its high-water mark ({after['attempt_logs'] / 2**20:.1f} MiB after VACUUM) and new "
          f"copies reuse the freed space, so it grows no more")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fire-seconds", type=float, default=30.0, help="how long the schedule fires per worker count")
    parser.add_argument("--runs", type=int, default=100_000, help="finished Runs for the retention figures")
    parser.add_argument("--log-bytes", type=int, default=1024, help="bytes of each Run's stored log copy")
    parser.add_argument("--prune-cap-s", type=float, default=600.0, help="stop pruning after this long")
    args = parser.parse_args()
    admin_dsn = os.environ.get("EDGE_PG_ADMIN_DSN")
    if not admin_dsn:
        print("EDGE_PG_ADMIN_DSN is not set (e.g. host=127.0.0.1 user=postgres dbname=postgres)", file=sys.stderr)
        return 2
    from cluster_postgres.migrations import migrate
    from cluster_postgres.readiness import bootstrap

    name = f"ql3_bench_{os.getpid()}_{secrets.token_hex(3)}"
    bootstrap(admin_dsn, name)
    owner_dsn = make_conninfo(admin_dsn, user="ql3_migration_owner", dbname=name)
    runtime_dsn = make_conninfo(admin_dsn, user="ql3_runtime", dbname=name)
    root = Path(tempfile.mkdtemp(prefix="ql3-bench-history-"))
    try:
        migrate(owner_dsn)
        with psycopg.connect(owner_dsn, autocommit=True) as owner:
            print(f"\nschedule fire latency (slot time to Run created, database time, ms), @every 2s for "
                  f"{args.fire_seconds:g} s; {os.cpu_count()} CPUs, PostgreSQL on loopback")
            for count in (1, 3) if args.fire_seconds > 0 else ():
                latencies = fire_latency(root, owner, runtime_dsn, count, args.fire_seconds)
                if latencies:
                    print(f"{count} worker(s): {len(latencies)} fires, {_quantiles(latencies)}; load avg {_load()}")
                else:
                    print(f"{count} worker(s): no fire (see {root})")
            if args.runs:
                retention(owner, runtime_dsn, args.runs, args.log_bytes, args.prune_cap_s)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
