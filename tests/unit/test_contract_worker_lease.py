"""Worker Session / Run Lease contract (spec §5): exact shape, limits, digest, capabilities, errors."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from typing import Any, Callable

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_runtime.contract import run_lease as rl
from edge_runtime.contract import worker_session as ws
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.worker_lease import (
    MAX_CAPABILITIES_BYTES,
    MAX_CONCURRENT_RUNS,
    MAX_RUN_LEASE_DURATION_MS,
    MAX_SESSION_LEASE_DURATION_MS,
    RUN_LEASE_TOKEN_DOMAIN,
    InvalidWorkerLeaseCommandError,
    RunNotStartableError,
    StartBarrierPassedError,
    WorkerLeaseError,
    WorkerLeaseFenceRejectedError,
    WorkerLeaseRepositoryError,
    WorkerSessionRejectedError,
    canonical_capabilities,
    capabilities_hash,
    digest_run_lease_token,
)
from edge_runtime.contract.validation import MAX_VERSION, encode, identifier_problem, int_problem

UNSET = msgspec.UNSET
DIGEST = "ab" * 32

REGISTER: dict[str, Any] = {
    "workerId": "worker-a",
    "sessionId": "0190c1a2-0000-7000-8000-000000000001",
    "capabilities": {"executors": ["local_process"], "arch": "mipsel"},
    "maxConcurrentRuns": 2,
    "leaseDurationMs": 60_000,
}
HEARTBEAT: dict[str, Any] = {
    "workerId": "worker-a",
    "sessionId": "s-1",
    "generation": 1,
    "expectedVersion": 0,
    "availableSlots": 2,
    "leaseDurationMs": 60_000,
}
DRAIN: dict[str, Any] = {"workerId": "worker-a", "sessionId": "s-1", "generation": 1, "expectedVersion": 0}
CLAIM: dict[str, Any] = {
    "workerId": "worker-a",
    "sessionId": "s-1",
    "sessionGeneration": 1,
    "runId": "run-1",
    "attemptId": "att-1",
    "offerId": "offer-1",
    "leaseToken": "secret-token",
    "leaseDurationMs": 30_000,
    "eventId": "evt-1",
}
RENEW: dict[str, Any] = {
    "workerId": "worker-a",
    "sessionId": "s-1",
    "sessionGeneration": 1,
    "attemptId": "att-1",
    "leaseToken": "secret-token",
    "expectedVersion": 1,
    "leaseDurationMs": 30_000,
}
RELEASE: dict[str, Any] = {**{k: v for k, v in RENEW.items() if k != "leaseDurationMs"}, "reason": "declined", "eventId": "e"}
START: dict[str, Any] = {k: v for k, v in RELEASE.items() if k != "reason"}
COMPLETE: dict[str, Any] = {
    "workerId": "worker-a",
    "sessionGeneration": 1,
    "attemptId": "att-1",
    "leaseGeneration": 1,
    "expectedVersion": 3,
    "tokenDigest": DIGEST,
    "eventId": "evt-9",
}

DECODERS: list[tuple[Callable[[bytes], Any], dict[str, Any]]] = [
    (ws.decode_register_command, REGISTER),
    (ws.decode_heartbeat_command, HEARTBEAT),
    (ws.decode_drain_command, DRAIN),
    (ws.decode_offline_command, DRAIN),
    (rl.decode_claim_run_command, CLAIM),
    (rl.decode_renew_command, RENEW),
    (rl.decode_release_command, RELEASE),
    (rl.decode_begin_start_command, START),
    (rl.decode_complete_command, COMPLETE),
]
DECODER_IDS = [d.__name__ for d, _ in DECODERS]


def _bytes(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode()


# --------------------------------------------------------------------------- shape


@pytest.mark.parametrize(("decoder", "wire"), DECODERS, ids=DECODER_IDS)
def test_every_command_round_trips_exactly_in_camel_case(decoder: Callable[[bytes], Any], wire: dict[str, Any]) -> None:
    cmd = decoder(_bytes(wire))
    assert json.loads(encode(cmd)) == wire


@pytest.mark.parametrize(("decoder", "wire"), DECODERS, ids=DECODER_IDS)
def test_unknown_missing_and_null_fields_are_rejected(decoder: Callable[[bytes], Any], wire: dict[str, Any]) -> None:
    with pytest.raises(InvalidWorkerLeaseCommandError, match=r"unknown field `extra`"):
        decoder(_bytes({**wire, "extra": 1}))
    first = next(iter(wire))
    with pytest.raises(InvalidWorkerLeaseCommandError, match=rf"missing required field `{first}`"):
        decoder(_bytes({k: v for k, v in wire.items() if k != first}))
    # No field is optional, so an explicit null is always a type error naming its path.
    for name in wire:
        with pytest.raises(InvalidWorkerLeaseCommandError, match=rf"\$\.{name}`"):
            decoder(_bytes({**wire, name: None}))
    with pytest.raises(InvalidWorkerLeaseCommandError, match="must be JSON bytes"):
        decoder(json.dumps(wire))  # type: ignore[arg-type]
    with pytest.raises(InvalidWorkerLeaseCommandError, match="Expected `object`, got `array`"):
        decoder(b"[]")


@pytest.mark.parametrize(
    ("decoder", "wire", "field", "value", "message"),
    [
        (ws.decode_register_command, REGISTER, "maxConcurrentRuns", 0, r"Expected `int` >= 1 - at `\$.maxConcurrentRuns`"),
        (ws.decode_register_command, REGISTER, "maxConcurrentRuns", MAX_CONCURRENT_RUNS + 1,
         rf"Expected `int` <= {MAX_CONCURRENT_RUNS} - at `\$.maxConcurrentRuns`"),
        (ws.decode_register_command, REGISTER, "leaseDurationMs", MAX_SESSION_LEASE_DURATION_MS + 1,
         rf"<= {MAX_SESSION_LEASE_DURATION_MS} - at `\$.leaseDurationMs`"),
        (ws.decode_register_command, REGISTER, "workerId", "x" * 129, r"length <= 128 - at `\$.workerId`"),
        (ws.decode_register_command, REGISTER, "sessionId", "a\nb", r"at `\$.sessionId`"),
        (ws.decode_register_command, REGISTER, "capabilities", [], r"Expected `object`, got `array` - at `\$.capabilities`"),
        (ws.decode_heartbeat_command, HEARTBEAT, "generation", 0, r">= 1 - at `\$.generation`"),
        (ws.decode_heartbeat_command, HEARTBEAT, "expectedVersion", MAX_VERSION + 1, r"at `\$.expectedVersion`"),
        (ws.decode_heartbeat_command, HEARTBEAT, "availableSlots", -1, r">= 0 - at `\$.availableSlots`"),
        (ws.decode_heartbeat_command, HEARTBEAT, "availableSlots", True, r"Expected `int`, got `bool`"),
        (rl.decode_claim_run_command, CLAIM, "leaseDurationMs", 0, r">= 1 - at `\$.leaseDurationMs`"),
        (rl.decode_claim_run_command, CLAIM, "leaseDurationMs", MAX_RUN_LEASE_DURATION_MS + 1,
         rf"<= {MAX_RUN_LEASE_DURATION_MS} - at `\$.leaseDurationMs`"),
        (rl.decode_claim_run_command, CLAIM, "leaseToken", "", r"length >= 1 - at `\$.leaseToken`"),
        (rl.decode_claim_run_command, CLAIM, "offerId", "o" * 65, r"length <= 64 - at `\$.offerId`"),
        (rl.decode_claim_run_command, CLAIM, "runId", "r" * 37, r"length <= 36 - at `\$.runId`"),
        (rl.decode_renew_command, RENEW, "expectedVersion", 0, r">= 1 - at `\$.expectedVersion`"),
        (rl.decode_release_command, RELEASE, "reason", "crashed", r"Invalid enum value 'crashed' - at `\$.reason`"),
        (rl.decode_complete_command, COMPLETE, "leaseGeneration", 0, r">= 1 - at `\$.leaseGeneration`"),
    ],
)
def test_decoders_reject_bad_values_naming_the_path(
    decoder: Callable[[bytes], Any], wire: dict[str, Any], field: str, value: Any, message: str
) -> None:
    with pytest.raises(InvalidWorkerLeaseCommandError, match=message):
        decoder(_bytes({**wire, field: value}))


def test_limits_are_inclusive() -> None:
    cmd = ws.decode_register_command(
        _bytes({**REGISTER, "maxConcurrentRuns": MAX_CONCURRENT_RUNS, "leaseDurationMs": MAX_SESSION_LEASE_DURATION_MS})
    )
    assert (cmd.max_concurrent_runs, cmd.lease_duration_ms) == (MAX_CONCURRENT_RUNS, MAX_SESSION_LEASE_DURATION_MS)
    claim = rl.decode_claim_run_command(_bytes({**CLAIM, "leaseDurationMs": MAX_RUN_LEASE_DURATION_MS}))
    assert claim.lease_duration_ms == MAX_RUN_LEASE_DURATION_MS
    assert ws.decode_heartbeat_command(_bytes({**HEARTBEAT, "availableSlots": 0})).available_slots == 0


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ws.RegisterWorkerCommand(worker_id="", session_id="s", capabilities={}, max_concurrent_runs=1,
                                          lease_duration_ms=1), "worker_id must not be empty"),
        (lambda: ws.RegisterWorkerCommand(worker_id="w", session_id="s", capabilities={}, max_concurrent_runs=65,
                                          lease_duration_ms=1), "max_concurrent_runs must be between 1 and 64, got 65"),
        (lambda: ws.HeartbeatCommand(worker_id="w", session_id="s", generation=1, expected_version=True,
                                     available_slots=1, lease_duration_ms=1), "expected_version must be an integer, got bool"),
        (lambda: rl.ClaimRunCommand(worker_id="w", session_id="s", session_generation=1, run_id="r", attempt_id="a",
                                    offer_id="o", lease_token="t\x7f", lease_duration_ms=1, event_id="e"),
         "lease_token must not contain control characters"),
        (lambda: rl.RenewRunLeaseCommand(worker_id="w", session_id="s", session_generation=1, attempt_id="a",
                                         lease_token="t", expected_version=1, lease_duration_ms=300_001),
         "lease_duration_ms must be between 1 and 300000, got 300001"),
        (lambda: rl.ReleaseRunLeaseCommand(worker_id="w", session_id="s", session_generation=1, attempt_id="a",
                                           lease_token="t", expected_version=1, reason="crashed", event_id="e"),
         r"reason must be one of \['declined', 'draining', 'shutdown'\]"),
        (lambda: rl.CompleteRunLeaseCommand(worker_id="w", session_generation=1, attempt_id="a", lease_generation=1,
                                            expected_version=1, token_digest="AB" * 32, event_id="e"),
         "token_digest must be 64 lowercase hex characters"),
    ],
)
def test_python_construction_is_held_to_the_same_rules(build: Callable[[], Any], message: str) -> None:
    with pytest.raises(InvalidWorkerLeaseCommandError, match=f"^{message}$"):
        build()


def test_release_reason_string_becomes_the_enum_member() -> None:
    cmd = rl.ReleaseRunLeaseCommand(worker_id="w", session_id="s", session_generation=1, attempt_id="a",
                                    lease_token="t", expected_version=1, reason="shutdown", event_id="e")
    assert cmd.reason is rl.ReleaseReason.SHUTDOWN


# --------------------------------------------------------------------------- capabilities


def test_capabilities_are_canonical_sorted_compact_json_with_sha256() -> None:
    a = {"z": 1, "a": {"y": [True, "x"], "b": -3}}
    b = {"a": {"b": -3, "y": [True, "x"]}, "z": 1}
    assert canonical_capabilities(a) == canonical_capabilities(b) == b'{"a":{"b":-3,"y":[true,"x"]},"z":1}'
    assert capabilities_hash(a) == hashlib.sha256(b'{"a":{"b":-3,"y":[true,"x"]},"z":1}').hexdigest()
    assert capabilities_hash({"a": 1}) != capabilities_hash({"a": "1"})


@pytest.mark.parametrize(
    ("capabilities", "message"),
    [
        ({"a": 1.5}, "capabilities.a must be a string, integer, boolean, list or object, got float"),
        ({"a": None}, "capabilities.a must be a string, integer, boolean, list or object, got NoneType"),
        ({"": 1}, "capabilities key must not be empty"),
        ({"a": {"b": {"c": {"d": {"e": 1}}}}}, "capabilities.a.b.c.d nests deeper than 4 levels"),
        ({"a": [[[[1]]]]}, r"capabilities.a\[0\]\[0\]\[0\] nests deeper than 4 levels"),
        ({"a": "x" * 257}, "capabilities.a must be at most 256 characters"),
        ({"a": 2**53}, "capabilities.a must be a safe integer"),
        ({f"k{i}": "v" * 200 for i in range(25)}, f"capabilities must be at most {MAX_CAPABILITIES_BYTES} bytes"),
    ],
)
def test_bad_capabilities_are_rejected(capabilities: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidWorkerLeaseCommandError, match=f"^{message}"):
        capabilities_hash(capabilities)
    with pytest.raises(InvalidWorkerLeaseCommandError, match=f"^{message}"):
        ws.decode_register_command(_bytes({**REGISTER, "capabilities": capabilities}))


# --------------------------------------------------------------------------- digest


def test_token_digest_uses_its_own_domain() -> None:
    assert RUN_LEASE_TOKEN_DOMAIN == b"qinglong.run-lease.v1\x00"
    expected = hashlib.sha256(b"qinglong.run-lease.v1\x00" + "tok\u00e9n".encode()).hexdigest()
    assert digest_run_lease_token("tok\u00e9n") == expected
    # Never equal to the CancellationDispatch digest of the same token (different domain).
    from edge_runtime.contract.cancellation_dispatch import digest_lease_token

    assert digest_run_lease_token("tok") != digest_lease_token("tok")
    with pytest.raises(InvalidWorkerLeaseCommandError, match="^lease_token must not be empty$"):
        digest_run_lease_token("")


def test_reprs_and_encoded_records_never_show_the_raw_token() -> None:
    claim = rl.decode_claim_run_command(_bytes(CLAIM))
    for cmd in (claim, rl.decode_renew_command(_bytes(RENEW)), rl.decode_release_command(_bytes(RELEASE)),
                rl.decode_begin_start_command(_bytes(START))):
        assert "secret-token" not in repr(cmd)
        assert "<redacted>" in repr(cmd)
    outcome = rl.ClaimedRunOutcome(lease=_lease(), lease_token="secret-token", replayed=False)
    assert "secret-token" not in repr(outcome)
    assert "secret-token" not in encode(outcome.lease).decode()


# --------------------------------------------------------------------------- records and outcomes


def _session(**changes: Any) -> ws.WorkerSessionRecord:
    caps = {"a": 1}
    fields: dict[str, Any] = dict(
        worker_id="w", session_id="s", generation=1, status=ws.SessionStatus.ONLINE, version=0, capabilities=caps,
        capabilities_hash=capabilities_hash(caps), max_concurrent_runs=2, available_slots=2, heartbeat_at_ms=10,
        lease_expires_at_ms=20, created_at_ms=10, updated_at_ms=10,
    )
    fields.update(changes)
    return ws.WorkerSessionRecord(**fields)


def _lease(**changes: Any) -> rl.RunLeaseRecord:
    fields: dict[str, Any] = dict(
        attempt_id="a", run_id="r", worker_id="w", session_id="s", session_generation=1, lease_generation=1,
        version=1, token_digest=DIGEST, offer_id="o", status=rl.LeaseStatus.LEASED, expires_at_ms=20,
        acquired_at_ms=10, updated_at_ms=10,
    )
    fields.update(changes)
    return rl.RunLeaseRecord(**fields)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({}, None),
        ({"status": ws.SessionStatus.DRAINING}, "a draining session must report zero available_slots"),
        ({"status": ws.SessionStatus.OFFLINE, "available_slots": 0}, None),
        ({"available_slots": 3}, "available_slots must be <= max_concurrent_runs"),
        ({"generation": 3, "version": 1}, "version must be >= generation - 1"),
        ({"lease_expires_at_ms": 9}, "lease_expires_at_ms must be >= heartbeat_at_ms"),
        ({"capabilities_hash": DIGEST}, "capabilities_hash does not match the canonical capabilities"),
    ],
)
def test_session_record_invariants(changes: dict[str, Any], problem: str | None) -> None:
    assert ws.session_record_problem(_session(**changes)) == problem


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({}, None),
        ({"status": rl.LeaseStatus.RELEASED, "released_at_ms": 11, "release_reason": rl.ReleaseReason.DECLINED}, None),
        ({"status": rl.LeaseStatus.RELEASED, "released_at_ms": 11},
         "a released grant must have released_at_ms and release_reason and no completed_at_ms"),
        ({"status": rl.LeaseStatus.RELEASED, "released_at_ms": 11, "release_reason": rl.ReleaseReason.DECLINED,
          "started_at_ms": 10}, "a released grant must never have been started"),
        ({"status": rl.LeaseStatus.COMPLETED, "completed_at_ms": 12, "started_at_ms": 11}, None),
        ({"status": rl.LeaseStatus.COMPLETED}, "a completed grant must have completed_at_ms and no release metadata"),
        ({"completed_at_ms": 12}, "a leased grant must not carry release or completion metadata"),
        ({"lease_generation": 2}, "version must be >= lease_generation"),
        ({"expires_at_ms": 10}, "expires_at_ms must be after acquired_at_ms"),
        ({"renewed_at_ms": 9}, "renewed_at_ms must be between 10 and 9007199254740991, got 9"),
        ({"token_digest": "x"}, "token_digest must be 64 lowercase hex characters"),
    ],
)
def test_lease_record_invariants(changes: dict[str, Any], problem: str | None) -> None:
    assert rl.lease_record_problem(_lease(**changes)) == problem


def test_outcomes_are_tagged_on_status_and_absent_fields_are_omitted() -> None:
    lease = _lease()
    assert rl.ClaimedRunOutcome.status == "claimed"
    wire = json.loads(encode(rl.ClaimedRunOutcome(lease=lease, lease_token="t", replayed=True)))
    assert wire["status"] == "claimed" and wire["replayed"] is True and "event" not in wire
    assert "renewedAtMs" not in wire["lease"] and wire["lease"]["tokenDigest"] == DIGEST
    assert json.loads(encode(rl.LeasedRunOutcome(lease=lease)))["status"] == "leased"
    assert json.loads(encode(rl.NotClaimableOutcome(reason=rl.NotClaimableReason.CANCEL_REQUESTED))) == {
        "status": "not_claimable", "reason": "cancel_requested"}
    assert json.loads(encode(rl.NoCapacityOutcome(active_leases=2, max_concurrent_runs=2, available_slots=5))) == {
        "status": "no_capacity", "activeLeases": 2, "maxConcurrentRuns": 2, "availableSlots": 5}
    registered = ws.RegisteredOutcome(session=_session(), replaced_session=True)
    assert json.loads(encode(registered))["replacedSession"] is True
    assert ws.ReplayedOutcome(session=_session()).replaced_session is False
    assert ws.ReplayedOutcome.status == "replayed"


def test_every_outcome_status_is_its_tag_on_the_class_and_on_an_instance() -> None:
    from edge_runtime.contract import cancellation_dispatch as cd
    from edge_runtime.contract.validation import Outcome

    outcomes = [kind for module in (cd, rl, ws) for kind in vars(module).values()
                if isinstance(kind, type) and issubclass(kind, Outcome) and kind is not Outcome]
    assert len(outcomes) == 12
    for kind in outcomes:
        assert type(kind.status) is str and kind.status == kind.__struct_config__.tag
    assert ws.ReplayedOutcome(session=_session()).status == "replayed"


def test_liveness_helpers_speak_of_authority_only() -> None:
    assert _session().is_live(19) and not _session().is_live(20)
    assert _lease().is_live(19) and not _lease().is_live(20)
    assert _lease().is_active()  # an expired grant still counts against capacity


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (WorkerLeaseError, "WORKER_LEASE_ERROR"),
        (InvalidWorkerLeaseCommandError, "INVALID_WORKER_LEASE_COMMAND"),
        (WorkerSessionRejectedError, "WORKER_SESSION_REJECTED"),
        (WorkerLeaseFenceRejectedError, "WORKER_LEASE_FENCE_REJECTED"),
        (StartBarrierPassedError, "WORKER_LEASE_START_BARRIER_PASSED"),
        (RunNotStartableError, "WORKER_LEASE_RUN_NOT_STARTABLE"),
        (WorkerLeaseRepositoryError, "WORKER_LEASE_REPOSITORY_FAILED"),
    ],
)
def test_errors_have_stable_codes_in_one_hierarchy(cls: type[WorkerLeaseError], code: str) -> None:
    error = cls("boom")
    assert isinstance(error, EdgeRuntimeError) and isinstance(error, WorkerLeaseError)
    assert (error.code, error.retryable, str(error)) == (code, False, "boom")


def test_only_a_busy_repository_error_is_retryable() -> None:
    assert WorkerLeaseRepositoryError("busy", retryable=True).retryable
    assert issubclass(StartBarrierPassedError, WorkerLeaseFenceRejectedError)


def test_contract_modules_import_no_database_code() -> None:
    code = (
        "import sys\n"
        "import edge_runtime.contract.worker_lease, edge_runtime.contract.worker_session, "
        "edge_runtime.contract.run_lease\n"
        "bad = [m for m in sys.modules if m == 'apsw' or m == 'sqlite3' or m.startswith('edge_runtime.local')]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- the checks derived from the declared limits


@given(
    worker_id=st.text(max_size=130), session_id=st.text(max_size=66), generation=st.integers(-1, 3),
    attempt_id=st.text(max_size=38), token=st.text(max_size=130), version=st.integers(-1, 3),
    duration=st.integers(-1, MAX_RUN_LEASE_DURATION_MS + 1), event_id=st.text(max_size=38),
)
def test_lease_commands_built_in_python_accept_exactly_the_valid_values(
    worker_id: str, session_id: str, generation: int, attempt_id: str, token: str, version: int, duration: int,
    event_id: str,
) -> None:
    fence = dict(worker_id=worker_id, session_id=session_id, session_generation=generation, attempt_id=attempt_id,
                 lease_token=token, expected_version=version)
    valid = all(
        problem is None
        for problem in (
            identifier_problem("w", worker_id, 128), identifier_problem("s", session_id, 64),
            int_problem("g", generation, 1, MAX_VERSION), identifier_problem("a", attempt_id, 36),
            identifier_problem("t", token, 128), int_problem("v", version, 1, MAX_VERSION),
        )
    )
    for build, extra_ok in (
        (lambda: rl.RenewRunLeaseCommand(**fence, lease_duration_ms=duration),
         int_problem("d", duration, 1, MAX_RUN_LEASE_DURATION_MS) is None),
        (lambda: rl.ReleaseRunLeaseCommand(**fence, reason="declined", event_id=event_id),
         identifier_problem("e", event_id, 36) is None),
    ):
        if valid and extra_ok:
            build()
        else:
            with pytest.raises(InvalidWorkerLeaseCommandError):
                build()
