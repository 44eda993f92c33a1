"""Canonical CancellationDispatch contract (spec §2).

Exact-shape commands, the durable record, claim/record outcomes, hard limits, the state
invariants, the result classification, the domain-separated token digest and the error types.
Wire format is JSON with camelCase names; an absent optional field is absent (``msgspec.UNSET``
in Python), never ``null``. This module owns no connection, clock, timer or process.
"""

from __future__ import annotations

import enum
from typing import Union

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.run_events import RunEvent
# The shared limits and the wire helpers are re-exported: the spec names them in this module.
from edge_runtime.contract.validation import (  # noqa: F401
    ATTEMPT_ID_MAX_LENGTH,
    EVENT_ID_MAX_LENGTH,
    LEASE_TOKEN_MAX_LENGTH,
    MAX_VERSION,
    RUN_ID_MAX_LENGTH,
    AttemptId,
    EventId,
    LeaseToken,
    RunId,
    SafeInt,
    Version,
    Command,
    Outcome,
    PositiveCounter,
    bounded_int_type,
    command_decoder,
    encode,
    fields_problem,
    first_problem,
    identifier_problem,
    identifier_type,
    int_problem,
    is_digest,
    lease_token_problem,
    token_digester,
)

# --------------------------------------------------------------------------- limits

LEASE_TOKEN_DOMAIN = b"qinglong.cancellation-dispatch-lease.v1\x00"
MAX_LEASE_DURATION_MS = 300_000
MAX_RETRY_DELAY_MS = 86_400_000
OWNER_MAX_LENGTH = 128

Owner = identifier_type(OWNER_MAX_LENGTH)
LeaseDurationMs = bounded_int_type(1, MAX_LEASE_DURATION_MS)
RetryDelayMs = bounded_int_type(1, MAX_RETRY_DELAY_MS)


# --------------------------------------------------------------------------- errors


class CancellationDispatchError(EdgeRuntimeError, code="CANCELLATION_DISPATCH_ERROR"):
    """Base of every CancellationDispatch error."""


class InvalidCommandError(CancellationDispatchError, code="INVALID_CANCELLATION_DISPATCH_COMMAND"):
    """The command is malformed: fix the input; retrying it unchanged never helps."""

    #: JSON path of the offending field for the cross-field rules msgspec cannot express itself;
    #: the decoders append it to the message like msgspec does (`` - at `$.retryDelayMs` ``).
    path: str | None = None


class BindingConflictError(CancellationDispatchError, code="CANCELLATION_DISPATCH_BINDING_CONFLICT"):
    """The Run's dispatch is bound to another Attempt; it is never rebound."""


class FenceRejectedError(CancellationDispatchError, code="CANCELLATION_DISPATCH_FENCE_REJECTED"):
    """The caller's lease no longer fences the dispatch: another owner or version holds it."""


class RepositoryError(CancellationDispatchError, code="CANCELLATION_DISPATCH_REPOSITORY_FAILED"):
    """The store failed, or holds a row that breaks the contract (which fails closed).

    ``retryable`` is true only when the database was busy or locked.
    """


# --------------------------------------------------------------------------- token digest


#: ``digest_lease_token(token)``: the domain-separated digest stored instead of the token (spec §2).
digest_lease_token = token_digester(LEASE_TOKEN_DOMAIN, InvalidCommandError)
#: Whether a value has the shape of a token digest (64 lowercase hex characters).
is_lease_token_digest = is_digest


# --------------------------------------------------------------------------- enums


class DispatchStatus(enum.StrEnum):
    PENDING = "pending"
    LEASED = "leased"
    RETRY_WAIT = "retry_wait"
    DISPATCHED = "dispatched"
    BLOCKED = "blocked"


class DispatchResult(enum.StrEnum):
    TERMINATION_REQUESTED = "termination_requested"
    ALREADY_EXITED = "already_exited"
    IDENTITY_MISMATCH = "identity_mismatch"
    PID_MISMATCH = "pid_mismatch"
    UNSUPPORTED = "unsupported"
    INVALID = "invalid"
    CONTROLLER_MISSING = "controller_missing"
    HANDLE_MISSING = "handle_missing"
    DISPATCH_ERROR = "dispatch_error"


