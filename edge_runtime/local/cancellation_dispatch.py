"""Local CancellationDispatch repository (spec §3) on the single-writer SQLite database.

Each mutation is one ``BEGIN IMMEDIATE`` transaction that reads the injected clock once, after the
write lock is held, and touches rows in the fixed order Run -> Attempt -> Dispatch. Every record
read or about to be written is checked against the contract invariants; a stored row that breaks
one fails closed with :class:`RepositoryError` and is never repaired or reclaimed.

The table keeps its legacy column name ``lease_token``. This adapter writes only
``sha256:<digest>`` there and projects an older raw value to its digest on read, so a raw token
never leaves this module and is never written by this runtime.
"""

from __future__ import annotations

from typing import Any

import apsw
import msgspec

from edge_runtime.contract.cancellation_dispatch import (
    check_rearm,
    CONTROLLER_NOT_INVOKED_RESULTS,
    EVENT_DISPATCH_REARMED,
    MAX_VERSION,
    RETRYABLE_RESULTS,
    RUN_ID_MAX_LENGTH,
    BlockedOutcome,
    ClaimCommand,
    ClaimedOutcome,
    ClaimOutcome,
    DispatchedOutcome,
    DispatchRecord,
    DispatchResult,
    DispatchStatus,
    InvalidCommandError,
    BindingConflictError,
    FenceRejectedError,
    LeasedOutcome,
    NotDueOutcome,
    NotEligibleOutcome,
    RecordResultCommand,
    RecordResultOutcome,
    RepositoryError,
    classify_result,
    dedupe_key_for,
    digest_lease_token,
    dispatch_record_problem,
    is_lease_token_digest,
)
from edge_runtime.contract.runs import ACTIVE_ATTEMPT_STATUSES
from edge_runtime.contract.validation import identifier_problem
from edge_runtime.contract.stored_records import record_to_write, stored_record
from edge_runtime.contract.transitions import dispatch_run_eligible, require_dispatch_fence
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.errors import StorageErrors
from edge_runtime.local.run_events import append_run_event, read_run_version
from edge_runtime.local.run_rows import read_attempt_fence, read_run_fence


DIGEST_PREFIX = "sha256:"
_UNSET = msgspec.UNSET

DISPATCH_COLUMNS = (
    "run_id, attempt_id, status, version, dispatch_count, next_attempt_at_ms, lease_owner, lease_token, "
    "lease_expires_at_ms, last_result, last_dispatched_at_ms, created_at_ms, updated_at_ms"
)
_SELECT_DISPATCH = f"SELECT {DISPATCH_COLUMNS} FROM run_cancellation_dispatches WHERE run_id = ?"
_INSERT_DISPATCH = f"INSERT INTO run_cancellation_dispatches ({DISPATCH_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_UPDATE_DISPATCH = (
    "UPDATE run_cancellation_dispatches SET status = ?, version = ?, dispatch_count = ?, next_attempt_at_ms = ?, "
    "lease_owner = ?, lease_token = ?, lease_expires_at_ms = ?, last_result = ?, last_dispatched_at_ms = ?, "
    "updated_at_ms = ? WHERE run_id = ? AND version = ?"
)


#: Stored text -> enum member, without the Python-level ``Enum.__call__`` on every read.
_STATUS_BY_VALUE = {status.value: status for status in DispatchStatus}
_RESULT_BY_VALUE = {result.value: result for result in DispatchResult}


def _null_if_absent(value: Any) -> Any:
    return None if value is _UNSET else value


def project_stored_token(stored: str | None) -> Any:
    """The digest of a stored ``lease_token`` value: new ``sha256:`` form, or a legacy raw token.

    Raises:
        RepositoryError: a legacy value that is not a valid token (its text is never echoed).
    """
    if stored is None:
        return _UNSET
    if stored.startswith(DIGEST_PREFIX) and is_lease_token_digest(stored[len(DIGEST_PREFIX) :]):
        return stored[len(DIGEST_PREFIX) :]
    try:
        return digest_lease_token(stored)
    except InvalidCommandError:
        raise RepositoryError("stored legacy lease token is invalid; the dispatch fails closed") from None


