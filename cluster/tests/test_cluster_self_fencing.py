"""Self-fencing of a cluster worker (docs/monitor.md): a worker paused past its leases (SIGSTOP),
whose running Attempt another worker then ended ``lost``, learns on resuming that its session is
gone and stops that Attempt's process group (every descendant) within about a heartbeat, records
the real exit status as a ``run.fenced_end`` event beside the ``lost`` verdict (never over it),
and never logs a success the database does not hold. The same for a worker restarted with the
same id after its Attempt was ended ``lost`` while its processes ran on under their monitors. A
cancel requested while a fenced-out worker lingers is delivered or recorded as never signalled: a
Run is never ``cancelled`` with an exit code no signal caused. Only liveness guards fail on time."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from cluster_postgres.store import PostgresStore
from edge_runtime.contract.run_lease import REASON_WORKER_GONE
from edge_runtime.contract.runs import CancelRunCommand, SubmitRunCommand
from tests.support.cluster_serve_harness import Worker, kill_attempt_groups, live_group_members, private_root, wait_for

SHORT_LEASES = {"EDGE_RUNTIME_SESSION_LEASE_MS": "2000", "EDGE_RUNTIME_RUN_LEASE_MS": "3000",
                "EDGE_RUNTIME_POLL_INTERVAL_MS": "1000"}


def _attempt(db: Any, run_id: str) -> tuple[Any, ...]:
    return db.execute("SELECT a.id, a.status, a.end_reason, a.pgid FROM ql3.run_attempts a WHERE a.run_id = %s "
                      "ORDER BY a.attempt DESC LIMIT 1", (run_id,)).fetchone()


def test_a_worker_resumed_after_its_attempt_was_lost_stops_it_and_records_only_an_event(
        pg_database: Any, owner: Any, tmp_path: Path) -> None:
    pg_database.reset(owner, None)  # real database time: leases run out by the database's clock
    db = owner
    store = PostgresStore(pg_database.runtime_dsn)
    pids = tmp_path / "pids"
    with private_root() as root:
        w1 = Worker(root, "w1", pg_database.runtime_dsn, slots=1, env=SHORT_LEASES, grace_ms=1000)
        w2 = Worker(root, "w2", pg_database.runtime_dsn, slots=1, env=SHORT_LEASES, grace_ms=1000)
        try:
            w1.start()
            run_id = store.runs.submit(SubmitRunCommand(argv=[
                "sh", "-c", f"trap '' TERM; sleep 600 & echo $! > {pids}; while :; do sleep 0.1; done"])).id
            wait_for(lambda: _attempt(db, run_id) is not None and _attempt(db, run_id)[1] == "running", 60,
                     "w1 running the Run")
            wait_for(lambda: pids.exists() and pids.read_text().strip(), 30, "the grandchild's pid")
            grandchild = int(pids.read_text())
            pgid = _attempt(db, run_id)[3]
            w1.process.send_signal(signal.SIGSTOP)  # paused past its session and Run Lease
            w2.start()
            wait_for(lambda: _attempt(db, run_id)[1] == "lost", 60, "w2 to end the paused worker's Attempt lost")
            assert live_group_members(pgid)  # nobody stopped it yet: its worker is paused
            w1.process.send_signal(signal.SIGCONT)
            resumed = time.monotonic()
            wait_for(lambda: not live_group_members(pgid), 30, "the fenced group to be stopped")
            wait_for(lambda: not live_group_members(grandchild) and
                     not Path(f"/proc/{grandchild}").exists(), 30, "the grandchild to be gone")
            print(f"fenced group stopped {time.monotonic() - resumed:.1f} s after the resume")
            wait_for(lambda: db.execute("SELECT count(*) FROM ql3.run_events WHERE run_id = %s "
                                        "AND type = 'run.fenced_end'", (run_id,)).fetchone()[0] == 1, 30,
                     "the fenced end's event")
            payload = db.execute("SELECT payload FROM ql3.run_events WHERE run_id = %s AND type = 'run.fenced_end'",
                                 (run_id,)).fetchone()[0]
            assert payload["exit_code"] == 128 + signal.SIGKILL  # it ignored SIGTERM: killed after the grace
            assert payload["attempt_status"] == "lost"
            attempt_id, status, reason, _ = _attempt(db, run_id)
            assert (status, reason) == ("lost", REASON_WORKER_GONE)  # the verdict stands
            assert db.execute("SELECT status FROM ql3.runs WHERE id = %s", (run_id,)).fetchone()[0] == "failed"
            log = w1.log_text()
            assert "attempt.fenced " in log
            assert f"attempt.finished run={run_id}" not in log  # never a success the database does not hold
        finally:
            for worker in (w1, w2):
                if worker.process is not None and worker.process.poll() is None:
                    worker.process.send_signal(signal.SIGCONT)
                worker.stop()
            store.close()


def _fenced_end(db: Any, run_id: str) -> Any:
    row = db.execute("SELECT payload FROM ql3.run_events WHERE run_id = %s AND type = 'run.fenced_end'",
                     (run_id,)).fetchone()
    return None if row is None else row[0]


def test_a_worker_restarted_with_the_same_id_stops_what_ran_on_of_its_lost_attempt(
        pg_database: Any, owner: Any, tmp_path: Path) -> None:
    pg_database.reset(owner, None)
    db = owner
    store = PostgresStore(pg_database.runtime_dsn)
    pids = tmp_path / "pids"
    with private_root() as root:
        w1 = Worker(root, "w1", pg_database.runtime_dsn, slots=1, env=SHORT_LEASES, grace_ms=1000)
        w2 = Worker(root, "w2", pg_database.runtime_dsn, slots=1, env=SHORT_LEASES, grace_ms=1000)
        try:
            w1.start()
            run_id = store.runs.submit(SubmitRunCommand(argv=[
                "sh", "-c", f"trap '' TERM; sleep 600 & echo $! > {pids}; while :; do sleep 0.1; done"])).id
            wait_for(lambda: _attempt(db, run_id) is not None and _attempt(db, run_id)[1] == "running", 60,
                     "w1 running the Run")
            wait_for(lambda: pids.exists() and pids.read_text().strip(), 30, "the grandchild's pid")
            grandchild = int(pids.read_text())
            pgid = _attempt(db, run_id)[3]
            w1.kill9()  # its task runs on under its monitor
            w2.start()
            wait_for(lambda: _attempt(db, run_id)[1] == "lost", 60, "w2 to end the dead worker's Attempt lost")
            assert live_group_members(pgid) and Path(f"/proc/{grandchild}").exists()  # nobody stopped it
            w1.start()  # the same id, a new life
            wait_for(lambda: "recovery.done" in w1.log_text(), 60, "w1 serving again")
            wait_for(lambda: not live_group_members(pgid), 30, "the lost Attempt's group to be stopped")
            wait_for(lambda: not Path(f"/proc/{grandchild}").exists(), 30, "the grandchild to be gone")
            payload = wait_for(lambda: _fenced_end(db, run_id), 30, "the fenced end's event")
            assert payload["exit_code"] == 128 + signal.SIGKILL  # it ignored SIGTERM: killed after the grace
            assert payload["attempt_status"] == "lost"
            _, status, reason, _ = _attempt(db, run_id)
            assert (status, reason) == ("lost", REASON_WORKER_GONE)  # the verdict stands
            assert db.execute("SELECT status FROM ql3.runs WHERE id = %s", (run_id,)).fetchone()[0] == "failed"
            log = w1.log_text()
            assert "attempt.fenced " in log and "fenced=1" in log
            assert f"attempt.finished run={run_id}" not in log
            w1.stop()
            w1.start()  # a later life finds nothing more to stop: the end is recorded once
            wait_for(lambda: w1.log_text().count("recovery.done") == 3, 60, "w1 serving a third time")
            assert w1.generation_logs[-1].read_text().count("attempt.fenced ") == 0
            assert db.execute("SELECT count(*) FROM ql3.run_events WHERE run_id = %s AND type = 'run.fenced_end'",
                              (run_id,)).fetchone()[0] == 1
        finally:
            for worker in (w1, w2):
                worker.stop()
            kill_attempt_groups(db)  # a failure above may have left the task running under its monitor
            store.close()


def test_a_cancel_requested_while_a_fenced_out_worker_lingers_is_never_a_cancel_without_a_signal(
        pg_database: Any, owner: Any, tmp_path: Path) -> None:
    pg_database.reset(owner, None)
    db = owner
    store = PostgresStore(pg_database.runtime_dsn)
    with private_root() as root:
        w1 = Worker(root, "w1", pg_database.runtime_dsn, slots=1, env=SHORT_LEASES, grace_ms=1000)
        w2 = Worker(root, "w2", pg_database.runtime_dsn, slots=1, env=SHORT_LEASES, grace_ms=1000)
        try:
            w1.start()
            started = tmp_path / "started"
            run_id = store.runs.submit(SubmitRunCommand(argv=[
                "sh", "-c", f"touch {started}; sleep 8; echo finished ok; exit 0"])).id
            wait_for(lambda: _attempt(db, run_id) is not None and _attempt(db, run_id)[1] == "running", 60,
                     "w1 running the Run")
            wait_for(started.exists, 30, "the task to start")
            w1.process.send_signal(signal.SIGSTOP)  # paused past its session: it will linger
            store.runs.request_cancel(CancelRunCommand(run_id=run_id))
            w2.start()
            time.sleep(4)  # past w1's session lease (2 s): not a figure, the scenario's pause
            w1.process.send_signal(signal.SIGCONT)
            wait_for(lambda: _attempt(db, run_id)[1] not in ("claimed", "starting", "running"), 60,
                     "the Attempt to end")
            attempt = db.execute("SELECT status, exit_code, end_reason, term_sent_at_ms FROM ql3.run_attempts "
                                 "WHERE run_id = %s", (run_id,)).fetchone()
            status, code, reason, term_sent_at = attempt
            run_status = db.execute("SELECT status FROM ql3.runs WHERE id = %s", (run_id,)).fetchone()[0]
            assert "service.session_lost" in w1.log_text()  # the scenario: w1 lingered
            if status == "cancelled":
                assert term_sent_at is not None  # delivered: the group was signalled
                assert code != 0
            else:  # not delivered: its real end, and the Run says no signal was sent
                assert (status, code, run_status) == ("succeeded", 0, "succeeded")
                assert "a cancel was requested, but it ended before any signal was sent" in reason
            assert not (run_status == "cancelled" and code == 0)
        finally:
            for worker in (w1, w2):
                if worker.process is not None and worker.process.poll() is None:
                    worker.process.send_signal(signal.SIGCONT)
                worker.stop()
            kill_attempt_groups(db)
            store.close()
