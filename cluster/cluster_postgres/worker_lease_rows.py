"""Worker Session and Run Lease rows in ``ql3``: the one place that reads a session's or a grant's
row, writes it, and moves the Attempt's fence projection of a grant, with the capacity count
(:data:`COUNT_ACTIVE`) the authority compares a session's slots with.

Shared by the two authorities (:mod:`cluster_postgres.worker_session`,
:mod:`cluster_postgres.run_lease`, :mod:`cluster_postgres.run_start`), the reads of
:mod:`cluster_postgres.worker_lease`, and the run store, whose ``finish_attempt`` completes a grant
still held in the transaction that ends its Attempt (:func:`complete_held_grant`; the Local store
does the same). Every function runs inside the caller's transaction, with the rows it changes
already locked (lock order Worker -> Run -> Attempt -> Run Lease).
"""
from __future__ import annotations

from typing import Any

import msgspec
import psycopg

from edge_runtime.contract.run_events import RunEvent
from edge_runtime.contract.run_lease import (
    LeaseStatus,
    ReleaseReason,
    RunLeaseRecord,
    dedupe_key_for,
    lease_event_payload,
    lease_record_problem,
)
from edge_runtime.contract.runs import AttemptStatus
from edge_runtime.contract.sql_vocabulary import sql_literal
from edge_runtime.contract.stored_records import record_to_write, stored_record
from edge_runtime.contract.validation import MAX_VERSION
from edge_runtime.contract.worker_lease import (
    WorkerLeaseFenceRejectedError,
    canonical_capabilities_unchecked,
)
from edge_runtime.contract.worker_session import SessionStatus, WorkerSessionRecord, session_record_problem
from cluster_postgres.errors import ClusterLeaseStorageError
from cluster_postgres.run_events import append_run_event

_UNSET = msgspec.UNSET
_replace = msgspec.structs.replace
_LEASE_STATUS = {s.value: s for s in LeaseStatus}
_RELEASE_REASON = {r.value: r for r in ReleaseReason}
_SESSION_STATUS = {s.value: s for s in SessionStatus}
_decode_capabilities = msgspec.json.Decoder(dict[str, Any]).decode

SESSION_COLUMNS = (
    "worker_id, session_id, generation, status, version, capabilities, capabilities_hash, max_concurrent_runs, "
    "available_slots, heartbeat_at_ms, lease_expires_at_ms, created_at_ms, updated_at_ms"
)
SELECT_SESSION = f"SELECT {SESSION_COLUMNS} FROM ql3.worker_sessions WHERE worker_id = %s"
LOCK_SESSION = SELECT_SESSION + " FOR NO KEY UPDATE"
_INSERT_SESSION = f"INSERT INTO ql3.worker_sessions ({SESSION_COLUMNS}) VALUES ({', '.join(['%s'] * 13)})"
_UPDATE_SESSION = (
    "UPDATE ql3.worker_sessions SET session_id = %s, generation = %s, status = %s, version = %s, capabilities = %s, "
    "capabilities_hash = %s, max_concurrent_runs = %s, available_slots = %s, heartbeat_at_ms = %s, "
    "lease_expires_at_ms = %s, created_at_ms = %s, updated_at_ms = %s WHERE worker_id = %s AND version = %s"
)
#: The ``leased`` grants of one session generation of a worker, except the Attempt named (``''`` excepts none).
COUNT_ACTIVE = (
    "SELECT count(*) FROM ql3.run_dispatch_leases "
    f"WHERE worker_id = %s AND session_generation = %s AND status = {sql_literal(LeaseStatus.LEASED)} "
    "AND attempt_id <> %s"
)

LEASE_COLUMNS = (
    "attempt_id, run_id, worker_id, session_id, session_generation, lease_generation, version, token_digest, "
    "offer_id, status, expires_at_ms, acquired_at_ms, renewed_at_ms, started_at_ms, released_at_ms, "
    "release_reason, completed_at_ms, updated_at_ms"
)
SELECT_LEASE = f"SELECT {LEASE_COLUMNS} FROM ql3.run_dispatch_leases WHERE attempt_id = %s"
LOCK_LEASE = SELECT_LEASE + " FOR NO KEY UPDATE"
_INSERT_LEASE = f"INSERT INTO ql3.run_dispatch_leases ({LEASE_COLUMNS}) VALUES ({', '.join(['%s'] * 18)})"
_UPDATE_LEASE = (
    "UPDATE ql3.run_dispatch_leases SET run_id = %s, worker_id = %s, session_id = %s, session_generation = %s, "
    "lease_generation = %s, version = %s, token_digest = %s, offer_id = %s, status = %s, expires_at_ms = %s, "
    "acquired_at_ms = %s, renewed_at_ms = %s, started_at_ms = %s, released_at_ms = %s, release_reason = %s, "
    "completed_at_ms = %s, updated_at_ms = %s WHERE attempt_id = %s AND version = %s"
)
#: The Attempt's copy of its live grant's fence (``run_attempts.lease_*``).
PROJECTION = (
    "lease_worker_id, lease_session_id, lease_session_generation, lease_generation, lease_version, "
    "lease_token_digest, lease_offer_id, lease_expires_at_ms"
)
NO_PROJECTION = (None,) * 8
#: The Attempt as a grant change needs it: ``(run_id, status, *projection)``.
LOCK_ATTEMPT = f"SELECT run_id, status, {PROJECTION} FROM ql3.run_attempts WHERE id = %s FOR NO KEY UPDATE"
_SET_PROJECTION = (
    "UPDATE ql3.run_attempts SET lease_worker_id = %s, lease_session_id = %s, lease_session_generation = %s, "
    "lease_generation = %s, lease_version = %s, lease_token_digest = %s, lease_offer_id = %s, "
    "lease_expires_at_ms = %s, updated_at_ms = %s, status = coalesce(%s, status) WHERE id = %s"
)


