"""A worker's scans see only its own Attempts (the processes on its host), and the orphan sweep
ends the running Attempts of a dead worker only: not those of a live one, not those with a cancel
pending (cluster-profile.md §6; README: Workers)."""

from __future__ import annotations

from typing import Any

from cluster_postgres.runs import PostgresRunRepository
from cluster_postgres.worker_lease import PostgresWorkerLeaseRepository
from edge_runtime.contract.run_lease import REASON_WORKER_GONE
from edge_runtime.contract.runs import CancelRunCommand, ProcessIdentity, SubmitRunCommand
from edge_runtime.service.worker import WorkerSession

LEASE_MS = 5_000


def _running(runtime: Any, runs: PostgresRunRepository, worker_id: str, pid: int) -> tuple[WorkerSession, str, str]:
    worker = WorkerSession(PostgresWorkerLeaseRepository(runtime()), worker_id=worker_id, slots=2,
                           session_lease_ms=LEASE_MS, run_lease_ms=LEASE_MS)
    worker.register()
    run = runs.submit(SubmitRunCommand(argv=["sleep", "60"]))
    grant = worker.start(run.id)
    runs.record_running(grant.lease.attempt_id, ProcessIdentity(pid, pid, 1, "boot"), log_path="/l", actor_id=worker_id)
    return worker, run.id, grant.lease.attempt_id


def test_a_worker_scoped_store_sees_only_the_cancels_and_kills_of_its_own_attempts(owner: Any, runtime: Any) -> None:
    everyone = PostgresRunRepository(runtime())
    _, run_a, attempt_a = _running(runtime, everyone, "host-a", 101)
    _, run_b, attempt_b = _running(runtime, everyone, "host-b", 202)
    for run_id in (run_a, run_b):
        everyone.request_cancel(CancelRunCommand(run_id=run_id))
    only_a = PostgresRunRepository(runtime(), scan_worker_id="host-a")
    assert {c.attempt_id for c in everyone.cancellation_candidates()} == {attempt_a, attempt_b}
    assert [c.attempt_id for c in only_a.cancellation_candidates()] == [attempt_a]
    everyone.record_termination_requested(attempt_b, grace_ms=1_000)
    owner.execute("UPDATE ql3_test.clock SET now_ms = now_ms + 2000")
    assert [k.attempt_id for k in everyone.kill_candidates()] == [attempt_b]
    assert only_a.kill_candidates() == []  # host-b's SIGKILL is host-b's
    assert everyone.next_due_at_ms() is not None
    assert only_a.next_due_at_ms() is None  # nothing of host-a is due: it does not wake for host-b's work
    assert PostgresRunRepository(runtime(), scan_worker_id="host-c").cancellation_candidates() == []


def test_the_sweep_ends_only_a_dead_workers_running_attempts_without_a_pending_cancel(owner: Any,
                                                                                     runtime: Any) -> None:
    runs = PostgresRunRepository(runtime())
    dead, lost_run, lost_attempt = _running(runtime, runs, "dead", 101)
    _, waiting_run, waiting_attempt = _running(runtime, runs, "dead", 102)
    runs.request_cancel(CancelRunCommand(run_id=waiting_run))
    live, live_run, _ = _running(runtime, runs, "live", 201)
    assert live.sweep_orphans(LEASE_MS) == []  # the dead worker's leases have not run out yet
    owner.execute("UPDATE ql3_test.clock SET now_ms = now_ms + %s", (LEASE_MS - 1000,))
    live.heartbeat(2)  # "live" stays live; "dead" sends nothing more
    owner.execute("UPDATE ql3_test.clock SET now_ms = now_ms + 1001")
    # Now every Run Lease has run out, "live"'s too, but only "dead" has no live session.
    swept = live.sweep_orphans(LEASE_MS)
    assert [attempt for attempt, _ in swept] == [lost_attempt]
    ended = runs.get_attempt(lost_attempt)
    assert (ended.status.value, ended.end_reason) == ("lost", REASON_WORKER_GONE)
    assert runs.get(lost_run).status.value == "failed"  # never requeued: it may still run there
    assert runs.get_attempt(waiting_attempt).status.value == "running"  # its cancel waits for "dead"
    assert runs.get(live_run).status.value == "running"
    assert dead.lease_of(lost_attempt).status.value == "completed"
