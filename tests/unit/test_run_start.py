"""The start sequence at the lease authority (issue 9): ``start_run``, ``abandon_start``,
``sweep_orphans``, and capacity counted from the session's own leases under the write lock."""

from __future__ import annotations

from typing import Any

import apsw
import pytest

from edge_runtime.contract.run_lease import NoCapacityOutcome
from edge_runtime.contract.runs import AttemptStatus, CancelRunCommand, SubmitRunCommand
from edge_runtime.contract.worker_lease import (
    WorkerLeaseFenceRejectedError,
    WorkerLeaseRepositoryError,
    WorkerSessionRejectedError,
)
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.run_start import REASON_ORPHAN_STARTING, REASON_ORPHAN_UNSTARTED
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.contract.worker_session import HeartbeatCommand
from edge_runtime.service.worker import RunGrant, WorkerSession

RUN_LEASE_MS = 60_000
SESSION_LEASE_MS = 120_000


def session(db: LocalDatabase, worker_id: str = "w", slots: int = 2) -> WorkerSession:
    worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id=worker_id, slots=slots, session_lease_ms=SESSION_LEASE_MS,
                           run_lease_ms=RUN_LEASE_MS)
    worker.register()
    return worker


def state(db: LocalDatabase) -> tuple[Any, ...]:
    """Everything the start sequence may write."""
    c = db.connection
    return tuple(
        c.execute(sql).fetchall()
        for sql in (
            "SELECT id, status, version, event_sequence FROM runs ORDER BY id",
            "SELECT id, status FROM run_attempts ORDER BY id",
            "SELECT id FROM run_events ORDER BY id",
            "SELECT attempt_id, status, version FROM run_dispatch_leases ORDER BY attempt_id",
        )
    )


@pytest.fixture
def runs(db: LocalDatabase) -> LocalRunRepository:
    return LocalRunRepository(db)


def submit(runs: LocalRunRepository) -> str:
    return runs.submit(SubmitRunCommand(argv=["true"])).id


def test_start_run_takes_a_queued_run_in_one_step(db: LocalDatabase, runs: LocalRunRepository) -> None:
    worker = session(db)
    run_id = submit(runs)
    grant = worker.start(run_id)
    assert isinstance(grant, RunGrant)
    [attempt] = runs.attempts(run_id)
    assert attempt.status is AttemptStatus.STARTING and attempt.id == grant.lease.attempt_id
    assert grant.lease.started_at_ms is not None and grant.lease.session_generation == worker.generation
    assert runs.get(run_id).status.value == "dispatching"
    assert [e.type for e in runs.events(run_id)] == [
        "run.created", "run.attempt_created", "run.lease_claimed", "run.attempt_starting"]
    assert worker.free_slots() == 1


@pytest.mark.parametrize("how", ["replaced", "stale_version", "offline"])
def test_a_fenced_out_session_takes_nothing_and_writes_nothing(
    db: LocalDatabase, runs: LocalRunRepository, how: str
) -> None:
    worker = session(db)
    run_id = submit(runs)
    if how == "replaced":
        session(db)  # same worker id: generation + 1
    elif how == "stale_version":
        repo = LocalWorkerLeaseRepository(db)  # a heartbeat this handle has not seen
        s = worker.session
        repo.heartbeat(HeartbeatCommand(worker_id="w", session_id=worker.session_id, generation=s.generation,
                                        expected_version=s.version, available_slots=2, lease_duration_ms=SESSION_LEASE_MS))
    else:
        worker.offline()
    before = state(db)
    with pytest.raises((WorkerLeaseFenceRejectedError, WorkerSessionRejectedError)):
        worker.start(run_id)
    assert state(db) == before
    assert runs.get(run_id).status.value == "queued"


def test_an_expired_session_takes_nothing(db: LocalDatabase, runs: LocalRunRepository, clock: ManualClock) -> None:
    worker = session(db)
    run_id = submit(runs)
    clock.advance(SESSION_LEASE_MS + 1)
    before = state(db)
    with pytest.raises(WorkerSessionRejectedError):
        worker.start(run_id)
    assert state(db) == before