def record_from_row(row: tuple[Any, ...]) -> DispatchRecord:
    """Project one stored row to a checked record.

    Raises:
        RepositoryError: the row breaks a contract invariant.
    """
    (run_id, attempt_id, status, version, dispatch_count, next_at, owner, token, expires, last, last_at, created,
     updated) = row
    return stored_record(lambda: DispatchRecord(
        run_id=run_id,
        attempt_id=attempt_id,
        # An unknown value falls through to the enum call, whose ValueError names it.
        status=_STATUS_BY_VALUE.get(status) or DispatchStatus(status),
        version=version,
        dispatch_count=dispatch_count,
        next_attempt_at_ms=_UNSET if next_at is None else next_at,
        lease_owner=_UNSET if owner is None else owner,
        lease_token_digest=project_stored_token(token),
        lease_expires_at_ms=_UNSET if expires is None else expires,
        last_result=_UNSET if last is None else (_RESULT_BY_VALUE.get(last) or DispatchResult(last)),
        last_dispatched_at_ms=_UNSET if last_at is None else last_at,
        created_at_ms=created,
        updated_at_ms=updated,
    ), "dispatch of run", run_id, RepositoryError, dispatch_record_problem)


def _checked(record: DispatchRecord) -> DispatchRecord:
    return record_to_write(record, dispatch_record_problem(record), "dispatch of run", record.run_id,
                           RepositoryError)


def _row_values(record: DispatchRecord) -> tuple[Any, ...]:
    digest = record.lease_token_digest
    return (
        record.status.value,
        record.version,
        record.dispatch_count,
        _null_if_absent(record.next_attempt_at_ms),
        _null_if_absent(record.lease_owner),
        None if digest is _UNSET else DIGEST_PREFIX + digest,
        _null_if_absent(record.lease_expires_at_ms),
        None if record.last_result is _UNSET else record.last_result.value,
        _null_if_absent(record.last_dispatched_at_ms),
        record.updated_at_ms,
    )


#: Storage failures become :class:`RepositoryError`; contract errors pass through.
repository_errors = StorageErrors(RepositoryError)


def _next_version(current: DispatchRecord) -> int:
    """The version of the dispatch's next change; a row at the maximum version takes none."""
    if current.version >= MAX_VERSION:
        raise RepositoryError(f"dispatch of run {current.run_id!r} has reached the maximum version")
    return current.version + 1


