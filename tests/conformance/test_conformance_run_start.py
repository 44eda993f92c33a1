"""The start sequence at the lease authority (every queued Run runs once) on every adapter: ``start_run``,
``abandon_start``, ``sweep_orphans`` and ``free_slots``, with capacity counted from the session's
own leases under the lock. Ported from tests/unit/test_run_start.py, whose commit-failure cases stay
Local-only (they inject an apsw failure); state is arranged only through the backend's set-up API.
"""

from __future__ import annotations

from typing import Any

import pytest

from edge_runtime.contract.run_lease import NoCapacityOutcome
from edge_runtime.contract.runs import AttemptStatus, CancelRunCommand, ProcessIdentity, SubmitRunCommand
from edge_runtime.contract.worker_lease import WorkerLeaseFenceRejectedError, WorkerSessionRejectedError
from edge_runtime.contract.worker_session import HeartbeatCommand
# The end reasons are the Local module's; the PostgreSQL adapter must store the same text.
from edge_runtime.contract.run_lease import REASON_ORPHAN_STARTING, REASON_ORPHAN_UNSTARTED
from edge_runtime.service.worker import RunGrant, WorkerSession

RUN_LEASE_MS = 60_000
IDENTITY = ProcessIdentity(pid=4242, pgid=4242, start_ticks=1, boot_id="boot-1")
SESSION_LEASE_MS = 120_000


def session(backend: Any, worker_id: str = "w", slots: int = 2) -> WorkerSession:
    worker = WorkerSession(backend.leases, worker_id=worker_id, slots=slots, session_lease_ms=SESSION_LEASE_MS,
                           run_lease_ms=RUN_LEASE_MS)
    worker.register()
    return worker


@pytest.fixture
def runs(backend: Any) -> Any:
    return backend.runs


def submit(runs: Any) -> str:
    return runs.submit(SubmitRunCommand(argv=["true"])).id


def test_start_run_takes_a_queued_run_in_one_step(backend: Any, runs: Any) -> None:
    worker = session(backend)
    run_id = submit(runs)
    grant = worker.start(run_id)
    assert isinstance(grant, RunGrant)
    [attempt] = runs.attempts(run_id)
    assert attempt.status is AttemptStatus.STARTING and attempt.id == grant.lease.attempt_id
    assert grant.lease.started_at_ms is not None and grant.lease.session_generation == worker.generation
    assert runs.get(run_id).status.value == "dispatching"
    # One event for the three steps: the Attempt's number, the grant and the offer it accepted.
    created, starting = runs.events(run_id)
    assert (created.type, starting.type, starting.sequence) == ("run.created", "run.attempt_starting", 2)
    assert (starting.attempt_id, starting.actor_type, starting.actor_id) == (attempt.id, "worker", worker.worker_id)
    assert starting.dedupe_key == "a1:start"  # the Attempt's number: unique in its Run, and short
    assert starting.payload == {"session_generation": worker.generation, "lease_generation": 1, "lease_version": 2,
                                "attempt": 1, "offer_id": grant.lease.offer_id}
    assert worker.free_slots() == 1


@pytest.mark.parametrize("how", ["replaced", "stale_version", "offline"])
def test_a_fenced_out_session_takes_nothing_and_writes_nothing(
    backend: Any, runs: Any, how: str
) -> None:
    worker = session(backend)
    run_id = submit(runs)
    if how == "replaced":
        session(backend)  # same worker id: generation + 1
    elif how == "stale_version":
        repo = backend.leases  # a heartbeat this session object has not seen
        s = worker.session
        repo.heartbeat(HeartbeatCommand(worker_id="w", session_id=worker.session_id, generation=s.generation,
                                        expected_version=s.version, available_slots=2, lease_duration_ms=SESSION_LEASE_MS))
    else:
        worker.offline()
    before = backend.snapshot()
    with pytest.raises((WorkerLeaseFenceRejectedError, WorkerSessionRejectedError)):
        worker.start(run_id)
    assert backend.snapshot() == before
    assert runs.get(run_id).status.value == "queued"