def test_capacity_is_the_sessions_own_leases_and_a_refusal_writes_nothing(
    db: LocalDatabase, runs: LocalRunRepository
) -> None:
    old = session(db, slots=2)
    for _ in range(2):
        assert isinstance(old.start(submit(runs)), RunGrant)  # two grants of generation 1, never ended
    new = session(db, slots=2)
    assert new.free_slots() == 2  # a replaced session's leases do not consume the new one's capacity
    ids = [submit(runs) for _ in range(3)]
    assert isinstance(new.start(ids[0]), RunGrant)
    assert isinstance(new.start(ids[1]), RunGrant)
    assert new.free_slots() == 0
    before = state(db)
    for _ in range(3):
        refused = new.start(ids[2])
        assert isinstance(refused, NoCapacityOutcome) and refused.active_leases == 2
    assert state(db) == before  # no Attempt, no event, no churn


def test_the_reported_available_slots_bound_the_count(db: LocalDatabase, runs: LocalRunRepository) -> None:
    worker = session(db, slots=2)
    worker.heartbeat(0)  # e.g. two re-adopted processes occupy the device
    run_id = submit(runs)
    before = state(db)
    assert isinstance(worker.start(run_id), NoCapacityOutcome) and worker.free_slots() == 0
    assert state(db) == before


def test_a_run_that_is_not_queued_is_not_started(db: LocalDatabase, runs: LocalRunRepository) -> None:
    worker = session(db)
    taken, cancelled = submit(runs), submit(runs)
    assert isinstance(worker.start(taken), RunGrant)
    runs.request_cancel(CancelRunCommand(run_id=cancelled))
    before = state(db)
    assert worker.start(taken) is None  # already dispatching: never two Attempts for one queued Run
    assert worker.start(cancelled) is None
    assert state(db) == before


@pytest.mark.parametrize("error", [apsw.BusyError, apsw.IOError, apsw.FullError], ids=["busy", "io", "full"])
def test_a_failed_start_transaction_leaves_the_run_queued(
    db: LocalDatabase, runs: LocalRunRepository, fail_next_commit: Any, error: type[BaseException]
) -> None:
    worker = session(db)
    run_id = submit(runs)
    before = state(db)
    fail_next_commit(error)
    with pytest.raises(WorkerLeaseRepositoryError):
        worker.start(run_id)
    assert state(db) == before
    assert isinstance(worker.start(run_id), RunGrant)  # the next pass takes it


def test_abandon_start_requeues_and_frees_the_slot(db: LocalDatabase, runs: LocalRunRepository) -> None:
    worker = session(db, slots=1)
    run_id = submit(runs)
    grant = worker.start(run_id)
    assert worker.free_slots() == 0
    assert worker.abandon_start(grant, "no descriptors").value == "queued"
    [attempt] = runs.attempts(run_id)
    assert (attempt.status, attempt.end_reason) == (AttemptStatus.LOST, "no descriptors")
    assert worker.lease_of(attempt.id).status.value == "completed"
    assert runs.get(run_id).status.value == "queued" and worker.free_slots() == 1
    assert runs.events(run_id)[-1].type == "run.requeued"
    assert worker.abandon_start(grant, "no descriptors").value == "queued"  # a retry after a lost reply
    second = worker.start(run_id)
    assert isinstance(second, RunGrant) and [a.attempt for a in runs.attempts(run_id)] == [1, 2]


def test_abandon_start_of_a_cancelled_run_cancels_it(db: LocalDatabase, runs: LocalRunRepository) -> None:
    worker = session(db)
    run_id = submit(runs)
    grant = worker.start(run_id)
    runs.request_cancel(CancelRunCommand(run_id=run_id))
    assert worker.abandon_start(grant, "spawn failed").value == "cancelled"
    assert runs.attempts(run_id)[0].status is AttemptStatus.CANCELLED


def test_abandon_start_works_after_the_session_was_replaced(db: LocalDatabase, runs: LocalRunRepository) -> None:
    old = session(db)
    run_id = submit(runs)
    grant = old.start(run_id)
    session(db)  # replaced while spawning: it still knows for certain it spawned nothing
    assert old.abandon_start(grant, "spawn failed").value == "queued"


@pytest.mark.parametrize("error", [apsw.BusyError, apsw.IOError, apsw.FullError], ids=["busy", "io", "full"])
def test_a_failed_abandon_changes_nothing_and_can_be_retried(
    db: LocalDatabase, runs: LocalRunRepository, fail_next_commit: Any, error: type[BaseException]
) -> None:
    worker = session(db)
    run_id = submit(runs)
    grant = worker.start(run_id)
    before = state(db)
    fail_next_commit(error)
    with pytest.raises(WorkerLeaseRepositoryError):
        worker.abandon_start(grant, "x")
    assert state(db) == before
    assert worker.abandon_start(grant, "x").value == "queued"


