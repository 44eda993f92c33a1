"""Local-only behaviour of LocalCancellationDispatchRepository: rollback on a version CAS miss,
broken stored rows, the injected clock, busy and closed databases. The contract itself is tested on
every adapter by tests/conformance/test_conformance_dispatch.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import msgspec
import pytest

from tests.support.dispatch import (
    claim_cmd,
    count,
    record_cmd,
    run_row,
    seed,
    stored_dispatch,
)
from edge_runtime.contract.cancellation_dispatch import (
    DispatchStatus,
    RepositoryError,
    digest_lease_token,
)
from edge_runtime.contract.errors import RunEventLogMismatchError
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, open_database

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


# --------------------------------------------------------------------------- two owners


# --------------------------------------------------------------------------- retry


# --------------------------------------------------------------------------- eligibility


# --------------------------------------------------------------------------- binding


# --------------------------------------------------------------------------- atomicity


def test_run_version_cas_miss_rolls_back_everything(
    repo: LocalCancellationDispatchRepository, db: LocalDatabase
) -> None:
    claimed(repo)
    before = stored_dispatch(db.connection)
    # A duplicate dedupe key (an event a foreign writer appended for this dispatch, uncounted by its
    # Run) fails the append, named as the foreign row it is.
    db.connection.execute(
        "INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, payload, "
        "created_at_ms) VALUES ('evt-x', 'run-1', 1, 't', 'cancel-dispatch:att-1:1', 'tool', 'x', '{}', 0)"
    )
    with pytest.raises(RunEventLogMismatchError) as caught:
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


