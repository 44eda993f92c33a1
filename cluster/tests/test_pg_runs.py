"""PostgreSQL-only behaviour of the run store (cluster-profile.md §4): the queue scan skips Runs
another transaction holds, two connections racing for one queued Run give one Attempt, a lock
timeout is the contract's retryable repository error, and two connections of one session racing
``start_run`` for its last slot take it once."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from cluster_postgres.runs import PostgresRunRepository
from cluster_postgres.worker_lease import PostgresWorkerLeaseRepository
from edge_runtime.contract.errors import RunEventLogMismatchError
from edge_runtime.contract.run_lease import NoCapacityOutcome, StartRunCommand
from edge_runtime.contract.runs import CancelRunCommand, RunRepositoryError, RunStatus, SubmitRunCommand
from edge_runtime.service.worker import RunGrant, WorkerSession


def test_the_queue_scan_skips_a_run_another_transaction_holds(owner: Any, runtime: Any) -> None:
    runs = PostgresRunRepository(runtime())
    held = runs.submit(SubmitRunCommand(argv=["true"]))
    free = runs.submit(SubmitRunCommand(argv=["true"]))
    holder = runtime()
    holder.execute("BEGIN")
    holder.execute("SELECT 1 FROM ql3.runs WHERE id = %s FOR NO KEY UPDATE", (held.id,))
    try:
        assert runs.queued_run_ids(10) == [free.id]
    finally:
        holder.execute("ROLLBACK")
    assert set(runs.queued_run_ids(10)) == {held.id, free.id}


def test_two_workers_racing_to_start_one_queued_run_create_one_attempt(owner: Any, runtime: Any) -> None:
    rounds = 10
    submitted = [PostgresRunRepository(runtime()).submit(SubmitRunCommand(argv=["true"])).id for _ in range(rounds)]
    sessions = []
    for side in (0, 1):
        worker = WorkerSession(PostgresWorkerLeaseRepository(runtime()), worker_id=f"w{side}", slots=rounds,
                               session_lease_ms=120_000, run_lease_ms=60_000)
        worker.register()
        sessions.append(worker.session)
    repos = [PostgresWorkerLeaseRepository(runtime()) for _ in range(2)]
    barrier = threading.Barrier(2)
    taken: list[list[bool]] = [[], []]

    def race(side: int) -> None:
        s = sessions[side]
        for number, run_id in enumerate(submitted):
            cmd = StartRunCommand(worker_id=s.worker_id, session_id=s.session_id, session_generation=s.generation,
                                  session_version=s.version, run_id=run_id, attempt_id=f"att-{side}-{number}",
                                  offer_id=f"offer-{side}-{number}", lease_token=f"token-{side}-{number}-" + "x" * 32,
                                  lease_duration_ms=60_000)
            barrier.wait(timeout=30)
            taken[side].append(type(repos[side].start_run(cmd)).__name__ == "ClaimedRunOutcome")

    threads = [threading.Thread(target=race, args=(side,)) for side in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [a + b for a, b in zip(taken[0], taken[1])] == [1] * rounds
    assert owner.execute("SELECT count(*) FROM run_attempts").fetchone()[0] == rounds
    assert {PostgresRunRepository(runtime()).get(r).status for r in submitted} == {RunStatus.DISPATCHING}


def test_a_lock_timeout_is_a_retryable_run_repository_error(owner: Any, runtime: Any) -> None:
    runs = PostgresRunRepository(runtime())
    run = runs.submit(SubmitRunCommand(argv=["true"]))
    holder = runtime()
    holder.execute("BEGIN")
    holder.execute("SELECT 1 FROM ql3.runs WHERE id = %s FOR UPDATE", (run.id,))
    with pytest.raises(RunRepositoryError) as caught:
        runs.request_cancel(CancelRunCommand(run_id=run.id))
    holder.execute("ROLLBACK")
    assert (caught.value.code, caught.value.retryable) == ("CLUSTER_STORAGE_FAILED", True)
    assert "SQLSTATE 55P03" in str(caught.value)
    assert runs.request_cancel(CancelRunCommand(run_id=run.id)).status is RunStatus.CANCELLED  # reusable


def test_two_connections_of_one_session_racing_to_start_never_oversell_its_slot(owner: Any, runtime: Any) -> None:
    worker = WorkerSession(PostgresWorkerLeaseRepository(runtime()), worker_id="w", slots=1,
                           session_lease_ms=120_000, run_lease_ms=60_000)
    worker.register()
    s = worker.session
    runs = PostgresRunRepository(runtime())
    run_ids = [runs.submit(SubmitRunCommand(argv=["true"])).id for _ in range(2)]
    repos = [PostgresWorkerLeaseRepository(runtime()) for _ in range(2)]
    barrier = threading.Barrier(2)
    outcomes: list[Any] = []

    def start(side: int) -> None:
        cmd = StartRunCommand(worker_id="w", session_id=s.session_id, session_generation=s.generation,
                              session_version=s.version, run_id=run_ids[side], attempt_id=f"att-{side}",
                              offer_id=f"offer-{side}", lease_token=f"token-{side}-" + "x" * 32,
                              lease_duration_ms=60_000)
        barrier.wait(timeout=30)
        outcomes.append(repos[side].start_run(cmd))

    threads = [threading.Thread(target=start, args=(side,)) for side in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(type(o).__name__ for o in outcomes) == ["ClaimedRunOutcome", NoCapacityOutcome.__name__]
    assert owner.execute("SELECT count(*) FROM run_dispatch_leases WHERE status = 'leased'").fetchone()[0] == 1
    assert owner.execute("SELECT count(*) FROM run_attempts").fetchone()[0] == 1


def test_a_run_whose_event_log_another_program_appended_to_is_set_aside_alone(owner: Any, runtime: Any) -> None:
    runs = PostgresRunRepository(runtime())
    broken, other = (runs.submit(SubmitRunCommand(argv=["true"])).id for _ in range(2))
    # Another program with the database's credentials: the next sequence, the Run's count left alone.
    owner.execute("INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, payload, "
                  "created_at_ms) SELECT md5(random()::text), id, event_sequence + 1, 'note', 'a-note', 'script', "
                  "'notes.py', '{}', created_at_ms FROM runs WHERE id = %s", (broken,))
    with pytest.raises(RunEventLogMismatchError) as cancelled:
        runs.request_cancel(CancelRunCommand(run_id=broken))
    assert cancelled.value.row_id == broken and "another program" in str(cancelled.value)
    worker = WorkerSession(PostgresWorkerLeaseRepository(runtime()), worker_id="w", slots=2,
                           session_lease_ms=120_000, run_lease_ms=60_000)
    worker.register()
    with pytest.raises(RunEventLogMismatchError) as started:
        worker.start(broken)
    assert runs.set_aside(broken, started.value, actor_id="w#1") is True
    assert runs.get(broken).status is RunStatus.FAILED and runs.attempts(broken) == []
    events = runs.events(broken)
    assert [e.sequence for e in events] == [1, 2, 3] and [e.type for e in events][1:] == ["note", "run.failed"]
    assert events[-1].payload["error"] == "RUN_EVENT_LOG_MISMATCH"
    assert runs.set_aside(broken, started.value, actor_id="w#1") is False  # ended: nothing more
    assert isinstance(worker.start(other), RunGrant)  # the others start