def _session_problem(record: WorkerSessionRecord, stored_capabilities: str) -> str | None:
    problem = session_record_problem(record)
    if problem is None and canonical_capabilities_unchecked(record.capabilities).decode() != stored_capabilities:
        problem = "capabilities are not stored in canonical form"
    return problem


def session_from_row(row: tuple[Any, ...]) -> WorkerSessionRecord:
    """Project one row selected with :data:`SESSION_COLUMNS`; a malformed row is a storage error."""
    return stored_record(lambda: WorkerSessionRecord(
        worker_id=row[0], session_id=row[1], generation=row[2], status=_SESSION_STATUS[row[3]],
        version=row[4], capabilities=_decode_capabilities(row[5]), capabilities_hash=row[6],
        max_concurrent_runs=row[7], available_slots=row[8], heartbeat_at_ms=row[9],
        lease_expires_at_ms=row[10], created_at_ms=row[11], updated_at_ms=row[12],
    ), "session of worker", row[0], ClusterLeaseStorageError, lambda record: _session_problem(record, row[5]))


def store_session(cur: psycopg.Cursor[Any], record: WorkerSessionRecord, expected_version: int | None) -> None:
    """Insert the session (``expected_version`` None) or CAS it from ``expected_version``."""
    record_to_write(record, session_record_problem(record), "session of worker", record.worker_id,
                    ClusterLeaseStorageError)
    text = canonical_capabilities_unchecked(record.capabilities).decode()
    values = (record.session_id, record.generation, record.status.value, record.version, text,
              record.capabilities_hash, record.max_concurrent_runs, record.available_slots, record.heartbeat_at_ms,
              record.lease_expires_at_ms, record.created_at_ms, record.updated_at_ms)
    _write_row(cur, _INSERT_SESSION, _UPDATE_SESSION, record.worker_id, values, expected_version,
               "session of worker")


def _write_row(cur: psycopg.Cursor[Any], insert: str, update: str, key: str, values: tuple[Any, ...],
               expected_version: int | None, what: str) -> None:
    """Insert a row (``expected_version`` None) or update it only at ``expected_version`` (CAS),
    as :func:`edge_runtime.local.worker_lease_rows._write_row` does; ``what`` names it in the error."""
    if expected_version is None:
        cur.execute(insert, (key, *values))
        return
    cur.execute(update, (*values, key, expected_version))
    if cur.rowcount != 1:
        raise ClusterLeaseStorageError(f"{what} {key!r} changed concurrently (CAS missed)")


def bump(version: int, what: str) -> int:
    """``version + 1``; a row at the contract's maximum version is a storage error."""
    if version >= MAX_VERSION:
        raise ClusterLeaseStorageError(f"{what} has reached the maximum version")
    return version + 1


def lease_from_row(row: tuple[Any, ...]) -> RunLeaseRecord:
    """Project one row selected with :data:`LEASE_COLUMNS`; a malformed row is a storage error."""
    def absent(value: Any) -> Any:
        return _UNSET if value is None else value

    return stored_record(lambda: RunLeaseRecord(
        attempt_id=row[0], run_id=row[1], worker_id=row[2], session_id=row[3], session_generation=row[4],
        lease_generation=row[5], version=row[6], token_digest=row[7], offer_id=row[8],
        status=_LEASE_STATUS[row[9]], expires_at_ms=row[10], acquired_at_ms=row[11], renewed_at_ms=absent(row[12]),
        started_at_ms=absent(row[13]), released_at_ms=absent(row[14]),
        release_reason=_UNSET if row[15] is None else _RELEASE_REASON[row[15]],
        completed_at_ms=absent(row[16]), updated_at_ms=row[17],
    ), "lease of attempt", row[0], ClusterLeaseStorageError, lease_record_problem)


def projection_of(lease: RunLeaseRecord | None) -> tuple[Any, ...]:
    """The projection a grant gives its Attempt: its fence while ``leased``, else all NULL."""
    if lease is None or lease.status is not LeaseStatus.LEASED:
        return NO_PROJECTION
    return (lease.worker_id, lease.session_id, lease.session_generation, lease.lease_generation, lease.version,
            lease.token_digest, lease.offer_id, lease.expires_at_ms)


