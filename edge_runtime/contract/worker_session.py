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
from typing import Any, Union

import msgspec

from edge_runtime.contract.validation import Outcome, PositiveCounter, SafeInt, Version, command_decoder, fields_problem
from edge_runtime.contract.worker_lease import (
    Capacity,
    SessionId,
    SessionLeaseDurationMs,
    Slots,
    WorkerId,
    capabilities_hash,
    capabilities_problem,
    InvalidWorkerLeaseCommandError,
    digest_problem,
    LeaseCommand,
)


class SessionStatus(enum.StrEnum):
    ONLINE = "online"
    DRAINING = "draining"
    OFFLINE = "offline"


# --------------------------------------------------------------------------- commands


class RegisterWorkerCommand(LeaseCommand):
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

    @property
    def capabilities_hash(self) -> str:
        return capabilities_hash(self.capabilities)

    def rule_problem(self) -> str | None:
        return capabilities_problem(self.capabilities)


class HeartbeatCommand(LeaseCommand):
    """Extend the session lease and report the free slots. A draining session's slots stay 0."""

    worker_id: WorkerId
    session_id: SessionId
    generation: PositiveCounter
    expected_version: Version
    available_slots: Slots
    lease_duration_ms: SessionLeaseDurationMs


class DrainCommand(LeaseCommand):
    """Stop taking new Runs; leases already held may still be renewed, started and completed."""

    worker_id: WorkerId
    session_id: SessionId
    generation: PositiveCounter
    expected_version: Version


class OfflineCommand(LeaseCommand):
    """End the session's authority now. Says nothing about whether its processes stopped."""

    worker_id: WorkerId
    session_id: SessionId
    generation: PositiveCounter
    expected_version: Version


# --------------------------------------------------------------------------- record


class WorkerSessionRecord(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, kw_only=True):
    """The durable state of a worker's current session.

    ``lease_expires_at_ms <= now`` means the session's authority lapsed; it never means that the
    worker's processes stopped.
    """

    worker_id: WorkerId
    session_id: SessionId
    generation: PositiveCounter
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
    problem = fields_problem(record, enums=False) or digest_problem("capabilities_hash", record.capabilities_hash)
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


class RegisteredOutcome(Outcome, tag="registered"):
    """A new session now holds the worker: the first one, or a replacement of an older one.

    ``replaced_session`` is true when an older session existed; its fences are now invalid.
    """

    session: WorkerSessionRecord
    replaced_session: bool


class ReplayedOutcome(Outcome, tag="replayed"):
    """An identical registration of the live current session: nothing changed."""

    session: WorkerSessionRecord

    @property
    def replaced_session(self) -> bool:
        return False


RegisterOutcome = Union[RegisteredOutcome, ReplayedOutcome]


# --------------------------------------------------------------------------- wire

decode_register_command = command_decoder(RegisterWorkerCommand, InvalidWorkerLeaseCommandError)
decode_heartbeat_command = command_decoder(HeartbeatCommand, InvalidWorkerLeaseCommandError)
decode_drain_command = command_decoder(DrainCommand, InvalidWorkerLeaseCommandError)
decode_offline_command = command_decoder(OfflineCommand, InvalidWorkerLeaseCommandError)