def test_a_claimed_attempt_of_a_replaced_session_is_requeued_at_once(
    db: LocalDatabase, runs: LocalRunRepository
) -> None:
    old = session(db)
    run_id = submit(runs)
    attempt = runs.create_attempt(run_id, actor_id="old")  # the separate ADR-0057 steps
    old.claim(run_id, attempt.id)
    new = session(db)
    assert new.sweep_orphans(RUN_LEASE_MS) == [(attempt.id, runs.get(run_id).status)]
    ended = runs.get_attempt(attempt.id)
    assert (ended.status, ended.end_reason) == (AttemptStatus.LOST, REASON_ORPHAN_UNSTARTED)
    assert runs.get(run_id).status.value == "queued"  # never failed: nothing ever started
    assert old.lease_of(attempt.id).status.value == "completed"
    assert new.sweep_orphans(RUN_LEASE_MS) == []


def test_a_claimed_attempt_without_a_lease_is_requeued_after_one_run_lease(
    db: LocalDatabase, runs: LocalRunRepository, clock: ManualClock
) -> None:
    worker = session(db)
    run_id = submit(runs)
    attempt = runs.create_attempt(run_id, actor_id="gone")
    assert worker.sweep_orphans(RUN_LEASE_MS) == []  # its creator may be claiming it right now
    clock.advance(RUN_LEASE_MS)
    worker.heartbeat(2)
    assert [a for a, _ in worker.sweep_orphans(RUN_LEASE_MS)] == [attempt.id]
    assert runs.get(run_id).status.value == "queued"


def test_a_starting_attempt_is_left_to_its_owner_until_its_grant_ran_out(
    db: LocalDatabase, runs: LocalRunRepository, clock: ManualClock
) -> None:
    old = session(db)
    run_id = submit(runs)
    grant = old.start(run_id)
    new = session(db)
    assert new.sweep_orphans(RUN_LEASE_MS) == []  # the replaced service may be spawning it now
    clock.advance(RUN_LEASE_MS)
    new.heartbeat(2)
    assert new.sweep_orphans(RUN_LEASE_MS) == [(grant.lease.attempt_id, runs.get(run_id).status)]
    ended = runs.get_attempt(grant.lease.attempt_id)
    assert (ended.status, ended.end_reason) == (AttemptStatus.LOST, REASON_ORPHAN_STARTING)
    assert runs.get(run_id).status.value == "failed"  # a process may have started: never twice


def test_a_live_owner_keeps_its_starting_attempt(db: LocalDatabase, runs: LocalRunRepository,
                                                clock: ManualClock) -> None:
    owner = session(db, worker_id="a")
    other = session(db, worker_id="b")
    run_id = submit(runs)
    owner.start(run_id)
    clock.advance(RUN_LEASE_MS)
    owner.heartbeat(2)
    other.heartbeat(2)
    assert other.sweep_orphans(RUN_LEASE_MS) == []  # its owner is current and live: its business


def test_orphans_of_a_dead_worker_are_found_by_another_worker(
    db: LocalDatabase, runs: LocalRunRepository, clock: ManualClock
) -> None:
    dead = session(db, worker_id="dead")
    run_id = submit(runs)
    attempt = runs.create_attempt(run_id, actor_id="dead")
    dead.claim(run_id, attempt.id)
    clock.advance(RUN_LEASE_MS)
    other = session(db, worker_id="alive")
    assert [a for a, _ in other.sweep_orphans(RUN_LEASE_MS)] == [attempt.id]
    assert runs.get(run_id).status.value == "queued"


def test_a_fenced_out_session_sweeps_nothing(db: LocalDatabase, runs: LocalRunRepository) -> None:
    old = session(db)
    run_id = submit(runs)
    attempt = runs.create_attempt(run_id, actor_id="x")
    old.claim(run_id, attempt.id)
    session(db)
    before = state(db)
    with pytest.raises(WorkerLeaseFenceRejectedError):
        old.sweep_orphans(RUN_LEASE_MS)
    assert state(db) == before
