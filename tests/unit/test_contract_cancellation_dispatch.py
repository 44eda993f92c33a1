"""The canonical CancellationDispatch contract (spec §2): exact shape, limits, digest, outcomes, errors."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_runtime.contract import cancellation_dispatch as cd
from edge_runtime.contract.cancellation_dispatch import (
    BLOCKING_RESULTS,
    LEASE_TOKEN_DOMAIN,
    MAX_LEASE_DURATION_MS,
    MAX_RETRY_DELAY_MS,
    MAX_VERSION,
    RETRYABLE_RESULTS,
    BindingConflictError,
    BlockedOutcome,
    CancellationDispatchError,
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
    RepositoryError,
    classify_result,
    decode_claim_command,
    decode_record_result_command,
    digest_lease_token,
    dispatch_record_problem,
    encode,
)
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.run_events import RunEvent
from edge_runtime.contract.validation import MAX_SAFE_INTEGER, identifier_problem

UNSET = msgspec.UNSET

CLAIM_WIRE: dict[str, Any] = {
    "runId": "run-1",
    "attemptId": "att-1",
    "requestedAtMs": 1_700_000_000_000,
    "owner": "worker-a",
    "leaseToken": "token-a",
    "leaseDurationMs": 30_000,
}
CLAIM_PY: dict[str, Any] = {
    "run_id": "run-1",
    "attempt_id": "att-1",
    "requested_at_ms": 1_700_000_000_000,
    "owner": "worker-a",
    "lease_token": "token-a",
    "lease_duration_ms": 30_000,
}
RECORD_WIRE: dict[str, Any] = {
    "runId": "run-1",
    "attemptId": "att-1",
    "owner": "worker-a",
    "leaseToken": "token-a",
    "expectedVersion": 1,
    "result": "termination_requested",
    "eventId": "evt-1",
}
RECORD_PY: dict[str, Any] = {
    "run_id": "run-1",
    "attempt_id": "att-1",
    "owner": "worker-a",
    "lease_token": "token-a",
    "expected_version": 1,
    "result": "termination_requested",
    "event_id": "evt-1",
}

CONTROL_REGEX_TEXT = "Expected `str` matching regex '^[^\\\\x00-\\\\x1f\\\\x7f]+$'"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _wire(base: dict[str, Any], **changes: Any) -> bytes:
    data = dict(base)
    for key, value in changes.items():
        if value is _DROP:
            data.pop(key)
        else:
            data[key] = value
    return json.dumps(data).encode()


_DROP = object()


def _decode_error(decoder: Any, data: bytes) -> str:
    with pytest.raises(InvalidCommandError) as caught:
        decoder(data)
    assert caught.value.code == "INVALID_CANCELLATION_DISPATCH_COMMAND"
    assert caught.value.retryable is False
    return str(caught.value)


def _construct_error(cls: type, **kwargs: Any) -> str:
    with pytest.raises(InvalidCommandError) as caught:
        cls(**kwargs)
    assert caught.value.retryable is False
    return str(caught.value)


# --------------------------------------------------------------------------- valid shapes


def test_claim_command_round_trips_in_camel_case() -> None:
    cmd = decode_claim_command(_wire(CLAIM_WIRE))
    assert cmd == ClaimCommand(**CLAIM_PY)
    assert json.loads(encode(cmd)) == CLAIM_WIRE
    assert decode_claim_command(bytearray(encode(cmd))) == cmd
    assert decode_claim_command(memoryview(encode(cmd))) == cmd


def test_record_result_command_round_trips_and_omits_an_absent_retry_delay() -> None:
    cmd = decode_record_result_command(_wire(RECORD_WIRE))
    assert cmd == RecordResultCommand(**RECORD_PY)
    assert cmd.result is DispatchResult.TERMINATION_REQUESTED
    assert cmd.retry_delay_ms is UNSET
    assert encode(cmd) == (
        b'{"runId":"run-1","attemptId":"att-1","owner":"worker-a","leaseToken":"token-a",'
        b'"expectedVersion":1,"result":"termination_requested","eventId":"evt-1"}'
    )
    retry = RecordResultCommand(**{**RECORD_PY, "result": "dispatch_error", "retry_delay_ms": 5_000})
    assert json.loads(encode(retry)) == {**RECORD_WIRE, "result": "dispatch_error", "retryDelayMs": 5_000}
    assert decode_record_result_command(encode(retry)) == retry


def test_python_construction_accepts_the_plain_result_string_and_keeps_the_enum() -> None:
    cmd = RecordResultCommand(**{**RECORD_PY, "result": "pid_mismatch"})
    assert cmd.result is DispatchResult.PID_MISMATCH


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("runId", "r" * 36),
        ("attemptId", "\u00e9" * 36),  # characters, not bytes
        ("owner", "o" * 128),
        ("leaseToken", "t" * 128),
        ("leaseToken", "\x80\u2603 spaces and unicode are fine"),
        ("requestedAtMs", 0),
        ("requestedAtMs", MAX_SAFE_INTEGER),
        ("leaseDurationMs", 1),
        ("leaseDurationMs", MAX_LEASE_DURATION_MS),
    ],
)
def test_claim_limits_are_inclusive(field: str, value: Any) -> None:
    cmd = decode_claim_command(_wire(CLAIM_WIRE, **{field: value}))
    assert json.loads(encode(cmd))[field] == value


@pytest.mark.parametrize(
    ("field", "value"),
    [("eventId", "e" * 36), ("expectedVersion", 1), ("expectedVersion", MAX_VERSION)],
)
def test_record_result_limits_are_inclusive(field: str, value: Any) -> None:
    cmd = decode_record_result_command(_wire(RECORD_WIRE, **{field: value}))
    assert json.loads(encode(cmd))[field] == value


@pytest.mark.parametrize("delay", [1, MAX_RETRY_DELAY_MS])
def test_retry_delay_limits_are_inclusive(delay: int) -> None:
    cmd = decode_record_result_command(_wire(RECORD_WIRE, result="handle_missing", retryDelayMs=delay))
    assert cmd.retry_delay_ms == delay


# --------------------------------------------------------------------------- exact shape: decode

# (field, bad JSON value, the whole expected error text)
CLAIM_DECODE_ERRORS = [
    ("runId", None, "Expected `str`, got `null` - at `$.runId`"),
    ("runId", 7, "Expected `str`, got `int` - at `$.runId`"),
    ("runId", "", "Expected `str` of length >= 1 - at `$.runId`"),
    ("runId", "r" * 37, "Expected `str` of length <= 36 - at `$.runId`"),
    ("runId", "run\n1", f"{CONTROL_REGEX_TEXT} - at `$.runId`"),
    ("attemptId", "a" * 37, "Expected `str` of length <= 36 - at `$.attemptId`"),
    ("attemptId", "att\x00", f"{CONTROL_REGEX_TEXT} - at `$.attemptId`"),
    ("attemptId", ["att-1"], "Expected `str`, got `array` - at `$.attemptId`"),
    ("owner", "o" * 129, "Expected `str` of length <= 128 - at `$.owner`"),
    ("owner", "worker\x7f", f"{CONTROL_REGEX_TEXT} - at `$.owner`"),
    ("owner", "", "Expected `str` of length >= 1 - at `$.owner`"),
    ("leaseToken", "t" * 129, "Expected `str` of length <= 128 - at `$.leaseToken`"),
    ("leaseToken", "tok\x1fen", f"{CONTROL_REGEX_TEXT} - at `$.leaseToken`"),
    ("leaseToken", "tok\ten", f"{CONTROL_REGEX_TEXT} - at `$.leaseToken`"),
    ("leaseToken", None, "Expected `str`, got `null` - at `$.leaseToken`"),
    ("requestedAtMs", None, "Expected `int`, got `null` - at `$.requestedAtMs`"),
    ("requestedAtMs", 1.5, "Expected `int`, got `float` - at `$.requestedAtMs`"),
    ("requestedAtMs", 1.0, "Expected `int`, got `float` - at `$.requestedAtMs`"),
    ("requestedAtMs", True, "Expected `int`, got `bool` - at `$.requestedAtMs`"),
    ("requestedAtMs", -1, "Expected `int` >= 0 - at `$.requestedAtMs`"),
    ("requestedAtMs", MAX_SAFE_INTEGER + 1, "Expected `int` <= 9007199254740991 - at `$.requestedAtMs`"),
    ("requestedAtMs", "1700000000000", "Expected `int`, got `str` - at `$.requestedAtMs`"),
    ("leaseDurationMs", 0, "Expected `int` >= 1 - at `$.leaseDurationMs`"),
    ("leaseDurationMs", -5, "Expected `int` >= 1 - at `$.leaseDurationMs`"),
    ("leaseDurationMs", MAX_LEASE_DURATION_MS + 1, "Expected `int` <= 300000 - at `$.leaseDurationMs`"),
    ("leaseDurationMs", False, "Expected `int`, got `bool` - at `$.leaseDurationMs`"),
    ("leaseDurationMs", 1e3, "Expected `int`, got `float` - at `$.leaseDurationMs`"),
]


@pytest.mark.parametrize(("field", "value", "message"), CLAIM_DECODE_ERRORS)
def test_decode_claim_rejects_bad_values_naming_the_path(field: str, value: Any, message: str) -> None:
    assert _decode_error(decode_claim_command, _wire(CLAIM_WIRE, **{field: value})) == message


RECORD_DECODE_ERRORS = [
    ("eventId", "e" * 37, "Expected `str` of length <= 36 - at `$.eventId`"),
    ("eventId", "evt\r", f"{CONTROL_REGEX_TEXT} - at `$.eventId`"),
    ("eventId", None, "Expected `str`, got `null` - at `$.eventId`"),
    ("expectedVersion", 0, "Expected `int` >= 1 - at `$.expectedVersion`"),
    ("expectedVersion", -1, "Expected `int` >= 1 - at `$.expectedVersion`"),
    ("expectedVersion", MAX_VERSION + 1, "Expected `int` <= 2147483647 - at `$.expectedVersion`"),
    ("expectedVersion", True, "Expected `int`, got `bool` - at `$.expectedVersion`"),
    ("expectedVersion", 2.0, "Expected `int`, got `float` - at `$.expectedVersion`"),
    ("result", "exploded", "Invalid enum value 'exploded' - at `$.result`"),
    ("result", "TERMINATION_REQUESTED", "Invalid enum value 'TERMINATION_REQUESTED' - at `$.result`"),
    ("result", None, "Expected `str`, got `null` - at `$.result`"),
    ("result", 1, "Expected `str`, got `int` - at `$.result`"),
    ("runId", "r" * 37, "Expected `str` of length <= 36 - at `$.runId`"),
    ("owner", "o" * 129, "Expected `str` of length <= 128 - at `$.owner`"),
    ("leaseToken", "", "Expected `str` of length >= 1 - at `$.leaseToken`"),
    ("retryDelayMs", None, "Expected `int`, got `null` - at `$.retryDelayMs`"),
]


@pytest.mark.parametrize(("field", "value", "message"), RECORD_DECODE_ERRORS)
def test_decode_record_result_rejects_bad_values_naming_the_path(field: str, value: Any, message: str) -> None:
    assert _decode_error(decode_record_result_command, _wire(RECORD_WIRE, **{field: value})) == message


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"result": "dispatch_error"},
         "retry_delay_ms is required for the retryable result dispatch_error - at `$.retryDelayMs`"),
        ({"result": "controller_missing"},
         "retry_delay_ms is required for the retryable result controller_missing - at `$.retryDelayMs`"),
        ({"result": "termination_requested", "retryDelayMs": 1000},
         "retry_delay_ms is only allowed for retryable results, not termination_requested - at `$.retryDelayMs`"),
        ({"result": "pid_mismatch", "retryDelayMs": 1000},
         "retry_delay_ms is only allowed for retryable results, not pid_mismatch - at `$.retryDelayMs`"),
        ({"result": "handle_missing", "retryDelayMs": 0}, "Expected `int` >= 1 - at `$.retryDelayMs`"),
        ({"result": "handle_missing", "retryDelayMs": MAX_RETRY_DELAY_MS + 1},
         "Expected `int` <= 86400000 - at `$.retryDelayMs`"),
        ({"result": "handle_missing", "retryDelayMs": 1.5}, "Expected `int`, got `float` - at `$.retryDelayMs`"),
        ({"result": "handle_missing", "retryDelayMs": True}, "Expected `int`, got `bool` - at `$.retryDelayMs`"),
        ({"result": "handle_missing", "retryDelayMs": None}, "Expected `int`, got `null` - at `$.retryDelayMs`"),
        # A null does not stand in for "absent", even where the field must be absent.
        ({"result": "already_exited", "retryDelayMs": None}, "Expected `int`, got `null` - at `$.retryDelayMs`"),
    ],
)
def test_retry_delay_is_present_exactly_for_retryable_results(changes: dict[str, Any], message: str) -> None:
    assert _decode_error(decode_record_result_command, _wire(RECORD_WIRE, **changes)) == message


@pytest.mark.parametrize(
    ("decoder", "base"), [(decode_claim_command, CLAIM_WIRE), (decode_record_result_command, RECORD_WIRE)]
)
def test_unknown_and_missing_fields_and_non_objects_are_rejected(decoder: Any, base: dict[str, Any]) -> None:
    assert _decode_error(decoder, _wire(base, extra=1)) == "Object contains unknown field `extra`"
    assert _decode_error(decoder, _wire(base, extra=None)) == "Object contains unknown field `extra`"
    # snake_case is not the wire name
    assert _decode_error(decoder, _wire(base, run_id="run-1")) == "Object contains unknown field `run_id`"
    assert _decode_error(decoder, _wire(base, runId=_DROP)) == "Object missing required field `runId`"
    assert _decode_error(decoder, b"[]") == "Expected `object`, got `array`"
    assert _decode_error(decoder, b"null") == "Expected `object`, got `null`"
    assert _decode_error(decoder, b"{") == "Input data was truncated"
    assert _decode_error(decoder, b"") == "Input data was truncated"
    assert _decode_error(decoder, b"nope").startswith("JSON is malformed")
    assert _decode_error(decoder, _wire(base).decode()) == "a command must be JSON bytes, got str"  # type: ignore[arg-type]
    assert _decode_error(decoder, None) == "a command must be JSON bytes, got NoneType"  # type: ignore[arg-type]


def test_claim_has_no_optional_field_so_every_null_is_rejected() -> None:
    for field in CLAIM_WIRE:
        message = _decode_error(decode_claim_command, _wire(CLAIM_WIRE, **{field: None}))
        assert message.endswith(f", got `null` - at `$.{field}`")


# --------------------------------------------------------------------------- exact shape: Python


CLAIM_CONSTRUCT_ERRORS = [
    ("run_id", None, "run_id must be a string, got NoneType"),
    ("run_id", 7, "run_id must be a string, got int"),
    ("run_id", "", "run_id must not be empty"),
    ("run_id", "r" * 37, "run_id must be at most 36 characters, got 37"),
    ("run_id", "run\n1", "run_id must not contain control characters"),
    ("attempt_id", "a" * 37, "attempt_id must be at most 36 characters, got 37"),
    ("attempt_id", "a\x7f", "attempt_id must not contain control characters"),
    ("owner", "o" * 129, "owner must be at most 128 characters, got 129"),
    ("owner", b"worker", "owner must be a string, got bytes"),
    ("lease_token", "t" * 129, "lease_token must be at most 128 characters, got 129"),
    ("lease_token", "t\x00", "lease_token must not contain control characters"),
    ("lease_token", UNSET, "lease_token must be a string, got UnsetType"),
    ("requested_at_ms", None, "requested_at_ms must be an integer, got NoneType"),
    ("requested_at_ms", 1.0, "requested_at_ms must be an integer, got float"),
    ("requested_at_ms", True, "requested_at_ms must be an integer, got bool"),
    ("requested_at_ms", -1, "requested_at_ms must be between 0 and 9007199254740991, got -1"),
    ("requested_at_ms", 2**53, "requested_at_ms must be between 0 and 9007199254740991, got 9007199254740992"),
    ("requested_at_ms", "5", "requested_at_ms must be an integer, got str"),
    ("lease_duration_ms", 0, "lease_duration_ms must be between 1 and 300000, got 0"),
    ("lease_duration_ms", 300_001, "lease_duration_ms must be between 1 and 300000, got 300001"),
    ("lease_duration_ms", False, "lease_duration_ms must be an integer, got bool"),
    ("lease_duration_ms", 10.0, "lease_duration_ms must be an integer, got float"),
]


@pytest.mark.parametrize(("field", "value", "message"), CLAIM_CONSTRUCT_ERRORS)
def test_constructing_a_claim_in_python_is_held_to_the_same_rules(field: str, value: Any, message: str) -> None:
    assert _construct_error(ClaimCommand, **{**CLAIM_PY, field: value}) == message
    # ...and the same value on the wire is rejected too.
    if value is not UNSET and not isinstance(value, bytes):
        _decode_error(decode_claim_command, _wire(CLAIM_WIRE, **{_camel(field): value}))


RECORD_CONSTRUCT_ERRORS = [
    ({"event_id": "e" * 37}, "event_id must be at most 36 characters, got 37"),
    ({"event_id": ""}, "event_id must not be empty"),
    ({"expected_version": 0}, "expected_version must be between 1 and 2147483647, got 0"),
    ({"expected_version": MAX_VERSION + 1}, "expected_version must be between 1 and 2147483647, got 2147483648"),
    ({"expected_version": True}, "expected_version must be an integer, got bool"),
    ({"expected_version": 1.0}, "expected_version must be an integer, got float"),
    ({"result": "exploded"}, f"result must be one of {[r.value for r in DispatchResult]}"),
    ({"result": None}, f"result must be one of {[r.value for r in DispatchResult]}"),
    ({"result": "dispatch_error"}, "retry_delay_ms is required for the retryable result dispatch_error"),
    ({"result": "termination_requested", "retry_delay_ms": 5},
     "retry_delay_ms is only allowed for retryable results, not termination_requested"),
    ({"result": "invalid", "retry_delay_ms": 5}, "retry_delay_ms is only allowed for retryable results, not invalid"),
    ({"result": "already_exited", "retry_delay_ms": None},
     "retry_delay_ms is only allowed for retryable results, not already_exited"),
    ({"result": "dispatch_error", "retry_delay_ms": None}, "retry_delay_ms must be an integer, got NoneType"),
    ({"result": "dispatch_error", "retry_delay_ms": 0}, "retry_delay_ms must be between 1 and 86400000, got 0"),
    ({"result": "dispatch_error", "retry_delay_ms": -1}, "retry_delay_ms must be between 1 and 86400000, got -1"),
    ({"result": "dispatch_error", "retry_delay_ms": 86_400_001},
     "retry_delay_ms must be between 1 and 86400000, got 86400001"),
    ({"result": "dispatch_error", "retry_delay_ms": True}, "retry_delay_ms must be an integer, got bool"),
    ({"result": "dispatch_error", "retry_delay_ms": 2.5}, "retry_delay_ms must be an integer, got float"),
]


@pytest.mark.parametrize(("changes", "message"), RECORD_CONSTRUCT_ERRORS)
def test_constructing_a_record_result_in_python_is_held_to_the_same_rules(
    changes: dict[str, Any], message: str
) -> None:
    assert _construct_error(RecordResultCommand, **{**RECORD_PY, **changes}) == message


def test_replace_re_validates() -> None:
    cmd = ClaimCommand(**CLAIM_PY)
    with pytest.raises(InvalidCommandError, match="lease_duration_ms must be between 1 and 300000, got -5"):
        msgspec.structs.replace(cmd, lease_duration_ms=-5)
    with pytest.raises(AttributeError):
        cmd.lease_duration_ms = 5  # type: ignore[misc]


def test_reprs_never_show_the_raw_token() -> None:
    claim = ClaimCommand(**{**CLAIM_PY, "lease_token": "SECRET-TOKEN"})
    record = RecordResultCommand(**{**RECORD_PY, "lease_token": "SECRET-TOKEN"})
    record_dict = DispatchRecord(run_id="r", attempt_id="a", status=DispatchStatus.PENDING, version=0,
                                 dispatch_count=0, next_attempt_at_ms=1, created_at_ms=1, updated_at_ms=1)
    claimed = ClaimedOutcome(dispatch=record_dict, lease_token="SECRET-TOKEN")
    for obj in (claim, record, claimed):
        assert "SECRET-TOKEN" not in repr(obj)
        assert "lease_token=<redacted>" in repr(obj)


# --------------------------------------------------------------------------- digest


@pytest.mark.parametrize(
    ("token", "digest"),
    [
        ("token-a", "684906d3f34c7bcda8d1601960bb658bfbc414cfd446f254e77a66b0089f2f17"),
        ("\u00e9\u2603", "b8aaf3eb75ba023e75813f3a1f6228eaef307d874e23cddef094fc4f74692522"),
        ("x" * 128, "79dc0259e87ee35429e794fe62ef262f62ab510ad55172f2d2d8bec23c4a6213"),
        ("sha256:abc", "b464a4f82a3fd8481eb55fbfafe28482491de73de4b83a37a826f7781b5f3956"),
    ],
)
def test_digest_vectors(token: str, digest: str) -> None:
    assert LEASE_TOKEN_DOMAIN == b"qinglong.cancellation-dispatch-lease.v1\x00"
    assert digest_lease_token(token) == digest
    assert hashlib.sha256(LEASE_TOKEN_DOMAIN + token.encode("utf-8")).hexdigest() == digest
    # Domain-separated: never the bare SHA-256 of the token.
    assert hashlib.sha256(token.encode("utf-8")).hexdigest() != digest


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("", "lease_token must not be empty"),
        ("t" * 129, "lease_token must be at most 128 characters, got 129"),
        ("a\nb", "lease_token must not contain control characters"),
        (None, "lease_token must be a string, got NoneType"),
        (b"token", "lease_token must be a string, got bytes"),
    ],
)
def test_digest_rejects_an_invalid_token(token: Any, message: str) -> None:
    with pytest.raises(InvalidCommandError) as caught:
        digest_lease_token(token)
    assert str(caught.value) == message


# --------------------------------------------------------------------------- records, outcomes, classification


def _record(**changes: Any) -> DispatchRecord:
    fields: dict[str, Any] = {
        "run_id": "run-1",
        "attempt_id": "att-1",
        "status": DispatchStatus.LEASED,
        "version": 1,
        "dispatch_count": 1,
        "lease_owner": "worker-a",
        "lease_token_digest": digest_lease_token("token-a"),
        "lease_expires_at_ms": 40,
        "created_at_ms": 10,
        "updated_at_ms": 10,
    }
    fields.update(changes)
    return DispatchRecord(**fields)


def test_record_encoding_omits_absent_fields_and_never_holds_a_raw_token() -> None:
    record = _record()
    assert dispatch_record_problem(record) is None
    assert json.loads(encode(record)) == {
        "runId": "run-1",
        "attemptId": "att-1",
        "status": "leased",
        "version": 1,
        "dispatchCount": 1,
        "leaseOwner": "worker-a",
        "leaseTokenDigest": digest_lease_token("token-a"),
        "leaseExpiresAtMs": 40,
        "createdAtMs": 10,
        "updatedAtMs": 10,
    }
    assert msgspec.json.decode(encode(record), type=DispatchRecord) == record
    with pytest.raises(msgspec.ValidationError, match=r"Expected `int`, got `null` - at `\$.nextAttemptAtMs`"):
        msgspec.json.decode(encode(record)[:-1] + b',"nextAttemptAtMs":null}', type=DispatchRecord)
    with pytest.raises(msgspec.ValidationError, match="unknown field `leaseToken`"):
        msgspec.json.decode(encode(record)[:-1] + b',"leaseToken":"t"}', type=DispatchRecord)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"lease_token_digest": UNSET}, "a leased dispatch must have lease_owner, lease_token_digest and "
                                        "lease_expires_at_ms"),
        ({"lease_token_digest": "ABC"}, "lease_token_digest must be 64 lowercase hex characters"),
        ({"lease_token_digest": digest_lease_token("t").upper()},
         "lease_token_digest must be 64 lowercase hex characters"),
        ({"status": DispatchStatus.DISPATCHED, "last_result": DispatchResult.ALREADY_EXITED},
         "a dispatched dispatch must not carry lease fields"),
        ({"next_attempt_at_ms": 5}, "a leased dispatch must not have next_attempt_at_ms"),
        ({"version": 0}, "version must be >= dispatch_count"),
        ({"updated_at_ms": 9}, "updated_at_ms must be >= created_at_ms"),
        ({"last_result": DispatchResult.TERMINATION_REQUESTED},
         "a leased dispatch must have a retryable or blocking last_result"),
        ({"version": True}, "version must be an integer, got bool"),
        ({"created_at_ms": -1}, "created_at_ms must be between 0 and 9007199254740991, got -1"),
        ({"lease_expires_at_ms": 1.5}, "lease_expires_at_ms must be an integer, got float"),
        ({"run_id": "r\n"}, "run_id must not contain control characters"),
        ({"status": "leased"}, "status 'leased' is not a dispatch status"),
    ],
)
def test_dispatch_record_problem_names_the_broken_invariant(changes: dict[str, Any], problem: str) -> None:
    assert dispatch_record_problem(_record(**changes)) == problem


def test_claim_outcomes_carry_their_status_strings_and_tags() -> None:
    record = _record()
    outcomes = [
        (ClaimedOutcome(dispatch=record, lease_token="token-a"), "claimed"),
        (NotEligibleOutcome(), "not_eligible"),
        (NotDueOutcome(dispatch=record), "not_due"),
        (LeasedOutcome(dispatch=record), "leased"),
        (DispatchedOutcome(dispatch=record), "dispatched"),
        (BlockedOutcome(dispatch=record), "blocked"),
    ]
    for outcome, status in outcomes:
        assert outcome.status == status
        assert type(outcome).status == status
        wire = json.loads(encode(outcome))
        assert wire["status"] == status
        assert msgspec.json.decode(encode(outcome), type=ClaimOutcome) == outcome
    assert encode(NotEligibleOutcome()) == b'{"status":"not_eligible"}'
    assert json.loads(encode(outcomes[0][0]))["leaseToken"] == "token-a"
    assert set(json.loads(encode(outcomes[2][0]))) == {"status", "dispatch"}


def test_record_result_outcome_shape() -> None:
    event = RunEvent(id="evt-1", run_id="run-1", sequence=1, type="run.cancel_dispatched",
                     dedupe_key="cancel-dispatch:att-1:1", actor_type="worker", actor_id="worker-a",
                     attempt_id="att-1", payload={"attempt_id": "att-1", "dispatch_count": 1,
                                                  "result": "already_exited"}, created_at_ms=5)
    outcome = RecordResultOutcome(dispatch=_record(), event=event)
    wire = json.loads(encode(outcome))
    assert set(wire) == {"dispatch", "event"}
    assert wire["event"]["dedupeKey"] == "cancel-dispatch:att-1:1"
    assert wire["event"]["payload"] == {"attempt_id": "att-1", "dispatch_count": 1, "result": "already_exited"}


def test_result_classification() -> None:
    assert {r.value for r in RETRYABLE_RESULTS} == {"controller_missing", "handle_missing", "dispatch_error"}
    assert {r.value for r in BLOCKING_RESULTS} == {"identity_mismatch", "pid_mismatch", "unsupported", "invalid"}
    expected = {
        "termination_requested": ("dispatched", "run.cancel_dispatched"),
        "already_exited": ("dispatched", "run.cancel_dispatched"),
        "identity_mismatch": ("blocked", "run.cancel_dispatch_blocked"),
        "pid_mismatch": ("blocked", "run.cancel_dispatch_blocked"),
        "unsupported": ("blocked", "run.cancel_dispatch_blocked"),
        "invalid": ("blocked", "run.cancel_dispatch_blocked"),
        "controller_missing": ("retry_wait", "run.cancel_dispatch_failed"),
        "handle_missing": ("retry_wait", "run.cancel_dispatch_failed"),
        "dispatch_error": ("retry_wait", "run.cancel_dispatch_failed"),
    }
    assert {r.value: (classify_result(r)[0].value, classify_result(r)[1]) for r in DispatchResult} == expected
    assert [s.value for s in DispatchStatus] == ["pending", "leased", "retry_wait", "dispatched", "blocked"]


def test_limits() -> None:
    assert (MAX_LEASE_DURATION_MS, MAX_RETRY_DELAY_MS, MAX_VERSION) == (300_000, 86_400_000, 2_147_483_647)
    assert (cd.RUN_ID_MAX_LENGTH, cd.ATTEMPT_ID_MAX_LENGTH, cd.EVENT_ID_MAX_LENGTH) == (36, 36, 36)
    assert (cd.OWNER_MAX_LENGTH, cd.LEASE_TOKEN_MAX_LENGTH) == (128, 128)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (InvalidCommandError, "INVALID_CANCELLATION_DISPATCH_COMMAND"),
        (BindingConflictError, "CANCELLATION_DISPATCH_BINDING_CONFLICT"),
        (FenceRejectedError, "CANCELLATION_DISPATCH_FENCE_REJECTED"),
        (RepositoryError, "CANCELLATION_DISPATCH_REPOSITORY_FAILED"),
    ],
)
def test_error_codes_and_retryable_flags(cls: type[CancellationDispatchError], code: str) -> None:
    error = cls("what happened")
    assert isinstance(error, CancellationDispatchError) and isinstance(error, EdgeRuntimeError)
    assert error.code == code == cls.code
    assert error.retryable is False
    assert str(error) == "what happened"
    if cls is RepositoryError:
        busy = cls("database busy", retryable=True)
        assert busy.retryable is True
        assert RepositoryError("x").retryable is False  # the flag is per instance


def test_the_contract_imports_no_database_code() -> None:
    code = (
        "import sys, edge_runtime.contract.cancellation_dispatch\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('apsw', 'sqlite3', '_sqlite3')"
        " or m.startswith('edge_runtime.local') or m.startswith('edge_runtime.service'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- the checks derived from the declared limits

_IDENTIFIER_TEXT = st.one_of(
    st.text(max_size=140),
    st.text(alphabet=st.sampled_from("ab\x00\x1f\x7f\x80\u2603\n"), max_size=40),
    st.text(alphabet="x", min_size=30, max_size=130),
)


@settings(max_examples=200, deadline=None)
@given(run_id=_IDENTIFIER_TEXT, owner=_IDENTIFIER_TEXT, token=_IDENTIFIER_TEXT,
       requested=st.one_of(st.integers(-2, 2), st.integers(MAX_SAFE_INTEGER - 1, MAX_SAFE_INTEGER + 1)),
       duration=st.one_of(st.integers(-1, 2), st.integers(MAX_LEASE_DURATION_MS - 1, MAX_LEASE_DURATION_MS + 1)))
def test_claim_construction_accepts_exactly_the_valid_values(
    run_id: str, owner: str, token: str, requested: int, duration: int
) -> None:
    valid = (
        identifier_problem("run_id", run_id, 36) is None
        and identifier_problem("owner", owner, 128) is None
        and identifier_problem("lease_token", token, 128) is None
        and 0 <= requested <= MAX_SAFE_INTEGER
        and 1 <= duration <= MAX_LEASE_DURATION_MS
    )
    fields = {**CLAIM_PY, "run_id": run_id, "owner": owner, "lease_token": token, "requested_at_ms": requested,
              "lease_duration_ms": duration}
    try:
        ClaimCommand(**fields)
    except InvalidCommandError:
        assert not valid
    else:
        assert valid
    wire = {**CLAIM_WIRE, "runId": run_id, "owner": owner, "leaseToken": token, "requestedAtMs": requested,
            "leaseDurationMs": duration}
    try:
        decode_claim_command(json.dumps(wire).encode())
    except InvalidCommandError:
        assert not valid
    else:
        assert valid
