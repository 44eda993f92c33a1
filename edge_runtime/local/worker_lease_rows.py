"""Rows of ``worker_sessions`` and ``run_dispatch_leases``, and the Attempt's lease projection.

Every record read from, or about to be written to, these tables is checked against the contract
invariants; a stored row that breaks one fails closed with :class:`WorkerLeaseRepositoryError`
and is never repaired. Writes of existing rows are compare-and-set on ``version``. Everything
here runs inside the caller's write transaction; nothing here reads a clock.
"""

from __future__ import annotations

import enum
import hashlib
import operator
from functools import lru_cache
from typing import Any

import apsw
import msgspec

from edge_runtime.contract.run_lease import LeaseStatus, ReleaseReason, RunLeaseRecord, lease_record_problem
from edge_runtime.contract.worker_lease import (
    WorkerLeaseFenceRejectedError,
    WorkerLeaseRepositoryError,
    canonical_capabilities_unchecked,
    capabilities_problem,
)
from edge_runtime.contract.runs import AttemptStatus
from edge_runtime.contract.worker_session import SessionStatus, WorkerSessionRecord, session_record_problem
from edge_runtime.contract.sql_vocabulary import sql_literal
from edge_runtime.contract.stored_records import record_to_write, stored_record
from edge_runtime.local.errors import StorageErrors

_UNSET = msgspec.UNSET
# Plain dict lookups: calling an Enum class to convert a value costs more than the lookup.
_SESSION_STATUS = {status.value: status for status in SessionStatus}
_LEASE_STATUS = {status.value: status for status in LeaseStatus}
_RELEASE_REASON = {reason.value: reason for reason in ReleaseReason}
_decode_capabilities = msgspec.json.Decoder(dict[str, Any]).decode

# --------------------------------------------------------------------------- sessions

_SESSION_NAMES = (
    "worker_id", "session_id", "generation", "status", "version", "capabilities", "capabilities_hash",
    "max_concurrent_runs", "available_slots", "heartbeat_at_ms", "lease_expires_at_ms", "created_at_ms",
    "updated_at_ms",
)
SESSION_COLUMNS = ", ".join(_SESSION_NAMES)


def _statements(table: str, names: tuple[str, ...]) -> tuple[str, str, str]:
    """SELECT by key, INSERT, and version-CAS UPDATE of ``table``; the key is the first column."""
    key, columns = names[0], ", ".join(names)
    return (
        f"SELECT {columns} FROM {table} WHERE {key} = ?",
        f"INSERT INTO {table} ({columns}) VALUES ({', '.join('?' * len(names))})",
        f"UPDATE {table} SET {', '.join(f'{name} = ?' for name in names[1:])} WHERE {key} = ? AND version = ?",
    )


_SELECT_SESSION, _INSERT_SESSION, _UPDATE_SESSION = _statements("worker_sessions", _SESSION_NAMES)
def _stored_values(fields: tuple[Any, ...]) -> tuple[Any, ...]:
    """Record fields as their columns hold them: an enum by its value, an absent field as NULL."""
    return tuple(None if v is _UNSET else v.value if isinstance(v, enum.Enum) else v for v in fields)


@lru_cache(maxsize=64)
def _capabilities_text_problem(text: str, stored_hash: str) -> str | None:
    """Why a stored capabilities text and hash break the contract, or None (cached per pair).

    Safe to cache: the answer depends on nothing but the two strings. A worker re-registers
    the same capabilities for its whole life, so every session read after the first is a hit.
    """
    try:
        capabilities = _decode_capabilities(text)
    except msgspec.DecodeError as exc:
        return f"capabilities are not a JSON object: {exc}"
    problem = capabilities_problem(capabilities)
    if problem is not None:
        return problem
    if canonical_capabilities_unchecked(capabilities).decode() != text:
        return "capabilities are not stored in canonical form"
    if hashlib.sha256(text.encode()).hexdigest() != stored_hash:
        return "capabilities_hash does not match the canonical capabilities"
    return None


def _session_problem(record: WorkerSessionRecord, text: str) -> str | None:
    return _capabilities_text_problem(text, record.capabilities_hash) or session_record_problem(
        record, check_capabilities=False
    )


def session_from_row(row: tuple[Any, ...]) -> WorkerSessionRecord:
    """Project one stored session row to a checked record.

    Raises:
        WorkerLeaseRepositoryError: the row breaks a contract invariant.
    """
    fields = dict(zip(_SESSION_NAMES, row))
    worker_id, text = fields["worker_id"], fields["capabilities"]

    def build() -> WorkerSessionRecord:
        fields["status"] = _SESSION_STATUS[fields["status"]]
        fields["capabilities"] = _decode_capabilities(text)
        return WorkerSessionRecord(**fields)

    return stored_record(build, "session of worker", worker_id, WorkerLeaseRepositoryError,
                         lambda record: _session_problem(record, text))


