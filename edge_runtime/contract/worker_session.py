"""Worker Session contract (spec §5): register, heartbeat, drain, offline, and the session record.

A worker registers a session (``session_id``, e.g. a UUIDv7, fresh per process start). The first
registration of a worker is generation 1 / version 0; the same session with identical
capabilities and capacity and a live session lease replays idempotently; a new session id
replaces the old one (generation + 1, version + 1), which invalidates every fence of the old one.
Heartbeat, drain and offline are fenced by worker id, session id, generation and expected version.
Draining and offline sessions report zero available slots.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar, Union

import msgspec

from edge_runtime.contract.validation import MAX_SAFE_INTEGER, SafeInt, first_problem, identifier_problem, int_problem
from edge_runtime.contract.worker_lease import (
    MAX_CONCURRENT_RUNS,
    MAX_SESSION_LEASE_DURATION_MS,
    MAX_VERSION,
    SESSION_ID_MAX_LENGTH,
    WORKER_ID_MAX_LENGTH,
    Capacity,
    Generation,
    SessionId,
    SessionLeaseDurationMs,
    Slots,
    Version,
    WorkerId,
    capabilities_hash,
    capabilities_problem,
    decode_with,
    digest_problem,
    identifier_ok,
    int_ok,
    is_token_digest,
    reject,
)


class SessionStatus(enum.StrEnum):
    ONLINE = "online"
    DRAINING = "draining"
    OFFLINE = "offline"


def _fence_problem(cmd: Any) -> str | None:
    return first_problem(
        identifier_problem("worker_id", cmd.worker_id, WORKER_ID_MAX_LENGTH),
        identifier_problem("session_id", cmd.session_id, SESSION_ID_MAX_LENGTH),
        int_problem("generation", cmd.generation, 1, MAX_VERSION),
        int_problem("expected_version", cmd.expected_version, 0, MAX_VERSION),
    )


# --------------------------------------------------------------------------- commands


class RegisterWorkerCommand(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False):
    """Register (or replay the registration of) one worker session.

    A new session starts with ``available_slots = max_concurrent_runs``; a worker that already
    runs something (an adopted Attempt after a restart) reports less with its first heartbeat.
    The caller never supplies the current time or an expiry, only the lease duration.
    """

    worker_id: WorkerId
    session_id: SessionId
    capabilities: dict[str, Any]
    max_concurrent_runs: Capacity
    lease_duration_ms: SessionLeaseDurationMs

    def __post_init__(self) -> None:
        reject(
            first_problem(
                identifier_problem("worker_id", self.worker_id, WORKER_ID_MAX_LENGTH),
                identifier_problem("session_id", self.session_id, SESSION_ID_MAX_LENGTH),
                capabilities_problem(self.capabilities),
                int_problem("max_concurrent_runs", self.max_concurrent_runs, 1, MAX_CONCURRENT_RUNS),
                int_problem("lease_duration_ms", self.lease_duration_ms, 1, MAX_SESSION_LEASE_DURATION_MS),
            )
        )

    @property
    def capabilities_hash(self) -> str:
        return capabilities_hash(self.capabilities)


class HeartbeatCommand(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False):
    """Extend the session lease and report the free slots. A draining session's slots stay 0."""

    worker_id: WorkerId
    session_id: SessionId
    generation: Generation
    expected_version: Version
    available_slots: Slots
    lease_duration_ms: SessionLeaseDurationMs

    def __post_init__(self) -> None:
        reject(
            first_problem(
                _fence_problem(self),
                int_problem("available_slots", self.available_slots, 0, MAX_CONCURRENT_RUNS),
                int_problem("lease_duration_ms", self.lease_duration_ms, 1, MAX_SESSION_LEASE_DURATION_MS),
            )
        )


class DrainCommand(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False):
    """Stop taking new Runs; leases already held may still be renewed, started and completed."""

    worker_id: WorkerId
    session_id: SessionId
    generation: Generation
    expected_version: Version

    def __post_init__(self) -> None:
        reject(_fence_problem(self))


class OfflineCommand(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False):
    """End the session's authority now. Says nothing about whether its processes stopped."""

    worker_id: WorkerId
    session_id: SessionId
    generation: Generation
    expected_version: Version

    def __post_init__(self) -> None:
        reject(_fence_problem(self))


# --------------------------------------------------------------------------- record


class WorkerSessionRecord(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, kw_only=True):
    """The durable state of a worker's current session.

    ``lease_expires_at_ms <= now`` means the session's authority lapsed; it never means that the
    worker's processes stopped.
    """

    worker_id: WorkerId
    session_id: SessionId
    generation: Generation
    status: SessionStatus
    version: Version
    capabilities: dict[str, Any]
    capabilities_hash: str
    max_concurrent_runs: Capacity
    available_slots: Slots
    heartbeat_at_ms: SafeInt
    lease_expires_at_ms: SafeInt
    created_at_ms: SafeInt
    updated_at_ms: SafeInt

    def is_live(self, now_ms: int) -> bool:
        """Whether the session lease is still running at ``now_ms`` (strictly before expiry)."""
        return self.lease_expires_at_ms > now_ms


