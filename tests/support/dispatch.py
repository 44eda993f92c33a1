"""Test helpers for the CancellationDispatch tests: seed Runs and Attempts, build commands.

Rows are written with plain SQL through the same apsw connection, only with the columns spec §4
lists, exactly as an external tool would.
"""

from __future__ import annotations

import itertools
from typing import Any

import apsw

from edge_runtime.contract.cancellation_dispatch import ClaimCommand, DispatchResult, RecordResultCommand

REQUESTED_AT_MS = 1_699_999_990_000
LEASE_MS = 30_000

_event_ids = itertools.count(1)


def insert_run(
    connection: apsw.Connection,
    run_id: str = "run-1",
    *,
    execution_owner: str = "runtime",
    status: str = "running",
    cancel_requested_at_ms: int | None = REQUESTED_AT_MS,
    created_at_ms: int = 1_600_000_000_000,
) -> None:
    connection.execute(
        "INSERT INTO runs (id, execution_owner, status, version, event_sequence, cancel_requested_at_ms, "
        "created_at_ms) VALUES (?, ?, ?, 0, 0, ?, ?)",
        (run_id, execution_owner, status, cancel_requested_at_ms, created_at_ms),
    )


def insert_attempt(
    connection: apsw.Connection,
    attempt_id: str = "att-1",
    run_id: str = "run-1",
    *,
    attempt: int = 1,
    status: str = "running",
    created_at_ms: int = 1_600_000_000_000,
) -> None:
    connection.execute(
        "INSERT INTO run_attempts (id, run_id, attempt, status, executor_type, created_at_ms) "
        "VALUES (?, ?, ?, ?, 'local_process', ?)",
        (attempt_id, run_id, attempt, status, created_at_ms),
    )


def seed(connection: apsw.Connection, run_id: str = "run-1", attempt_id: str = "att-1", **run: Any) -> None:
    """One active, runtime-owned, cancel-requested Run with one running Attempt."""
    insert_run(connection, run_id, **run)
    insert_attempt(connection, attempt_id, run_id)


def claim_cmd(
    *,
    run_id: str = "run-1",
    attempt_id: str = "att-1",
    requested_at_ms: int = REQUESTED_AT_MS,
    owner: str = "worker-a",
    lease_token: str = "token-a",
    lease_duration_ms: int = LEASE_MS,
) -> ClaimCommand:
    return ClaimCommand(
        run_id=run_id,
        attempt_id=attempt_id,
        requested_at_ms=requested_at_ms,
        owner=owner,
        lease_token=lease_token,
        lease_duration_ms=lease_duration_ms,
    )


def fresh_event_id() -> str:
    return f"evt-{next(_event_ids)}"


def record_cmd(
    *,
    version: int,
    result: DispatchResult | str = DispatchResult.TERMINATION_REQUESTED,
    run_id: str = "run-1",
    attempt_id: str = "att-1",
    owner: str = "worker-a",
    lease_token: str = "token-a",
    event_id: str | None = None,
    retry_delay_ms: int | None = None,
) -> RecordResultCommand:
    kwargs: dict[str, Any] = {}
    if retry_delay_ms is not None:
        kwargs["retry_delay_ms"] = retry_delay_ms
    return RecordResultCommand(
        run_id=run_id,
        attempt_id=attempt_id,
        owner=owner,
        lease_token=lease_token,
        expected_version=version,
        result=result,
        event_id=event_id or fresh_event_id(),
        **kwargs,
    )


def run_row(connection: apsw.Connection, run_id: str = "run-1") -> tuple[int, int]:
    """The Run's ``(version, event_sequence)``."""
    return connection.execute("SELECT version, event_sequence FROM runs WHERE id = ?", (run_id,)).fetchone()


def stored_dispatch(connection: apsw.Connection, run_id: str = "run-1") -> dict[str, Any] | None:
    cursor = connection.execute("SELECT * FROM run_cancellation_dispatches WHERE run_id = ?", (run_id,))
    names = [d[0] for d in cursor.getdescription()]
    row = cursor.fetchone()
    return None if row is None else dict(zip(names, row))


def count(connection: apsw.Connection, table: str) -> int:
    return connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


RACE_REQUESTED_AT_MS = 1_000


def race_claims(db_path: str, owner: str, run_ids: list[str], barrier: Any, results: Any) -> None:
    """Child process body for the process race test: one claim per round, all released together.

    Runs in a fresh interpreter (multiprocessing 'spawn'), with its own connection and the system
    clock; reports ``(round, owner, status)`` or ``(round, owner, "error: ...")``.
    """
    from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
    from edge_runtime.local.database import open_database

    db = open_database(db_path)
    try:
        repo = LocalCancellationDispatchRepository(db)
        for index, run_id in enumerate(run_ids):
            command = claim_cmd(
                run_id=run_id, attempt_id=f"att-{run_id}", requested_at_ms=RACE_REQUESTED_AT_MS, owner=owner,
                lease_token=f"token-{owner}-{index}", lease_duration_ms=300_000,
            )
            barrier.wait(timeout=60)
            try:
                status = repo.claim(command).status
            except Exception as exc:  # reported, and the test fails on it
                status = f"error: {type(exc).__name__}: {exc}"
            results.put((index, owner, status))
    finally:
        db.close()