# Every claim, renew and release reads its worker's session row, which changes only on a heartbeat.
# A row tuple equal to one already projected (every column, so nothing can differ) gives the same
# checked record. A row that breaks an invariant raises and is never cached. Records are values:
# callers must not mutate their capabilities dict.
_session_from_known_row = lru_cache(maxsize=64)(session_from_row)


def read_session(connection: apsw.Connection, worker_id: str) -> WorkerSessionRecord | None:
    row = connection.execute(_SELECT_SESSION, (worker_id,)).fetchone()
    return None if row is None else _session_from_known_row(row)


def store_session(connection: apsw.Connection, record: WorkerSessionRecord, expected_version: int | None) -> None:
    """Insert (``expected_version`` None) or version-CAS update one checked session."""
    text = canonical_capabilities_unchecked(record.capabilities).decode()
    record_to_write(record, _session_problem(record, text), "session of worker", record.worker_id,
                    WorkerLeaseRepositoryError)
    values = _stored_values(tuple(
        text if name == "capabilities" else getattr(record, name) for name in _SESSION_NAMES[1:]
    ))
    _write_row(connection, _INSERT_SESSION, _UPDATE_SESSION, record.worker_id, values, expected_version,
               "session of worker")


def _write_row(connection: apsw.Connection, insert: str, update: str, key: str, values: tuple[Any, ...],
               expected_version: int | None, what: str) -> None:
    """Insert a row (``expected_version`` None) or update it only at ``expected_version`` (CAS)."""
    if expected_version is None:
        connection.execute(insert, (key, *values))
        return
    connection.execute(update, (*values, key, expected_version))
    if connection.changes() != 1:
        raise WorkerLeaseRepositoryError(f"{what} {key!r} changed concurrently (CAS missed)")


# --------------------------------------------------------------------------- leases

_LEASE_NAMES = (
    "attempt_id", "run_id", "worker_id", "session_id", "session_generation", "lease_generation", "version",
    "token_digest", "offer_id", "status", "expires_at_ms", "acquired_at_ms", "renewed_at_ms", "started_at_ms",
    "released_at_ms", "release_reason", "completed_at_ms", "updated_at_ms",
)
#: The columns a record leaves absent (stored NULL) until the grant reaches that step.
_LEASE_OPTIONAL = frozenset({"renewed_at_ms", "started_at_ms", "released_at_ms", "release_reason", "completed_at_ms"})
LEASE_COLUMNS = ", ".join(_LEASE_NAMES)
_SELECT_LEASE, _INSERT_LEASE, _UPDATE_LEASE = _statements("run_dispatch_leases", _LEASE_NAMES)
_lease_fields = operator.attrgetter(*_LEASE_NAMES[1:])
# Served by the partial index run_dispatch_leases_active (worker_id, session_generation).
_COUNT_ACTIVE = (
    "SELECT count(*) FROM run_dispatch_leases "
    f"WHERE worker_id = ? AND session_generation = ? AND status = {sql_literal(LeaseStatus.LEASED)} "
    "AND attempt_id <> ?"
)
_SELECT_ACTIVE = (
    f"SELECT {LEASE_COLUMNS} FROM run_dispatch_leases WHERE worker_id = ? "
    f"AND status = {sql_literal(LeaseStatus.LEASED)} "
    "ORDER BY session_generation, attempt_id"
)


def lease_from_row(row: tuple[Any, ...]) -> RunLeaseRecord:
    """Project one stored lease row to a checked record.

    Raises:
        WorkerLeaseRepositoryError: the row breaks a contract invariant.
    """
    fields = dict(zip(_LEASE_NAMES, row))

    def build() -> RunLeaseRecord:
        for name in _LEASE_OPTIONAL:
            if fields[name] is None:
                fields[name] = _UNSET
        fields["status"] = _LEASE_STATUS[fields["status"]]
        if fields["release_reason"] is not _UNSET:
            fields["release_reason"] = _RELEASE_REASON[fields["release_reason"]]
        return RunLeaseRecord(**fields)

    return stored_record(build, "lease of attempt", fields["attempt_id"], WorkerLeaseRepositoryError,
                         lease_record_problem)


# Renew, release, start and complete each read back the row the step before wrote. A row tuple
# equal to one already checked here (written or read; every column, so nothing can differ) gives
# the same checked record, so the invariants are not checked again on the way back. A row that
# breaks one raises and is never remembered. A bounded map, oldest entry dropped first.
_checked_leases: dict[tuple[Any, ...], RunLeaseRecord] = {}