def store_lease(cur: psycopg.Cursor[Any], record: RunLeaseRecord, expected_version: int | None) -> None:
    """Insert the grant (``expected_version`` None) or CAS it from ``expected_version``."""
    record_to_write(record, lease_record_problem(record), "lease of attempt", record.attempt_id,
                    ClusterLeaseStorageError)

    def null(value: Any) -> Any:
        return None if value is _UNSET else value

    values = (record.run_id, record.worker_id, record.session_id, record.session_generation,
              record.lease_generation, record.version, record.token_digest, record.offer_id, record.status.value,
              record.expires_at_ms, record.acquired_at_ms, null(record.renewed_at_ms), null(record.started_at_ms),
              null(record.released_at_ms), None if record.release_reason is _UNSET else record.release_reason.value,
              null(record.completed_at_ms), record.updated_at_ms)
    _write_row(cur, _INSERT_LEASE, _UPDATE_LEASE, record.attempt_id, values, expected_version,
               "lease of attempt")


def _move_projection(cur: psycopg.Cursor[Any], attempt: tuple[Any, ...] | None, old: RunLeaseRecord | None,
                     new: RunLeaseRecord, now: int, *, set_status: AttemptStatus | None = None) -> None:
    """Move the Attempt's projection (``attempt``: its row as :data:`LOCK_ATTEMPT` locked it) from
    ``old``'s fence to ``new``'s, whole; a projection that does not match ``old`` is a fence
    rejection."""
    if attempt is None or tuple(attempt[2:]) != projection_of(old):
        raise WorkerLeaseFenceRejectedError(
            f"the lease projection of attempt {new.attempt_id!r} does not match its lease; nothing was changed"
        )
    status = None if set_status is None else set_status.value
    cur.execute(_SET_PROJECTION, (*projection_of(new), now, status, new.attempt_id))


def held_grant(cur: psycopg.Cursor[Any], attempt_id: str) -> RunLeaseRecord | None:
    """The Attempt's grant, locked, when it is still ``leased``; else None."""
    row = cur.execute(LOCK_LEASE, (attempt_id,)).fetchone()
    lease = None if row is None else lease_from_row(row)
    return lease if lease is not None and lease.status is LeaseStatus.LEASED else None


def write_grant(cur: psycopg.Cursor[Any], attempt: tuple[Any, ...] | None, old: RunLeaseRecord | None,
                new: RunLeaseRecord, now: int, *, set_status: AttemptStatus | None = None) -> None:
    """Replace an Attempt's grant ``old`` (None: it has none yet) by ``new``: the lease row (a CAS
    on ``old``'s version) and, together with it, the Attempt's projection moved from ``old``'s
    fence to ``new``'s (``attempt``: its row as :data:`LOCK_ATTEMPT` locked it), as
    :func:`edge_runtime.local.worker_lease_rows.write_grant` does."""
    store_lease(cur, new, None if old is None else old.version)
    _move_projection(cur, attempt, old, new, now, set_status=set_status)


def close_grant(cur: psycopg.Cursor[Any], attempt: tuple[Any, ...] | None, lease: RunLeaseRecord,
                now: int) -> RunLeaseRecord:
    """Complete the held grant ``lease`` now (its Attempt ended, or never started): the completed
    grant, written with its Attempt's projection cleared."""
    completed = _replace(lease, status=LeaseStatus.COMPLETED, version=bump(lease.version, "lease"), completed_at_ms=now,
                         updated_at_ms=now)
    write_grant(cur, attempt, lease, completed, now)
    return completed


def complete_held_grant(cur: psycopg.Cursor[Any], lease: RunLeaseRecord, now: int) -> RunLeaseRecord:
    """Complete ``lease`` (from :func:`held_grant`) because its Attempt ends in this transaction:
    the row and the projection ``complete`` writes; the caller records it in the Run's end event
    (``completed_grant_extra``). Any holder's grant: once its Attempt ended it can fence nothing."""
    return close_grant(cur, cur.execute(LOCK_ATTEMPT, (lease.attempt_id,)).fetchone(), lease, now)


def lease_event(cur: psycopg.Cursor[Any], run: list[int] | None, lease: RunLeaseRecord, event_id: str,
                event_type: str, step: str, now: int, *, dedupe_key: str | None = None, **extra: Any) -> RunEvent:
    """Append a Run Lease event to the locked Run (``run``: its ``[version, event_sequence]``,
    advanced), keyed by its grant's ``step`` (or by ``dedupe_key``: the composed start's one event
    is keyed by its Attempt's number)."""
    if run is None:
        raise ClusterLeaseStorageError(f"run {lease.run_id!r} does not exist")
    return append_run_event(
        cur, run, run_id=lease.run_id, event_id=event_id, event_type=event_type,
        dedupe_key=dedupe_key or dedupe_key_for(lease.attempt_id, lease.lease_generation, step),
        actor_type="worker", actor_id=lease.worker_id, attempt_id=lease.attempt_id,
        payload=lease_event_payload(lease, **extra), now_ms=now,
    )
