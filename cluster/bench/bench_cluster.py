"""``make bench-cluster``: claim + result cycles per second of the PostgreSQL CancellationDispatch
repository on loopback, with one client and with four, against the floor: the very same SQL
statements, in the same transactions, sent by hand with psycopg and no repository logic.

Each client is its own process with its own connection and its own Runs. Figures are printed,
never asserted (the machines are noisy). A private database is created through
``EDGE_PG_ADMIN_DSN`` and dropped at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import statistics
import sys
import time
from typing import Any

import msgspec
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

REQUESTED = 1_000
LEASE_MS = 300_000


def _seed(owner_dsn: str, clients: int, per_client: int) -> None:
    with psycopg.connect(owner_dsn, autocommit=True) as owner:
        owner.execute("TRUNCATE ql3.attempt_logs, ql3.run_events, ql3.run_cancellation_dispatches, ql3.run_dispatch_leases, "
                      "ql3.run_attempts, ql3.worker_sessions, ql3.runs")
        owner.execute("INSERT INTO ql3.runs (id, status, cancel_requested_at_ms, created_at_ms) "
                      "SELECT 'r' || c || '-' || i, 'running', %s, 0 FROM generate_series(0, %s) c, "
                      "generate_series(0, %s) i", (REQUESTED, clients - 1, per_client - 1))
        owner.execute("INSERT INTO ql3.run_attempts (id, run_id, attempt, status, created_at_ms) "
                      "SELECT 'a' || substr(id, 2), id, 1, 'running', 0 FROM ql3.runs")
        owner.execute("VACUUM ANALYZE ql3.runs")
        owner.execute("VACUUM ANALYZE ql3.run_attempts")


def _repository_cycles(conn: Any, client: int, count: int) -> None:
    from cluster_postgres.cancellation_dispatch import PostgresCancellationDispatchRepository
    from edge_runtime.contract.cancellation_dispatch import ClaimCommand, DispatchResult, RecordResultCommand

    repo = PostgresCancellationDispatchRepository(conn)
    for i in range(count):
        run_id, attempt_id, token = f"r{client}-{i}", f"a{client}-{i}", f"token-{client}-{i}"
        claimed = repo.claim(ClaimCommand(run_id=run_id, attempt_id=attempt_id, requested_at_ms=REQUESTED,
                                          owner="bench", lease_token=token, lease_duration_ms=LEASE_MS))
        repo.record_result(RecordResultCommand(run_id=run_id, attempt_id=attempt_id, owner="bench", lease_token=token,
                                               expected_version=claimed.dispatch.version,
                                               result=DispatchResult.TERMINATION_REQUESTED, event_id=f"e{client}-{i}"))


def _floor_cycles(conn: Any, client: int, count: int) -> None:
    """The same statements as the repository, with the values a first claim and a result write."""
    from cluster_postgres import cancellation_dispatch as cd
    from cluster_postgres import run_events as ev
    from edge_runtime.contract.cancellation_dispatch import digest_lease_token

    cur = conn.cursor()
    encode = msgspec.json.Encoder().encode
    for i in range(count):
        run_id, attempt_id = f"r{client}-{i}", f"a{client}-{i}"
        digest = digest_lease_token(f"token-{client}-{i}")
        with conn.transaction():
            cur.execute(cd._LOCK_RUN, (run_id,)).fetchone()
            cur.execute(cd._LOCK_ATTEMPT, (attempt_id,)).fetchone()
            cur.execute(cd._LOCK, (run_id,)).fetchone()
            now = cur.execute(ev._NOW).fetchone()[0]
            cur.execute(cd._INSERT, (run_id, attempt_id, "leased", 1, 1, None, "bench", digest, now + LEASE_MS, None,
                                     None, now, now))
        with conn.transaction():
            run = cur.execute(cd._LOCK_RUN, (run_id,)).fetchone()
            cur.execute(cd._LOCK, (run_id,)).fetchone()
            now = cur.execute(ev._NOW).fetchone()[0]
            cur.execute(cd._UPDATE, ("dispatched", 2, 1, None, None, None, None, "termination_requested", now, now,
                                     run_id, 1))
            payload = encode({"attempt_id": attempt_id, "dispatch_count": 1, "result": "termination_requested"}).decode()
            cur.execute(ev._APPEND, (now, run_id, run[3], run[4], f"e{client}-{i}", "run.cancel_dispatched",
                                     f"cancel-dispatch:{attempt_id}:1", "worker", "bench", attempt_id, payload, now))


def _client(mode: str, dsn: str, client: int, count: int, start: Any, results: Any) -> None:
    from cluster_postgres.connection import connect

    conn = connect(dsn)
    body = _repository_cycles if mode == "repository" else _floor_cycles
    start.wait()
    wall, cpu = time.perf_counter(), time.process_time()
    body(conn, client, count)
    results.put((time.perf_counter() - wall, time.process_time() - cpu))
    conn.close()


def _measure(mode: str, owner_dsn: str, runtime_dsn: str, clients: int, count: int) -> tuple[float, float]:
    """(cycles per second over all clients, client CPU µs per cycle)."""
    _seed(owner_dsn, clients, count)
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(clients + 1), ctx.Queue()
    procs = [ctx.Process(target=_client, args=(mode, runtime_dsn, c, count, start, results)) for c in range(clients)]
    for p in procs:
        p.start()
    start.wait()
    began = time.perf_counter()
    timings = [results.get(timeout=600) for _ in procs]
    elapsed = time.perf_counter() - began
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a {mode} client failed (exit {p.exitcode})")
    cpu_us = sum(t[1] for t in timings) / (clients * count) * 1e6
    return clients * count / elapsed, cpu_us


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=2000, help="claim + result cycles per client per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the median is reported")
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
    try:
        migrate(owner_dsn)
        print(f"claim + record_result cycles on loopback, {args.cycles} per client, median of {args.rounds} rounds")
        print(f"{'clients':>7}  {'repository/s':>12}  {'floor/s':>9}  {'ratio':>5}  "
              f"{'repo CPU µs/cycle':>17}  {'floor CPU µs/cycle':>18}  {'Python µs/cycle':>15}")
        for clients in (1, 4):
            repo, floor, repo_cpu, floor_cpu = [], [], [], []
            for _ in range(args.rounds):
                for mode, rates, cpus in (("floor", floor, floor_cpu), ("repository", repo, repo_cpu)):
                    rate, cpu = _measure(mode, owner_dsn, runtime_dsn, clients, args.cycles)
                    rates.append(rate)
                    cpus.append(cpu)
            r, f = statistics.median(repo), statistics.median(floor)
            rc, fc = statistics.median(repo_cpu), statistics.median(floor_cpu)
            print(f"{clients:>7}  {r:>12.0f}  {f:>9.0f}  {r / f:>5.2f}  {rc:>17.0f}  {fc:>18.0f}  {rc - fc:>15.0f}")
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