def _remember_lease(row: tuple[Any, ...], record: RunLeaseRecord) -> None:
    if len(_checked_leases) >= 64:
        del _checked_leases[next(iter(_checked_leases))]
    _checked_leases[row] = record


def _checked_lease(row: tuple[Any, ...]) -> RunLeaseRecord:
    record = _checked_leases.get(row)
    if record is None:
        record = lease_from_row(row)
        _remember_lease(row, record)
    return record


def read_lease(connection: apsw.Connection, attempt_id: str) -> RunLeaseRecord | None:
    row = connection.execute(_SELECT_LEASE, (attempt_id,)).fetchone()
    return None if row is None else _checked_lease(row)


def count_other_active(connection: apsw.Connection, worker_id: str, generation: int, attempt_id: str) -> int:
    """Active (``leased``, expired or not) grants of one session, other than ``attempt_id``'s."""
    return connection.execute(_COUNT_ACTIVE, (worker_id, generation, attempt_id)).fetchone()[0]


def read_active_leases(connection: apsw.Connection, worker_id: str) -> list[RunLeaseRecord]:
    return [_checked_lease(row) for row in connection.execute(_SELECT_ACTIVE, (worker_id,))]


def store_lease(connection: apsw.Connection, record: RunLeaseRecord, expected_version: int | None) -> None:
    """Insert (``expected_version`` None) or version-CAS update one checked lease.

    The identifiers of every record written here come from a checked record or a validated
    command, so only the state invariants are re-checked (the table's CHECKs back them too).
    """
    record_to_write(record, lease_record_problem(record), "lease of attempt", record.attempt_id,
                    WorkerLeaseRepositoryError)
    values = _stored_values(_lease_fields(record))
    _write_row(connection, _INSERT_LEASE, _UPDATE_LEASE, record.attempt_id, values, expected_version,
               "lease of attempt")
    _remember_lease((record.attempt_id, *values), record)


# --------------------------------------------------------------------------- Attempt projection

# The projection is matched on the whole fence of the grant it mirrors, never on a subset.
_PROJECTION_MATCH = (
    "lease_worker_id IS ? AND lease_session_id IS ? AND lease_session_generation IS ? AND lease_generation IS ? "
    "AND lease_version IS ? AND lease_token_digest IS ? AND lease_offer_id IS ? AND lease_expires_at_ms IS ?"
)
_SET_PROJECTION = (
    "UPDATE run_attempts SET lease_worker_id = ?, lease_session_id = ?, lease_session_generation = ?, "
    "lease_generation = ?, lease_version = ?, lease_token_digest = ?, lease_offer_id = ?, lease_expires_at_ms = ?"
)
_NO_PROJECTION = (None,) * 8


def projection_of(lease: RunLeaseRecord | None) -> tuple[Any, ...]:
    """The projection values a grant puts on its Attempt (all None for no active grant)."""
    if lease is None or lease.status is not LeaseStatus.LEASED:
        return _NO_PROJECTION
    return (
        lease.worker_id,
        lease.session_id,
        lease.session_generation,
        lease.lease_generation,
        lease.version,
        lease.token_digest,
        lease.offer_id,
        lease.expires_at_ms,
    )


def write_grant(
    connection: apsw.Connection,
    old: RunLeaseRecord | None,
    new: RunLeaseRecord,
    *,
    now_ms: int,
    set_status: AttemptStatus | None = None,
    require_status: AttemptStatus | None = None,
) -> None:
    """Replace an Attempt's grant ``old`` (None: it has none yet) by ``new``: the lease row
    (:func:`store_lease`, a CAS on ``old``'s version) and, together with it, a CAS of the
    Attempt's projection from what ``old`` put there to what ``new`` puts there (``set_status``:
    the Attempt's new status; ``require_status``: the status it must have).

    Raises:
        WorkerLeaseFenceRejectedError: the Attempt's projection (or status) is not what the
            grant says it should be; the caller's transaction rolls back.
    """
    store_lease(connection, new, None if old is None else old.version)
    sql = _SET_PROJECTION + ", updated_at_ms = ?"
    params: list[Any] = [*projection_of(new), now_ms]
    if set_status is not None:
        sql += ", status = ?"
        params.append(set_status.value)
    sql += " WHERE id = ? AND " + _PROJECTION_MATCH
    params += [new.attempt_id, *projection_of(old)]
    if require_status is not None:
        sql += " AND status = ?"
        params.append(require_status.value)
    connection.execute(sql, params)
    if connection.changes() != 1:
        raise WorkerLeaseFenceRejectedError(
            f"the lease projection of attempt {new.attempt_id!r} does not match its lease; nothing was changed"
        )


# --------------------------------------------------------------------------- errors


#: Storage failures become :class:`WorkerLeaseRepositoryError`; contract errors pass through.
repository_errors = StorageErrors(WorkerLeaseRepositoryError)
