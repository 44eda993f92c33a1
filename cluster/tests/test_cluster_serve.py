"""Scale out: several ``edge-runtime-cluster serve`` workers on one PostgreSQL (cluster-profile.md §6).

- Several hosts: three workers, each in a network namespace of its own reaching a throwaway
  PostgreSQL over its veth (or, where namespaces cannot be made, as separate processes), 210 Runs
  submitted at once all end, each executed exactly once; no session above its capacity (sampled
  from the database while they run); each cancel is delivered by the worker whose host runs the
  process, and the cancelled process tree dies (latency printed, never asserted).
- A worker dies (kill -9 of one serve): see test_a_killed_worker_....
- The database fails over: see test_workers_follow_a_failover_....

Figures (cancel latency, resume time) are printed (``-s`` shows them); only liveness guards
fail a test on time.
"""

from __future__ import annotations

import collections
import contextlib
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cluster_postgres.migrations import migrate
from cluster_postgres.readiness import bootstrap
from cluster_postgres.store import PostgresStore
from edge_runtime.contract.run_lease import REASON_ORPHAN_STARTING, REASON_ORPHAN_UNSTARTED, REASON_WORKER_GONE
from edge_runtime.contract.runs import CancelRunCommand, InvalidRunCommandError, SubmitRunCommand
from edge_runtime.service.worker import RunGrant, WorkerSession
from tests.support.ha_cluster import HaPair, unavailable_reason
from tests.support.pg_test_database import unavailable
from tests.support.cluster_serve_harness import (
    Namespace,
    Worker,
    kill_attempt_groups,
    live_group_members,
    netns_unavailable_reason,
    private_root,
    wait_for,
)
from tests.support.pg_unfenced_attempts import take_queued_run

ACTIVE = ("created", "queued", "dispatching", "running")
#: A task that appends its Run id to the ledger file given as $0: one line per execution.
def ledger_task(ledger: Path, then: str = "") -> list[str]:
    return ["sh", "-c", 'echo "$EDGE_RUNTIME_RUN_ID" >> "$0"' + (f"; {then}" if then else ""), str(ledger)]


def ledger_counts(ledger: Path) -> collections.Counter[str]:
    return collections.Counter(ledger.read_text().split()) if ledger.exists() else collections.Counter()


def _dsn(host: str, port: int, user: str, dbname: str = "qinglong") -> str:
    return f"host={host} port={port} user={user} dbname={dbname} connect_timeout=3"


def active_count(conn: Any) -> int:
    return conn.execute(f"SELECT count(*) FROM ql3.runs WHERE status IN {ACTIVE}").fetchone()[0]


def assert_event_logs_have_no_gap(conn: Any) -> None:
    gaps = conn.execute(
        "SELECT r.id, r.event_sequence, count(e.sequence), min(e.sequence), max(e.sequence) "
        "FROM ql3.runs r LEFT JOIN ql3.run_events e ON e.run_id = r.id GROUP BY r.id, r.event_sequence "
        "HAVING count(e.sequence) <> r.event_sequence OR min(e.sequence) <> 1 OR max(e.sequence) <> r.event_sequence"
    ).fetchall()
    assert gaps == []


