"""The Run and Attempt decisions both stores take from edge_runtime/contract/transitions.py, each on
its own (the conformance suite checks that both adapters execute them alike)."""

from __future__ import annotations

import msgspec
import pytest

from edge_runtime.contract.stored_records import record_to_write, stored_record
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
    capacity_refusal,
    claim_replayed,
    dispatch_run_eligible,
    grant_held,
    new_grant,
    require_dispatch_fence,
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


# --------------------------------------------------------------------------- leases and dispatches


def _claim(**fields: object):
    from edge_runtime.contract.run_lease import ClaimRunCommand

    values = {"worker_id": "w", "session_id": "s", "session_generation": 2, "run_id": "r1", "attempt_id": "a1",
              "offer_id": "o1", "lease_token": "t" * 43, "lease_duration_ms": 5_000, "event_id": "e1"}
    return ClaimRunCommand(**(values | fields))


def _session(max_runs: int, slots: int):
    from edge_runtime.contract.worker_session import SessionStatus, WorkerSessionRecord

    return WorkerSessionRecord(worker_id="w", session_id="s", generation=2, status=SessionStatus.ONLINE, version=1,
                               capabilities={}, capabilities_hash="h" * 64, max_concurrent_runs=max_runs,
                               available_slots=slots, heartbeat_at_ms=1, lease_expires_at_ms=9, created_at_ms=1,
                               updated_at_ms=1)


@pytest.mark.parametrize(("max_runs", "slots", "active", "refused"), [
    (2, 2, 1, False), (2, 2, 2, True), (4, 1, 1, True), (1, 4, 1, True), (4, 4, 0, False),
])
def test_a_new_grant_needs_room_under_both_the_session_cap_and_its_free_slots(
        max_runs: int, slots: int, active: int, refused: bool) -> None:
    refusal = capacity_refusal(_session(max_runs, slots), active)
    assert (refusal is not None) is refused
    if refusal is not None:
        assert (refusal.active_leases, refusal.max_concurrent_runs, refusal.available_slots) == (active, max_runs, slots)


def test_a_new_grant_is_leased_from_now_for_the_claims_duration() -> None:
    first = new_grant(_claim(), "d" * 64, 1_000)
    assert (first.status, first.lease_generation, first.version, first.expires_at_ms, first.acquired_at_ms,
            first.offer_id, first.token_digest) == (LeaseStatus.LEASED, 1, 1, 6_000, 1_000, "o1", "d" * 64)
    again = new_grant(_claim(), "d" * 64, 2_000, lease_generation=3, version=5)
    assert (again.lease_generation, again.version, again.expires_at_ms) == (3, 5, 7_000)


def test_a_claim_is_a_replay_only_with_the_same_session_offer_and_token() -> None:
    held = new_grant(_claim(), "d" * 64, 1_000)
    assert claim_replayed(held, _claim(), "d" * 64)
    assert not claim_replayed(held, _claim(), "e" * 64)  # another token
    assert not claim_replayed(held, _claim(offer_id="o2"), "d" * 64)  # another offer
    assert not claim_replayed(held, _claim(session_generation=3), "d" * 64)  # a later session
    assert not claim_replayed(None, _claim(), "d" * 64)
    released = msgspec.structs.replace(held, status=LeaseStatus.RELEASED, released_at_ms=1_500)
    assert not grant_held(released, "d" * 64, worker_id="w")  # only a leased grant is held


