"""PostgreSQL CancellationDispatch repository (ADR-0456 as cluster-profile.md §4 states it).

Same commands, results and errors as the Local repository. Each operation is one short READ
COMMITTED transaction that locks rows ``FOR NO KEY UPDATE`` in the global order Run -> Attempt
-> Dispatch, then reads the database clock once; the caller never supplies a time. Only the
token's digest is sent to the server. Every record read or about to be written is checked
against the contract invariants and fails closed.
"""

from __future__ import annotations

import hmac
from typing import Any

import msgspec
import psycopg

from edge_runtime.contract.cancellation_dispatch import (
    check_rearm,
    CONTROLLER_NOT_INVOKED_RESULTS,
    EVENT_DISPATCH_REARMED,
    MAX_VERSION,
    RETRYABLE_RESULTS,
    RUN_ID_MAX_LENGTH,
    BindingConflictError,
    BlockedOutcome,
    ClaimCommand,
    ClaimedOutcome,
    ClaimOutcome,
    DispatchedOutcome,
    DispatchRecord,
    DispatchResult,
    DispatchStatus,
    FenceRejectedError,
    InvalidCommandError,
    LeasedOutcome,
    NotDueOutcome,
    NotEligibleOutcome,
    RecordResultCommand,
    RecordResultOutcome,
    classify_result,
    dedupe_key_for,
    digest_lease_token,
    dispatch_record_problem,
)
from edge_runtime.contract.runs import ACTIVE_ATTEMPT_STATUSES
from edge_runtime.contract.validation import identifier_problem
from edge_runtime.contract.stored_records import record_to_write, stored_record
from edge_runtime.contract.transitions import dispatch_run_eligible, require_dispatch_fence
from cluster_postgres.connection import NOTIFY_WAKE
from cluster_postgres.errors import ClusterDispatchStorageError, Transaction, reading
from cluster_postgres.run_events import append_run_event, clamp, database_now

#: Run statuses whose cancellation may still be dispatched; Attempt statuses that may own a process.

_UNSET = msgspec.UNSET
_replace = msgspec.structs.replace
_STATUS = {s.value: s for s in DispatchStatus}
_RESULT = {r.value: r for r in DispatchResult}

_COLUMNS = (
    "run_id, attempt_id, status, version, dispatch_count, next_attempt_at_ms, lease_owner, lease_token_digest, "
    "lease_expires_at_ms, last_result, last_dispatched_at_ms, created_at_ms, updated_at_ms"
)
_SELECT = f"SELECT {_COLUMNS} FROM ql3.run_cancellation_dispatches WHERE run_id = %s"
_LOCK = _SELECT + " FOR NO KEY UPDATE"
_INSERT = f"INSERT INTO ql3.run_cancellation_dispatches ({_COLUMNS}) VALUES ({', '.join(['%s'] * 13)})"
_UPDATE = (
    "UPDATE ql3.run_cancellation_dispatches SET status = %s, version = %s, dispatch_count = %s, "
    "next_attempt_at_ms = %s, lease_owner = %s, lease_token_digest = %s, lease_expires_at_ms = %s, last_result = %s, "
    "last_dispatched_at_ms = %s, updated_at_ms = %s WHERE run_id = %s AND version = %s"
)
_LOCK_RUN = (
    "SELECT execution_owner, status, cancel_requested_at_ms, version, event_sequence FROM ql3.runs "
    "WHERE id = %s FOR NO KEY UPDATE"
)
_LOCK_ATTEMPT = "SELECT run_id, status FROM ql3.run_attempts WHERE id = %s FOR NO KEY UPDATE"


def _record(row: tuple[Any, ...]) -> DispatchRecord:
    (run_id, attempt_id, status, version, count, next_at, owner, digest, expires, last, last_at, created, updated) = row
    return stored_record(lambda: DispatchRecord(
        run_id=run_id, attempt_id=attempt_id, status=_STATUS[status], version=version, dispatch_count=count,
        next_attempt_at_ms=_UNSET if next_at is None else next_at,
        lease_owner=_UNSET if owner is None else owner,
        lease_token_digest=_UNSET if digest is None else digest,
        lease_expires_at_ms=_UNSET if expires is None else expires,
        last_result=_UNSET if last is None else _RESULT[last],
        last_dispatched_at_ms=_UNSET if last_at is None else last_at,
        created_at_ms=created, updated_at_ms=updated,
    ), "dispatch of run", run_id, ClusterDispatchStorageError, dispatch_record_problem)


def _checked(record: DispatchRecord) -> DispatchRecord:
    return record_to_write(record, dispatch_record_problem(record), "dispatch of run", record.run_id,
                           ClusterDispatchStorageError)


def _values(r: DispatchRecord) -> tuple[Any, ...]:
    def null(value: Any) -> Any:
        return None if value is _UNSET else value

    return (
        r.status.value, r.version, r.dispatch_count, null(r.next_attempt_at_ms), null(r.lease_owner),
        null(r.lease_token_digest), null(r.lease_expires_at_ms), None if r.last_result is _UNSET else r.last_result.value,
        null(r.last_dispatched_at_ms), r.updated_at_ms,
    )


