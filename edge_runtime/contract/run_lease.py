"""Run Lease contract (spec §5): claim, renew, release, the start barrier, completion.

A Run Lease is a fenced grant for one session to execute one Attempt. Its fence is the worker
id, session id and session generation, the lease version (bumped by every change, never reset)
and the digest of an in-memory bearer token. ``lease_generation`` counts grants of the Attempt:
a takeover of an expired, never-started grant or a re-claim after release starts a new one.

Lifecycle: ``claim_run`` -> ``leased`` (Attempt ``claimed``); ``renew`` extends it;
``release`` -> ``released`` only while the Attempt is still ``claimed``; ``begin_start`` is the
start barrier (Attempt ``claimed`` -> ``starting``), after which the grant can no longer be
released or taken over; ``complete`` -> ``completed`` when the Attempt has ended.

An expired lease is ``leased`` with ``expires_at_ms <= now``. It is never evidence that a process
stopped, and nothing here reports "not running".
"""

from __future__ import annotations

import enum
from typing import Any, Union

import msgspec

from edge_runtime.contract.run_events import RunEvent
from edge_runtime.contract.validation import (
    MAX_SAFE_INTEGER,
    AttemptId,
    EventId,
    LeaseToken,
    Outcome,
    PositiveCounter,
    RunId,
    SafeInt,
    Version,
    command_decoder,
    fields_problem,
    int_problem,
)
from edge_runtime.contract.worker_lease import (
    OfferId,
    RunLeaseDurationMs,
    SessionId,
    Slots,
    WorkerId,
    InvalidWorkerLeaseCommandError,
    digest_problem,
    LeaseCommand,
)


class LeaseStatus(enum.StrEnum):
    LEASED = "leased"
    RELEASED = "released"
    COMPLETED = "completed"


class ReleaseReason(enum.StrEnum):
    """Why a worker gave back a grant it never started."""

    DECLINED = "declined"
    DRAINING = "draining"
    SHUTDOWN = "shutdown"


class NotClaimableReason(enum.StrEnum):
    RUN_MISSING = "run_missing"
    RUN_NOT_RUNTIME_OWNED = "run_not_runtime_owned"
    RUN_TERMINAL = "run_terminal"
    CANCEL_REQUESTED = "cancel_requested"
    ATTEMPT_MISSING = "attempt_missing"
    ATTEMPT_NOT_CLAIMED = "attempt_not_claimed"
    LEASE_COMPLETED = "lease_completed"
    #: start_run only: the Run is no longer queued (another service took it).
    RUN_NOT_QUEUED = "run_not_queued"


EVENT_LEASE_CLAIMED = "run.lease_claimed"
EVENT_LEASE_RELEASED = "run.lease_released"
EVENT_ATTEMPT_STARTING = "run.attempt_starting"
EVENT_LEASE_COMPLETED = "run.lease_completed"

# Why the orphan sweep ended an Attempt (its ``end_reason``), the same on every store.
#: Never crossed the start barrier: certainly no process; the Run goes back to the queue.
REASON_ORPHAN_UNSTARTED = "never started: its service stopped or was replaced before the start barrier"
#: Crossed the barrier with no recorded process: one may have run, so the Run fails.
REASON_ORPHAN_STARTING = (
    "its service stopped while starting the process; its identity was never recorded, so it is never signalled"
)
#: Running under a worker that stopped renewing its Run Lease and whose session is gone (Cluster
#: Profile): the process is on that worker's host, which nobody else can see or signal, so it
#: cannot be proved stopped and the Run fails rather than run twice (ADR-0057 section 5).
REASON_WORKER_GONE = (
    "its worker stopped renewing the Run Lease and has no live session; the process on that host cannot be "
    "proved stopped, so the run is not retried"
)


#: How long after a worker's session expired (by the store's time) a cancel still waits for that
#: worker to come back and deliver it itself; then the orphan sweep ends the Attempt ``lost`` and
#: the Run ``cancelled`` with REASON_CANCEL_MET_BY_LOSS. Long enough for a supervisor to restart a
#: worker that crashed; short enough that a user's cancel of a Run on a host that is gone ends.
CANCEL_LOSS_GRACE_MS = 20_000
#: The cancel of a Run whose worker was lost: met by the loss (Cluster Profile). The process on
#: that host cannot be proved stopped; a worker that returns finds its Run Lease closed.
REASON_CANCEL_MET_BY_LOSS = (
    "cancel met by the loss of its worker: no live session for the grace period after its session expired; "
    "the process on that host cannot be proved stopped"
)


def dedupe_key_for(attempt_id: str, lease_generation: int, step: str) -> str:
    """The event dedupe key of one step (``claimed``, ``released``, ...) of one grant."""
    return f"run-lease:{attempt_id}:{lease_generation}:{step}"


