"""Runs and Attempts conformance (docs/runs.md): every body runs against each adapter's run store.

Ported from tests/unit/test_local_runs.py; state is arranged only through the backend's set-up API.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from edge_runtime.contract.runs import (
    MAX_BATCH_RUNS,
    AttemptStatus,
    CancelRunCommand,
    InvalidRunCommandError,
    ProcessIdentity,
    RunNotFoundError,
    RunStateConflictError,
    RunStatus,
    SubmitRunCommand,
)

IDENTITY = ProcessIdentity(pid=4242, pgid=4242, start_ticks=777, boot_id="boot-a")


@pytest.fixture
def runs(backend: Any) -> Any:
    return backend.runs


def _start(backend: Any, runs: Any, run_id: str) -> str:
    """Create an Attempt and move it through the start barrier (owned by the lease authority)."""
    attempt = backend.take_queued_run(run_id, actor_id="w1")
    backend.set_attempt_status(attempt.id, "starting")
    runs.record_running(attempt.id, IDENTITY, log_path="/tmp/a.log", actor_id="w1")
    return attempt.id


def _types(runs: Any, run_id: str) -> list[str]:
    return [event.type for event in runs.events(run_id)]


def test_submit_stores_a_queued_runtime_run_with_one_event(backend, runs) -> None:
    run = runs.submit(SubmitRunCommand(argv=["echo", "hi"], name="greet"))
    assert run.status is RunStatus.QUEUED
    assert run.execution_owner == "runtime"
    assert (run.command, run.name, run.created_at_ms) == (["echo", "hi"], "greet", backend.now())
    assert (run.version, run.event_sequence) == (1, 1)
    events = runs.events(run.id)
    assert [(e.type, e.sequence, e.payload) for e in events] == [("run.created", 1, {"status": "queued", "argc": 2})]
    # The command line stays with the Run; events are low-sensitivity.
    assert "hi" not in msgspec.json.encode(events).decode()


def test_submit_batch_stores_every_run_in_order_in_one_transaction(backend, runs) -> None:
    cmds = [SubmitRunCommand(argv=["echo", str(n)], name="batch", timeout_ms=60_000) for n in range(5)]
    ids = runs.submit_batch(cmds)
    assert len(set(ids)) == 5
    stored = [runs.get(run_id) for run_id in ids]
    assert [run.command for run in stored] == [["echo", str(n)] for n in range(5)]
    assert {(run.status, run.name, run.timeout_ms, run.created_at_ms, run.version, run.event_sequence)
            for run in stored} == {(RunStatus.QUEUED, "batch", 60_000, backend.now(), 1, 1)}
    assert all([(e.type, e.payload) for e in runs.events(run_id)]
               == [("run.created", {"status": "queued", "argc": 2, "timeout_ms": 60_000})] for run_id in ids)
    assert sorted(runs.queued_run_ids(10)) == sorted(ids)


@pytest.mark.parametrize("bad", [[], "not a list", [SubmitRunCommand(argv=["true"]), {"argv": ["true"]}],
                                 [SubmitRunCommand(argv=["true"])] * (MAX_BATCH_RUNS + 1)],
                         ids=["empty", "not-a-list", "foreign-item", "over-the-limit"])
def test_submit_batch_refuses_a_bad_batch_whole(backend, runs, bad) -> None:
    with pytest.raises(InvalidRunCommandError):
        runs.submit_batch(bad)
    assert backend.count("runs") == 0 and backend.count("run_events") == 0


def test_submit_batch_holds_as_many_runs_as_the_limit(backend, runs) -> None:
    ids = runs.submit_batch([SubmitRunCommand(argv=["true"])] * MAX_BATCH_RUNS)
    assert len(set(ids)) == MAX_BATCH_RUNS == backend.count("runs") == backend.count("run_events")


def test_cancel_of_a_queued_run_ends_it_at_once_and_is_refused_afterwards(backend, runs) -> None:
    run = runs.submit(SubmitRunCommand(argv=["true"]))
    backend.advance(5)
    cancelled = runs.request_cancel(CancelRunCommand(run_id=run.id, reason="not needed"))
    assert cancelled.status is RunStatus.CANCELLED
    assert cancelled.cancel_requested_at_ms == backend.now()
    assert _types(runs, run.id) == ["run.created", "run.cancel_requested", "run.cancelled"]
    with pytest.raises(RunStateConflictError, match="already ended as cancelled"):
        runs.request_cancel(CancelRunCommand(run_id=run.id))


def test_cancel_of_a_running_run_is_durable_idempotent_and_becomes_a_candidate(backend, runs) -> None:
    run = runs.submit(SubmitRunCommand(argv=["sleep", "9"]))
    attempt_id = _start(backend, runs, run.id)
    assert runs.get(run.id).status is RunStatus.RUNNING
    assert runs.cancellation_candidates() == []
    first = runs.request_cancel(CancelRunCommand(run_id=run.id))
    backend.advance(100)
    again = runs.request_cancel(CancelRunCommand(run_id=run.id, reason="twice"))
    assert again.cancel_requested_at_ms == first.cancel_requested_at_ms
    assert again.status is RunStatus.RUNNING
    assert _types(runs, run.id).count("run.cancel_requested") == 1
    [candidate] = runs.cancellation_candidates()
    assert (candidate.run_id, candidate.attempt_id, candidate.requested_at_ms) == (
        run.id, attempt_id, first.cancel_requested_at_ms)


def test_unknown_and_malformed_run_ids(backend, runs) -> None:
    with pytest.raises(RunNotFoundError):
        runs.get("00000000-0000-0000-0000-000000000000")
    with pytest.raises(RunNotFoundError):
        runs.request_cancel(CancelRunCommand(run_id="nope"))
    with pytest.raises(InvalidRunCommandError):
        runs.get("x" * 37)


def test_record_running_needs_the_start_barrier_and_stores_the_identity(backend, runs) -> None:
    run = runs.submit(SubmitRunCommand(argv=["true"]))
    attempt = backend.take_queued_run(run.id, actor_id="w1")
    with pytest.raises(RunStateConflictError, match="not starting"):
        runs.record_running(attempt.id, IDENTITY, log_path="/tmp/a.log", actor_id="w1")
    assert runs.get_attempt(attempt.id).identity is None


def test_finish_attempt_ends_the_run_once(backend, runs) -> None:
    run = runs.submit(SubmitRunCommand(argv=["false"]))
    attempt_id = _start(backend, runs, run.id)
    assert runs.get_attempt(attempt_id).identity == IDENTITY
    ended = runs.finish_attempt(attempt_id, AttemptStatus.FAILED, actor_id="w1", exit_code=1)
    assert (ended.status, ended.exit_code) == (AttemptStatus.FAILED, 1)
    again = runs.finish_attempt(attempt_id, AttemptStatus.SUCCEEDED, actor_id="w1", exit_code=0)
    assert again.status is AttemptStatus.FAILED
    assert runs.get(run.id).status is RunStatus.FAILED
    assert _types(runs, run.id)[-1] == "run.failed"
    # Keyed by the Attempt's number; the Attempt is the event's column, not part of its payload.
    started, failed = runs.events(run.id)[-2:]
    assert (started.type, started.dedupe_key, started.attempt_id, started.payload) == (
        "run.started", "a1:running", attempt_id, {"pid": IDENTITY.pid})
    assert (failed.dedupe_key, failed.attempt_id, failed.payload) == (
        "run.finished", attempt_id, {"status": "failed", "attempt_status": "failed", "exit_code": 1})


def test_a_lost_attempt_ends_its_run_failed_or_cancelled(backend, runs) -> None:
    plain = runs.submit(SubmitRunCommand(argv=["true"]))
    runs.finish_attempt(_start(backend, runs, plain.id), AttemptStatus.LOST, actor_id="w1", reason="gone")
    assert runs.get(plain.id).status is RunStatus.FAILED
    cancelled = runs.submit(SubmitRunCommand(argv=["true"]))
    attempt_id = _start(backend, runs, cancelled.id)
    runs.request_cancel(CancelRunCommand(run_id=cancelled.id))
    runs.finish_attempt(attempt_id, AttemptStatus.LOST, actor_id="w1", reason="gone")
    assert runs.get(cancelled.id).status is RunStatus.CANCELLED


def test_kill_deadline_is_durable_first_one_stands_and_kill_is_recorded_once(backend, runs) -> None:
    run = runs.submit(SubmitRunCommand(argv=["sleep", "9"]))
    attempt_id = _start(backend, runs, run.id)
    start = backend.now()
    runs.record_termination_requested(attempt_id, grace_ms=1_000)
    backend.advance(500)
    later = runs.record_termination_requested(attempt_id, grace_ms=1_000)
    assert later.kill_deadline_at_ms == start + 1_000
    assert runs.next_due_at_ms() == start + 1_000
    assert runs.kill_candidates() == []
    backend.advance(500)
    [candidate] = runs.kill_candidates()
    assert (candidate.attempt_id, candidate.identity, candidate.kill_deadline_at_ms) == (attempt_id, IDENTITY, start + 1_000)
    runs.record_killed(attempt_id, actor_id="w1")
    runs.record_killed(attempt_id, actor_id="w1")
    assert runs.kill_candidates() == []
    assert _types(runs, run.id).count("run.kill_sent") == 1


def test_requeue_unstarted_puts_the_run_back_in_the_queue(backend, runs) -> None:
    run = runs.submit(SubmitRunCommand(argv=["true"]))
    attempt = backend.take_queued_run(run.id, actor_id="w1")
    lost = runs.requeue_unstarted(attempt.id, actor_id="w1", reason="no free slot")
    assert (lost.status, lost.end_reason) == (AttemptStatus.LOST, "no free slot")
    assert runs.get(run.id).status is RunStatus.QUEUED
    assert runs.queued_run_ids(5) == [run.id]
    requeued = runs.events(run.id)[-1]
    assert (requeued.type, requeued.dedupe_key, requeued.attempt_id, requeued.payload) == (
        "run.requeued", "a1:requeued", attempt.id, {"reason": "no free slot"})
    second = backend.take_queued_run(run.id, actor_id="w1")
    assert second.attempt == 2
    lost_again = runs.requeue_unstarted(second.id, actor_id="w1", reason="still no slot")
    assert lost_again.status is AttemptStatus.LOST
    assert runs.events(run.id)[-1].dedupe_key == "a2:requeued"  # each Attempt its own key
    with pytest.raises(RunStateConflictError):
        runs.requeue_unstarted(attempt.id, actor_id="w1", reason="again")


def test_requeue_unstarted_of_a_cancel_requested_run_cancels_it(backend, runs) -> None:
    run = runs.submit(SubmitRunCommand(argv=["true"]))
    attempt = backend.take_queued_run(run.id, actor_id="w1")
    backend.request_cancel(run.id, 1)
    ended = runs.requeue_unstarted(attempt.id, actor_id="w1", reason="no free slot")
    assert (ended.status, ended.end_reason) == (AttemptStatus.CANCELLED, "cancelled before the process was started")
    assert runs.get(run.id).status is RunStatus.CANCELLED
    assert runs.queued_run_ids(5) == []


def test_detail_and_list(backend, runs) -> None:
    first = runs.submit(SubmitRunCommand(argv=["true"]))
    backend.advance(1)
    second = runs.submit(SubmitRunCommand(argv=["true"]))
    _start(backend, runs, first.id)
    assert [r.id for r in runs.list_runs()] == [second.id, first.id]
    assert [r.id for r in runs.list_runs(status=RunStatus.RUNNING)] == [first.id]
    detail = runs.detail(first.id)
    assert [a.status for a in detail.attempts] == [AttemptStatus.RUNNING]
    assert detail.dispatch is msgspec.UNSET