def session_record_problem(record: WorkerSessionRecord, *, check_capabilities: bool = True) -> str | None:
    """The first contract invariant ``record`` breaks, or None.

    ``check_capabilities=False`` skips the capabilities and their hash, for a caller that has
    just checked that very canonical text (the Local adapter caches that check per text: it
    costs more than every other invariant together and the text rarely changes).
    """
    fast = (
        identifier_ok(record.worker_id, WORKER_ID_MAX_LENGTH)
        and identifier_ok(record.session_id, SESSION_ID_MAX_LENGTH)
        and int_ok(record.generation, 1, MAX_VERSION)
        and int_ok(record.version, 0, MAX_VERSION)
        and int_ok(record.max_concurrent_runs, 1, MAX_CONCURRENT_RUNS)
        and int_ok(record.available_slots, 0, MAX_CONCURRENT_RUNS)
        and int_ok(record.heartbeat_at_ms, 0, MAX_SAFE_INTEGER)
        and int_ok(record.lease_expires_at_ms, 0, MAX_SAFE_INTEGER)
        and int_ok(record.created_at_ms, 0, MAX_SAFE_INTEGER)
        and int_ok(record.updated_at_ms, 0, MAX_SAFE_INTEGER)
        and is_token_digest(record.capabilities_hash)
    )
    problem = None if fast else first_problem(
        identifier_problem("worker_id", record.worker_id, WORKER_ID_MAX_LENGTH),
        identifier_problem("session_id", record.session_id, SESSION_ID_MAX_LENGTH),
        int_problem("generation", record.generation, 1, MAX_VERSION),
        int_problem("version", record.version, 0, MAX_VERSION),
        int_problem("max_concurrent_runs", record.max_concurrent_runs, 1, MAX_CONCURRENT_RUNS),
        int_problem("available_slots", record.available_slots, 0, MAX_CONCURRENT_RUNS),
        int_problem("heartbeat_at_ms", record.heartbeat_at_ms, 0, MAX_SAFE_INTEGER),
        int_problem("lease_expires_at_ms", record.lease_expires_at_ms, 0, MAX_SAFE_INTEGER),
        int_problem("created_at_ms", record.created_at_ms, 0, MAX_SAFE_INTEGER),
        int_problem("updated_at_ms", record.updated_at_ms, 0, MAX_SAFE_INTEGER),
        digest_problem("capabilities_hash", record.capabilities_hash),
    )
    if problem is not None:
        return problem
    if not isinstance(record.status, SessionStatus):
        return f"status {record.status!r} is not a session status"
    if record.version < record.generation - 1:
        return "version must be >= generation - 1"
    if record.available_slots > record.max_concurrent_runs:
        return "available_slots must be <= max_concurrent_runs"
    if record.status is not SessionStatus.ONLINE and record.available_slots != 0:
        return f"a {record.status.value} session must report zero available_slots"
    if record.lease_expires_at_ms < record.heartbeat_at_ms:
        return "lease_expires_at_ms must be >= heartbeat_at_ms"
    if record.updated_at_ms < record.created_at_ms:
        return "updated_at_ms must be >= created_at_ms"
    if check_capabilities:
        problem = capabilities_problem(record.capabilities)
        if problem is not None:
            return problem
        if capabilities_hash(record.capabilities) != record.capabilities_hash:
            return "capabilities_hash does not match the canonical capabilities"
    return None


# --------------------------------------------------------------------------- outcomes


class _Outcome(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, tag_field="status"):
    status: ClassVar[str]


class RegisteredOutcome(_Outcome, tag="registered"):
    """A new session now holds the worker: the first one, or a replacement of an older one.

    ``replaced_session`` is true when an older session existed; its fences are now invalid.
    """

    status: ClassVar[str] = "registered"
    session: WorkerSessionRecord
    replaced_session: bool


class ReplayedOutcome(_Outcome, tag="replayed"):
    """An identical registration of the live current session: nothing changed."""

    status: ClassVar[str] = "replayed"
    session: WorkerSessionRecord

    @property
    def replaced_session(self) -> bool:
        return False


RegisterOutcome = Union[RegisteredOutcome, ReplayedOutcome]


# --------------------------------------------------------------------------- wire

_register_decoder = msgspec.json.Decoder(RegisterWorkerCommand)
_heartbeat_decoder = msgspec.json.Decoder(HeartbeatCommand)
_drain_decoder = msgspec.json.Decoder(DrainCommand)
_offline_decoder = msgspec.json.Decoder(OfflineCommand)


def decode_register_command(data: bytes) -> RegisterWorkerCommand:
    """Decode an exact-shape JSON registration.

    Raises:
        InvalidWorkerLeaseCommandError: malformed JSON, unknown, missing or null fields, wrong
            types or out-of-range values (the message names the ``$.path``).
    """
    return decode_with(_register_decoder, data)


def decode_heartbeat_command(data: bytes) -> HeartbeatCommand:
    """Decode an exact-shape JSON heartbeat (see :func:`decode_register_command`)."""
    return decode_with(_heartbeat_decoder, data)


def decode_drain_command(data: bytes) -> DrainCommand:
    """Decode an exact-shape JSON drain (see :func:`decode_register_command`)."""
    return decode_with(_drain_decoder, data)


def decode_offline_command(data: bytes) -> OfflineCommand:
    """Decode an exact-shape JSON offline (see :func:`decode_register_command`)."""
    return decode_with(_offline_decoder, data)