def test_an_expired_session_takes_nothing(backend: Any, runs: Any) -> None:
    worker = session(backend)
    run_id = submit(runs)
    backend.advance(SESSION_LEASE_MS + 1)
    before = backend.snapshot()
    with pytest.raises(WorkerSessionRejectedError):
        worker.start(run_id)
    assert backend.snapshot() == before


def test_capacity_is_the_sessions_own_leases_and_a_refusal_writes_nothing(
    backend: Any, runs: Any
) -> None:
    old = session(backend, slots=2)
    for _ in range(2):
        assert isinstance(old.start(submit(runs)), RunGrant)  # two grants of generation 1, never ended
    new = session(backend, slots=2)
    assert new.free_slots() == 2  # a replaced session's leases do not consume the new one's capacity
    ids = [submit(runs) for _ in range(3)]
    assert isinstance(new.start(ids[0]), RunGrant)
    assert isinstance(new.start(ids[1]), RunGrant)
    assert new.free_slots() == 0
    before = backend.snapshot()
    for _ in range(3):
        refused = new.start(ids[2])
        assert isinstance(refused, NoCapacityOutcome) and refused.active_leases == 2
    assert backend.snapshot() == before  # no Attempt, no event, no churn


def test_the_reported_available_slots_bound_the_count(backend: Any, runs: Any) -> None:
    worker = session(backend, slots=2)
    worker.heartbeat(0)  # e.g. two re-adopted processes occupy the device
    run_id = submit(runs)
    before = backend.snapshot()
    assert isinstance(worker.start(run_id), NoCapacityOutcome) and worker.free_slots() == 0
    assert backend.snapshot() == before


def test_a_run_that_is_not_queued_is_not_started(backend: Any, runs: Any) -> None:
    worker = session(backend)
    taken, cancelled = submit(runs), submit(runs)
    assert isinstance(worker.start(taken), RunGrant)
    runs.request_cancel(CancelRunCommand(run_id=cancelled))
    before = backend.snapshot()
    assert worker.start(taken) is None  # already dispatching: never two Attempts for one queued Run
    assert worker.start(cancelled) is None
    assert backend.snapshot() == before


def test_finishing_the_attempt_completes_its_grant_with_one_event(backend: Any, runs: Any) -> None:
    worker = session(backend, slots=1)
    run_id = submit(runs)
    grant = worker.start(run_id)
    attempt_id = grant.lease.attempt_id
    runs.record_running(attempt_id, IDENTITY, log_path="/tmp/a.log", actor_id=worker.worker_id)
    runs.finish_attempt(attempt_id, AttemptStatus.SUCCEEDED, actor_id=worker.worker_id, exit_code=0)
    lease = worker.lease_of(attempt_id)
    assert (lease.status.value, lease.version, lease.completed_at_ms) == ("completed", 3, backend.now())
    assert worker.free_slots() == 1
    assert worker.complete(attempt_id) is False  # nothing left for the service's own call
    # The Run's end names the grant it completed: no separate run.lease_completed event.
    events = runs.events(run_id)
    assert [e.type for e in events] == ["run.created", "run.attempt_starting", "run.started", "run.succeeded"]
    assert (events[-1].attempt_id, events[-1].payload) == (attempt_id, {
        "status": "succeeded", "attempt_status": "succeeded", "exit_code": 0, "lease_generation": 1,
        "lease_version": 3})
    assert backend.projection(attempt_id) == (None,) * 8


def test_abandon_start_requeues_and_frees_the_slot(backend: Any, runs: Any) -> None:
    worker = session(backend, slots=1)
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


def test_abandon_start_of_a_cancelled_run_cancels_it(backend: Any, runs: Any) -> None:
    worker = session(backend)
    run_id = submit(runs)
    grant = worker.start(run_id)
    runs.request_cancel(CancelRunCommand(run_id=run_id))
    assert worker.abandon_start(grant, "spawn failed").value == "cancelled"
    assert runs.attempts(run_id)[0].status is AttemptStatus.CANCELLED


