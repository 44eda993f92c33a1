"""The Run and Attempt decisions both stores take from edge_runtime/contract/transitions.py, each on
its own (the conformance suite checks that both adapters execute them alike)."""

from __future__ import annotations

import pytest

from edge_runtime.contract.run_lease import LeaseStatus, NotClaimableReason, RunLeaseRecord
from edge_runtime.contract.runs import AttemptStatus, RunRecord, RunStateConflictError, RunStatus
from edge_runtime.contract.transitions import (
    REASON_CANCELLED_BEFORE_START,
    RUNTIME_OWNER,
    UnstartedRunAction,
    attempt_end_extra,
    cancel_refusal,
    cancel_requested_payload,
    cancels_at_once,
    dispatch_run_eligible,
    is_orphan_start,
    lease_mismatch,
    not_claimable,
    run_status_after_attempt,
    unstarted_end,
)


def test_a_run_is_claimable_only_while_the_runtimes_active_and_not_asked_to_cancel() -> None:
    assert not_claimable(RUNTIME_OWNER, RunStatus.QUEUED, None) is None
    assert not_claimable("qinglong", RunStatus.QUEUED, None) is NotClaimableReason.RUN_NOT_RUNTIME_OWNED
    assert not_claimable(RUNTIME_OWNER, RunStatus.SUCCEEDED, None) is NotClaimableReason.RUN_TERMINAL
    assert not_claimable(RUNTIME_OWNER, RunStatus.QUEUED, 5) is NotClaimableReason.CANCEL_REQUESTED


def test_a_lease_mismatch_names_versions_and_never_the_token() -> None:
    assert lease_mismatch("a1", None) == "attempt 'a1' has no Run Lease"
    current = RunLeaseRecord(attempt_id="a1", run_id="r1", worker_id="w", session_id="s", session_generation=3,
                             lease_generation=1, version=7, status=LeaseStatus.RELEASED, token_digest="d" * 64,
                             offer_id="o1", acquired_at_ms=1, expires_at_ms=2, updated_at_ms=2)
    message = lease_mismatch("a1", current)
    assert "released at version 7, session generation 3" in message and "d" * 16 not in message


@pytest.mark.parametrize(("status", "lease", "expires", "live", "now", "orphan"), [
    (AttemptStatus.CLAIMED, None, None, True, 10_000, False),  # no grant, younger than abandon_after
    (AttemptStatus.CLAIMED, None, None, True, 60_000, True),  # no grant, older
    (AttemptStatus.CLAIMED, "released", 99_999, True, 1_000, True),  # a grant nobody holds
    (AttemptStatus.CLAIMED, "leased", 5_000, True, 1_000, False),  # held and live
    (AttemptStatus.CLAIMED, "leased", 5_000, False, 1_000, True),  # before the barrier: a dead owner is enough
    (AttemptStatus.CLAIMED, "leased", 500, True, 1_000, True),  # or an expired grant
    (AttemptStatus.STARTING, "leased", 5_000, False, 1_000, False),  # past it: may be spawning right now
    (AttemptStatus.STARTING, "leased", 500, True, 1_000, False),
    (AttemptStatus.STARTING, "leased", 500, False, 1_000, True),  # both: expired and owner gone
])
def test_the_orphan_rule(status: AttemptStatus, lease: str | None, expires: int | None, live: bool, now: int,
                         orphan: bool) -> None:
    assert is_orphan_start(attempt_status=status, created_at_ms=0, lease_status=lease, lease_expires_at_ms=expires,
                           owner_live=live, now_ms=now, abandon_after_ms=30_000) is orphan


def _run(**fields: object) -> RunRecord:
    values = {"id": "r1", "execution_owner": RUNTIME_OWNER, "status": RunStatus.RUNNING, "version": 1,
              "event_sequence": 1, "created_at_ms": 1, "updated_at_ms": 1, **fields}
    return RunRecord(**values)


def test_cancel_is_refused_for_another_executors_run_and_for_an_ended_one() -> None:
    assert cancel_refusal(_run()) is None
    other = cancel_refusal(_run(execution_owner="qinglong"))
    assert isinstance(other, RunStateConflictError) and "owned by qinglong" in str(other)
    ended = cancel_refusal(_run(status=RunStatus.FAILED))
    assert isinstance(ended, RunStateConflictError) and "already ended as failed" in str(ended)


def test_a_cancel_ends_the_run_at_once_only_before_any_attempt_is_active() -> None:
    assert cancels_at_once(RunStatus.QUEUED, 0) and cancels_at_once(RunStatus.RETRY_WAIT, 0)
    assert not cancels_at_once(RunStatus.QUEUED, 1)
    assert not cancels_at_once(RunStatus.RUNNING, 0)
    assert cancel_requested_payload(7, None) == {"requested_at_ms": 7}
    assert cancel_requested_payload(7, "stop") == {"requested_at_ms": 7, "reason": "stop"}


def test_an_unstarted_attempt_requeues_its_run_unless_a_process_may_have_started_or_a_cancel_waits() -> None:
    requeue = unstarted_end(RunStatus.DISPATCHING, cancel_requested=False, reason="no slot", may_have_started=False)
    assert requeue == (AttemptStatus.LOST, "no slot", UnstartedRunAction.REQUEUE, None)
    failed = unstarted_end(RunStatus.DISPATCHING, cancel_requested=False, reason="gone", may_have_started=True)
    assert failed == (AttemptStatus.LOST, "gone", UnstartedRunAction.END, RunStatus.FAILED)
    cancelled = unstarted_end(RunStatus.DISPATCHING, cancel_requested=True, reason="no slot", may_have_started=False)
    assert cancelled == (AttemptStatus.CANCELLED, REASON_CANCELLED_BEFORE_START, UnstartedRunAction.END,
                         RunStatus.CANCELLED)
    maybe = unstarted_end(RunStatus.DISPATCHING, cancel_requested=True, reason="gone", may_have_started=True)
    assert maybe == (AttemptStatus.CANCELLED, "gone", UnstartedRunAction.END, RunStatus.CANCELLED)
    ended = unstarted_end(RunStatus.CANCELLED, cancel_requested=True, reason="x", may_have_started=False)
    assert ended.run_action is UnstartedRunAction.KEEP


def test_the_runs_end_follows_its_attempts_except_a_lost_one_under_a_cancel() -> None:
    assert run_status_after_attempt(AttemptStatus.SUCCEEDED, cancel_requested=True) is RunStatus.SUCCEEDED
    assert run_status_after_attempt(AttemptStatus.LOST, cancel_requested=False) is RunStatus.FAILED
    assert run_status_after_attempt(AttemptStatus.LOST, cancel_requested=True) is RunStatus.CANCELLED
    assert attempt_end_extra(AttemptStatus.FAILED, 3, None) == {"attempt_status": "failed", "exit_code": 3}


def test_a_dispatch_is_claimable_only_for_the_runs_current_cancel_request() -> None:
    assert dispatch_run_eligible(RUNTIME_OWNER, RunStatus.RUNNING, 5, 5)
    assert not dispatch_run_eligible(RUNTIME_OWNER, RunStatus.RUNNING, 6, 5)
    assert not dispatch_run_eligible(RUNTIME_OWNER, RunStatus.CANCELLED, 5, 5)
    assert not dispatch_run_eligible("qinglong", RunStatus.RUNNING, 5, 5)
