"""CancellationDispatch conformance: every body runs against Local and PostgreSQL (spec §3, §7).

Ported from tests/unit/test_local_cancellation_dispatch.py; what only Local has (the legacy
``lease_token`` column and its projection, CHECK-bypassing rows, the injected clock's own
validation, SQLite busy/closed handling) stays there.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from edge_runtime.contract.cancellation_dispatch import (
    BindingConflictError,
    ClaimCommand,
    DispatchResult,
    DispatchStatus,
    FenceRejectedError,
    InvalidCommandError,
    RecordResultCommand,
    RepositoryError,
    digest_lease_token,
    dispatch_record_problem,
)
from edge_runtime.contract.errors import RunEventLogMismatchError

UNSET = msgspec.UNSET
REQUESTED_AT_MS = 1_699_999_990_000
LEASE_MS = 30_000
_ids = iter(range(1, 10**9))


def claim_cmd(*, run_id: str = "run-1", attempt_id: str = "att-1", requested_at_ms: int = REQUESTED_AT_MS,
              owner: str = "worker-a", lease_token: str = "token-a", lease_duration_ms: int = LEASE_MS) -> ClaimCommand:
    return ClaimCommand(run_id=run_id, attempt_id=attempt_id, requested_at_ms=requested_at_ms, owner=owner,
                        lease_token=lease_token, lease_duration_ms=lease_duration_ms)


def record_cmd(*, version: int, result: Any = DispatchResult.TERMINATION_REQUESTED, run_id: str = "run-1",
               attempt_id: str = "att-1", owner: str = "worker-a", lease_token: str = "token-a",
               event_id: str | None = None, retry_delay_ms: int | None = None) -> RecordResultCommand:
    extra = {} if retry_delay_ms is None else {"retry_delay_ms": retry_delay_ms}
    return RecordResultCommand(run_id=run_id, attempt_id=attempt_id, owner=owner, lease_token=lease_token,
                               expected_version=version, result=result, event_id=event_id or f"evt-{next(_ids)}",
                               **extra)


def seed(backend: Any, run_id: str = "run-1", attempt_id: str = "att-1", *, status: str = "running",
         execution_owner: str = "runtime", cancel_requested_at_ms: int | None = REQUESTED_AT_MS) -> None:
    """One active, runtime-owned, cancel-requested Run with one running Attempt."""
    backend.create_run(run_id, status=status, execution_owner=execution_owner,
                       cancel_requested_at_ms=cancel_requested_at_ms)
    backend.create_attempt(attempt_id, run_id)


def claimed(backend: Any, **kwargs: Any) -> Any:
    outcome = backend.dispatch.claim(claim_cmd(**kwargs))
    assert outcome.status == "claimed", outcome
    return outcome


@pytest.fixture
def repo(backend: Any) -> Any:
    seed(backend)
    return backend.dispatch


# --------------------------------------------------------------------------- claim basics


def test_first_claim_creates_and_leases_the_dispatch(backend: Any, repo: Any) -> None:
    now = backend.now()
    assert repo.find_by_run_id("run-1") is None
    outcome = claimed(backend)
    record = outcome.dispatch
    assert outcome.lease_token == "token-a"
    assert record.status is DispatchStatus.LEASED
    assert (record.run_id, record.attempt_id, record.version, record.dispatch_count) == ("run-1", "att-1", 1, 1)
    assert record.lease_owner == "worker-a"
    assert record.lease_token_digest == digest_lease_token("token-a")
    assert record.lease_expires_at_ms == now + LEASE_MS
    assert record.next_attempt_at_ms is UNSET
    assert record.last_result is UNSET and record.last_dispatched_at_ms is UNSET
    assert (record.created_at_ms, record.updated_at_ms) == (now, now)
    assert repo.find_by_run_id("run-1") == record
    # A claim is not an event: the Run's version and sequence are untouched.
    assert backend.run_version("run-1") == (0, 0)


def test_claim_before_the_requested_time_creates_a_pending_row_and_is_not_due(backend: Any) -> None:
    requested = backend.now() + 1_000
    seed(backend, cancel_requested_at_ms=requested)
    repo = backend.dispatch
    outcome = repo.claim(claim_cmd(requested_at_ms=requested))
    assert outcome.status == "not_due"
    record = outcome.dispatch
    assert record.status is DispatchStatus.PENDING
    assert (record.version, record.dispatch_count, record.next_attempt_at_ms) == (0, 0, requested)
    assert repo.find_by_run_id("run-1") == record
    backend.advance(999)
    assert repo.claim(claim_cmd(requested_at_ms=requested)).status == "not_due"
    backend.advance(1)
    outcome = repo.claim(claim_cmd(requested_at_ms=requested))
    assert outcome.status == "claimed"
    assert outcome.dispatch.created_at_ms == requested - 1_000
    assert outcome.dispatch.updated_at_ms == requested


def test_find_by_run_id_rejects_an_invalid_identifier(repo: Any) -> None:
    with pytest.raises(InvalidCommandError, match="run_id must be at most 36 characters, got 37"):
        repo.find_by_run_id("r" * 37)


def test_repository_rejects_commands_of_the_wrong_type(repo: Any) -> None:
    with pytest.raises(InvalidCommandError, match="claim expects a ClaimCommand, got dict"):
        repo.claim({"runId": "run-1"})
    with pytest.raises(InvalidCommandError, match="record_result expects a RecordResultCommand, got ClaimCommand"):
        repo.record_result(claim_cmd())


# --------------------------------------------------------------------------- two owners


def test_two_owners_takeover_exactly_at_expiry_and_stale_fence(backend: Any, repo: Any) -> None:
    first = claimed(backend, owner="worker-a", lease_token="token-a")
    expires = first.dispatch.lease_expires_at_ms

    backend.advance(expires - 1 - backend.now())
    seen = repo.claim(claim_cmd(owner="worker-b", lease_token="token-b"))
    assert seen.status == "leased"
    assert seen.dispatch == first.dispatch

    backend.advance(1)
    second = claimed(backend, owner="worker-b", lease_token="token-b")
    assert second.dispatch.version == 2 and second.dispatch.dispatch_count == 2
    assert second.dispatch.lease_owner == "worker-b"
    assert second.dispatch.lease_expires_at_ms == expires + LEASE_MS
    assert second.dispatch.created_at_ms == first.dispatch.created_at_ms

    with pytest.raises(FenceRejectedError) as stale:
        repo.record_result(record_cmd(version=1, owner="worker-a", lease_token="token-a"))
    assert stale.value.code == "CANCELLATION_DISPATCH_FENCE_REJECTED"
    assert stale.value.retryable is False
    assert str(stale.value) == (
        "lease of run 'run-1' at version 1 by 'worker-a' no longer fences the dispatch (now leased at version 2)"
    )
    for owner, token in (("worker-a", "token-a"), ("worker-b", "token-a"), ("worker-a", "token-b")):
        with pytest.raises(FenceRejectedError):
            repo.record_result(record_cmd(version=2, owner=owner, lease_token=token))
    assert repo.find_by_run_id("run-1") == second.dispatch
    assert backend.run_version("run-1") == (0, 0)

    backend.advance(10)
    landed = repo.record_result(record_cmd(version=2, owner="worker-b", lease_token="token-b", event_id="evt-b"))
    record = landed.dispatch
    assert record.status is DispatchStatus.DISPATCHED
    assert record.version == 3 and record.dispatch_count == 2
    assert record.last_result is DispatchResult.TERMINATION_REQUESTED
    assert record.last_dispatched_at_ms == backend.now()
    assert (record.lease_owner, record.lease_token_digest, record.lease_expires_at_ms) == (UNSET, UNSET, UNSET)
    assert record.next_attempt_at_ms is UNSET
    event = landed.event
    assert event.id == "evt-b" and event.sequence == 1 and event.type == "run.cancel_dispatched"
    assert event.dedupe_key == "cancel-dispatch:att-1:2"
    assert (event.actor_type, event.actor_id, event.attempt_id) == ("worker", "worker-b", "att-1")
    assert event.payload == {"attempt_id": "att-1", "dispatch_count": 2, "result": "termination_requested"}
    assert event.created_at_ms == backend.now()
    assert backend.events("run-1") == [event]
    assert backend.run_version("run-1") == (1, 1)

    backend.advance(LEASE_MS * 10)
    later = repo.claim(claim_cmd(owner="worker-c", lease_token="token-c"))
    assert later.status == "dispatched" and later.dispatch == record
    assert repo.claim(claim_cmd(owner="worker-b", lease_token="token-b")).status == "dispatched"


def test_expired_lease_not_taken_over_is_still_fenced_by_version_owner_and_token(backend: Any, repo: Any) -> None:
    first = claimed(backend)
    backend.advance(first.dispatch.lease_expires_at_ms + 60_000 - backend.now())
    outcome = repo.record_result(record_cmd(version=1, result=DispatchResult.ALREADY_EXITED))
    assert outcome.dispatch.status is DispatchStatus.DISPATCHED
    assert outcome.dispatch.last_result is DispatchResult.ALREADY_EXITED


def test_a_result_cannot_be_recorded_twice(backend: Any, repo: Any) -> None:
    claimed(backend)
    repo.record_result(record_cmd(version=1))
    with pytest.raises(FenceRejectedError, match=r"now dispatched at version 2"):
        repo.record_result(record_cmd(version=1))
    with pytest.raises(FenceRejectedError):
        repo.record_result(record_cmd(version=2))


def test_record_result_without_a_dispatch_or_for_another_attempt_is_fence_rejected(backend: Any, repo: Any) -> None:
    with pytest.raises(FenceRejectedError, match="no cancellation dispatch exists for run 'run-1'"):
        repo.record_result(record_cmd(version=1))
    with pytest.raises(FenceRejectedError, match="no cancellation dispatch exists for run 'nope'"):
        repo.record_result(record_cmd(version=1, run_id="nope"))
    claimed(backend)
    backend.create_attempt("att-2", "run-1", attempt=2)
    with pytest.raises(FenceRejectedError):
        repo.record_result(record_cmd(version=1, attempt_id="att-2"))


def test_blocking_result_blocks_for_good(backend: Any, repo: Any) -> None:
    claimed(backend)
    outcome = repo.record_result(record_cmd(version=1, result=DispatchResult.PID_MISMATCH))
    assert outcome.dispatch.status is DispatchStatus.BLOCKED
    assert outcome.event.type == "run.cancel_dispatch_blocked"
    assert outcome.dispatch.last_dispatched_at_ms == backend.now()
    backend.advance(10**9)
    again = repo.claim(claim_cmd(owner="worker-z", lease_token="token-z"))
    assert again.status == "blocked" and again.dispatch == outcome.dispatch


def test_rearm_turns_blocked_into_retry_wait_due_now_under_an_exact_version(backend: Any, repo: Any) -> None:
    claimed(backend)
    blocked = repo.record_result(record_cmd(version=1, result=DispatchResult.IDENTITY_MISMATCH)).dispatch
    backend.advance(50)
    with pytest.raises(FenceRejectedError, match="rearm needs blocked at version 1"):
        repo.rearm("run-1", 1, event_id="evt-r0", actor_id="operator")
    outcome = repo.rearm("run-1", blocked.version, event_id="evt-r1", actor_id="operator")
    rearmed = outcome.dispatch
    assert (rearmed.status, rearmed.version, rearmed.next_attempt_at_ms) == (DispatchStatus.RETRY_WAIT, 3, backend.now())
    assert rearmed.last_result is DispatchResult.IDENTITY_MISMATCH
    assert (outcome.event.type, outcome.event.actor_type, outcome.event.dedupe_key) == (
        "run.cancel_dispatch_rearmed", "user", "cancel-dispatch-rearm:att-1:3")
    assert outcome.event.payload == {"attempt_id": "att-1", "dispatch_count": 1, "previous_result": "identity_mismatch"}
    assert backend.run_version("run-1") == (2, 2)
    with pytest.raises(FenceRejectedError):
        repo.rearm("run-1", 3, event_id="evt-r2", actor_id="operator")
    again = claimed(backend, owner="worker-b", lease_token="token-b")
    assert (again.dispatch.version, again.dispatch.dispatch_count) == (4, 2)
    with pytest.raises(FenceRejectedError, match="no cancellation dispatch exists for run 'nope'"):
        repo.rearm("nope", 1, event_id="evt-r3", actor_id="operator")
    with pytest.raises(InvalidCommandError):
        repo.rearm("run-1", 0, event_id="evt-r4", actor_id="operator")


# --------------------------------------------------------------------------- retry


def test_retry_wait_is_due_exactly_at_now_plus_delay(backend: Any, repo: Any) -> None:
    claimed(backend)
    first_result_at = backend.advance(7)
    outcome = repo.record_result(record_cmd(version=1, result=DispatchResult.DISPATCH_ERROR, retry_delay_ms=5_000))
    record = outcome.dispatch
    assert record.status is DispatchStatus.RETRY_WAIT
    assert record.next_attempt_at_ms == first_result_at + 5_000
    assert record.last_result is DispatchResult.DISPATCH_ERROR
    assert record.last_dispatched_at_ms == first_result_at
    assert record.version == 2 and record.dispatch_count == 1
    assert outcome.event.type == "run.cancel_dispatch_failed"
    assert outcome.event.payload == {"attempt_id": "att-1", "dispatch_count": 1, "result": "dispatch_error"}

    backend.advance(4_999)
    early = repo.claim(claim_cmd(owner="worker-b", lease_token="token-b"))
    assert early.status == "not_due" and early.dispatch == record

    backend.advance(1)
    second = claimed(backend, owner="worker-b", lease_token="token-b")
    assert second.dispatch.version == 3 and second.dispatch.dispatch_count == 2
    assert second.dispatch.last_result is DispatchResult.DISPATCH_ERROR
    assert second.dispatch.last_dispatched_at_ms == first_result_at

    backend.advance(3)
    missing = repo.record_result(record_cmd(version=3, owner="worker-b", lease_token="token-b",
                                            result=DispatchResult.CONTROLLER_MISSING, retry_delay_ms=1_000))
    assert missing.dispatch.status is DispatchStatus.RETRY_WAIT
    assert missing.dispatch.last_dispatched_at_ms == first_result_at
    assert missing.dispatch.next_attempt_at_ms == backend.now() + 1_000
    assert missing.event.dedupe_key == "cancel-dispatch:att-1:2"
    assert backend.run_version("run-1") == (2, 2)

    backend.advance(1_000)
    third = claimed(backend, owner="worker-c", lease_token="token-c")
    handle = repo.record_result(record_cmd(version=5, owner="worker-c", lease_token="token-c",
                                           result=DispatchResult.HANDLE_MISSING, retry_delay_ms=1))
    assert third.dispatch.dispatch_count == 3
    assert handle.dispatch.last_dispatched_at_ms == first_result_at
    assert handle.dispatch.last_result is DispatchResult.HANDLE_MISSING


def test_a_blocking_result_given_as_a_plain_string_blocks(backend: Any, repo: Any) -> None:
    claimed(backend)
    outcome = repo.record_result(record_cmd(version=1, result="unsupported"))
    assert outcome.dispatch.status is DispatchStatus.BLOCKED
    assert outcome.dispatch.last_result is DispatchResult.UNSUPPORTED


# --------------------------------------------------------------------------- eligibility


def _arrange(case: str, backend: Any) -> dict[str, Any]:
    """Set up one not-eligible condition; returns claim overrides."""
    if case == "run-missing":
        seed(backend, "run-other", "att-1")
    elif case == "legacy-owner":
        seed(backend, execution_owner="legacy")
    elif case.startswith("run-"):
        seed(backend, status=case[4:])
    elif case == "no-cancel-request":
        seed(backend, cancel_requested_at_ms=None)
    elif case in ("requested-at-later", "requested-at-earlier"):
        seed(backend)
        return {"requested_at_ms": REQUESTED_AT_MS + (1 if case.endswith("later") else -1)}
    elif case == "attempt-missing":
        backend.create_run("run-1", cancel_requested_at_ms=REQUESTED_AT_MS)
    elif case == "attempt-of-another-run":
        backend.create_run("run-1", cancel_requested_at_ms=REQUESTED_AT_MS)
        backend.create_run("run-2", cancel_requested_at_ms=REQUESTED_AT_MS)
        backend.create_attempt("att-1", "run-2")
    elif case.startswith("attempt-"):
        backend.create_run("run-1", cancel_requested_at_ms=REQUESTED_AT_MS)
        backend.create_attempt("att-1", "run-1", status=case[8:])
    else:
        raise AssertionError(case)
    return {}


NOT_ELIGIBLE = [
    "run-missing", "legacy-owner", "no-cancel-request", "requested-at-later", "requested-at-earlier",
    "attempt-missing", "attempt-of-another-run", "run-succeeded", "run-failed", "run-cancelled",
    "attempt-succeeded", "attempt-failed", "attempt-cancelled", "attempt-lost",
]


@pytest.mark.parametrize("case", NOT_ELIGIBLE)
def test_each_not_eligible_condition_returns_not_eligible_and_creates_no_row(backend: Any, case: str) -> None:
    overrides = _arrange(case, backend)
    before = backend.snapshot()
    outcome = backend.dispatch.claim(claim_cmd(**overrides))
    assert outcome.status == "not_eligible"
    assert msgspec.json.encode(outcome) == b'{"status":"not_eligible"}'
    assert backend.count("run_cancellation_dispatches") == 0
    assert backend.snapshot() == before


@pytest.mark.parametrize("run_status", ["created", "queued", "dispatching", "running", "waiting_approval",
                                        "retry_wait", "lost"])
@pytest.mark.parametrize("attempt_status", ["claimed", "starting", "running"])
def test_every_active_run_and_attempt_status_is_eligible(backend: Any, run_status: str, attempt_status: str) -> None:
    backend.create_run("run-1", status=run_status, cancel_requested_at_ms=REQUESTED_AT_MS)
    backend.create_attempt("att-1", "run-1", status=attempt_status)
    assert backend.dispatch.claim(claim_cmd()).status == "claimed"


def test_a_run_that_ends_after_the_claim_still_records_the_result(backend: Any, repo: Any) -> None:
    claimed(backend)
    backend.set_run_status("run-1", "cancelled")
    backend.set_attempt_status("att-1", "cancelled")
    outcome = repo.record_result(record_cmd(version=1))
    assert outcome.dispatch.status is DispatchStatus.DISPATCHED
    assert repo.claim(claim_cmd(owner="worker-b", lease_token="token-b")).status == "not_eligible"


# --------------------------------------------------------------------------- binding


@pytest.mark.parametrize("first_result", [None, DispatchResult.TERMINATION_REQUESTED])
def test_a_second_attempt_of_the_same_run_is_a_binding_conflict(backend: Any, repo: Any, first_result: Any) -> None:
    claimed(backend)
    if first_result is not None:
        repo.record_result(record_cmd(version=1, result=first_result))
    backend.set_attempt_status("att-1", "failed")
    backend.create_attempt("att-2", "run-1", attempt=2, status="running")
    backend.advance(LEASE_MS)
    before = backend.snapshot()
    with pytest.raises(BindingConflictError) as caught:
        repo.claim(claim_cmd(attempt_id="att-2", owner="worker-b", lease_token="token-b"))
    assert caught.value.code == "CANCELLATION_DISPATCH_BINDING_CONFLICT"
    assert caught.value.retryable is False
    assert str(caught.value) == "dispatch of run 'run-1' is bound to attempt 'att-1', not 'att-2'"
    assert backend.snapshot() == before


# --------------------------------------------------------------------------- atomicity


def test_duplicate_event_id_rolls_back_everything_and_a_fresh_id_lands(backend: Any, repo: Any) -> None:
    seed(backend, "run-2", "att-2")
    claimed(backend, run_id="run-2", attempt_id="att-2")
    repo.record_result(record_cmd(version=1, run_id="run-2", attempt_id="att-2", event_id="evt-dup"))

    lease = claimed(backend)
    before = backend.snapshot()
    backend.advance(5)
    with pytest.raises(RepositoryError) as caught:
        repo.record_result(record_cmd(version=1, event_id="evt-dup"))
    assert caught.value.retryable is False
    assert backend.snapshot() == before
    record = repo.find_by_run_id("run-1")
    assert record == lease.dispatch and record.status is DispatchStatus.LEASED and record.version == 1
    assert backend.events("run-1") == []

    landed = repo.record_result(record_cmd(version=1, event_id="evt-fresh"))
    assert landed.dispatch.version == 2
    assert landed.event.sequence == 1
    assert backend.run_version("run-1") == (1, 1)


def test_a_failed_event_append_rolls_back_everything(backend: Any, repo: Any) -> None:
    claimed(backend)
    # A duplicate dedupe key (an event a foreign writer appended for this dispatch, at the Run's next
    # sequence) fails the append: named as the foreign row it is (the Run's log holds an event its
    # Run did not count), which `check` reports and the service sets aside.
    backend.append_foreign_event("run-1", "cancel-dispatch:att-1:1")
    before = backend.snapshot()
    with pytest.raises(RunEventLogMismatchError) as caught:
        repo.record_result(record_cmd(version=1))
    assert caught.value.retryable is False
    assert backend.snapshot() == before


def test_every_record_the_repository_returns_satisfies_the_invariants(backend: Any, repo: Any) -> None:
    records = [claimed(backend).dispatch]
    records.append(repo.record_result(record_cmd(version=1, result="handle_missing", retry_delay_ms=10)).dispatch)
    backend.advance(10)
    records.append(claimed(backend, owner="worker-b", lease_token="token-b").dispatch)
    records.append(repo.record_result(record_cmd(version=3, owner="worker-b", lease_token="token-b",
                                                 result="identity_mismatch")).dispatch)
    for record in records:
        assert dispatch_record_problem(record) is None