def test_abandon_start_works_after_the_session_was_replaced(backend: Any, runs: Any) -> None:
    old = session(backend)
    run_id = submit(runs)
    grant = old.start(run_id)
    session(backend)  # replaced while spawning: it still knows for certain it spawned nothing
    assert old.abandon_start(grant, "spawn failed").value == "queued"


def test_a_claimed_attempt_of_a_replaced_session_is_requeued_at_once(
    backend: Any, runs: Any
) -> None:
    old = session(backend)
    run_id = submit(runs)
    attempt = backend.take_queued_run(run_id, actor_id="old")  # the separate ADR-0057 steps
    old.claim(run_id, attempt.id)
    new = session(backend)
    assert new.sweep_orphans(RUN_LEASE_MS) == [(attempt.id, runs.get(run_id).status)]
    ended = runs.get_attempt(attempt.id)
    assert (ended.status, ended.end_reason) == (AttemptStatus.LOST, REASON_ORPHAN_UNSTARTED)
    assert runs.get(run_id).status.value == "queued"  # never failed: nothing ever started
    assert old.lease_of(attempt.id).status.value == "completed"
    assert new.sweep_orphans(RUN_LEASE_MS) == []


def test_a_claimed_attempt_without_a_lease_is_requeued_after_one_run_lease(
    backend: Any, runs: Any
) -> None:
    worker = session(backend)
    run_id = submit(runs)
    attempt = backend.take_queued_run(run_id, actor_id="gone")
    assert worker.sweep_orphans(RUN_LEASE_MS) == []  # its creator may be claiming it right now
    backend.advance(RUN_LEASE_MS)
    worker.heartbeat(2)
    assert [a for a, _ in worker.sweep_orphans(RUN_LEASE_MS)] == [attempt.id]
    assert runs.get(run_id).status.value == "queued"


def test_a_starting_attempt_is_left_to_its_owner_until_its_grant_ran_out(
    backend: Any, runs: Any
) -> None:
    old = session(backend)
    run_id = submit(runs)
    grant = old.start(run_id)
    new = session(backend)
    assert new.sweep_orphans(RUN_LEASE_MS) == []  # the replaced service may be spawning it now
    backend.advance(RUN_LEASE_MS)
    new.heartbeat(2)
    assert new.sweep_orphans(RUN_LEASE_MS) == [(grant.lease.attempt_id, runs.get(run_id).status)]
    ended = runs.get_attempt(grant.lease.attempt_id)
    assert (ended.status, ended.end_reason) == (AttemptStatus.LOST, REASON_ORPHAN_STARTING)
    assert runs.get(run_id).status.value == "failed"  # a process may have started: never twice


def test_a_live_owner_keeps_its_starting_attempt(backend: Any, runs: Any) -> None:
    owner = session(backend, worker_id="a")
    other = session(backend, worker_id="b")
    run_id = submit(runs)
    owner.start(run_id)
    backend.advance(RUN_LEASE_MS)
    owner.heartbeat(2)
    other.heartbeat(2)
    assert other.sweep_orphans(RUN_LEASE_MS) == []  # its owner is current and live: its business


def test_orphans_of_a_dead_worker_are_found_by_another_worker(
    backend: Any, runs: Any
) -> None:
    dead = session(backend, worker_id="dead")
    run_id = submit(runs)
    attempt = backend.take_queued_run(run_id, actor_id="dead")
    dead.claim(run_id, attempt.id)
    backend.advance(RUN_LEASE_MS)
    other = session(backend, worker_id="alive")
    assert [a for a, _ in other.sweep_orphans(RUN_LEASE_MS)] == [attempt.id]
    assert runs.get(run_id).status.value == "queued"


def test_a_fenced_out_session_sweeps_nothing(backend: Any, runs: Any) -> None:
    old = session(backend)
    run_id = submit(runs)
    attempt = backend.take_queued_run(run_id, actor_id="x")
    old.claim(run_id, attempt.id)
    session(backend)
    before = backend.snapshot()
    with pytest.raises(WorkerLeaseFenceRejectedError):
        old.sweep_orphans(RUN_LEASE_MS)
    assert backend.snapshot() == before
