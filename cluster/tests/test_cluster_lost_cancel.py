"""A lost worker's cancel is resolved: met by the loss once its session expired plus the grace.

Two real ``edge-runtime-cluster serve`` workers at real database time. The worker running a Run
is SIGKILLed and the Run cancelled while it is dead. ``show`` says what the database knows: the
Run Lease expired, the worker's session expired. Until the session's expiry plus
``CANCEL_LOSS_GRACE_MS`` the cancel waits for that worker; then the other worker's orphan sweep
ends the Attempt ``lost`` and the Run ``cancelled``, the reason saying the cancel was met by the
loss.
"""

from __future__ import annotations

from typing import Any

from cluster_postgres import cli as cluster_cli
from cluster_postgres.store import PostgresStore
from edge_runtime.contract.run_lease import CANCEL_LOSS_GRACE_MS, REASON_CANCEL_MET_BY_LOSS
from edge_runtime.contract.runs import CancelRunCommand, SubmitRunCommand
from tests.support.cluster_serve_harness import Worker, kill_attempt_groups, live_group_members, private_root, wait_for

SHORT_LEASES = {"EDGE_RUNTIME_SESSION_LEASE_MS": "2000", "EDGE_RUNTIME_RUN_LEASE_MS": "3000",
                "EDGE_RUNTIME_POLL_INTERVAL_MS": "1000"}


def _status(db: Any, run_id: str) -> str:
    return db.execute("SELECT status FROM ql3.runs WHERE id = %s", (run_id,)).fetchone()[0]


def test_a_dead_workers_cancelled_run_is_resolved_by_another_worker_after_the_grace(
        pg_database: Any, owner: Any, capsys: Any) -> None:
    pg_database.reset(owner, None)  # real database time
    db = owner
    store = PostgresStore(pg_database.runtime_dsn)
    with private_root() as root:
        doomed = Worker(root, "lc1", pg_database.runtime_dsn, slots=1, env=SHORT_LEASES)
        survivor = Worker(root, "lc2", pg_database.runtime_dsn, slots=1, env=SHORT_LEASES)
        try:
            doomed.start()
            wait_for(lambda: db.execute("SELECT count(*) FROM ql3.worker_sessions WHERE worker_id = 'lc1' "
                                        "AND status = 'online'").fetchone()[0] == 1, 60, "lc1 registered")
            run_id = store.runs.submit(SubmitRunCommand(argv=["sleep", "300"])).id
            wait_for(lambda: _status(db, run_id) == "running", 60, "lc1 running the run")
            survivor.start()
            wait_for(lambda: db.execute("SELECT count(*) FROM ql3.worker_sessions WHERE worker_id = 'lc2' "
                                        "AND status = 'online'").fetchone()[0] == 1, 60, "lc2 registered")
            doomed.kill9()
            store.runs.request_cancel(CancelRunCommand(run_id=run_id, reason="stop it"))
            session_expiry = db.execute("SELECT lease_expires_at_ms FROM ql3.worker_sessions "
                                        "WHERE worker_id = 'lc1'").fetchone()[0]
            # The Run Lease (3 s) was renewed on its own beat, not with the session (2 s): wait for both to
            # have passed by database time, or show could still rightly call the lease live.
            lease_expiry = db.execute("SELECT expires_at_ms FROM ql3.run_dispatch_leases WHERE run_id = %s "
                                      "AND status = 'leased'", (run_id,)).fetchone()[0]
            wait_for(lambda: db.execute("SELECT ql3.now_ms()").fetchone()[0] > max(session_expiry, lease_expiry),
                     30, "lc1's session and Run Lease expired by database time")
            if _status(db, run_id) == "running":  # within the grace (the usual case): show says why it waits
                assert cluster_cli.main(["show", "--dsn", pg_database.runtime_dsn, run_id]) == 0
                shown = capsys.readouterr().out
                assert "cancel     requested" in shown
                assert "run lease  leased (expired)  worker=lc1" in shown
                assert "worker     lc1  session online (expired)" in shown

            wait_for(lambda: _status(db, run_id) != "running", CANCEL_LOSS_GRACE_MS / 1000 + 60,
                     "the cancel resolved by the loss")
            assert _status(db, run_id) == "cancelled"
            status, reason, finished, pgid = db.execute(
                "SELECT status, end_reason, finished_at_ms, pgid FROM ql3.run_attempts WHERE run_id = %s",
                (run_id,)).fetchone()
            assert (status, reason) == ("lost", REASON_CANCEL_MET_BY_LOSS)
            assert finished >= session_expiry + CANCEL_LOSS_GRACE_MS  # not before the grace, by database time
            ended = db.execute("SELECT actor_id, payload->>'reason', payload->>'attempt_status' FROM ql3.run_events "
                               "WHERE run_id = %s AND type = 'run.cancelled'", (run_id,)).fetchall()
            assert len(ended) == 1 and ended[0][0].startswith("lc2") and ended[0][1:] == (REASON_CANCEL_MET_BY_LOSS,
                                                                                          "lost")
            assert db.execute("SELECT status FROM ql3.run_dispatch_leases WHERE run_id = %s",
                              (run_id,)).fetchone()[0] == "completed"
            # Nobody signalled the process on the dead worker's host (none can): it is left as it was.
            assert live_group_members(pgid)
            assert cluster_cli.main(["show", "--dsn", pg_database.runtime_dsn, run_id]) == 0
            shown = capsys.readouterr().out
            assert "status     cancelled" in shown and "cancel met by the loss of its worker" in shown
        finally:
            doomed.kill9()
            survivor.stop()
            kill_attempt_groups(db)
            store.close()