def lease_event_payload(lease: RunLeaseRecord, **extra: Any) -> dict[str, Any]:
    """The payload of a Run Lease event, the same on every store.

    Low-sensitivity: counters and ids, never a token or digest. The Attempt and the worker are the
    event's own ``attempt_id`` and ``actor_id`` columns, so the payload does not repeat them
    (fewer, smaller writes: every byte of an event is stored three times over with its indexes).
    """
    return {"session_generation": lease.session_generation, "lease_generation": lease.lease_generation,
            "lease_version": lease.version, **extra}


def completed_grant_extra(lease: RunLeaseRecord) -> dict[str, Any]:
    """What a Run's end event adds when the same transaction completed the Attempt's grant.

    Both stores end the Attempt, its Run and a grant still held in one commit (``finish_attempt``);
    the end event then says which grant it completed (generation and final version) instead of a
    second event (``run.lease_completed``) for the same moment (fewer, smaller writes).
    """
    return {"lease_generation": lease.lease_generation, "lease_version": lease.version}


def start_event_extra(attempt: int, offer_id: str) -> dict[str, Any]:
    """What ``start_run``'s one ``run.attempt_starting`` event adds to :func:`lease_event_payload`.

    ``start_run`` creates the Attempt, claims its grant and crosses the start barrier in one
    transaction, so one event records all three: the Attempt's number and the offer accepted
    (what ``run.attempt_created`` and ``run.lease_claimed`` said when they were separate steps;
    stores written before that rule still hold those).
    """
    return {"attempt": attempt, "offer_id": offer_id}


# --------------------------------------------------------------------------- commands


class ClaimRunCommand(LeaseCommand):
    """Claim the Run Lease of a ``claimed`` Attempt for the caller's current session.

    ``offer_id`` is the stable id of the offer being accepted; with the token digest and the
    full session fence it makes a retried claim an idempotent replay.
    """

    worker_id: WorkerId
    session_id: SessionId
    session_generation: PositiveCounter
    run_id: RunId
    attempt_id: AttemptId
    offer_id: OfferId
    lease_token: LeaseToken
    lease_duration_ms: RunLeaseDurationMs
    event_id: EventId


class _HeldGrantCommand(LeaseCommand):
    """The fence of a grant the caller holds: its session, the Attempt, the raw token and the
    lease version it last saw. The commands below add their own fields after these."""

    worker_id: WorkerId
    session_id: SessionId
    session_generation: PositiveCounter
    attempt_id: AttemptId
    lease_token: LeaseToken
    expected_version: PositiveCounter


class RenewRunLeaseCommand(_HeldGrantCommand):
    """Extend a held grant; CAS on the lease version and on the Attempt's projection."""

    lease_duration_ms: RunLeaseDurationMs


class ReleaseRunLeaseCommand(_HeldGrantCommand):
    """Give back a grant whose Attempt is still ``claimed`` (before the start barrier)."""

    reason: ReleaseReason
    event_id: EventId


class BeginStartCommand(_HeldGrantCommand):
    """Cross the start barrier: the Attempt goes ``claimed`` -> ``starting`` under a live grant."""

    event_id: EventId


class StartRunCommand(LeaseCommand):
    """Take a queued Run in one fenced step: create its next Attempt (``attempt_id``), claim its
    Run Lease and cross the start barrier, all in one transaction (Local Profile composition of
    ``claim_run`` and ``begin_start``).

    Fenced by the caller's session id, generation *and* version (the one its last heartbeat
    returned): a replaced, drained or stale session takes nothing. A refusal writes nothing.
    """

    worker_id: WorkerId
    session_id: SessionId
    session_generation: PositiveCounter
    session_version: Version
    run_id: RunId
    attempt_id: AttemptId
    offer_id: OfferId
    lease_token: LeaseToken
    lease_duration_ms: RunLeaseDurationMs


class CompleteRunLeaseCommand(LeaseCommand):
    """Close a grant because its Attempt ended.

    Fenced by the grant itself (worker id, the session generation it was granted to, lease
    generation, lease version and token digest), not by the worker's *current* session: after a
    restart the new session finishes Attempts it adopted from the old one, and the raw token
    died with the old process, so the durable digest is what identifies the grant. Completing
    records a fact about a process that ended; it grants no new authority, so no live session
    is required.
    """

    worker_id: WorkerId
    session_generation: PositiveCounter
    attempt_id: AttemptId
    lease_generation: PositiveCounter
    expected_version: PositiveCounter
    token_digest: str
    event_id: EventId

    def rule_problem(self) -> str | None:
        return digest_problem("token_digest", self.token_digest)


# --------------------------------------------------------------------------- record


