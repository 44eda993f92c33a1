"""Canonical CancellationDispatch contract (spec §2).

Exact-shape commands, the durable record, claim/record outcomes, hard limits, the state
invariants, the result classification, the domain-separated token digest and the error types.
Wire format is JSON with camelCase names; an absent optional field is absent (``msgspec.UNSET``
in Python), never ``null``. This module owns no connection, clock, timer or process.
"""

from __future__ import annotations

import enum
import hashlib
import re
from typing import Any, ClassVar, Union

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.run_events import RunEvent
from edge_runtime.contract.validation import (
    MAX_SAFE_INTEGER,
    SafeInt,
    bounded_int_type,
    first_problem,
    identifier_matcher,
    identifier_problem,
    identifier_type,
    int_problem,
)

# --------------------------------------------------------------------------- limits

LEASE_TOKEN_DOMAIN = b"qinglong.cancellation-dispatch-lease.v1\x00"
MAX_LEASE_DURATION_MS = 300_000
MAX_RETRY_DELAY_MS = 86_400_000
MAX_VERSION = 2_147_483_647

RUN_ID_MAX_LENGTH = 36
ATTEMPT_ID_MAX_LENGTH = 36
EVENT_ID_MAX_LENGTH = 36
OWNER_MAX_LENGTH = 128
LEASE_TOKEN_MAX_LENGTH = 128

RunId = identifier_type(RUN_ID_MAX_LENGTH)
AttemptId = identifier_type(ATTEMPT_ID_MAX_LENGTH)
EventId = identifier_type(EVENT_ID_MAX_LENGTH)
Owner = identifier_type(OWNER_MAX_LENGTH)
LeaseToken = identifier_type(LEASE_TOKEN_MAX_LENGTH)
LeaseDurationMs = bounded_int_type(1, MAX_LEASE_DURATION_MS)
RetryDelayMs = bounded_int_type(1, MAX_RETRY_DELAY_MS)
ExpectedVersion = bounded_int_type(1, MAX_VERSION)
Version = bounded_int_type(0, MAX_VERSION)

_DIGEST_PATTERN = re.compile(r"[0-9a-f]{64}")
_match_digest = _DIGEST_PATTERN.fullmatch

# Hot-path identifier checks (one C call each); the *_problem helpers word a rejection.
_match_id36 = identifier_matcher(36)  # run_id, attempt_id, event_id
_match_id128 = identifier_matcher(128)  # owner, lease_token
assert RUN_ID_MAX_LENGTH == ATTEMPT_ID_MAX_LENGTH == EVENT_ID_MAX_LENGTH == 36
assert OWNER_MAX_LENGTH == LEASE_TOKEN_MAX_LENGTH == 128

# --------------------------------------------------------------------------- errors


class CancellationDispatchError(EdgeRuntimeError):
    """Base of every CancellationDispatch error."""

    code = "CANCELLATION_DISPATCH_ERROR"


class InvalidCommandError(CancellationDispatchError):
    """The command is malformed: fix the input; retrying it unchanged never helps."""

    code = "INVALID_CANCELLATION_DISPATCH_COMMAND"

    #: JSON path of the offending field for the cross-field rules msgspec cannot express itself;
    #: the decoders append it to the message like msgspec does (`` - at `$.retryDelayMs` ``).
    path: str | None = None


class BindingConflictError(CancellationDispatchError):
    """The Run's dispatch is bound to another Attempt; it is never rebound."""

    code = "CANCELLATION_DISPATCH_BINDING_CONFLICT"


class FenceRejectedError(CancellationDispatchError):
    """The caller's lease no longer fences the dispatch: another owner or version holds it."""

    code = "CANCELLATION_DISPATCH_FENCE_REJECTED"


class RepositoryError(CancellationDispatchError):
    """The store failed, or holds a row that breaks the contract (which fails closed).

    ``retryable`` is true only when the database was busy or locked.
    """

    code = "CANCELLATION_DISPATCH_REPOSITORY_FAILED"


