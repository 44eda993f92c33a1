"""Local-only behaviour of the Worker Session and Run Lease repository: the raw bytes of the SQLite
files, busy handling, broken stored rows, the injected clock, the schema and its query plans.
The contract itself is tested on every adapter by tests/conformance/test_conformance_worker_lease.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw
import msgspec
import pytest

from edge_runtime.contract.run_lease import (
    ClaimedRunOutcome,
    RunLeaseRecord,
)
from edge_runtime.contract.worker_lease import (
    WorkerLeaseRepositoryError,
)
from edge_runtime.contract.worker_session import RegisteredOutcome, WorkerSessionRecord
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.run_events import list_run_events
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from tests.support.worker_lease import (
    claim_cmd,
    register_cmd,
    renew_cmd,
    seed_run,
    seed_runs,
    snapshot,
)

replace = msgspec.structs.replace


@pytest.fixture
def repo(db: LocalDatabase) -> LocalWorkerLeaseRepository:
    return LocalWorkerLeaseRepository(db)


def _register(repo: LocalWorkerLeaseRepository, **kwargs: Any) -> WorkerSessionRecord:
    outcome = repo.register(register_cmd(**kwargs))
    assert isinstance(outcome, RegisteredOutcome)
    return outcome.session


def _claim(repo: LocalWorkerLeaseRepository, session: WorkerSessionRecord, run_id: str, attempt_id: str,
           **kwargs: Any) -> RunLeaseRecord:
    outcome = repo.claim_run(claim_cmd(session, run_id, attempt_id, **kwargs))
    assert isinstance(outcome, ClaimedRunOutcome), outcome
    return outcome.lease


# =========================================================================== registration


# =========================================================================== heartbeat, drain, offline


# =========================================================================== claim


# =========================================================================== capacity


# =========================================================================== takeover


# =========================================================================== renew


# =========================================================================== release and the start barrier


# =========================================================================== complete


# =========================================================================== authority is not process state


# =========================================================================== secrets and failures


def test_no_raw_token_reaches_the_database_files_or_events(db_path: Path, clock: ManualClock) -> None:
    tokens = [f"raw-bearer-token-{i:04d}-{'q' * 40}" for i in range(6)]
    db = open_database(db_path, clock=clock)
    try:
        repo = LocalWorkerLeaseRepository(db)
        session = _register(repo, max_concurrent_runs=6)
        pairs = seed_runs(db.connection, 6)
        leases = [_claim(repo, session, run_id, attempt_id, token=token)
                  for (run_id, attempt_id), token in zip(pairs, tokens)]
        for lease, token in zip(leases, tokens):
            clock.advance(1)
            lease = repo.renew(renew_cmd(lease, token))
            repo.renew(renew_cmd(lease, token))
        files = [db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")]
        assert files[1].stat().st_size > 0  # the claims are still in the WAL, so it is really scanned
        for path in files:
            data = path.read_bytes()
            for token in tokens:
                assert token.encode() not in data, f"raw token found in {path.name}"
        events = [e for run_id, _ in pairs for e in list_run_events(db.connection, run_id)]
        assert events and not any(token in json.dumps(msgspec.to_builtins(e)) for e in events for token in tokens)
    finally:
        db.close()
    for path in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")):
        if path.exists():
            data = path.read_bytes()
            assert not any(token.encode() in data for token in tokens)


def test_a_busy_database_is_a_retryable_repository_error(db_path: Path, clock: ManualClock) -> None:
    holder = open_database(db_path, clock=clock)
    waiter = open_database(db_path, clock=clock, busy_timeout_ms=20)
    try:
        holder.connection.execute("BEGIN IMMEDIATE")
        with pytest.raises(WorkerLeaseRepositoryError, match="database busy") as caught:
            LocalWorkerLeaseRepository(waiter).register(register_cmd())
        assert caught.value.retryable is True
        holder.connection.execute("ROLLBACK")
        assert isinstance(LocalWorkerLeaseRepository(waiter).register(register_cmd()), RegisteredOutcome)
    finally:
        waiter.close()
        holder.close()


def test_a_broken_stored_row_fails_closed_and_is_not_retryable(
    repo: LocalWorkerLeaseRepository, db: LocalDatabase
) -> None:
    _register(repo)
    db.connection.execute("UPDATE worker_sessions SET capabilities_hash = ? WHERE worker_id = 'worker-a'", ("0" * 64,))
    with pytest.raises(WorkerLeaseRepositoryError, match="breaks an invariant: capabilities_hash does not match") as caught:
        repo.find_session("worker-a")
    assert caught.value.retryable is False
    with pytest.raises(WorkerLeaseRepositoryError):
        repo.register(register_cmd())


def test_an_invalid_clock_value_fails_the_operation(repo: LocalWorkerLeaseRepository, clock: ManualClock) -> None:
    clock.set(-1)
    with pytest.raises(WorkerLeaseRepositoryError, match="clock returned an invalid time") as caught:
        repo.register(register_cmd())
    assert caught.value.retryable is False
    clock.set(5)
    assert repo.find_session("worker-a") is None


# =========================================================================== schema


def test_the_capacity_count_uses_the_partial_active_lease_index(db: LocalDatabase) -> None:
    plan = db.connection.execute(
        "EXPLAIN QUERY PLAN SELECT count(*) FROM run_dispatch_leases "
        "WHERE worker_id = ? AND session_generation = ? AND status = 'leased' AND attempt_id <> ?",
        ("w", 1, "a"),
    ).fetchall()
    assert any("run_dispatch_leases_active" in row[-1] for row in plan), plan
    indexes = {row[0] for row in db.connection.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name IN ('worker_sessions', 'run_dispatch_leases') "
        "AND sql IS NOT NULL")}
    # ... and no other: the clock floor reads the grants' times through their Runs (migration 0009).
    assert indexes == {"run_dispatch_leases_active"}


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        # draining and offline sessions report no capacity
        ("UPDATE worker_sessions SET status = 'draining'", ()),
        ("UPDATE worker_sessions SET available_slots = max_concurrent_runs + 1", ()),
        ("UPDATE worker_sessions SET max_concurrent_runs = 65, available_slots = 0", ()),
        ("UPDATE worker_sessions SET status = 'gone', available_slots = 0", ()),
        ("UPDATE worker_sessions SET generation = 5", ()),  # version must be >= generation - 1
        ("UPDATE worker_sessions SET capabilities_hash = 'ABC'", ()),
        # terminal shape of leases
        ("UPDATE run_dispatch_leases SET status = 'released'", ()),
        ("UPDATE run_dispatch_leases SET status = 'released', released_at_ms = acquired_at_ms, "
         "release_reason = 'declined', started_at_ms = acquired_at_ms", ()),
        ("UPDATE run_dispatch_leases SET status = 'completed'", ()),
        ("UPDATE run_dispatch_leases SET completed_at_ms = acquired_at_ms", ()),
        ("UPDATE run_dispatch_leases SET token_digest = ?", ("raw-token",)),
        ("UPDATE run_dispatch_leases SET lease_generation = version + 1", ()),
        ("UPDATE run_dispatch_leases SET expires_at_ms = acquired_at_ms", ()),
        # the Attempt projection is all or nothing
        ("UPDATE run_attempts SET lease_offer_id = NULL", ()),
        ("UPDATE run_attempts SET lease_token_digest = ?", ("raw-token",)),
    ],
)
def test_the_schema_refuses_rows_that_break_the_shape(
    repo: LocalWorkerLeaseRepository, db: LocalDatabase, sql: str, params: tuple[Any, ...]
) -> None:
    session = _register(repo)
    seed_run(db.connection, "r1", "a1")
    _claim(repo, session, "r1", "a1")
    before = snapshot(db.connection)
    with pytest.raises(apsw.ConstraintError):
        db.connection.execute(sql, params)
    assert snapshot(db.connection) == before


