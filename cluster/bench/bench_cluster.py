"""``make bench-cluster``: claim + result cycles per second of the PostgreSQL CancellationDispatch
repository on loopback, with one client and with four, against the floor: the very same SQL
statements, in the same transactions, sent by hand with psycopg and no repository logic.

Each client is its own process with its own connection and its own Runs, kept for the whole
measurement of a client count. The cycles of each side (5,000 by default, shared among the
clients) run in blocks, floor and repository alternating (the order flips every block), so a
change in the machine's load falls on both sides alike; the medians over the blocks are reported,
with the ratio of each block pair. Figures are printed, never asserted (the machines are noisy).
A private database is created through ``EDGE_PG_ADMIN_DSN`` and dropped at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import statistics
import sys
import time
from typing import Any, NamedTuple

import msgspec
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

REQUESTED = 1_000
LEASE_MS = 300_000


def _seed(owner_dsn: str, clients: int, per_client: int) -> None:
    with psycopg.connect(owner_dsn, autocommit=True) as owner:
        owner.execute("TRUNCATE ql3.schedule_fires, ql3.schedules, ql3.attempt_logs, ql3.run_events, ql3.run_cancellation_dispatches, ql3.run_dispatch_leases, "
                      "ql3.run_attempts, ql3.worker_sessions, ql3.runs")
        owner.execute("INSERT INTO ql3.runs (id, status, cancel_requested_at_ms, created_at_ms) "
                      "SELECT 'r' || c || '-' || i, 'running', %s, 0 FROM generate_series(0, %s) c, "
                      "generate_series(0, %s) i", (REQUESTED, clients - 1, per_client - 1))
        owner.execute("INSERT INTO ql3.run_attempts (id, run_id, attempt, status, created_at_ms) "
                      "SELECT 'a' || substr(id, 2), id, 1, 'running', 0 FROM ql3.runs")
        owner.execute("VACUUM ANALYZE ql3.runs")
        owner.execute("VACUUM ANALYZE ql3.run_attempts")


def _repository_cycles(conn: Any, client: int, first: int, count: int) -> None:
    from cluster_postgres.cancellation_dispatch import PostgresCancellationDispatchRepository
    from edge_runtime.contract.cancellation_dispatch import ClaimCommand, DispatchResult, RecordResultCommand

    repo = PostgresCancellationDispatchRepository(conn)
    for i in range(first, first + count):
        run_id, attempt_id, token = f"r{client}-{i}", f"a{client}-{i}", f"token-{client}-{i}"
        claimed = repo.claim(ClaimCommand(run_id=run_id, attempt_id=attempt_id, requested_at_ms=REQUESTED,
                                          owner="bench", lease_token=token, lease_duration_ms=LEASE_MS))
        repo.record_result(RecordResultCommand(run_id=run_id, attempt_id=attempt_id, owner="bench", lease_token=token,
                                               expected_version=claimed.dispatch.version,
                                               result=DispatchResult.TERMINATION_REQUESTED, event_id=f"e{client}-{i}"))


def _floor_cycles(conn: Any, client: int, first: int, count: int) -> None:
    """The same statements as the repository, with the values a first claim and a result write."""
    from cluster_postgres import cancellation_dispatch as cd
    from cluster_postgres import run_events as ev
    from edge_runtime.contract.cancellation_dispatch import digest_lease_token

    cur = conn.cursor()
    encode = msgspec.json.Encoder().encode
    for i in range(first, first + count):
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


def _client(dsn: str, client: int, start: Any, orders: Any, results: Any) -> None:
    """Run the blocks ``orders`` sends (``(mode, first, count)``; None ends) on one connection."""
    # Imported here, before any block, so that no block's time or CPU includes an import.
    import cluster_postgres.cancellation_dispatch  # noqa: F401
    import cluster_postgres.run_events  # noqa: F401
    from cluster_postgres.connection import connect

    conn = connect(dsn)
    while (order := orders.get()) is not None:
        mode, first, count = order
        body = _repository_cycles if mode == "repository" else _floor_cycles
        start.wait()
        cpu = time.process_time()
        body(conn, client, first, count)
        results.put(time.process_time() - cpu)
    conn.close()


class Block(NamedTuple):
    rate: float  #: cycles per second over all clients
    cpu_us: float  #: client CPU µs per cycle


def _measure(owner_dsn: str, runtime_dsn: str, clients: int, cycles: int, blocks: int) -> dict[str, list[Block]]:
    """``blocks`` blocks of each side, ``cycles / blocks`` cycles each, shared among ``clients``."""
    per_client = cycles // blocks // clients
    if per_client < 1:
        raise SystemExit(f"--cycles {cycles} is too few for {blocks} blocks of {clients} clients")
    _seed(owner_dsn, clients, 2 * blocks * per_client)
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(clients + 1), ctx.Queue()
    orders = [ctx.Queue() for _ in range(clients)]
    procs = [ctx.Process(target=_client, args=(runtime_dsn, c, start, orders[c], results)) for c in range(clients)]
    for p in procs:
        p.start()
    measured: dict[str, list[Block]] = {"floor": [], "repository": []}
    first = 0
    try:
        for block in range(blocks):
            for mode in ("floor", "repository") if block % 2 == 0 else ("repository", "floor"):
                for queue in orders:
                    queue.put((mode, first, per_client))
                start.wait(timeout=600)
                began = time.perf_counter()
                cpu = sum(results.get(timeout=600) for _ in procs)
                elapsed = time.perf_counter() - began
                measured[mode].append(Block(clients * per_client / elapsed, cpu / (clients * per_client) * 1e6))
                first += per_client
    finally:
        for queue in orders:
            queue.put(None)
        for p in procs:
            p.join(timeout=60)
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    if failed:
        raise SystemExit(f"a client failed (exit codes {failed})")
    return measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=5000,
                        help="claim + result cycles of each side per client count, shared among the clients")
    parser.add_argument("--blocks", type=int, default=10, help="alternating blocks the cycles are split into")
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
        print("load average (1, 5, 15 min) at the start: " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
        print(f"claim + record_result cycles on loopback: {args.cycles} per side and client count, shared among the "
              f"clients, in {args.blocks} blocks with floor and repository alternating; medians over the blocks")
        print(f"{'clients':>7}  {'repository/s':>12}  {'floor/s':>9}  {'ratio':>5}  {'block ratios':>15}  "
              f"{'repo CPU µs/cycle':>17}  {'floor CPU µs/cycle':>18}  {'Python µs/cycle':>15}")
        for clients in (1, 4):
            measured = _measure(owner_dsn, runtime_dsn, clients, args.cycles, args.blocks)
            repo, floor = measured["repository"], measured["floor"]
            ratios = [r.rate / f.rate for r, f in zip(repo, floor)]
            python_us = statistics.median(r.cpu_us - f.cpu_us for r, f in zip(repo, floor))
            print(f"{clients:>7}  {statistics.median(b.rate for b in repo):>12.0f}  "
                  f"{statistics.median(b.rate for b in floor):>9.0f}  {statistics.median(ratios):>5.2f}  "
                  f"{min(ratios):>7.2f}–{max(ratios):<7.2f}  {statistics.median(b.cpu_us for b in repo):>17.0f}  "
                  f"{statistics.median(b.cpu_us for b in floor):>18.0f}  {python_us:>15.0f}")
        print("ratio: median over the blocks of (repository/s ÷ floor/s of the same block pair), target ≥ 0.85; "
              "block ratios: their range; Python µs/cycle: median over the block pairs of the repository's client CPU "
              "per cycle minus the floor's (the repository's own Python)")
        print("load average (1, 5, 15 min) at the end: " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