RETRYABLE_RESULTS = frozenset(
    {DispatchResult.CONTROLLER_MISSING, DispatchResult.HANDLE_MISSING, DispatchResult.DISPATCH_ERROR}
)
BLOCKING_RESULTS = frozenset(
    {
        DispatchResult.IDENTITY_MISMATCH,
        DispatchResult.PID_MISMATCH,
        DispatchResult.UNSUPPORTED,
        DispatchResult.INVALID,
    }
)
DELIVERED_RESULTS = frozenset({DispatchResult.TERMINATION_REQUESTED, DispatchResult.ALREADY_EXITED})

#: Results after which the controller was never invoked, so the last dispatch time is kept.
CONTROLLER_NOT_INVOKED_RESULTS = frozenset({DispatchResult.CONTROLLER_MISSING, DispatchResult.HANDLE_MISSING})

EVENT_DISPATCHED = "run.cancel_dispatched"
EVENT_DISPATCH_FAILED = "run.cancel_dispatch_failed"
EVENT_DISPATCH_BLOCKED = "run.cancel_dispatch_blocked"
#: An operator re-armed a blocked dispatch (ADR-0458 exact-CAS rearm).
EVENT_DISPATCH_REARMED = "run.cancel_dispatch_rearmed"


def classify_result(result: DispatchResult) -> tuple[DispatchStatus, str]:
    """The status a dispatch moves to after ``result``, and the event type that records it."""
    if result in RETRYABLE_RESULTS:
        return DispatchStatus.RETRY_WAIT, EVENT_DISPATCH_FAILED
    if result in BLOCKING_RESULTS:
        return DispatchStatus.BLOCKED, EVENT_DISPATCH_BLOCKED
    return DispatchStatus.DISPATCHED, EVENT_DISPATCHED


def dedupe_key_for(attempt_id: str, dispatch_count: int) -> str:
    """The event dedupe key of the result of one dispatch of an Attempt."""
    return f"cancel-dispatch:{attempt_id}:{dispatch_count}"


def check_rearm(run_id: object, expected_version: object, event_id: object, actor_id: object) -> None:
    """Refuse a re-arm (``dispatch rearm``) whose arguments are not a run id, a version written
    at least once, an event id and an actor, with :class:`InvalidCommandError` naming the first."""
    problem = first_problem(
        identifier_problem("run_id", run_id, RUN_ID_MAX_LENGTH),
        int_problem("expected_version", expected_version, 1, MAX_VERSION),
        identifier_problem("event_id", event_id, EVENT_ID_MAX_LENGTH),
        identifier_problem("actor_id", actor_id, OWNER_MAX_LENGTH),
    )
    if problem is not None:
        raise InvalidCommandError(problem)


# --------------------------------------------------------------------------- commands


class _Command(Command):
    error = InvalidCommandError


class ClaimCommand(_Command):
    """Claim the cancellation dispatch of a Run's Attempt for ``lease_duration_ms``.

    ``requested_at_ms`` is the Run's existing ``cancel_requested_at_ms``; the caller never
    supplies the current time or an expiry.
    """

    run_id: RunId
    attempt_id: AttemptId
    requested_at_ms: SafeInt
    owner: Owner
    lease_token: LeaseToken
    lease_duration_ms: LeaseDurationMs


class RecordResultCommand(_Command):
    """Record what the controller did under the lease fenced by owner, token and version.

    ``retry_delay_ms`` is present exactly when ``result`` is retryable.
    """

    run_id: RunId
    attempt_id: AttemptId
    owner: Owner
    lease_token: LeaseToken
    expected_version: PositiveCounter
    result: DispatchResult
    event_id: EventId
    retry_delay_ms: RetryDelayMs | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        problem = fields_problem(self)
        # retry_delay_ms is the last field: its own limit is worded after the cross-field rule.
        if problem is not None and not problem.startswith("retry_delay_ms"):
            self.reject(problem)
        if self.result not in RETRYABLE_RESULTS:
            if self.retry_delay_ms is not msgspec.UNSET:
                self.reject(f"retry_delay_ms is only allowed for retryable results, not {self.result.value}",
                        "$.retryDelayMs")
        elif self.retry_delay_ms is msgspec.UNSET:
            self.reject(f"retry_delay_ms is required for the retryable result {self.result.value}", "$.retryDelayMs")
        self.reject(problem, "$.retryDelayMs")


# --------------------------------------------------------------------------- record


