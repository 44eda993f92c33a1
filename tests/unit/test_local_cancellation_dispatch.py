"""LocalCancellationDispatchRepository against spec §3, on a real database file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import msgspec
import pytest

from dispatch_support import (
    LEASE_MS,
    REQUESTED_AT_MS,
    claim_cmd,
    count,
    insert_attempt,
    insert_run,
    record_cmd,
    run_row,
    seed,
    stored_dispatch,
)
from edge_runtime.contract.cancellation_dispatch import (
    BindingConflictError,
    DispatchResult,
    DispatchStatus,
    FenceRejectedError,
    InvalidCommandError,
    RepositoryError,
    digest_lease_token,
    dispatch_record_problem,
)
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.run_events import list_run_events

UNSET = msgspec.UNSET


@pytest.fixture
def repo(db: LocalDatabase) -> LocalCancellationDispatchRepository:
    seed(db.connection)
    return LocalCancellationDispatchRepository(db)


def claimed(repo: LocalCancellationDispatchRepository, **kwargs: Any) -> Any:
    outcome = repo.claim(claim_cmd(**kwargs))
    assert outcome.status == "claimed", outcome
    return outcome


# --------------------------------------------------------------------------- claim basics


def test_first_claim_creates_and_leases_the_dispatch(
    repo: LocalCancellationDispatchRepository, db: LocalDatabase, clock: ManualClock
) -> None:
    now = clock.now_ms()
    assert repo.find_by_run_id("run-1") is None
    outcome = claimed(repo)
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
    stored = stored_dispatch(db.connection)
    assert stored["lease_token"] == "sha256:" + digest_lease_token("token-a")
    # A claim is not an event: the Run's version and sequence are untouched.
    assert run_row(db.connection) == (0, 0)


def test_claim_before_the_requested_time_creates_a_pending_row_and_is_not_due(
    db: LocalDatabase, clock: ManualClock
) -> None:
    requested = clock.now_ms() + 1_000
    seed(db.connection, cancel_requested_at_ms=requested)
    repo = LocalCancellationDispatchRepository(db)
    outcome = repo.claim(claim_cmd(requested_at_ms=requested))
    assert outcome.status == "not_due"
    record = outcome.dispatch
    assert record.status is DispatchStatus.PENDING
    assert (record.version, record.dispatch_count, record.next_attempt_at_ms) == (0, 0, requested)
    assert repo.find_by_run_id("run-1") == record
    clock.advance(999)
    assert repo.claim(claim_cmd(requested_at_ms=requested)).status == "not_due"
    clock.advance(1)
    outcome = repo.claim(claim_cmd(requested_at_ms=requested))
    assert outcome.status == "claimed"
    assert outcome.dispatch.created_at_ms == requested - 1_000
    assert outcome.dispatch.updated_at_ms == requested


def test_find_by_run_id_rejects_an_invalid_identifier(repo: LocalCancellationDispatchRepository) -> None:
    with pytest.raises(InvalidCommandError, match="run_id must be at most 36 characters, got 37"):
        repo.find_by_run_id("r" * 37)


def test_repository_rejects_commands_of_the_wrong_type(repo: LocalCancellationDispatchRepository) -> None:
    with pytest.raises(InvalidCommandError, match="claim expects a ClaimCommand, got dict"):
        repo.claim({"runId": "run-1"})  # type: ignore[arg-type]
    with pytest.raises(InvalidCommandError, match="record_result expects a RecordResultCommand, got ClaimCommand"):
        repo.record_result(claim_cmd())  # type: ignore[arg-type]


# --------------------------------------------------------------------------- two owners


def test_two_owners_takeover_exactly_at_expiry_and_stale_fence(
    repo: LocalCancellationDispatchRepository, db: LocalDatabase, clock: ManualClock
) -> None:
    first = claimed(repo, owner="worker-a", lease_token="token-a")
    expires = first.dispatch.lease_expires_at_ms

    clock.set(expires - 1)
    seen = repo.claim(claim_cmd(owner="worker-b", lease_token="token-b"))
    assert seen.status == "leased"
    assert seen.dispatch == first.dispatch

    clock.set(expires)
    second = claimed(repo, owner="worker-b", lease_token="token-b")
    assert second.dispatch.version == 2 and second.dispatch.dispatch_count == 2
    assert second.dispatch.lease_owner == "worker-b"
    assert second.dispatch.lease_expires_at_ms == expires + LEASE_MS
    assert second.dispatch.created_at_ms == first.dispatch.created_at_ms

    # The stale owner's result, with its own (old) fence, is rejected and changes nothing.
    with pytest.raises(FenceRejectedError) as stale:
        repo.record_result(record_cmd(version=1, owner="worker-a", lease_token="token-a"))
    assert stale.value.code == "CANCELLATION_DISPATCH_FENCE_REJECTED"
    assert stale.value.retryable is False
    assert str(stale.value) == (
        "lease of run 'run-1' at version 1 by 'worker-a' no longer fences the dispatch (now leased at version 2)"
    )
    # Nor does the stale owner get through with the current version but its own owner or token.
    with pytest.raises(FenceRejectedError):
        repo.record_result(record_cmd(version=2, owner="worker-a", lease_token="token-a"))
    with pytest.raises(FenceRejectedError):
        repo.record_result(record_cmd(version=2, owner="worker-b", lease_token="token-a"))
    with pytest.raises(FenceRejectedError):
        repo.record_result(record_cmd(version=2, owner="worker-a", lease_token="token-b"))
    assert repo.find_by_run_id("run-1") == second.dispatch
    assert run_row(db.connection) == (0, 0)

    clock.advance(10)
    landed = repo.record_result(record_cmd(version=2, owner="worker-b", lease_token="token-b", event_id="evt-b"))
    record = landed.dispatch
    assert record.status is DispatchStatus.DISPATCHED
    assert record.version == 3 and record.dispatch_count == 2
    assert record.last_result is DispatchResult.TERMINATION_REQUESTED
    assert record.last_dispatched_at_ms == clock.now_ms()
    assert (record.lease_owner, record.lease_token_digest, record.lease_expires_at_ms) == (UNSET, UNSET, UNSET)
    assert record.next_attempt_at_ms is UNSET
    event = landed.event
    assert event.id == "evt-b" and event.sequence == 1 and event.type == "run.cancel_dispatched"
    assert event.dedupe_key == "cancel-dispatch:att-1:2"
    assert (event.actor_type, event.actor_id, event.attempt_id) == ("worker", "worker-b", "att-1")
    assert event.payload == {"attempt_id": "att-1", "dispatch_count": 2, "result": "termination_requested"}
    assert event.created_at_ms == clock.now_ms()
    assert list_run_events(db.connection, "run-1") == [event]
    assert run_row(db.connection) == (1, 1)

    clock.advance(LEASE_MS * 10)
    later = repo.claim(claim_cmd(owner="worker-c", lease_token="token-c"))
    assert later.status == "dispatched"
    assert later.dispatch == record
    # The dispatched record is not leased again, even by its last owner.
    assert repo.claim(claim_cmd(owner="worker-b", lease_token="token-b")).status == "dispatched"


def test_expired_lease_not_taken_over_is_still_fenced_by_version_owner_and_token(
    repo: LocalCancellationDispatchRepository, clock: ManualClock
) -> None:
    first = claimed(repo)
    clock.set(first.dispatch.lease_expires_at_ms + 60_000)
    outcome = repo.record_result(record_cmd(version=1, result=DispatchResult.ALREADY_EXITED))
    assert outcome.dispatch.status is DispatchStatus.DISPATCHED
    assert outcome.dispatch.last_result is DispatchResult.ALREADY_EXITED


def test_a_result_cannot_be_recorded_twice(repo: LocalCancellationDispatchRepository) -> None:
    claimed(repo)
    repo.record_result(record_cmd(version=1))
    with pytest.raises(FenceRejectedError, match=r"now dispatched at version 2"):
        repo.record_result(record_cmd(version=1))
    with pytest.raises(FenceRejectedError):
        repo.record_result(record_cmd(version=2))


def test_record_result_without_a_dispatch_or_for_another_attempt_is_fence_rejected(
    repo: LocalCancellationDispatchRepository, db: LocalDatabase
) -> None:
    with pytest.raises(FenceRejectedError, match="no cancellation dispatch exists for run 'run-1'"):
        repo.record_result(record_cmd(version=1))
    with pytest.raises(FenceRejectedError, match="no cancellation dispatch exists for run 'nope'"):
        repo.record_result(record_cmd(version=1, run_id="nope"))
    claimed(repo)
    insert_attempt(db.connection, "att-2", "run-1", attempt=2)
    with pytest.raises(FenceRejectedError):
        repo.record_result(record_cmd(version=1, attempt_id="att-2"))


def test_blocking_result_blocks_for_good(repo: LocalCancellationDispatchRepository, clock: ManualClock) -> None:
    claimed(repo)
    outcome = repo.record_result(record_cmd(version=1, result=DispatchResult.PID_MISMATCH))
    assert outcome.dispatch.status is DispatchStatus.BLOCKED
    assert outcome.event.type == "run.cancel_dispatch_blocked"
    assert outcome.dispatch.last_dispatched_at_ms == clock.now_ms()
    clock.advance(10**9)
    again = repo.claim(claim_cmd(owner="worker-z", lease_token="token-z"))
    assert again.status == "blocked" and again.dispatch == outcome.dispatch


# --------------------------------------------------------------------------- retry


def test_retry_wait_is_due_exactly_at_now_plus_delay(
    repo: LocalCancellationDispatchRepository, db: LocalDatabase, clock: ManualClock
) -> None:
    claimed(repo)
    clock.advance(7)
    first_result_at = clock.now_ms()
    outcome = repo.record_result(record_cmd(version=1, result=DispatchResult.DISPATCH_ERROR, retry_delay_ms=5_000))
    record = outcome.dispatch
    assert record.status is DispatchStatus.RETRY_WAIT
    assert record.next_attempt_at_ms == first_result_at + 5_000
    assert record.last_result is DispatchResult.DISPATCH_ERROR
    assert record.last_dispatched_at_ms == first_result_at
    assert record.version == 2 and record.dispatch_count == 1
    assert outcome.event.type == "run.cancel_dispatch_failed"
    assert outcome.event.payload == {"attempt_id": "att-1", "dispatch_count": 1, "result": "dispatch_error"}

    clock.set(first_result_at + 4_999)
    early = repo.claim(claim_cmd(owner="worker-b", lease_token="token-b"))
    assert early.status == "not_due" and early.dispatch == record

    clock.set(first_result_at + 5_000)
    second = claimed(repo, owner="worker-b", lease_token="token-b")
    assert second.dispatch.version == 3 and second.dispatch.dispatch_count == 2
    # The last result survives a new lease (a leased row may carry a retryable last_result).
    assert second.dispatch.last_result is DispatchResult.DISPATCH_ERROR
    assert second.dispatch.last_dispatched_at_ms == first_result_at

    # The controller was never invoked: the previous dispatch time is kept.
    clock.advance(3)
    missing = repo.record_result(
        record_cmd(version=3, owner="worker-b", lease_token="token-b",
                   result=DispatchResult.CONTROLLER_MISSING, retry_delay_ms=1_000)
    )
    assert missing.dispatch.status is DispatchStatus.RETRY_WAIT
    assert missing.dispatch.last_dispatched_at_ms == first_result_at
    assert missing.dispatch.next_attempt_at_ms == clock.now_ms() + 1_000
    assert missing.event.dedupe_key == "cancel-dispatch:att-1:2"
    assert run_row(db.connection) == (2, 2)

    clock.advance(1_000)
    third = claimed(repo, owner="worker-c", lease_token="token-c")
    handle = repo.record_result(
        record_cmd(version=5, owner="worker-c", lease_token="token-c",
                   result=DispatchResult.HANDLE_MISSING, retry_delay_ms=1)
    )
    assert third.dispatch.dispatch_count == 3
    assert handle.dispatch.last_dispatched_at_ms == first_result_at
    assert handle.dispatch.last_result is DispatchResult.HANDLE_MISSING


def test_a_blocking_result_given_as_a_plain_string_blocks(repo: LocalCancellationDispatchRepository) -> None:
    claimed(repo)
    outcome = repo.record_result(record_cmd(version=1, result="unsupported"))
    assert outcome.dispatch.status is DispatchStatus.BLOCKED
    assert outcome.dispatch.last_result is DispatchResult.UNSUPPORTED


# --------------------------------------------------------------------------- eligibility


def _not_eligible_cases() -> list[Any]:
    def run_missing(c: apsw.Connection) -> dict[str, Any]:
        insert_run(c, "run-other")
        insert_attempt(c, "att-1", "run-other")
        return {}

    def legacy_owner(c: apsw.Connection) -> dict[str, Any]:
        seed(c, execution_owner="legacy")
        return {}

    def run_status(status: str) -> Any:
        def make(c: apsw.Connection) -> dict[str, Any]:
            seed(c, status=status)
            return {}

        return make

    def no_cancel_request(c: apsw.Connection) -> dict[str, Any]:
        seed(c, cancel_requested_at_ms=None)
        return {}

    def requested_at(delta: int) -> Any:
        def make(c: apsw.Connection) -> dict[str, Any]:
            seed(c)
            return {"requested_at_ms": REQUESTED_AT_MS + delta}

        return make

    def attempt_missing(c: apsw.Connection) -> dict[str, Any]:
        insert_run(c)
        return {}

    def attempt_of_another_run(c: apsw.Connection) -> dict[str, Any]:
        insert_run(c)
        insert_run(c, "run-2")
        insert_attempt(c, "att-1", "run-2")
        return {}

    def attempt_status(status: str) -> Any:
        def make(c: apsw.Connection) -> dict[str, Any]:
            insert_run(c)
            insert_attempt(c, status=status)
            return {}

        return make

    cases = [
        pytest.param(run_missing, id="run-missing"),
        pytest.param(legacy_owner, id="legacy-owner"),
        pytest.param(no_cancel_request, id="no-cancel-request"),
        pytest.param(requested_at(+1), id="requested-at-later"),
        pytest.param(requested_at(-1), id="requested-at-earlier"),
        pytest.param(attempt_missing, id="attempt-missing"),
        pytest.param(attempt_of_another_run, id="attempt-of-another-run"),
    ]
    cases += [pytest.param(run_status(s), id=f"run-{s}") for s in ("succeeded", "failed", "cancelled")]
    cases += [pytest.param(attempt_status(s), id=f"attempt-{s}") for s in ("succeeded", "failed", "cancelled", "lost")]
    return cases


@pytest.mark.parametrize("arrange", _not_eligible_cases())
def test_each_not_eligible_condition_returns_not_eligible_and_creates_no_row(
    db: LocalDatabase, arrange: Any
) -> None:
    overrides = arrange(db.connection)
    repo = LocalCancellationDispatchRepository(db)
    before = run_row(db.connection) if db.connection.execute("SELECT 1 FROM runs WHERE id='run-1'").fetchone() else None
    outcome = repo.claim(claim_cmd(**overrides))
    assert outcome.status == "not_eligible"
    assert msgspec.json.encode(outcome) == b'{"status":"not_eligible"}'
    assert count(db.connection, "run_cancellation_dispatches") == 0
    assert count(db.connection, "run_events") == 0
    if before is not None:
        assert run_row(db.connection) == before


@pytest.mark.parametrize("run_status", ["created", "queued", "dispatching", "running", "waiting_approval",
                                        "retry_wait", "lost"])
@pytest.mark.parametrize("attempt_status", ["claimed", "starting", "running"])
def test_every_active_run_and_attempt_status_is_eligible(
    db: LocalDatabase, run_status: str, attempt_status: str
) -> None:
    insert_run(db.connection, status=run_status)
    insert_attempt(db.connection, status=attempt_status)
    assert LocalCancellationDispatchRepository(db).claim(claim_cmd()).status == "claimed"


def test_a_run_that_ends_after_the_claim_still_records_the_result(
    repo: LocalCancellationDispatchRepository, db: LocalDatabase
) -> None:
    claimed(repo)
    db.connection.execute("UPDATE runs SET status = 'cancelled' WHERE id = 'run-1'")
    db.connection.execute("UPDATE run_attempts SET status = 'cancelled' WHERE id = 'att-1'")
    outcome = repo.record_result(record_cmd(version=1))
    assert outcome.dispatch.status is DispatchStatus.DISPATCHED
    # ...but no new claim is eligible any more.
    assert repo.claim(claim_cmd(owner="worker-b", lease_token="token-b")).status == "not_eligible"


# --------------------------------------------------------------------------- binding


@pytest.mark.parametrize("first_result", [None, DispatchResult.TERMINATION_REQUESTED])
def test_a_second_attempt_of_the_same_run_is_a_binding_conflict(
    repo: LocalCancellationDispatchRepository, db: LocalDatabase, clock: ManualClock, first_result: Any
) -> None:
    claimed(repo)
    if first_result is not None:
        repo.record_result(record_cmd(version=1, result=first_result))
    before = stored_dispatch(db.connection)
    db.connection.execute("UPDATE run_attempts SET status = 'failed' WHERE id = 'att-1'")
    insert_attempt(db.connection, "att-2", "run-1", attempt=2, status="running")
    clock.advance(LEASE_MS)
    with pytest.raises(BindingConflictError) as caught:
        repo.claim(claim_cmd(attempt_id="att-2", owner="worker-b", lease_token="token-b"))
    assert caught.value.code == "CANCELLATION_DISPATCH_BINDING_CONFLICT"
    assert caught.value.retryable is False
    assert str(caught.value) == "dispatch of run 'run-1' is bound to attempt 'att-1', not 'att-2'"
    assert stored_dispatch(db.connection) == before


# --------------------------------------------------------------------------- atomicity


def test_duplicate_event_id_rolls_back_everything_and_a_fresh_id_lands(
    repo: LocalCancellationDispatchRepository, db: LocalDatabase, clock: ManualClock
) -> None:
    # Another Run's result already used the event id.
    seed(db.connection, "run-2", "att-2")
    claimed(repo, run_id="run-2", attempt_id="att-2")
    repo.record_result(record_cmd(version=1, run_id="run-2", attempt_id="att-2", event_id="evt-dup"))

    lease = claimed(repo)
    before_dispatch = stored_dispatch(db.connection)
    before_run = run_row(db.connection)
    assert before_run == (0, 0)
    clock.advance(5)
    with pytest.raises(RepositoryError) as caught:
        repo.record_result(record_cmd(version=1, event_id="evt-dup"))
    assert caught.value.retryable is False
    assert caught.value.code == "CANCELLATION_DISPATCH_REPOSITORY_FAILED"
    assert stored_dispatch(db.connection) == before_dispatch
    record = repo.find_by_run_id("run-1")
    assert record == lease.dispatch and record.status is DispatchStatus.LEASED and record.version == 1
    assert run_row(db.connection) == before_run
    assert list_run_events(db.connection, "run-1") == []
    assert not db.connection.in_transaction

    landed = repo.record_result(record_cmd(version=1, event_id="evt-fresh"))
    assert landed.dispatch.version == 2
    assert landed.event.sequence == 1
    assert run_row(db.connection) == (1, 1)


def test_run_version_cas_miss_rolls_back_everything(
    repo: LocalCancellationDispatchRepository, db: LocalDatabase
) -> None:
    claimed(repo)
    before = stored_dispatch(db.connection)
    # A duplicate dedupe key (an event a foreign writer appended for this dispatch) fails the append.
    db.connection.execute(
        "INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, payload, "
        "created_at_ms) VALUES ('evt-x', 'run-1', 1, 't', 'cancel-dispatch:att-1:1', 'tool', 'x', '{}', 0)"
    )
    with pytest.raises(RepositoryError) as caught:
        repo.record_result(record_cmd(version=1))
    assert caught.value.retryable is False
    assert stored_dispatch(db.connection) == before
    assert run_row(db.connection) == (0, 0)


# --------------------------------------------------------------------------- fail closed


def _write_unchecked(db: LocalDatabase, **row: Any) -> None:
    """Store a dispatch row bypassing the CHECK constraints, as a buggy tool or old release might."""
    values = {
        "run_id": "run-1",
        "attempt_id": "att-1",
        "status": "leased",
        "version": 1,
        "dispatch_count": 1,
        "next_attempt_at_ms": None,
        "lease_owner": "worker-a",
        "lease_token": "sha256:" + digest_lease_token("token-a"),
        "lease_expires_at_ms": 1_600_000_000_000,
        "last_result": None,
        "last_dispatched_at_ms": None,
        "created_at_ms": 1_600_000_000_000,
        "updated_at_ms": 1_600_000_000_000,
    }
    values.update(row)
    connection = db.connection
    # The shape triggers of migration 0005 too (an old release wrote without them).
    triggers = connection.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                                  "AND tbl_name = 'run_cancellation_dispatches' AND name LIKE '%result_shape%'").fetchall()
    connection.execute("PRAGMA ignore_check_constraints = ON")
    try:
        for name, _ in triggers:
            connection.execute(f"DROP TRIGGER {name}")
        connection.execute(
            f"INSERT INTO run_cancellation_dispatches ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
            tuple(values.values()),
        )
    finally:
        connection.execute("PRAGMA ignore_check_constraints = OFF")
        for _, sql in triggers:
            connection.execute(sql)


BROKEN_ROWS = [
    pytest.param({"lease_token": None}, "a leased dispatch must have lease_owner, lease_token_digest and "
                 "lease_expires_at_ms", id="leased-null-token"),
    pytest.param({"lease_owner": None}, "a leased dispatch must have", id="leased-null-owner"),
    pytest.param({"lease_expires_at_ms": None}, "a leased dispatch must have", id="leased-null-expiry"),
    pytest.param({"lease_owner": "bad\nowner"}, "lease_owner must not contain control characters",
                 id="leased-owner-control-char"),
    pytest.param({"lease_token": "raw\x00token"}, "stored legacy lease token is invalid", id="legacy-token-control"),
    pytest.param({"lease_token": "t" * 129}, "stored legacy lease token is invalid", id="legacy-token-too-long"),
    pytest.param({"lease_token": ""}, "stored legacy lease token is invalid", id="legacy-token-empty"),
    pytest.param({"status": "pending", "version": 0, "dispatch_count": 0, "next_attempt_at_ms": 1},
                 "a pending dispatch must not carry lease fields", id="pending-with-lease"),
    pytest.param({"status": "pending", "version": 3, "dispatch_count": 0, "next_attempt_at_ms": 1,
                  "lease_owner": None, "lease_token": None, "lease_expires_at_ms": None},
                 "a pending dispatch must have version 0", id="pending-version"),
    pytest.param({"status": "retry_wait", "lease_owner": None, "lease_token": None, "lease_expires_at_ms": None,
                  "version": 2, "last_result": "dispatch_error"},
                 "a retry_wait dispatch must have next_attempt_at_ms", id="retry-wait-no-due-time"),
    pytest.param({"status": "retry_wait", "lease_owner": None, "lease_token": None, "lease_expires_at_ms": None,
                  "version": 2, "next_attempt_at_ms": 1, "last_result": "termination_requested"},
                 "a retry_wait dispatch must have a retryable or blocking last_result", id="retry-wait-delivered"),
    pytest.param({"status": "dispatched", "lease_owner": None, "lease_token": None, "lease_expires_at_ms": None,
                  "version": 2}, "a dispatched dispatch must have last_result", id="dispatched-no-result"),
    pytest.param({"status": "blocked", "lease_owner": None, "lease_token": None, "lease_expires_at_ms": None,
                  "version": 2, "last_result": "already_exited"}, "a blocked dispatch must have a blocking",
                 id="blocked-delivered"),
    pytest.param({"status": "leased", "last_result": "already_exited"},
                 "a leased dispatch must have a retryable or blocking last_result", id="leased-delivered-result"),
    pytest.param({"dispatch_count": 0}, "a leased dispatch must have dispatch_count >= 1", id="leased-count-0"),
    pytest.param({"dispatch_count": 2}, "version must be >= dispatch_count", id="count-above-version"),
    pytest.param({"updated_at_ms": 1}, "updated_at_ms must be >= created_at_ms", id="updated-before-created"),
    pytest.param({"version": -1}, "version must be between 0 and 2147483647", id="negative-version"),
    pytest.param({"status": "exploded"}, "is malformed", id="unknown-status"),
    pytest.param({"last_result": "shrug"}, "is malformed", id="unknown-result"),
]


@pytest.mark.parametrize(("row", "message"), BROKEN_ROWS)
def test_a_stored_row_breaking_an_invariant_fails_closed_and_is_never_reclaimed(
    db: LocalDatabase, clock: ManualClock, row: dict[str, Any], message: str
) -> None:
    seed(db.connection)
    _write_unchecked(db, **row)
    repo = LocalCancellationDispatchRepository(db)
    before = stored_dispatch(db.connection)
    clock.advance(10**9)  # far past any expiry or due time: a healthy row would be claimable

    for attempt in (
        lambda: repo.find_by_run_id("run-1"),
        lambda: repo.claim(claim_cmd(owner="worker-b", lease_token="token-b")),
        lambda: repo.record_result(record_cmd(version=1)),
    ):
        with pytest.raises(RepositoryError, match="^stored .*(breaks an invariant|malformed|invalid)") as caught:
            attempt()
        assert message in str(caught.value)
        assert caught.value.retryable is False
        assert caught.value.code == "CANCELLATION_DISPATCH_REPOSITORY_FAILED"
    assert stored_dispatch(db.connection) == before
    assert run_row(db.connection) == (0, 0)
    assert count(db.connection, "run_events") == 0
    # A raw token never leaks into an error text.
    assert "raw\x00token" not in str(caught.value)


class _FixedClock:
    def __init__(self, value: Any) -> None:
        self.value = value

    def now_ms(self) -> Any:
        return self.value


@pytest.mark.parametrize("value", [-1, 1.5, float(1_700_000_000_000), True, "1700000000000", None, 2**53])
def test_an_invalid_clock_value_fails_the_operation_non_retryable(
    repo: LocalCancellationDispatchRepository, db: LocalDatabase, clock: ManualClock, value: Any
) -> None:
    lease = claimed(repo)
    before = stored_dispatch(db.connection)
    db.clock = _FixedClock(value)
    for attempt in (
        lambda: repo.claim(claim_cmd(owner="worker-b", lease_token="token-b")),
        lambda: repo.record_result(record_cmd(version=1)),
    ):
        with pytest.raises(RepositoryError, match="clock returned an invalid time") as caught:
            attempt()
        assert caught.value.retryable is False
        assert not db.connection.in_transaction
    assert stored_dispatch(db.connection) == before
    db.clock = clock
    assert repo.record_result(record_cmd(version=lease.dispatch.version)).dispatch.version == 2


def test_a_busy_database_is_a_retryable_repository_error(db_path: Path, clock: ManualClock) -> None:
    setup = open_database(db_path, clock=clock)
    seed(setup.connection)
    repo_a = LocalCancellationDispatchRepository(setup)
    lease = repo_a.claim(claim_cmd())
    setup.close()

    db = open_database(db_path, clock=clock, busy_timeout_ms=20)
    repo = LocalCancellationDispatchRepository(db)
    blocker = apsw.Connection(str(db_path))
    try:
        blocker.execute("BEGIN IMMEDIATE")
        for attempt in (
            lambda: repo.claim(claim_cmd(owner="worker-b", lease_token="token-b")),
            lambda: repo.record_result(record_cmd(version=1)),
        ):
            with pytest.raises(RepositoryError, match="^database busy") as caught:
                attempt()
            assert caught.value.retryable is True
            assert caught.value.code == "CANCELLATION_DISPATCH_REPOSITORY_FAILED"
            assert not db.connection.in_transaction
        blocker.execute("ROLLBACK")
        # Retrying unchanged now succeeds.
        outcome = repo.record_result(record_cmd(version=lease.dispatch.version))
        assert outcome.dispatch.status is DispatchStatus.DISPATCHED
    finally:
        blocker.close()
        db.close()


def test_operations_on_a_closed_database_are_repository_errors(db_path: Path, clock: ManualClock) -> None:
    db = open_database(db_path, clock=clock)
    repo = LocalCancellationDispatchRepository(db)
    db.close()
    with pytest.raises(RepositoryError, match="is closed") as caught:
        repo.claim(claim_cmd())
    assert caught.value.retryable is False


def test_every_record_the_repository_returns_satisfies_the_invariants(
    repo: LocalCancellationDispatchRepository, clock: ManualClock
) -> None:
    records = [claimed(repo).dispatch]
    records.append(repo.record_result(record_cmd(version=1, result="handle_missing", retry_delay_ms=10)).dispatch)
    clock.advance(10)
    records.append(claimed(repo, owner="worker-b", lease_token="token-b").dispatch)
    records.append(repo.record_result(record_cmd(version=3, owner="worker-b", lease_token="token-b",
                                                 result="identity_mismatch")).dispatch)
    for record in records:
        assert dispatch_record_problem(record) is None