class CapacitySampler(threading.Thread):
    """Samples, from the database, each worker's active Run Leases against its capacity."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.stop = threading.Event()
        self.samples = 0
        self.peak: dict[str, int] = collections.defaultdict(int)
        self.over: list[tuple[str, int, int]] = []
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    rows = conn.execute(
                        "SELECT l.worker_id, count(*), min(least(s.max_concurrent_runs, s.available_slots)), "
                        "min(s.max_concurrent_runs) FROM ql3.run_dispatch_leases l "
                        "JOIN ql3.worker_sessions s ON s.worker_id = l.worker_id AND s.generation = l.session_generation "
                        "WHERE l.status = 'leased' GROUP BY l.worker_id").fetchall()
                    self.samples += 1
                    for worker_id, active, _, capacity in rows:
                        self.peak[worker_id] = max(self.peak[worker_id], active)
                        if active > capacity:
                            self.over.append((worker_id, active, capacity))
                    time.sleep(0.02)
        except psycopg.Error as exc:
            self.errors.append(str(exc))


def _group_gone(pgid: int) -> bool:
    return not live_group_members(pgid)


# ====================================================================== several hosts


def test_three_workers_on_three_hosts_run_210_runs_exactly_once_within_capacity_and_cancel_on_the_right_host(
        tmp_path: Path) -> None:
    reason = unavailable_reason()
    if reason is not None:
        unavailable(reason)
    netns_reason = netns_unavailable_reason()
    mode = "netns" if netns_reason is None else "processes"
    print(f"\nmulti-host mode: {mode}" + (f" (network namespaces unavailable: {netns_reason})" if netns_reason else ""))
    slots = 3
    namespaces = [Namespace(i) for i in range(1, 4)] if mode == "netns" else []
    hba = tuple(f"host all all {ns.subnet} trust" for ns in namespaces)
    with private_root() as root:
        try:
            for ns in namespaces:
                ns.create()
            with HaPair(standby=False, listen_addresses="*" if namespaces else "127.0.0.1", hba=hba,
                        log_statements=False) as ha:
                port = ha.primary.port
                bootstrap(ha.primary.dsn, "qinglong")
                migrate(_dsn("127.0.0.1", port, "ql3_migration_owner"))
                superuser = _dsn("127.0.0.1", port, "postgres")
                workers = [
                    Worker(root, f"host-{i}", _dsn(ns.host_ip if namespaces else "127.0.0.1", port, "ql3_runtime"),
                           slots=slots, namespace=ns if namespaces else None)
                    for i, ns in zip(range(1, 4), namespaces or [None] * 3)
                ]
                with psycopg.connect(superuser, autocommit=True) as db:
                    try:
                        _several_hosts(db, workers, superuser, _dsn("127.0.0.1", port, "ql3_runtime"), tmp_path,
                                       slots, mode)
                    finally:
                        for worker in workers:
                            worker.kill9()
                        kill_attempt_groups(db)
        finally:
            for ns in namespaces:
                ns.delete()


def _several_hosts(db: Any, workers: list[Worker], superuser: str, client_dsn: str, tmp_path: Path, slots: int,
                   mode: str) -> None:
    for worker in workers:
        worker.start()
    wait_for(lambda: db.execute("SELECT count(*) FROM ql3.worker_sessions WHERE status = 'online'").fetchone()[0] == 3,
             60, "three workers registered")
    if mode == "netns":  # each reached the database from its own namespace's address, over its veth
        peers = {row[0] for row in db.execute(
            "SELECT host(client_addr) FROM pg_stat_activity WHERE usename = 'ql3_runtime'").fetchall()}
        assert {w.namespace.ns_ip for w in workers} <= peers
    ledger = tmp_path / "ledger"
    sampler = CapacitySampler(superuser)
    sampler.start()
    store = PostgresStore(client_dsn)
    try:
        submitted = [store.runs.submit(SubmitRunCommand(argv=ledger_task(ledger, "sleep 0.2"))).id for _ in range(210)]
        started = time.monotonic()
        wait_for(lambda: active_count(db) == 0, 300, "all 210 runs ended", interval=0.2)
        elapsed = time.monotonic() - started
    finally:
        sampler.stop.set()
        sampler.join(10)
    counts = ledger_counts(ledger)
    assert sorted(counts) == sorted(submitted) and set(counts.values()) == {1}  # each executed exactly once
    statuses = dict(db.execute("SELECT id, status FROM ql3.runs").fetchall())
    assert {statuses[run_id] for run_id in submitted} == {"succeeded"}
    assert set(dict(db.execute("SELECT run_id, count(*) FROM ql3.run_attempts GROUP BY run_id").fetchall()).values()) == {1}
    per_worker = dict(db.execute("SELECT worker_id, count(*) FROM ql3.run_dispatch_leases GROUP BY worker_id").fetchall())
    assert set(per_worker) == {w.worker_id for w in workers} and min(per_worker.values()) > 0
    assert sampler.errors == [] and sampler.samples > 0 and max(sampler.peak.values()) > 0
    assert sampler.over == []  # no session ever above its capacity
    assert max(sampler.peak.values()) <= slots
    print(f"210 runs on 3 workers: {elapsed:.1f} s; runs per worker {per_worker}; "
          f"peak leases per worker {dict(sampler.peak)} (capacity {slots}, {sampler.samples} samples)")

    # Cancels: fill every slot with a process tree, then cancel them all at once.
    trees = [store.runs.submit(SubmitRunCommand(argv=["sh", "-c", "sleep 120 & sleep 120 & wait"])).id
             for _ in range(3 * slots)]
    wait_for(lambda: db.execute("SELECT count(*) FROM ql3.runs WHERE status = 'running' AND id = ANY(%s)",
                                (trees,)).fetchone()[0] == len(trees), 60, "the process trees running")
    where = {run_id: (worker_id, pgid) for run_id, worker_id, pgid in db.execute(
        "SELECT a.run_id, l.worker_id, a.pgid FROM ql3.run_attempts a JOIN ql3.run_dispatch_leases l "
        "ON l.attempt_id = a.id WHERE a.run_id = ANY(%s)", (trees,)).fetchall()}
    assert all(len(live_group_members(pgid)) == 3 for _, pgid in where.values())
    requested: dict[str, float] = {}
    for run_id in trees:
        store.runs.request_cancel(CancelRunCommand(run_id=run_id))
        requested[run_id] = time.monotonic()
    latency: dict[str, float] = {}

    def all_gone() -> bool:
        for run_id, (_, pgid) in where.items():
            if run_id not in latency and _group_gone(pgid):
                latency[run_id] = time.monotonic() - requested[run_id]
        return len(latency) == len(where)

    wait_for(all_gone, 60, "every cancelled process tree gone", interval=0.005)
    wait_for(lambda: db.execute("SELECT count(*) FROM ql3.runs WHERE status = 'cancelled' AND id = ANY(%s)",
                                (trees,)).fetchone()[0] == len(trees), 60, "the cancelled runs ended")
    # Delivered by the worker whose host runs the process: the dispatch event's actor, and its log.
    for run_id, actor in db.execute("SELECT run_id, actor_id FROM ql3.run_events WHERE type = 'run.cancel_dispatched' "
                                    "AND run_id = ANY(%s)", (trees,)).fetchall():
        assert actor.split("#")[0] == where[run_id][0]
    for worker in workers:
        mine = {run_id for run_id, (worker_id, _) in where.items() if worker_id == worker.worker_id}
        logged = {run_id for run_id in trees if f"cancel.dispatched run={run_id}" in worker.log_text()}
        assert logged == mine
    assert_event_logs_have_no_gap(db)
    store.close()
    ms = sorted(v * 1000 for v in latency.values())
    print(f"cancel latency (request committed -> process tree gone), {len(ms)} cancels on "
          f"{len({w for w, _ in where.values()})} workers: median {statistics.median(ms):.0f} ms, max {ms[-1]:.0f} ms")


# ====================================================================== a worker dies

#: Short leases, so a dead worker's leases run out within seconds (both at their minimum range).
SHORT_LEASES = {"EDGE_RUNTIME_SESSION_LEASE_MS": "2000", "EDGE_RUNTIME_RUN_LEASE_MS": "3000",
                "EDGE_RUNTIME_POLL_INTERVAL_MS": "1000"}


#: The term of the dead worker's ("ghost") session and Run Leases while it lives: a fifth of it
#: between renewals leaves room for a slow host; once it dies they run out within it.
GHOST_LEASE_MS = 5_000


class GhostAlive(threading.Thread):
    """A worker that took two Runs and lives, heartbeating its session and renewing both Run Leases,
    until :meth:`die`: only then do its leases start running out (by database time)."""

    def __init__(self, ghost: WorkerSession, grants: list[RunGrant]) -> None:
        super().__init__(daemon=True)
        self.ghost, self.grants = ghost, grants
        self.dead = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        while not self.dead.wait(GHOST_LEASE_MS / 5 / 1000):
            try:
                self.ghost.heartbeat(self.ghost.session.available_slots)
                for grant in self.grants:
                    self.ghost.renew(grant)
            except Exception as exc:  # noqa: BLE001 - kept, and raised by die() in the test's thread
                self.error = exc
                return

    def die(self) -> None:
        self.dead.set()
        self.join(30)
        assert self.error is None, f"the ghost worker could not stay alive: {self.error!r}"


def _attempts(db: Any, run_id: str) -> list[tuple[Any, ...]]:
    return db.execute("SELECT a.id, a.status, a.end_reason, a.pgid, l.worker_id FROM ql3.run_attempts a "
                      "LEFT JOIN ql3.run_dispatch_leases l ON l.attempt_id = a.id WHERE a.run_id = %s "
                      "ORDER BY a.attempt", (run_id,)).fetchall()


def _status(db: Any, run_id: str) -> str:
    return db.execute("SELECT status FROM ql3.runs WHERE id = %s", (run_id,)).fetchone()[0]


def test_a_killed_worker_loses_its_running_attempts_its_unstarted_runs_run_elsewhere_and_its_cancels_wait_for_it(
        pg_database: Any, owner: Any, runtime: Any, tmp_path: Path) -> None:
    pg_database.reset(owner, None)  # real database time: leases run out by the database's clock
    db = owner
    ledger = tmp_path / "ledger"
    store = PostgresStore(pg_database.runtime_dsn)
    with private_root() as root:
        workers = {name: Worker(root, name, pg_database.runtime_dsn, slots=2, env=SHORT_LEASES)
                   for name in ("w1", "w2", "w3")}
        ghost_alive: GhostAlive | None = None
        try:
            # A worker that took two Runs and dies before it ran them: one never crossed the start barrier
            # (claimed), one crossed it without recording a process (starting).
            from cluster_postgres.worker_lease import PostgresWorkerLeaseRepository

            ghost = WorkerSession(PostgresWorkerLeaseRepository(runtime()), worker_id="ghost", slots=2,
                                  session_lease_ms=GHOST_LEASE_MS, run_lease_ms=GHOST_LEASE_MS)
            ghost.register()
            unstarted = store.runs.submit(SubmitRunCommand(argv=ledger_task(ledger))).id
            starting = store.runs.submit(SubmitRunCommand(argv=ledger_task(ledger))).id
            grants = [ghost.claim(unstarted, take_queued_run(store.runs, unstarted, actor_id="ghost").id),
                      ghost.start(starting)]
            assert all(isinstance(grant, RunGrant) for grant in grants)
            # It lives (heartbeats, renews) until w1 is full and w2 and w3 are up, however slowly
            # they start: a Run of its found orphaned before then would be w1's to take.
            ghost_alive = GhostAlive(ghost, grants)
            ghost_alive.start()

            w1 = workers["w1"]
            w1.start()
            long_runs = [store.runs.submit(SubmitRunCommand(argv=ledger_task(ledger, "exec sleep 120"))).id
                         for _ in range(2)]
            wait_for(lambda: all(_status(db, r) == "running" for r in long_runs), 60, "w1 running both long runs")
            assert {_attempts(db, r)[0][4] for r in long_runs} == {"w1"}
            workers["w2"].start()
            workers["w3"].start()
            wait_for(lambda: db.execute("SELECT count(*) FROM ql3.worker_sessions WHERE worker_id IN ('w2', 'w3') "
                                        "AND status = 'online'").fetchone()[0] == 2, 60, "w2 and w3 registered")

            assert all(_attempts(db, r)[0][1] in ("claimed", "starting") for r in (unstarted, starting))
            ghost_alive.die()  # from now on its leases run out by database time, with w1 full
            w1.kill9()
            lost_run, waiting_run = long_runs
            store.runs.request_cancel(CancelRunCommand(run_id=waiting_run))  # acknowledged while w1 is dead
            short = [store.runs.submit(SubmitRunCommand(argv=ledger_task(ledger))).id for _ in range(6)]

            wait_for(lambda: _status(db, lost_run) == "failed", 60, "the dead worker's running Attempt ended")
            wait_for(lambda: all(_status(db, r) != "queued" and _status(db, r) not in ACTIVE
                                 for r in [*short, unstarted, starting]), 60, "the other runs ended")

            # Its running Attempt: lost with the reason, after its Run Lease ran out by database time,
            # ended by a live worker, never retried; the process is left alone (it cannot be proved stopped).
            [(attempt_id, status, end_reason, pgid, _)] = _attempts(db, lost_run)
            assert (status, end_reason) == ("lost", REASON_WORKER_GONE)
            expires, completed = db.execute("SELECT expires_at_ms, completed_at_ms FROM ql3.run_dispatch_leases "
                                            "WHERE attempt_id = %s", (attempt_id,)).fetchone()
            assert expires <= completed  # ended only once its lease had run out, by database time
            ender = db.execute("SELECT actor_id FROM ql3.run_events WHERE run_id = %s AND type = 'run.failed'",
                               (lost_run,)).fetchone()[0]
            assert ender.split("#")[0] in ("w2", "w3")
            assert live_group_members(pgid)  # still running on the dead worker's host: never signalled, never rerun
            # Its Runs that never started: the unstarted one requeued and ran elsewhere, once; the one
            # past the barrier failed (a process may have begun).
            first, second = _attempts(db, unstarted)
            assert first[1:3] == ("lost", REASON_ORPHAN_UNSTARTED) and second[1] == "succeeded"
            assert second[4] in ("w2", "w3") and _status(db, unstarted) == "succeeded"
            [(_, status, end_reason, _, _)] = _attempts(db, starting)
            assert (status, end_reason, _status(db, starting)) == ("lost", REASON_ORPHAN_STARTING, "failed")
            assert {_status(db, r) for r in short} == {"succeeded"}

            # Its cancelled Attempt: the cancel stays pending for w1 (no other host can signal it).
            [(waiting_attempt, status, _, waiting_pgid, _)] = _attempts(db, waiting_run)
            assert status == "running" and _status(db, waiting_run) == "running"
            assert db.execute("SELECT count(*) FROM ql3.run_events WHERE run_id = %s AND type = "
                              "'run.cancel_dispatched'", (waiting_run,)).fetchone()[0] == 0
            assert len(live_group_members(waiting_pgid)) == 1

            # w1 comes back: it re-adopts the process and delivers the pending cancel itself.
            w1.start()
            wait_for(lambda: _status(db, waiting_run) == "cancelled", 60, "the pending cancel delivered by w1")
            wait_for(lambda: _group_gone(waiting_pgid), 30, "the cancelled process gone")
            actor = db.execute("SELECT actor_id FROM ql3.run_events WHERE run_id = %s AND type = "
                               "'run.cancel_dispatched'", (waiting_run,)).fetchone()[0]
            assert actor.startswith("w1#")
            assert "adopted=1" in w1.log_text()

            counts = ledger_counts(ledger)
            assert max(counts.values()) == 1  # nothing ran twice
            assert {r for r in [*short, unstarted, *long_runs]} == set(counts)
            assert_event_logs_have_no_gap(db)
        finally:
            if ghost_alive is not None:
                ghost_alive.dead.set()
            for worker in workers.values():
                worker.kill9()
            kill_attempt_groups(db)
            store.close()


# ====================================================================== failover


class Submitter(threading.Thread):
    """Submits a Run every 50 ms through the multi-host DSN; keeps the ids the database acknowledged."""

    def __init__(self, dsn: str, ledger: Path) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.ledger = ledger
        self.stop = threading.Event()
        self.acked: list[tuple[float, str]] = []
        self.failures = 0

    def run(self) -> None:
        from edge_runtime.contract.errors import EdgeRuntimeError

        store = None
        while not self.stop.is_set():
            try:
                store = store or PostgresStore(self.dsn)
                run = store.runs.submit(SubmitRunCommand(argv=ledger_task(self.ledger)))
                self.acked.append((time.monotonic(), run.id))
            except EdgeRuntimeError:
                self.failures += 1  # not acknowledged: the outcome may be either, and is not counted
            self.stop.wait(0.05)
        if store is not None:
            store.close()


def _retry(action: Any, timeout: float = 60) -> Any:
    """Run ``action`` until the database acknowledges it (a liveness guard bounds the wait)."""
    from edge_runtime.contract.errors import EdgeRuntimeError

    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except EdgeRuntimeError as exc:
            if not exc.retryable or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_workers_follow_a_failover_through_a_multi_host_dsn_and_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    reason = unavailable_reason()
    if reason is not None:
        unavailable(reason)
    ledger = tmp_path / "ledger"
    with private_root() as root, HaPair(log_statements=False) as ha:
        primary, standby = ha.primary, ha.standby
        bootstrap(primary.dsn, "qinglong")
        migrate(_dsn("127.0.0.1", primary.port, "ql3_migration_owner"))
        ha.wait_streaming()
        with psycopg.connect(primary.dsn, autocommit=True) as admin:  # acknowledged = on both servers
            admin.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            admin.execute("SELECT pg_reload_conf()")
            wait_for(lambda: admin.execute("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
                                           ).fetchone()[0] == 1, 30, "synchronous replication")
        multi = (f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=ql3_runtime dbname=qinglong "
                 "target_session_attrs=read-write connect_timeout=2")
        workers = [Worker(root, f"f{i}", multi, slots=2) for i in range(1, 4)]
        store = PostgresStore(multi)
        submitter = Submitter(multi, ledger)
        try:
            for worker in workers:
                worker.start()
            on_primary = _dsn("127.0.0.1", primary.port, "postgres")
            with psycopg.connect(on_primary, autocommit=True) as db:
                wait_for(lambda: db.execute("SELECT count(*) FROM ql3.worker_sessions WHERE status = 'online'"
                                            ).fetchone()[0] == 3, 60, "three workers registered")
                long_runs = [store.runs.submit(SubmitRunCommand(argv=["sleep", "120"])).id for _ in range(3)]
                wait_for(lambda: all(_status(db, r) == "running" for r in long_runs), 60, "long runs running")
                store.runs.request_cancel(CancelRunCommand(run_id=long_runs[0]))  # acknowledged before
            submitter.start()
            time.sleep(2)
            killed = time.monotonic()
            ha.primary.stop("immediate")
            ha.promote()
            promoted = time.monotonic()
            for run_id in long_runs[1:]:  # acknowledged after: on the new primary
                _retry(lambda: store.runs.request_cancel(CancelRunCommand(run_id=run_id)))
            on_new = _dsn("127.0.0.1", standby.port, "postgres")
            with psycopg.connect(on_new, autocommit=True) as db:
                promoted_ms = db.execute("SELECT ql3.now_ms()").fetchone()[0]

                def first_after() -> float | None:
                    after = [run_id for at, run_id in submitter.acked if at > promoted]
                    done = after and db.execute("SELECT max(finished_at_ms) FROM ql3.runs WHERE id = ANY(%s) AND "
                                                "status = 'succeeded'", (after,)).fetchone()[0]
                    return time.monotonic() - promoted if done else None

                resumed_s = wait_for(first_after, 60, "a run submitted after the promotion succeeded")
                per_worker = wait_for(lambda: (lambda rows: rows if len(rows) == 3 else None)(dict(db.execute(
                    "SELECT worker_id, min(acquired_at_ms) - %s FROM ql3.run_dispatch_leases WHERE acquired_at_ms > %s "
                    "GROUP BY worker_id", (promoted_ms, promoted_ms)).fetchall())), 60, "every worker took work again")
                time.sleep(1)
                submitter.stop.set()
                submitter.join(30)
                wait_for(lambda: active_count(db) == 0, 120, "every run ended", interval=0.2)

                acked = [run_id for _, run_id in submitter.acked]
                assert len(acked) > 20 and any(at > promoted for at, _ in submitter.acked)
                statuses = dict(db.execute("SELECT id, status FROM ql3.runs WHERE id = ANY(%s)", (acked,)).fetchall())
                assert sorted(statuses) == sorted(acked)  # every acknowledged submit survived
                assert set(statuses.values()) == {"succeeded"}
                cancelled = db.execute("SELECT id FROM ql3.runs WHERE id = ANY(%s) AND status = 'cancelled' "
                                       "AND cancel_requested_at_ms IS NOT NULL", (long_runs,)).fetchall()
                assert len(cancelled) == 3  # every acknowledged cancel survived and was delivered
                counts = ledger_counts(ledger)
                assert all(counts[run_id] == 1 for run_id in acked) and max(counts.values()) == 1
                processes = db.execute("SELECT max(n) FROM (SELECT count(pid) AS n FROM ql3.run_attempts "
                                       "GROUP BY run_id) x").fetchone()[0]
                assert processes == 1  # no Run had a process twice
                assert_event_logs_have_no_gap(db)
            for worker in workers:
                text = worker.log_text()
                logged = [int(part.split("=", 1)[1]) for line in text.splitlines() if "service.tick_failed" in line
                          for part in line.split() if part.startswith("failures=")]
                assert all(n & (n - 1) == 0 for n in logged)  # logged at the 1st, 2nd, 4th... failure only
                assert "store.reconnected" in text
            print(f"\nfailover: primary killed, standby promoted in {promoted - killed:.1f} s; "
                  f"first run submitted after the promotion succeeded {resumed_s:.1f} s after it; "
                  f"each worker's first new lease after the promotion (database ms): {per_worker}; "
                  f"{submitter.failures} submits failed (not acknowledged) during the failover, {len(acked)} acknowledged")
        finally:
            submitter.stop.set()
            for worker in workers:
                worker.kill9()
            store.close()
            # After a failure the tasks are bounded (sleep 120) anyway; the servers go with HaPair.
            with contextlib.suppress(psycopg.OperationalError), psycopg.connect(
                    _dsn("127.0.0.1", standby.port, "postgres"), autocommit=True) as db:
                kill_attempt_groups(db)


# ====================================================================== the database unreachable


def test_a_worker_cut_off_from_the_database_keeps_its_attempt_running_backs_off_and_resumes(tmp_path: Path) -> None:
    reason = unavailable_reason()
    if reason is not None:
        unavailable(reason)
    netns_reason = netns_unavailable_reason()
    if netns_reason is not None:  # the cut is a namespace's link; the failover test covers plain processes
        pytest.skip(f"network namespaces unavailable: {netns_reason}")
    ns = Namespace(7)
    release = tmp_path / "release"
    with private_root() as root:
        try:
            ns.create()
            with HaPair(standby=False, listen_addresses="*", hba=(f"host all all {ns.subnet} trust",),
                        log_statements=False) as ha:
                port = ha.primary.port
                bootstrap(ha.primary.dsn, "qinglong")
                migrate(_dsn("127.0.0.1", port, "ql3_migration_owner"))
                # A quick fallback poll makes the worker use the database every second; short network
                # timeouts (the DSN overrides the defaults) make each try fail fast on the cut link.
                dsn = (f"host={ns.host_ip} port={port} user=ql3_runtime dbname=qinglong connect_timeout=2 "
                       "tcp_user_timeout=2000 keepalives_idle=1 keepalives_interval=1 keepalives_count=2")
                worker = Worker(root, "cut-1", dsn, slots=2, namespace=ns,
                                env={"EDGE_RUNTIME_POLL_INTERVAL_MS": "1000", "EDGE_RUNTIME_SESSION_LEASE_MS": "120000",
                                     "EDGE_RUNTIME_RUN_LEASE_MS": "120000"})
                store = PostgresStore(_dsn("127.0.0.1", port, "ql3_runtime"))
                with psycopg.connect(_dsn("127.0.0.1", port, "postgres"), autocommit=True) as db:
                    try:
                        worker.start()
                        held = store.runs.submit(SubmitRunCommand(
                            argv=["sh", "-c", 'while [ ! -e "$0" ]; do sleep 0.1; done', str(release)])).id
                        wait_for(lambda: _status(db, held) == "running", 60, "the held run running")
                        [(_, _, _, pgid, _)] = _attempts(db, held)
                        ns.cut()
                        cut_off = store.runs.submit(SubmitRunCommand(argv=["true"])).id
                        wait_for(lambda: any("service.tick_failed" in line and "failures=4" in line
                                             for line in worker.log_text().splitlines()), 120,
                                 "four failed ticks in a row")
                        assert live_group_members(pgid)  # its running Attempt is left alone meanwhile
                        assert worker.process.poll() is None
                        assert _status(db, cut_off) == "queued"
                        ns.restore()
                        restored = time.monotonic()
                        wait_for(lambda: _status(db, cut_off) == "succeeded", 120, "the worker resumed")
                        resumed_s = time.monotonic() - restored
                        release.touch()
                        wait_for(lambda: _status(db, held) == "succeeded", 60, "the held run ended normally")
                        text = worker.log_text()
                        logged = [int(part.split("=", 1)[1]) for line in text.splitlines()
                                  if "service.tick_failed" in line for part in line.split()
                                  if part.startswith("failures=")]
                        assert logged[:3] == [1, 2, 4] and all(n & (n - 1) == 0 for n in logged)
                        assert "service.recovered" in text and "store.reconnected" in text
                        # The listener reconnects on its own backoff (capped at 5 s), maybe after the loop did.
                        wait_for(lambda: "wake.listening" in worker.log_text(), 60, "the listener reconnected")
                        assert_event_logs_have_no_gap(db)
                        print(f"\nlink cut: worker resumed {resumed_s:.1f} s after the link came back; "
                              f"tick failures logged: {logged}")
                    except BaseException:
                        print(worker.log_text())  # the worker's own account of what happened
                        raise
                    finally:
                        worker.kill9()
                        kill_attempt_groups(db)
                        store.close()
        finally:
            ns.delete()


# ====================================================================== task


def test_a_worker_runs_task_as_the_device_does_from_its_own_scripts_directory(
        pg_database: Any, owner: Any, tmp_path: Path) -> None:
    pg_database.reset(owner, None)
    ledger = tmp_path / "ledger"
    store = PostgresStore(pg_database.runtime_dsn)
    with private_root() as root:
        worker = Worker(root, "tasker", pg_database.runtime_dsn, slots=2, env={"EDGE_RUNTIME_POLL_INTERVAL_MS": "1000"})
        scripts = root / "scripts"  # the default: `scripts` beside the worker's log directory
        (scripts / "jd").mkdir(parents=True)
        (scripts / "jd" / "acc.sh").write_text(f'echo "$CK $(pwd)" >> {ledger}\n')
        try:
            store.environment.set("CK", "first&second&third", secret=False)
            # The form is the contract's: every store refuses what no worker could run.
            with pytest.raises(InvalidRunCommandError, match="conc needs the name of the variable"):
                store.runs.submit(SubmitRunCommand(argv=["task", "jd/acc.sh", "conc"]))
            conc = store.runs.submit(SubmitRunCommand(argv=["task", "jd/acc.sh", "conc", "CK", "1", "3"])).id
            desi = store.runs.submit(SubmitRunCommand(argv=["task jd/acc.sh desi CK 2"])).id
            # Not checked at submit (the script is the worker's host's business): the Run fails, saying why.
            missing = store.runs.submit(SubmitRunCommand(argv=["task", "nope.sh"])).id
            worker.start()
            wait_for(lambda: all(_status(owner, r) not in ACTIVE for r in (conc, desi, missing)), 60, "the runs ended")
            assert [_status(owner, r) for r in (conc, desi, missing)] == ["succeeded", "succeeded", "failed"]
            assert sorted(ledger.read_text().splitlines()) == [f"{account} {scripts / 'jd'}"
                                                              for account in ("first", "second", "third")]
            [(_, _, reason, _, _)] = _attempts(owner, missing)
            assert reason == f"task nope.sh: no such script: {scripts / 'nope.sh'}"
            assert store.runs.get(conc).command == ["task", "jd/acc.sh", "conc", "CK", "1", "3"]  # as written
        except BaseException:
            print(worker.log_text())
            raise
        finally:
            worker.stop()
            kill_attempt_groups(owner)
            store.close()


# ====================================================================== the command itself


def test_serve_refuses_a_missing_dsn_or_a_bad_setting_before_connecting(pg_database: Any, owner: Any,
                                                                         monkeypatch: Any, capsys: Any) -> None:
    from cluster_postgres.cli import main

    monkeypatch.delenv("EDGE_RUNTIME_CLUSTER_DSN", raising=False)
    assert main(["serve"]) == 1
    assert "give --dsn or set $EDGE_RUNTIME_CLUSTER_DSN [CONFIG_INVALID]" in capsys.readouterr().err
    assert main(["serve", "--dsn", pg_database.runtime_dsn, "--slots", "0", "--log-dir", "/nonexistent"]) == 1
    assert "[CONFIG_INVALID]" in capsys.readouterr().err
    monkeypatch.setenv("EDGE_RUNTIME_RUN_LEASE_MS", "12")
    assert main(["serve", "--dsn", pg_database.runtime_dsn, "--log-dir", "/nonexistent"]) == 1
    assert "run_lease_ms" in capsys.readouterr().err
    monkeypatch.delenv("EDGE_RUNTIME_RUN_LEASE_MS")
    # The panel is the device's (its password and sessions live in the device's database): a
    # cluster worker refuses the setting instead of ignoring it.
    monkeypatch.setenv("EDGE_RUNTIME_PANEL_LISTEN", "127.0.0.1:5700")
    assert main(["serve", "--dsn", pg_database.runtime_dsn, "--log-dir", "/nonexistent"]) == 1
    assert "the Cluster Profile serves none (unset it) [CONFIG_INVALID]" in capsys.readouterr().err
    assert owner.execute("SELECT count(*) FROM worker_sessions").fetchone()[0] == 0  # nothing registered


def test_serve_stops_cleanly_on_sigterm_and_its_composition_loads_no_local_adapter(
        pg_database: Any, owner: Any, tmp_path: Path) -> None:
    import subprocess
    import sys

    pg_database.reset(owner, None)
    probe = (
        "import sys\n"
        "from pathlib import Path\n"
        "from cluster_postgres.serve import build_service\n"
        "from edge_runtime.service.config import load_config\n"
        f"build_service({pg_database.runtime_dsn!r}, load_config(env={{}}), log_dir=Path('/nonexistent'))\n"
        "print(sorted(m for m in sys.modules if m == 'apsw' or m.startswith('edge_runtime.local') or m == 'sqlite3'))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
    with private_root() as root:
        worker = Worker(root, "stopper", pg_database.runtime_dsn, slots=1)
        try:
            worker.start()
            wait_for(lambda: "recovery.done" in worker.log_text(), 60, "the worker serving")
            worker.process.send_signal(15)
            assert worker.process.wait(timeout=30) == 0
            assert "service.stopped" in worker.log_text()
            assert owner.execute("SELECT status FROM worker_sessions WHERE worker_id = 'stopper'").fetchone()[0] == "offline"
        finally:
            worker.kill9()