# --------------------------------------------------------------------------- token digest


def lease_token_problem(token: object) -> str | None:
    """Why ``token`` is not a valid lease token, or None."""
    return identifier_problem("lease_token", token, LEASE_TOKEN_MAX_LENGTH)


def digest_lease_token(token: str) -> str:
    """SHA-256 of the domain string and the UTF-8 token, as 64 lowercase hex characters.

    Raises:
        InvalidCommandError: the token is not a valid lease token.
    """
    if type(token) is not str or _match_id128(token) is None:
        raise InvalidCommandError(lease_token_problem(token) or "lease_token is invalid")
    return hashlib.sha256(LEASE_TOKEN_DOMAIN + token.encode("utf-8")).hexdigest()


def is_lease_token_digest(value: object) -> bool:
    """Whether ``value`` has the shape of a token digest (64 lowercase hex characters)."""
    return type(value) is str and _match_digest(value) is not None


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


# --------------------------------------------------------------------------- commands


def _reject(problem: str | None, path: str | None = None) -> None:
    if problem is not None:
        error = InvalidCommandError(problem)
        error.path = path
        raise error


class ClaimCommand(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False):
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

    def __post_init__(self) -> None:
        # Fast path: one cheap test per field; the detailed checks below only word a rejection.
        run_id, attempt_id, requested, owner, token, duration = (
            self.run_id, self.attempt_id, self.requested_at_ms, self.owner, self.lease_token, self.lease_duration_ms
        )
        if (
            type(run_id) is str and _match_id36(run_id) is not None
            and type(attempt_id) is str and _match_id36(attempt_id) is not None
            and type(requested) is int and 0 <= requested <= MAX_SAFE_INTEGER
            and type(owner) is str and _match_id128(owner) is not None
            and type(token) is str and _match_id128(token) is not None
            and type(duration) is int and 1 <= duration <= MAX_LEASE_DURATION_MS
        ):
            return
        _reject(
            first_problem(
                identifier_problem("run_id", self.run_id, RUN_ID_MAX_LENGTH),
                identifier_problem("attempt_id", self.attempt_id, ATTEMPT_ID_MAX_LENGTH),
                int_problem("requested_at_ms", self.requested_at_ms, 0, MAX_SAFE_INTEGER),
                identifier_problem("owner", self.owner, OWNER_MAX_LENGTH),
                lease_token_problem(self.lease_token),
                int_problem("lease_duration_ms", self.lease_duration_ms, 1, MAX_LEASE_DURATION_MS),
            )
        )

    def __repr__(self) -> str:
        # The raw token is a write capability: keep it out of reprs, logs and tracebacks.
        return (
            f"ClaimCommand(run_id={self.run_id!r}, attempt_id={self.attempt_id!r}, "
            f"requested_at_ms={self.requested_at_ms!r}, owner={self.owner!r}, "
            f"lease_token=<redacted>, lease_duration_ms={self.lease_duration_ms!r})"
        )