class DispatchRecord(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, kw_only=True):
    """The durable state of one Run's cancellation dispatch. It never carries a raw token."""

    run_id: RunId
    attempt_id: AttemptId
    status: DispatchStatus
    version: Version
    dispatch_count: Version
    next_attempt_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    lease_owner: Owner | msgspec.UnsetType = msgspec.UNSET
    lease_token_digest: str | msgspec.UnsetType = msgspec.UNSET
    lease_expires_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    last_result: DispatchResult | msgspec.UnsetType = msgspec.UNSET
    last_dispatched_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    created_at_ms: SafeInt
    updated_at_ms: SafeInt


def dispatch_record_problem(record: DispatchRecord) -> str | None:
    """The first contract invariant ``record`` breaks, or None when it satisfies all of them.

    The field limits come from the record's declared types (:func:`fields_problem`); the
    shape rules below are the cross-field invariants of spec §2.
    """
    UNSET = msgspec.UNSET
    problem = fields_problem(record, enums=False)
    if problem is not None:
        return problem
    status, version, count = record.status, record.version, record.dispatch_count
    next_at, expires, last = record.next_attempt_at_ms, record.lease_expires_at_ms, record.last_result
    owner, digest = record.lease_owner, record.lease_token_digest
    if not isinstance(status, DispatchStatus):
        return f"status {status!r} is not a dispatch status"
    if last is not UNSET and not isinstance(last, DispatchResult):
        return f"last_result {last!r} is not a dispatch result"

    if status is DispatchStatus.LEASED:
        if owner is UNSET or digest is UNSET or expires is UNSET:
            return "a leased dispatch must have lease_owner, lease_token_digest and lease_expires_at_ms"
        if not is_digest(digest):
            return "lease_token_digest must be 64 lowercase hex characters"
    elif owner is not UNSET or digest is not UNSET or expires is not UNSET:
        return f"a {status.value} dispatch must not carry lease fields"

    waits = status is DispatchStatus.PENDING or status is DispatchStatus.RETRY_WAIT
    if waits and next_at is UNSET:
        return f"a {status.value} dispatch must have next_attempt_at_ms"
    if not waits and next_at is not UNSET:
        return f"a {status.value} dispatch must not have next_attempt_at_ms"

    if status is DispatchStatus.PENDING:
        if version != 0 or count != 0 or last is not UNSET:
            return "a pending dispatch must have version 0, dispatch_count 0 and no last_result"
    elif count < 1:
        return f"a {status.value} dispatch must have dispatch_count >= 1"
    if version < count:
        return "version must be >= dispatch_count"
    if record.updated_at_ms < record.created_at_ms:
        return "updated_at_ms must be >= created_at_ms"

    if status is DispatchStatus.RETRY_WAIT or (status is DispatchStatus.LEASED and last is not UNSET):
        if last not in RETRYABLE_RESULTS and last not in BLOCKING_RESULTS:
            return f"a {status.value} dispatch must have a retryable or blocking last_result"
    elif status is DispatchStatus.DISPATCHED and last not in DELIVERED_RESULTS:
        return "a dispatched dispatch must have last_result termination_requested or already_exited"
    elif status is DispatchStatus.BLOCKED and last not in BLOCKING_RESULTS:
        return "a blocked dispatch must have a blocking last_result"
    return None


# --------------------------------------------------------------------------- outcomes


class ClaimedOutcome(Outcome, tag="claimed"):
    """The caller now holds the lease. The only place the raw token ever appears."""

    dispatch: DispatchRecord
    lease_token: str

    def __repr__(self) -> str:
        return f"ClaimedOutcome(dispatch={self.dispatch!r}, lease_token=<redacted>)"


class NotEligibleOutcome(Outcome, tag="not_eligible"):
    """The Run or Attempt is not (or no longer) one whose cancellation may be dispatched."""


class NotDueOutcome(Outcome, tag="not_due"):
    dispatch: DispatchRecord


class LeasedOutcome(Outcome, tag="leased"):
    dispatch: DispatchRecord


class DispatchedOutcome(Outcome, tag="dispatched"):
    dispatch: DispatchRecord


class BlockedOutcome(Outcome, tag="blocked"):
    dispatch: DispatchRecord


ClaimOutcome = Union[
    ClaimedOutcome, NotEligibleOutcome, NotDueOutcome, LeasedOutcome, DispatchedOutcome, BlockedOutcome
]


class RecordResultOutcome(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False):
    dispatch: DispatchRecord
    event: RunEvent


# --------------------------------------------------------------------------- wire


decode_claim_command = command_decoder(ClaimCommand, InvalidCommandError)
decode_record_result_command = command_decoder(RecordResultCommand, InvalidCommandError)