class RunLeaseRecord(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, kw_only=True):
    """The durable state of an Attempt's Run Lease. It carries the token digest, never the token."""

    attempt_id: AttemptId
    run_id: RunId
    worker_id: WorkerId
    session_id: SessionId
    session_generation: PositiveCounter
    lease_generation: PositiveCounter
    version: PositiveCounter
    token_digest: str
    offer_id: OfferId
    status: LeaseStatus
    expires_at_ms: SafeInt
    acquired_at_ms: SafeInt
    renewed_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    started_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    released_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    release_reason: ReleaseReason | msgspec.UnsetType = msgspec.UNSET
    completed_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    updated_at_ms: SafeInt

    def is_active(self) -> bool:
        """Whether the grant still counts against its session's capacity (``leased``, live or not)."""
        return self.status is LeaseStatus.LEASED

    def is_live(self, now_ms: int) -> bool:
        """Whether the grant is ``leased`` and not yet expired at ``now_ms``."""
        return self.status is LeaseStatus.LEASED and self.expires_at_ms > now_ms


_OPTIONAL_TIMES = ("renewed_at_ms", "started_at_ms", "released_at_ms", "completed_at_ms")


def lease_record_problem(record: RunLeaseRecord) -> str | None:
    """The first contract invariant ``record`` breaks, or None: the declared field limits, then
    the cross-field rules below."""
    UNSET = msgspec.UNSET
    problem = fields_problem(record, enums=False) or digest_problem("token_digest", record.token_digest)
    if problem is not None:
        return problem
    for name in _OPTIONAL_TIMES:
        value = getattr(record, name)
        if value is not UNSET and value < record.acquired_at_ms:
            return int_problem(name, value, record.acquired_at_ms, MAX_SAFE_INTEGER)
    status = record.status
    if not isinstance(status, LeaseStatus):
        return f"status {status!r} is not a lease status"
    if record.release_reason is not UNSET and not isinstance(record.release_reason, ReleaseReason):
        return f"release_reason {record.release_reason!r} is not a release reason"
    if record.version < record.lease_generation:
        return "version must be >= lease_generation"
    if record.expires_at_ms <= record.acquired_at_ms:
        return "expires_at_ms must be after acquired_at_ms"
    if record.updated_at_ms < record.acquired_at_ms:
        return "updated_at_ms must be >= acquired_at_ms"
    released = record.released_at_ms is not UNSET, record.release_reason is not UNSET
    completed = record.completed_at_ms is not UNSET
    if status is LeaseStatus.LEASED and (any(released) or completed):
        return "a leased grant must not carry release or completion metadata"
    if status is LeaseStatus.RELEASED:
        if not all(released) or completed:
            return "a released grant must have released_at_ms and release_reason and no completed_at_ms"
        if record.started_at_ms is not UNSET:
            return "a released grant must never have been started"
    if status is LeaseStatus.COMPLETED and (not completed or any(released)):
        return "a completed grant must have completed_at_ms and no release metadata"
    return None


# --------------------------------------------------------------------------- outcomes


class ClaimedRunOutcome(Outcome, tag="claimed", kw_only=True):
    """The caller holds the grant. The only place the raw token ever appears.

    ``replayed`` is true for an idempotent replay of an earlier identical claim; ``event`` (the
    ``run.lease_claimed`` event) is present only when this call wrote it.
    """

    lease: RunLeaseRecord
    lease_token: str
    replayed: bool
    event: RunEvent | msgspec.UnsetType = msgspec.UNSET

    def __repr__(self) -> str:
        return (
            f"ClaimedRunOutcome(lease={self.lease!r}, lease_token=<redacted>, replayed={self.replayed!r}, "
            f"event={self.event!r})"
        )


class LeasedRunOutcome(Outcome, tag="leased"):
    """Another caller (or another offer of this one) holds a live grant on the Attempt."""

    lease: RunLeaseRecord


class NotClaimableOutcome(Outcome, tag="not_claimable"):
    """The Run or Attempt may not be claimed; ``reason`` says which check failed."""

    reason: NotClaimableReason


class NoCapacityOutcome(Outcome, tag="no_capacity", kw_only=True):
    """The session's active leases already reach ``max_concurrent_runs`` or ``available_slots``."""

    active_leases: Slots
    max_concurrent_runs: Slots
    available_slots: Slots


ClaimRunOutcome = Union[ClaimedRunOutcome, LeasedRunOutcome, NotClaimableOutcome, NoCapacityOutcome]
#: ``start_run``: ``claimed`` means started (the lease carries ``started_at_ms``); nothing is
#: written for the other two.
StartRunOutcome = Union[ClaimedRunOutcome, NotClaimableOutcome, NoCapacityOutcome]


class LeaseTransitionOutcome(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False):
    """The grant after release, start or completion, and the event that recorded it."""

    lease: RunLeaseRecord
    event: RunEvent


# --------------------------------------------------------------------------- wire

decode_claim_run_command = command_decoder(ClaimRunCommand, InvalidWorkerLeaseCommandError)
decode_renew_command = command_decoder(RenewRunLeaseCommand, InvalidWorkerLeaseCommandError)
decode_release_command = command_decoder(ReleaseRunLeaseCommand, InvalidWorkerLeaseCommandError)
decode_begin_start_command = command_decoder(BeginStartCommand, InvalidWorkerLeaseCommandError)
decode_complete_command = command_decoder(CompleteRunLeaseCommand, InvalidWorkerLeaseCommandError)