class RecordResultCommand(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False):
    """Record what the controller did under the lease fenced by owner, token and version.

    ``retry_delay_ms`` is present exactly when ``result`` is retryable.
    """

    run_id: RunId
    attempt_id: AttemptId
    owner: Owner
    lease_token: LeaseToken
    expected_version: ExpectedVersion
    result: DispatchResult
    event_id: EventId
    retry_delay_ms: RetryDelayMs | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        run_id, attempt_id, owner, token, version, event_id = (
            self.run_id, self.attempt_id, self.owner, self.lease_token, self.expected_version, self.event_id
        )
        # Fast path as in ClaimCommand; the detailed checks only run to word a rejection.
        if not (
            type(run_id) is str and _match_id36(run_id) is not None
            and type(attempt_id) is str and _match_id36(attempt_id) is not None
            and type(owner) is str and _match_id128(owner) is not None
            and type(token) is str and _match_id128(token) is not None
            and type(version) is int and 1 <= version <= MAX_VERSION
            and type(event_id) is str and _match_id36(event_id) is not None
        ):
            _reject(
                first_problem(
                    identifier_problem("run_id", run_id, RUN_ID_MAX_LENGTH),
                    identifier_problem("attempt_id", attempt_id, ATTEMPT_ID_MAX_LENGTH),
                    identifier_problem("owner", owner, OWNER_MAX_LENGTH),
                    lease_token_problem(token),
                    int_problem("expected_version", version, 1, MAX_VERSION),
                    identifier_problem("event_id", event_id, EVENT_ID_MAX_LENGTH),
                )
            )
        if not isinstance(self.result, DispatchResult):
            # Python callers may pass the plain string; the frozen struct keeps the enum member.
            try:
                msgspec.structs.force_setattr(self, "result", DispatchResult(self.result))
            except ValueError:
                raise InvalidCommandError(f"result must be one of {[r.value for r in DispatchResult]}") from None
        if self.result in RETRYABLE_RESULTS:
            if self.retry_delay_ms is msgspec.UNSET:
                _reject(f"retry_delay_ms is required for the retryable result {self.result.value}", "$.retryDelayMs")
            _reject(int_problem("retry_delay_ms", self.retry_delay_ms, 1, MAX_RETRY_DELAY_MS), "$.retryDelayMs")
        elif self.retry_delay_ms is not msgspec.UNSET:
            _reject(f"retry_delay_ms is only allowed for retryable results, not {self.result.value}", "$.retryDelayMs")

    def __repr__(self) -> str:
        return (
            f"RecordResultCommand(run_id={self.run_id!r}, attempt_id={self.attempt_id!r}, "
            f"owner={self.owner!r}, lease_token=<redacted>, expected_version={self.expected_version!r}, "
            f"result={self.result!r}, event_id={self.event_id!r}, retry_delay_ms={self.retry_delay_ms!r})"
        )


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

    Runs on every record read and written, so each test is a cheap inline check; a message is
    only built for a record that fails one.
    """
    UNSET = msgspec.UNSET
    run_id, attempt_id, status = record.run_id, record.attempt_id, record.status
    version, count, created, updated = record.version, record.dispatch_count, record.created_at_ms, record.updated_at_ms
    next_at, expires, last_at = record.next_attempt_at_ms, record.lease_expires_at_ms, record.last_dispatched_at_ms
    owner, digest, last = record.lease_owner, record.lease_token_digest, record.last_result

    if type(run_id) is not str or _match_id36(run_id) is None:
        return identifier_problem("run_id", run_id, RUN_ID_MAX_LENGTH)
    if type(attempt_id) is not str or _match_id36(attempt_id) is None:
        return identifier_problem("attempt_id", attempt_id, ATTEMPT_ID_MAX_LENGTH)
    # Unrolled on purpose: this runs several times per operation.
    if type(version) is not int or not 0 <= version <= MAX_VERSION:
        return int_problem("version", version, 0, MAX_VERSION)
    if type(count) is not int or not 0 <= count <= MAX_VERSION:
        return int_problem("dispatch_count", count, 0, MAX_VERSION)
    if type(created) is not int or not 0 <= created <= MAX_SAFE_INTEGER:
        return int_problem("created_at_ms", created, 0, MAX_SAFE_INTEGER)
    if type(updated) is not int or not 0 <= updated <= MAX_SAFE_INTEGER:
        return int_problem("updated_at_ms", updated, 0, MAX_SAFE_INTEGER)
    if next_at is not UNSET and (type(next_at) is not int or not 0 <= next_at <= MAX_SAFE_INTEGER):
        return int_problem("next_attempt_at_ms", next_at, 0, MAX_SAFE_INTEGER)
    if expires is not UNSET and (type(expires) is not int or not 0 <= expires <= MAX_SAFE_INTEGER):
        return int_problem("lease_expires_at_ms", expires, 0, MAX_SAFE_INTEGER)
    if last_at is not UNSET and (type(last_at) is not int or not 0 <= last_at <= MAX_SAFE_INTEGER):
        return int_problem("last_dispatched_at_ms", last_at, 0, MAX_SAFE_INTEGER)
    if not isinstance(status, DispatchStatus):
        return f"status {status!r} is not a dispatch status"
    if last is not UNSET and not isinstance(last, DispatchResult):
        return f"last_result {last!r} is not a dispatch result"

    if status is DispatchStatus.LEASED:
        if owner is UNSET or digest is UNSET or expires is UNSET:
            return "a leased dispatch must have lease_owner, lease_token_digest and lease_expires_at_ms"
        if type(owner) is not str or _match_id128(owner) is None:
            return identifier_problem("lease_owner", owner, OWNER_MAX_LENGTH)
        if type(digest) is not str or _match_digest(digest) is None:
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
    if updated < created:
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


class _Outcome(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, tag_field="status"):
    status: ClassVar[str]


class ClaimedOutcome(_Outcome, tag="claimed"):
    """The caller now holds the lease. The only place the raw token ever appears."""

    status: ClassVar[str] = "claimed"
    dispatch: DispatchRecord
    lease_token: str

    def __repr__(self) -> str:
        return f"ClaimedOutcome(dispatch={self.dispatch!r}, lease_token=<redacted>)"


class NotEligibleOutcome(_Outcome, tag="not_eligible"):
    """The Run or Attempt is not (or no longer) one whose cancellation may be dispatched."""

    status: ClassVar[str] = "not_eligible"


class NotDueOutcome(_Outcome, tag="not_due"):
    status: ClassVar[str] = "not_due"
    dispatch: DispatchRecord


class LeasedOutcome(_Outcome, tag="leased"):
    status: ClassVar[str] = "leased"
    dispatch: DispatchRecord


class DispatchedOutcome(_Outcome, tag="dispatched"):
    status: ClassVar[str] = "dispatched"
    dispatch: DispatchRecord


class BlockedOutcome(_Outcome, tag="blocked"):
    status: ClassVar[str] = "blocked"
    dispatch: DispatchRecord


ClaimOutcome = Union[
    ClaimedOutcome, NotEligibleOutcome, NotDueOutcome, LeasedOutcome, DispatchedOutcome, BlockedOutcome
]


class RecordResultOutcome(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False):
    dispatch: DispatchRecord
    event: RunEvent


# --------------------------------------------------------------------------- wire


_claim_decoder = msgspec.json.Decoder(ClaimCommand)
_record_result_decoder = msgspec.json.Decoder(RecordResultCommand)
_encoder = msgspec.json.Encoder()


def _decode(decoder: msgspec.json.Decoder, data: bytes) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidCommandError(f"a command must be JSON bytes, got {type(data).__name__}")
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise InvalidCommandError(str(exc)) from None
    except InvalidCommandError as exc:
        # A cross-field rule of __post_init__ (msgspec's own constraints already passed).
        if exc.path is None:
            raise
        error = InvalidCommandError(f"{exc.message} - at `{exc.path}`")
        error.path = exc.path
        raise error from None


def decode_claim_command(data: bytes) -> ClaimCommand:
    """Decode an exact-shape JSON claim command.

    Raises:
        InvalidCommandError: malformed JSON, unknown or missing fields, nulls, wrong types or
            out-of-range values; the message names the offending ``$.path`` where msgspec knows it.
    """
    return _decode(_claim_decoder, data)


def decode_record_result_command(data: bytes) -> RecordResultCommand:
    """Decode an exact-shape JSON record-result command (see :func:`decode_claim_command`)."""
    return _decode(_record_result_decoder, data)


def encode(obj: Any) -> bytes:
    """Encode a contract object as camelCase JSON; absent optional fields are omitted."""
    return _encoder.encode(obj)
