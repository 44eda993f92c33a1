"""Test helpers for the Worker Session / Run Lease tests: seed Runs and Attempts, build commands.

Rows are seeded with plain SQL through apsw, with only the columns spec §4 lists.
"""

from __future__ import annotations

import itertools
from typing import Any

import apsw

from edge_runtime.contract.run_lease import (
    BeginStartCommand,
    ClaimRunCommand,
    CompleteRunLeaseCommand,
    ReleaseReason,
    ReleaseRunLeaseCommand,
    RenewRunLeaseCommand,
    RunLeaseRecord,
)
from edge_runtime.contract.worker_session import (
    DrainCommand,
    HeartbeatCommand,
    OfflineCommand,
    RegisterWorkerCommand,
    WorkerSessionRecord,
)

SESSION_MS = 60_000
LEASE_MS = 30_000
CAPABILITIES: dict[str, Any] = {"executors": ["local_process"], "arch": "mipsel", "memory_mb": 128}

_ids = itertools.count(1)


def next_event_id() -> str:
    return f"evt-{next(_ids)}"


def seed_run(
    connection: apsw.Connection,
    run_id: str,
    attempt_id: str | None = None,
    *,
    run_status: str = "dispatching",
    execution_owner: str = "runtime",
    cancel_requested_at_ms: int | None = None,
    attempt_status: str = "claimed",
) -> None:
    """One Run and (unless ``attempt_id`` is None) one Attempt of it."""
    connection.execute(
        "INSERT INTO runs (id, execution_owner, status, version, event_sequence, cancel_requested_at_ms, "
        "created_at_ms) VALUES (?, ?, ?, 0, 0, ?, 1600000000000)",
        (run_id, execution_owner, run_status, cancel_requested_at_ms),
    )
    if attempt_id is not None:
        connection.execute(
            "INSERT INTO run_attempts (id, run_id, attempt, status, executor_type, created_at_ms) "
            "VALUES (?, ?, 1, ?, 'local_process', 1600000000000)",
            (attempt_id, run_id, attempt_status),
        )


def seed_runs(connection: apsw.Connection, count: int, prefix: str = "r") -> list[tuple[str, str]]:
    """``count`` claimable (Run, Attempt) pairs, in one transaction."""
    pairs = [(f"{prefix}{i}", f"{prefix}{i}-a") for i in range(count)]
    with connection:
        for run_id, attempt_id in pairs:
            seed_run(connection, run_id, attempt_id)
    return pairs


def register_cmd(
    worker_id: str = "worker-a",
    session_id: str = "session-1",
    *,
    capabilities: dict[str, Any] | None = None,
    max_concurrent_runs: int = 2,
    lease_duration_ms: int = SESSION_MS,
) -> RegisterWorkerCommand:
    return RegisterWorkerCommand(
        worker_id=worker_id,
        session_id=session_id,
        capabilities=CAPABILITIES if capabilities is None else capabilities,
        max_concurrent_runs=max_concurrent_runs,
        lease_duration_ms=lease_duration_ms,
    )


def heartbeat_cmd(session: WorkerSessionRecord, *, available_slots: int | None = None, **overrides: Any) -> HeartbeatCommand:
    fields: dict[str, Any] = dict(
        worker_id=session.worker_id,
        session_id=session.session_id,
        generation=session.generation,
        expected_version=session.version,
        available_slots=session.max_concurrent_runs if available_slots is None else available_slots,
        lease_duration_ms=SESSION_MS,
    )
    fields.update(overrides)
    return HeartbeatCommand(**fields)


def drain_cmd(session: WorkerSessionRecord, **overrides: Any) -> DrainCommand:
    fields: dict[str, Any] = dict(
        worker_id=session.worker_id,
        session_id=session.session_id,
        generation=session.generation,
        expected_version=session.version,
    )
    fields.update(overrides)
    return DrainCommand(**fields)


def offline_cmd(session: WorkerSessionRecord, **overrides: Any) -> OfflineCommand:
    return OfflineCommand(**{**msg_fields(drain_cmd(session)), **overrides})


def msg_fields(cmd: Any) -> dict[str, Any]:
    return {name: getattr(cmd, name) for name in cmd.__struct_fields__}


def claim_cmd(
    session: WorkerSessionRecord,
    run_id: str,
    attempt_id: str,
    *,
    token: str = "token-1",
    offer_id: str = "offer-1",
    lease_duration_ms: int = LEASE_MS,
    **overrides: Any,
) -> ClaimRunCommand:
    fields: dict[str, Any] = dict(
        worker_id=session.worker_id,
        session_id=session.session_id,
        session_generation=session.generation,
        run_id=run_id,
        attempt_id=attempt_id,
        offer_id=offer_id,
        lease_token=token,
        lease_duration_ms=lease_duration_ms,
        event_id=next_event_id(),
    )
    fields.update(overrides)
    return ClaimRunCommand(**fields)


def _lease_fence(lease: RunLeaseRecord, token: str) -> dict[str, Any]:
    return dict(
        worker_id=lease.worker_id,
        session_id=lease.session_id,
        session_generation=lease.session_generation,
        attempt_id=lease.attempt_id,
        lease_token=token,
        expected_version=lease.version,
    )


def renew_cmd(lease: RunLeaseRecord, token: str = "token-1", **overrides: Any) -> RenewRunLeaseCommand:
    return RenewRunLeaseCommand(**{**_lease_fence(lease, token), "lease_duration_ms": LEASE_MS, **overrides})


def release_cmd(lease: RunLeaseRecord, token: str = "token-1", **overrides: Any) -> ReleaseRunLeaseCommand:
    return ReleaseRunLeaseCommand(
        **{**_lease_fence(lease, token), "reason": ReleaseReason.DECLINED, "event_id": next_event_id(), **overrides}
    )


def start_cmd(lease: RunLeaseRecord, token: str = "token-1", **overrides: Any) -> BeginStartCommand:
    return BeginStartCommand(**{**_lease_fence(lease, token), "event_id": next_event_id(), **overrides})


def complete_cmd(lease: RunLeaseRecord, **overrides: Any) -> CompleteRunLeaseCommand:
    fields: dict[str, Any] = dict(
        worker_id=lease.worker_id,
        session_generation=lease.session_generation,
        attempt_id=lease.attempt_id,
        lease_generation=lease.lease_generation,
        expected_version=lease.version,
        token_digest=lease.token_digest,
        event_id=next_event_id(),
    )
    fields.update(overrides)
    return CompleteRunLeaseCommand(**fields)


def snapshot(connection: apsw.Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row this subsystem (and the Run/Attempt/event tables) holds, for "nothing changed"."""
    tables = ("worker_sessions", "run_dispatch_leases", "runs", "run_attempts", "run_events")
    return {t: connection.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in tables}