def test_a_dispatch_result_is_fenced_by_attempt_status_version_owner_and_token() -> None:
    from edge_runtime.contract.cancellation_dispatch import (
        DispatchRecord, DispatchResult, DispatchStatus, FenceRejectedError, RecordResultCommand)

    current = DispatchRecord(run_id="r1", attempt_id="a1", status=DispatchStatus.LEASED, version=4, dispatch_count=1,
                             lease_owner="svc", lease_token_digest="d" * 64, lease_expires_at_ms=10,
                             created_at_ms=1, updated_at_ms=2)

    def result(**fields: object) -> RecordResultCommand:
        values = {"run_id": "r1", "attempt_id": "a1", "owner": "svc", "lease_token": "t" * 43,
                  "expected_version": 4, "result": DispatchResult.TERMINATION_REQUESTED, "event_id": "e1"}
        return RecordResultCommand(**(values | fields))

    require_dispatch_fence(current, result(), "d" * 64)  # the holder passes, even after its lease expired
    for command, digest in [(result(attempt_id="a2"), "d" * 64), (result(expected_version=3), "d" * 64),
                            (result(owner="other"), "d" * 64), (result(), "e" * 64)]:
        with pytest.raises(FenceRejectedError, match="no longer fences the dispatch"):
            require_dispatch_fence(current, command, digest)
    with pytest.raises(FenceRejectedError):
        require_dispatch_fence(msgspec.structs.replace(current, status=DispatchStatus.RETRY_WAIT), result(), "d" * 64)


def test_a_rearm_names_its_first_bad_argument() -> None:
    from edge_runtime.contract.cancellation_dispatch import InvalidCommandError, check_rearm

    check_rearm("r1", 3, "e1", "operator")
    with pytest.raises(InvalidCommandError, match="expected_version"):
        check_rearm("r1", 0, "e1", "operator")
    with pytest.raises(InvalidCommandError, match="run_id"):
        check_rearm("", 0, "", "")


# --------------------------------------------------------------------------- stored records


class _StoreError(Exception):
    pass


def test_a_stored_row_that_makes_no_record_or_a_broken_one_fails_closed_and_a_broken_record_is_not_written() -> None:
    assert stored_record(lambda: {"ok": 1}, "thing", "x", _StoreError) == {"ok": 1}
    with pytest.raises(_StoreError, match=r"^stored thing 'x' is malformed: 'status'$"):
        stored_record(lambda: {}["status"], "thing", "x", _StoreError)
    with pytest.raises(_StoreError, match=r"^stored thing 'x' breaks an invariant: too old$"):
        stored_record(lambda: 5, "thing", "x", _StoreError, lambda value: "too old" if value < 9 else None)
    assert record_to_write("r", None, "thing", "x", _StoreError) == "r"
    with pytest.raises(_StoreError, match=r"^refusing to write thing 'x': too old$"):
        record_to_write("r", "too old", "thing", "x", _StoreError)


# --------------------------------------------------------------------------- schedules


@pytest.mark.parametrize(("overlap", "active", "outcome", "to_cancel"), [
    ("skip", [], "started", ()),
    ("replace", [], "started", ()),
    ("skip", [("r1", False)], "skipped", ()),
    ("queue", [("r1", False)], "waiting", ()),
    ("replace", [("r1", False), ("r2", True)], "waiting", ("r1",)),  # r2's cancel is already requested
])
def test_a_slot_starts_skips_or_waits_and_replace_cancels_what_is_not_cancelling(
        overlap: str, active: list, outcome: str, to_cancel: tuple) -> None:
    from edge_runtime.contract.schedules import FireOutcome, Overlap, slot_decision

    assert slot_decision(Overlap(overlap), active) == (FireOutcome(outcome), to_cancel)


def test_a_pause_keeps_the_next_fire_and_a_resume_starts_after_now() -> None:
    from edge_runtime.contract.schedules import ScheduleRecord, next_fire_on_pause_change, replaced_reason
    from edge_runtime.contract.time_zones import time_zone

    record = msgspec.convert({"id": "s1", "expression": "0 * * * *", "command": ["true"], "overlap": "skip",
                              "paused": False, "nextFireAtMs": 3_600_000, "firedCount": 0, "skippedCount": 0,
                              "coalescedCount": 0, "createdAtMs": 0, "updatedAtMs": 0, "number": 1}, ScheduleRecord)
    utc = time_zone("UTC")
    assert next_fire_on_pause_change(record, True, 5 * 3_600_000 + 1, utc) == 3_600_000
    assert next_fire_on_pause_change(record, False, 5 * 3_600_000 + 1, utc) == 6 * 3_600_000  # missed slots not fired
    assert replaced_reason("s1") == "replaced by schedule s1"