class LocalCancellationDispatchRepository:
    """Durable, fenced cancellation dispatches on a :class:`LocalDatabase`."""

    __slots__ = ("_db",)

    def __init__(self, db: LocalDatabase) -> None:
        self._db = db

    # ----------------------------------------------------------------- reads

    def find_by_run_id(self, run_id: str) -> DispatchRecord | None:
        """The Run's dispatch record, or None when there is none.

        Raises:
            InvalidCommandError: ``run_id`` is not a valid identifier.
            RepositoryError: the stored row breaks an invariant, or the database failed.
        """
        problem = identifier_problem("run_id", run_id, RUN_ID_MAX_LENGTH)
        if problem is not None:
            raise InvalidCommandError(problem)
        with repository_errors():
            row = self._db.connection.execute(_SELECT_DISPATCH, (run_id,)).fetchone()
            return None if row is None else record_from_row(row)

    # ----------------------------------------------------------------- claim

    def claim(self, cmd: ClaimCommand) -> ClaimOutcome:
        """Claim the dispatch of ``cmd.run_id`` for ``cmd.attempt_id`` (spec §3, claim).

        Raises:
            BindingConflictError: the dispatch is bound to another Attempt of the Run.
            RepositoryError: a stored row breaks an invariant, or the database failed
                (``retryable`` when it was busy).
        """
        ClaimCommand.require(cmd, "claim")
        digest = digest_lease_token(cmd.lease_token)
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            run = read_run_fence(connection, cmd.run_id)
            if run is None or not dispatch_run_eligible(run.execution_owner, run.status, run.cancel_requested_at_ms,
                                                        cmd.requested_at_ms):
                return NotEligibleOutcome()
            attempt = read_attempt_fence(connection, cmd.attempt_id)
            if attempt is None or attempt.run_id != cmd.run_id or attempt.status not in ACTIVE_ATTEMPT_STATUSES:
                return NotEligibleOutcome()

            row = connection.execute(_SELECT_DISPATCH, (cmd.run_id,)).fetchone()
            if row is None:
                # Checked below if it is stored as is; a claim taken at once checks the leased record.
                current = DispatchRecord(
                    run_id=cmd.run_id,
                    attempt_id=cmd.attempt_id,
                    status=DispatchStatus.PENDING,
                    version=0,
                    dispatch_count=0,
                    next_attempt_at_ms=cmd.requested_at_ms,
                    created_at_ms=now,
                    updated_at_ms=now,
                )
            else:
                current = record_from_row(row)
                if current.attempt_id != cmd.attempt_id:
                    raise BindingConflictError(
                        f"dispatch of run {cmd.run_id!r} is bound to attempt {current.attempt_id!r}, "
                        f"not {cmd.attempt_id!r}"
                    )

            outcome = self._claim_decision(current, now)
            if outcome is None:
                claimed = _checked(
                    msgspec.structs.replace(
                        current,
                        status=DispatchStatus.LEASED,
                        version=_next_version(current),
                        dispatch_count=current.dispatch_count + 1,
                        next_attempt_at_ms=_UNSET,
                        lease_owner=cmd.owner,
                        lease_token_digest=digest,
                        lease_expires_at_ms=now + cmd.lease_duration_ms,
                        updated_at_ms=now,
                    )
                )
                self._store(connection, claimed, None if row is None else current.version)
                return ClaimedOutcome(dispatch=claimed, lease_token=cmd.lease_token)
            if row is None:
                self._store(connection, _checked(current), None)
            return outcome

    @staticmethod
    def _claim_decision(current: DispatchRecord, now: int) -> ClaimOutcome | None:
        """What a claim sees without taking the lease, or None when it may take it."""
        status = current.status
        if status is DispatchStatus.DISPATCHED:
            return DispatchedOutcome(dispatch=current)
        if status is DispatchStatus.BLOCKED:
            return BlockedOutcome(dispatch=current)
        if status is DispatchStatus.LEASED:
            if current.lease_expires_at_ms > now:
                return LeasedOutcome(dispatch=current)
            return None  # expired lease: taken over exactly at expiry
        if current.next_attempt_at_ms > now:
            return NotDueOutcome(dispatch=current)
        return None

    # ----------------------------------------------------------------- record_result

    def record_result(self, cmd: RecordResultCommand) -> RecordResultOutcome:
        """Record the controller's result under the caller's fence (spec §3, record_result).

        Does not re-check that the Run and Attempt are active: a signal's outcome is recorded
        even when the Run ended meanwhile (often because of that very signal).

        Raises:
            FenceRejectedError: no such dispatch, another Attempt, not leased, another version,
                owner or token.
            RepositoryError: duplicate event id, Run CAS miss, broken stored row, or database
                failure; everything is rolled back.
        """
        RecordResultCommand.require(cmd, "record_result")
        digest = digest_lease_token(cmd.lease_token)
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            run = read_run_version(connection, cmd.run_id)
            row = connection.execute(_SELECT_DISPATCH, (cmd.run_id,)).fetchone()
            if run is None or row is None:
                raise FenceRejectedError(f"no cancellation dispatch exists for run {cmd.run_id!r}")
            current = record_from_row(row)
            require_dispatch_fence(current, cmd, digest)

            result = cmd.result
            status, event_type = classify_result(result)
            retryable = result in RETRYABLE_RESULTS
            updated = _checked(
                msgspec.structs.replace(
                    current,
                    status=status,
                    version=_next_version(current),
                    next_attempt_at_ms=now + cmd.retry_delay_ms if retryable else _UNSET,
                    lease_owner=_UNSET,
                    lease_token_digest=_UNSET,
                    lease_expires_at_ms=_UNSET,
                    last_result=result,
                    last_dispatched_at_ms=(
                        current.last_dispatched_at_ms if result in CONTROLLER_NOT_INVOKED_RESULTS else now
                    ),
                    updated_at_ms=now,
                )
            )
            self._store(connection, updated, current.version)

            event = append_run_event(
                connection,
                run_id=cmd.run_id,
                event_id=cmd.event_id,
                event_type=event_type,
                dedupe_key=dedupe_key_for(cmd.attempt_id, updated.dispatch_count),
                actor_type="worker",
                actor_id=cmd.owner,
                attempt_id=cmd.attempt_id,
                payload={
                    "attempt_id": cmd.attempt_id,
                    "dispatch_count": updated.dispatch_count,
                    "result": result.value,
                },
                now_ms=now,
                run_version=run,
            )
            return RecordResultOutcome(dispatch=updated, event=event)

    # ----------------------------------------------------------------- rearm

    def rearm(self, run_id: str, expected_version: int, *, event_id: str, actor_id: str) -> RecordResultOutcome:
        """Exact-CAS re-arm of a ``blocked`` dispatch (ADR-0458): back to ``retry_wait``, due now.

        An operator uses it after resolving why delivery was blocked (for example a recorded
        identity that no longer matched). It needs no lease capability: the version is the fence.
        The blocking ``last_result`` is kept as history; the next claim takes a fresh lease.

        Raises:
            InvalidCommandError: bad run id, version, event id or actor.
            FenceRejectedError: no dispatch, not blocked, or not at ``expected_version``.
        """
        check_rearm(run_id, expected_version, event_id, actor_id)
        with repository_errors(), self._db.write() as now:
            connection = self._db.connection
            run = read_run_version(connection, run_id)
            row = connection.execute(_SELECT_DISPATCH, (run_id,)).fetchone()
            if run is None or row is None:
                raise FenceRejectedError(f"no cancellation dispatch exists for run {run_id!r}")
            current = record_from_row(row)
            if current.status is not DispatchStatus.BLOCKED or current.version != expected_version:
                raise FenceRejectedError(
                    f"dispatch of run {run_id!r} is {current.status.value} at version {current.version}; "
                    f"rearm needs blocked at version {expected_version}"
                )
            rearmed = _checked(
                msgspec.structs.replace(
                    current,
                    status=DispatchStatus.RETRY_WAIT,
                    version=_next_version(current),
                    next_attempt_at_ms=now,
                    updated_at_ms=now,
                )
            )
            self._store(connection, rearmed, current.version)
            event = append_run_event(
                connection,
                run_id=run_id,
                event_id=event_id,
                event_type=EVENT_DISPATCH_REARMED,
                dedupe_key=f"cancel-dispatch-rearm:{current.attempt_id}:{rearmed.version}",
                actor_type="user",
                actor_id=actor_id,
                attempt_id=current.attempt_id,
                payload={
                    "attempt_id": current.attempt_id,
                    "dispatch_count": current.dispatch_count,
                    "previous_result": current.last_result.value,
                },
                now_ms=now,
                run_version=run,
            )
            return RecordResultOutcome(dispatch=rearmed, event=event)

    # ----------------------------------------------------------------- storage

    @staticmethod
    def _store(connection: apsw.Connection, record: DispatchRecord, expected_version: int | None) -> None:
        """Insert (``expected_version`` None) or version-CAS update one checked record."""
        values = _row_values(record)
        if expected_version is None:
            connection.execute(
                _INSERT_DISPATCH, (record.run_id, record.attempt_id, *values[:-1], record.created_at_ms, values[-1])
            )
            return
        connection.execute(_UPDATE_DISPATCH, (*values, record.run_id, expected_version))
        if connection.changes() != 1:
            raise RepositoryError(f"dispatch of run {record.run_id!r} changed concurrently (version CAS missed)")