class PostgresCancellationDispatchRepository:
    """Durable, fenced cancellation dispatches in ``ql3``. One connection, not thread-safe.

    Constructing it opens nothing: ``conn`` comes from :func:`cluster_postgres.connection.connect`.
    """

    __slots__ = ("_conn", "_cur")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._cur = conn.cursor()

    def find_by_run_id(self, run_id: str) -> DispatchRecord | None:
        """The Run's dispatch, or None (a plain read, no lock)."""
        problem = identifier_problem("run_id", run_id, RUN_ID_MAX_LENGTH)
        if problem is not None:
            raise InvalidCommandError(problem)
        with reading(ClusterDispatchStorageError):
            row = self._cur.execute(_SELECT, (run_id,)).fetchone()
        return None if row is None else _record(row)

    def claim(self, cmd: ClaimCommand) -> ClaimOutcome:
        """Claim the dispatch of ``cmd.run_id`` for ``cmd.attempt_id`` (Local semantics).

        A retried claim with the same run, attempt, owner and token while that lease is live is an
        idempotent replay and returns the same ``claimed`` outcome (§4 deviation: the retry after
        an ambiguous COMMIT).

        Raises:
            BindingConflictError: the dispatch is bound to another Attempt of the Run.
            RepositoryError: ``CLUSTER_STORAGE_FAILED`` (retryable per SQLSTATE) or a broken row.
        """
        if not isinstance(cmd, ClaimCommand):
            raise InvalidCommandError(f"claim expects a ClaimCommand, got {type(cmd).__name__}")
        digest = digest_lease_token(cmd.lease_token)
        cur = self._cur
        with Transaction(self._conn, ClusterDispatchStorageError):
            run = cur.execute(_LOCK_RUN, (cmd.run_id,)).fetchone()
            if run is None or not dispatch_run_eligible(run[0], run[1], run[2], cmd.requested_at_ms):
                return NotEligibleOutcome()
            attempt = cur.execute(_LOCK_ATTEMPT, (cmd.attempt_id,)).fetchone()
            if attempt is None or attempt[0] != cmd.run_id or attempt[1] not in ACTIVE_ATTEMPT_STATUSES:
                return NotEligibleOutcome()
            row = cur.execute(_LOCK, (cmd.run_id,)).fetchone()
            db_now = database_now(cur)
            if row is None:
                now = db_now
                current = DispatchRecord(
                    run_id=cmd.run_id, attempt_id=cmd.attempt_id, status=DispatchStatus.PENDING, version=0,
                    dispatch_count=0, next_attempt_at_ms=cmd.requested_at_ms, created_at_ms=now, updated_at_ms=now,
                )
            else:
                current = _record(row)
                if current.attempt_id != cmd.attempt_id:
                    raise BindingConflictError(
                        f"dispatch of run {cmd.run_id!r} is bound to attempt {current.attempt_id!r}, not {cmd.attempt_id!r}"
                    )
                now = clamp(cur, db_now, current.updated_at_ms, [run[3], run[4]], cmd.run_id, cmd.owner)

            status = current.status
            if status is DispatchStatus.DISPATCHED:
                return DispatchedOutcome(dispatch=current)
            if status is DispatchStatus.BLOCKED:
                return BlockedOutcome(dispatch=current)
            if status is DispatchStatus.LEASED and current.lease_expires_at_ms > now:
                if current.lease_owner == cmd.owner and hmac.compare_digest(current.lease_token_digest, digest):
                    return ClaimedOutcome(dispatch=current, lease_token=cmd.lease_token)
                return LeasedOutcome(dispatch=current)
            if status is not DispatchStatus.LEASED and current.next_attempt_at_ms > now:
                if row is None:
                    cur.execute(_INSERT, (current.run_id, current.attempt_id, *_values(_checked(current))[:-1],
                                          current.created_at_ms, current.updated_at_ms))
                return NotDueOutcome(dispatch=current)
            if current.version >= MAX_VERSION:
                raise ClusterDispatchStorageError(f"dispatch of run {cmd.run_id!r} has reached the maximum version")
            claimed = _checked(_replace(
                current, status=DispatchStatus.LEASED, version=current.version + 1,
                dispatch_count=current.dispatch_count + 1, next_attempt_at_ms=_UNSET, lease_owner=cmd.owner,
                lease_token_digest=digest, lease_expires_at_ms=now + cmd.lease_duration_ms, updated_at_ms=now,
            ))
            self._store(claimed, None if row is None else current.version)
            return ClaimedOutcome(dispatch=claimed, lease_token=cmd.lease_token)

    def record_result(self, cmd: RecordResultCommand) -> RecordResultOutcome:
        """Record the controller's result under the caller's fence; CAS the Run; append the event.

        Raises:
            FenceRejectedError: no dispatch, another Attempt, not leased, or another version,
                owner or token.
            RepositoryError: duplicate event id, Run CAS miss, broken row or database failure;
                everything is rolled back.
        """
        if not isinstance(cmd, RecordResultCommand):
            raise InvalidCommandError(f"record_result expects a RecordResultCommand, got {type(cmd).__name__}")
        digest = digest_lease_token(cmd.lease_token)
        cur = self._cur
        with Transaction(self._conn, ClusterDispatchStorageError):
            run_row = cur.execute(_LOCK_RUN, (cmd.run_id,)).fetchone()
            row = None if run_row is None else cur.execute(_LOCK, (cmd.run_id,)).fetchone()
            if row is None:
                raise FenceRejectedError(f"no cancellation dispatch exists for run {cmd.run_id!r}")
            db_now = database_now(cur)
            current = _record(row)
            require_dispatch_fence(current, cmd, digest)
            run = [run_row[3], run_row[4]]
            now = clamp(cur, db_now, current.updated_at_ms, run, cmd.run_id, cmd.owner)
            result = cmd.result
            status, event_type = classify_result(result)
            updated = _checked(_replace(
                current, status=status, version=current.version + 1,
                next_attempt_at_ms=now + cmd.retry_delay_ms if result in RETRYABLE_RESULTS else _UNSET,
                lease_owner=_UNSET, lease_token_digest=_UNSET, lease_expires_at_ms=_UNSET, last_result=result,
                last_dispatched_at_ms=current.last_dispatched_at_ms if result in CONTROLLER_NOT_INVOKED_RESULTS else now,
                updated_at_ms=now,
            ))
            self._store(updated, current.version)
            event = self._append(
                run, cmd.run_id, cmd.event_id, event_type, dedupe_key_for(cmd.attempt_id, updated.dispatch_count),
                "worker", cmd.owner, cmd.attempt_id,
                {"attempt_id": cmd.attempt_id, "dispatch_count": updated.dispatch_count, "result": result.value}, now,
            )
            return RecordResultOutcome(dispatch=updated, event=event)

    def rearm(self, run_id: str, expected_version: int, *, event_id: str, actor_id: str) -> RecordResultOutcome:
        """Exact-CAS re-arm of a ``blocked`` dispatch: ``retry_wait``, due now, version + 1.

        Raises:
            InvalidCommandError: bad run id, version, event id or actor.
            FenceRejectedError: no dispatch, not blocked, or not at ``expected_version``.
        """
        check_rearm(run_id, expected_version, event_id, actor_id)
        cur = self._cur
        with Transaction(self._conn, ClusterDispatchStorageError):
            run_row = cur.execute(_LOCK_RUN, (run_id,)).fetchone()
            row = None if run_row is None else cur.execute(_LOCK, (run_id,)).fetchone()
            if row is None:
                raise FenceRejectedError(f"no cancellation dispatch exists for run {run_id!r}")
            db_now = database_now(cur)
            current = _record(row)
            if current.status is not DispatchStatus.BLOCKED or current.version != expected_version:
                raise FenceRejectedError(
                    f"dispatch of run {run_id!r} is {current.status.value} at version {current.version}; "
                    f"rearm needs blocked at version {expected_version}"
                )
            if current.version >= MAX_VERSION:
                raise ClusterDispatchStorageError(f"dispatch of run {run_id!r} has reached the maximum version")
            run = [run_row[3], run_row[4]]
            now = clamp(cur, db_now, current.updated_at_ms, run, run_id, actor_id)
            rearmed = _checked(_replace(current, status=DispatchStatus.RETRY_WAIT, version=current.version + 1,
                                        next_attempt_at_ms=now, updated_at_ms=now))
            self._store(rearmed, current.version)
            event = self._append(
                run, run_id, event_id, EVENT_DISPATCH_REARMED,
                f"cancel-dispatch-rearm:{current.attempt_id}:{rearmed.version}", "user", actor_id, current.attempt_id,
                {"attempt_id": current.attempt_id, "dispatch_count": current.dispatch_count,
                 "previous_result": current.last_result.value}, now,
            )
            cur.execute(NOTIFY_WAKE)  # the dispatch is due now: wake the workers on commit
            return RecordResultOutcome(dispatch=rearmed, event=event)

    # ----------------------------------------------------------------- storage

    def _store(self, record: DispatchRecord, expected_version: int | None) -> None:
        values = _values(record)
        if expected_version is None:
            self._cur.execute(_INSERT, (record.run_id, record.attempt_id, *values[:-1], record.created_at_ms, values[-1]))
            return
        self._cur.execute(_UPDATE, (*values, record.run_id, expected_version))
        if self._cur.rowcount != 1:
            raise ClusterDispatchStorageError(f"dispatch of run {record.run_id!r} changed concurrently (version CAS missed)")

    def _append(self, run: list[int], run_id: str, event_id: str, event_type: str, dedupe_key: str, actor_type: str,
                actor_id: str, attempt_id: str, payload: dict[str, Any], now: int) -> Any:
        return append_run_event(self._cur, run, run_id=run_id, event_id=event_id, event_type=event_type,
                                dedupe_key=dedupe_key, actor_type=actor_type, actor_id=actor_id,
                                payload=payload, now_ms=now, attempt_id=attempt_id)
