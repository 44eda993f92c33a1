"""Run timeouts on the cluster: enforced by database time through the CancellationDispatch.

Two real ``edge-runtime-cluster serve`` workers (one slot each, so each runs one of the timed-out
Runs): a Run whose Attempt outlives its ``timeout_ms`` gets a cancel request with reason
``timeout`` from the worker holding its Run Lease, the dispatch delivers it, its process group
dies and the Run ends ``cancelled``; a Run that ends within its timeout is left alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cluster_postgres.store import PostgresStore
from edge_runtime.contract.runs import SubmitRunCommand
from edge_runtime.contract.schedules import TIMEOUT_REASON
from tests.support.cluster_serve_harness import Worker, kill_attempt_groups, live_group_members, private_root, wait_for

SHORT_LEASES = {"EDGE_RUNTIME_SESSION_LEASE_MS": "2000", "EDGE_RUNTIME_RUN_LEASE_MS": "3000",
                "EDGE_RUNTIME_POLL_INTERVAL_MS": "1000"}


def _run_row(db: Any, run_id: str) -> tuple[Any, ...]:
    return db.execute("SELECT status, cancel_reason, timeout_ms FROM ql3.runs WHERE id = %s", (run_id,)).fetchone()


def test_a_timeout_on_two_workers_cancels_each_run_through_the_dispatch_by_database_time(
        pg_database: Any, owner: Any, tmp_path: Path) -> None:
    pg_database.reset(owner, None)  # real database time
    db = owner
    store = PostgresStore(pg_database.runtime_dsn)
    with private_root() as root:
        workers = [Worker(root, name, pg_database.runtime_dsn, slots=1, env=SHORT_LEASES, grace_ms=1000)
                   for name in ("t1", "t2")]
        try:
            for worker in workers:
                worker.start()
            wait_for(lambda: db.execute("SELECT count(*) FROM ql3.worker_sessions WHERE status = 'online'")
                     .fetchone()[0] == 2, 60, "both workers registered")
            timed = [store.runs.submit(SubmitRunCommand(argv=["sleep", "60"], timeout_ms=1500)).id for _ in range(2)]
            wait_for(lambda: all(_run_row(db, r)[0] not in ("created", "queued", "dispatching", "running")
                                 for r in timed), 45, "both timed-out runs ended")
            for run_id in timed:
                assert _run_row(db, run_id) == ("cancelled", TIMEOUT_REASON, 1500)
                attempt_status, pgid, worker_id, started, term_sent = db.execute(
                    "SELECT a.status, a.pgid, l.worker_id, a.started_at_ms, a.term_sent_at_ms FROM ql3.run_attempts a "
                    "JOIN ql3.run_dispatch_leases l ON l.attempt_id = a.id WHERE a.run_id = %s", (run_id,)).fetchone()
                assert attempt_status == "cancelled"
                assert term_sent - started >= 1500  # signalled not before its timeout, by database time
                assert not live_group_members(pgid)
                requester = db.execute("SELECT actor_id FROM ql3.run_events WHERE run_id = %s "
                                       "AND type = 'run.cancel_requested'", (run_id,)).fetchall()
                assert requester == [("scheduler",)]  # one request, from the scheduler hook
                dispatch = db.execute("SELECT status FROM ql3.run_cancellation_dispatches WHERE run_id = %s",
                                      (run_id,)).fetchone()
                assert dispatch is not None  # delivered through the dispatch
            ran_on = {db.execute("SELECT l.worker_id FROM ql3.run_attempts a JOIN ql3.run_dispatch_leases l "
                                 "ON l.attempt_id = a.id WHERE a.run_id = %s", (r,)).fetchone()[0] for r in timed}
            assert ran_on == {"t1", "t2"}

            within = store.runs.submit(SubmitRunCommand(argv=["sleep", "0.2"], timeout_ms=30_000)).id
            wait_for(lambda: _run_row(db, within)[0] == "succeeded", 45, "the run within its timeout succeeded")
            assert _run_row(db, within)[1] is None
        finally:
            for worker in workers:
                worker.stop()
            kill_attempt_groups(db)
            store.close()
