"""The cancellation dispatcher against the real repositories, a manual clock and a fake controller."""

from __future__ import annotations

import io

import msgspec
import pytest

from edge_runtime.contract.cancellation_dispatch import MAX_RETRY_DELAY_MS, DispatchResult
from edge_runtime.contract.runs import CancelRunCommand, SubmitRunCommand
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.controller import KillOutcome
from edge_runtime.service.dispatcher import retry_delay_ms
from tests.support.dispatcher import BASE_MS, GRACE_MS, IDENTITY, FakeController, make_dispatcher, start_attempt


def test_retry_delay_doubles_and_is_capped() -> None:
    assert [retry_delay_ms(n, 1_000, 10_000) for n in (1, 2, 3, 4, 5, 6)] == [1_000, 2_000, 4_000, 8_000, 10_000,
                                                                            10_000]
    assert retry_delay_ms(10_000, 1_000, 10**12) == MAX_RETRY_DELAY_MS


def _running_run(db: LocalDatabase) -> tuple[str, str]:
    runs = LocalRunRepository(db)
    run = runs.submit(SubmitRunCommand(argv=["sleep", "60"]))
    attempt_id = start_attempt(db, run.id)
    runs.request_cancel(CancelRunCommand(run_id=run.id))
    return run.id, attempt_id


def test_termination_stores_the_kill_deadline_and_sigkill_is_enforced_once(db: LocalDatabase,
                                                                          clock: ManualClock) -> None:
    run_id, attempt_id = _running_run(db)
    controller = FakeController(DispatchResult.TERMINATION_REQUESTED)
    log = io.StringIO()
    dispatcher = make_dispatcher(db, clock, controller, log)
    runs = LocalRunRepository(db)

    assert dispatcher.dispatch_due() == 1
    assert controller.terminated == [IDENTITY]
    dispatch = LocalCancellationDispatchRepository(db).find_by_run_id(run_id)
    assert (dispatch.status.value, dispatch.last_result.value) == ("dispatched", "termination_requested")
    attempt = runs.get_attempt(attempt_id)
    assert attempt.kill_deadline_at_ms == attempt.term_sent_at_ms + GRACE_MS
    assert dispatcher.dispatch_due() == 0  # delivered: never again

    assert dispatcher.enforce_kills() == []  # grace not over
    assert runs.next_due_at_ms() == attempt.kill_deadline_at_ms
    clock.advance(GRACE_MS)
    assert dispatcher.enforce_kills() == [attempt_id]
    assert controller.killed == [IDENTITY]
    assert dispatcher.enforce_kills() == []  # recorded durably: not enforced twice
    kill = [e for e in runs.events(run_id) if e.type == "run.kill_sent"]
    assert [e.payload["outcome"] for e in kill] == ["killed"]
    assert "cancel.dispatched" in log.getvalue() and "kill.enforced" in log.getvalue()


def test_a_retryable_result_backs_off_exponentially(db: LocalDatabase, clock: ManualClock) -> None:
    run_id, _ = _running_run(db)
    controller = FakeController(DispatchResult.DISPATCH_ERROR, DispatchResult.DISPATCH_ERROR,
                                DispatchResult.TERMINATION_REQUESTED)
    dispatcher = make_dispatcher(db, clock, controller, io.StringIO())
    repo = LocalCancellationDispatchRepository(db)

    assert dispatcher.dispatch_due() == 1
    first = repo.find_by_run_id(run_id)
    assert first.status.value == "retry_wait"
    assert first.next_attempt_at_ms == clock.now_ms() + BASE_MS
    clock.advance(BASE_MS - 1)
    assert dispatcher.dispatch_due() == 0
    clock.advance(1)
    assert dispatcher.dispatch_due() == 1
    assert repo.find_by_run_id(run_id).next_attempt_at_ms == clock.now_ms() + 2 * BASE_MS
    clock.advance(2 * BASE_MS)
    assert dispatcher.dispatch_due() == 1
    assert repo.find_by_run_id(run_id).status.value == "dispatched"
    assert len(controller.terminated) == 3


@pytest.mark.parametrize("result", [DispatchResult.IDENTITY_MISMATCH, DispatchResult.PID_MISMATCH])
def test_a_blocking_result_is_never_retried_and_sets_no_deadline(db: LocalDatabase, clock: ManualClock,
                                                                result: DispatchResult) -> None:
    run_id, attempt_id = _running_run(db)
    controller = FakeController(result)
    dispatcher = make_dispatcher(db, clock, controller, io.StringIO())
    assert dispatcher.dispatch_due() == 1
    dispatch = LocalCancellationDispatchRepository(db).find_by_run_id(run_id)
    assert (dispatch.status.value, dispatch.last_result) == ("blocked", result)
    clock.advance(10**9)
    assert dispatcher.dispatch_due() == 0
    assert dispatcher.enforce_kills() == []
    assert LocalRunRepository(db).get_attempt(attempt_id).kill_deadline_at_ms is msgspec.UNSET
    assert controller.killed == []
    assert len(controller.terminated) == 1


def test_a_failed_sigkill_is_retried_from_memory_without_recording(db: LocalDatabase, clock: ManualClock) -> None:
    run_id, attempt_id = _running_run(db)
    controller = FakeController(DispatchResult.TERMINATION_REQUESTED, kill=KillOutcome.ERROR)
    dispatcher = make_dispatcher(db, clock, controller, io.StringIO())
    dispatcher.dispatch_due()
    clock.advance(GRACE_MS)
    assert dispatcher.enforce_kills() == []
    retry_at = dispatcher.next_kill_retry_at_ms()
    assert retry_at is not None and retry_at > clock.now_ms()
    assert dispatcher.enforce_kills() == []  # not before its retry time
    assert len(controller.killed) == 1
    controller.kill = KillOutcome.KILLED
    clock.set(retry_at)
    assert dispatcher.enforce_kills() == [attempt_id]
    assert dispatcher.next_kill_retry_at_ms() is None
