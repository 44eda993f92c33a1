"""Run and Attempt decisions every store makes the same way, decided here once.

Each adapter reads the rows under its own locks (SQLite's write transaction, PostgreSQL's row
locks) and then asks one of these pure functions what the rule says; it only executes the answer.
The conformance suite (tests/conformance) runs both adapters against the same expectations, and
tests/unit/test_transitions.py pins each decision on its own.
"""

from __future__ import annotations

import enum
import hmac
from typing import TYPE_CHECKING, Any, NamedTuple

from edge_runtime.contract.cancellation_dispatch import DispatchStatus, FenceRejectedError
from edge_runtime.contract.run_lease import LeaseStatus, NoCapacityOutcome, NotClaimableReason, RunLeaseRecord
from edge_runtime.contract.runs import (
    ACTIVE_RUN_STATUSES,
    RUN_STATUS_AFTER_ATTEMPT,
    AttemptStatus,
    RunStateConflictError,
    RunStatus,
)

if TYPE_CHECKING:
    from edge_runtime.contract.cancellation_dispatch import DispatchRecord, RecordResultCommand
    from edge_runtime.contract.run_lease import ClaimRunCommand, StartRunCommand
    from edge_runtime.contract.runs import RunRecord
    from edge_runtime.contract.worker_session import WorkerSessionRecord

#: Who executes a Run that the runtime's workers may start (``runs.execution_owner``).
RUNTIME_OWNER = "runtime"


def not_claimable(execution_owner: str, status: str, cancel_requested_at_ms: int | None) -> NotClaimableReason | None:
    """Why a Run with these columns may not be leased to a worker now, or None when it may: it must
    be the runtime's, still active, and not asked to cancel."""
    if execution_owner != RUNTIME_OWNER:
        return NotClaimableReason.RUN_NOT_RUNTIME_OWNED
    if status not in ACTIVE_RUN_STATUSES:
        return NotClaimableReason.RUN_TERMINAL
    if cancel_requested_at_ms is not None:
        return NotClaimableReason.CANCEL_REQUESTED
    return None


def lease_mismatch(attempt_id: str, current: RunLeaseRecord | None) -> str:
    """The message of a fence the caller no longer holds. It names versions and statuses only,
    never a token or its digest."""
    if current is None:
        return f"attempt {attempt_id!r} has no Run Lease"
    return (
        f"the caller's fence no longer holds the lease of attempt {attempt_id!r} "
        f"(now {current.status.value} at version {current.version}, session generation "
        f"{current.session_generation})"
    )


def is_orphan_start(*, attempt_status: str, created_at_ms: int, lease_status: str | None, lease_expires_at_ms: int | None,
                    owner_live: bool, now_ms: int, abandon_after_ms: int) -> bool:
    """Whether an Attempt stranded before a process was recorded (``claimed`` or ``starting``) is
    an orphan its sweep may end now.

    - No grant at all: only an Attempt left by an older version's separate steps (create, then
      claim) or by another tool; its creator gets ``abandon_after_ms`` to claim it.
    - A grant no longer ``leased`` (released or completed): nobody can start it any more.
    - ``claimed`` (before the start barrier): an expired grant, or a dead owner, is enough.
    - ``starting`` (past the barrier): its owner may be spawning it right now, so both the grant
      must have run out and the owner be gone.
    """
    if lease_status is None:
        return created_at_ms <= now_ms - abandon_after_ms
    if lease_status != LeaseStatus.LEASED.value:
        return True
    expired = lease_expires_at_ms is not None and lease_expires_at_ms <= now_ms
    if attempt_status == AttemptStatus.CLAIMED:
        return expired or not owner_live
    return expired and not owner_live


#: The end reason of a Run cancelled before any Attempt started (its ``run.cancelled`` event).
REASON_CANCELLED_BEFORE_ANY_ATTEMPT = "cancelled before an attempt started"
#: The end reason of an Attempt cancelled before its process was started.
REASON_CANCELLED_BEFORE_START = "cancelled before the process was started"
#: The Run statuses in which a cancel with no active Attempt ends the Run at once.
_CANCELLABLE_AT_ONCE = frozenset({RunStatus.CREATED, RunStatus.QUEUED, RunStatus.RETRY_WAIT})


def cancel_refusal(run: RunRecord) -> RunStateConflictError | None:
    """Why ``run`` takes no cancel request, or None when it does: another executor's Run, or one
    that already ended."""
    if run.execution_owner != RUNTIME_OWNER:
        return RunStateConflictError(f"run {run.id} is owned by {run.execution_owner}, not this runtime")
    if run.status not in ACTIVE_RUN_STATUSES:
        return RunStateConflictError(f"run {run.id} already ended as {run.status.value}")
    return None


def cancel_requested_payload(requested_at_ms: int, reason: str | None) -> dict[str, Any]:
    """The payload of a Run's ``run.cancel_requested`` event."""
    payload: dict[str, Any] = {"requested_at_ms": requested_at_ms}
    if reason is not None:
        payload["reason"] = reason
    return payload


def cancels_at_once(run_status: RunStatus, active_attempts: int) -> bool:
    """Whether a cancel request ends the Run in the same transaction (reason
    ``REASON_CANCELLED_BEFORE_ANY_ATTEMPT``): no Attempt is active and none is running for it. Otherwise the
    cancellation dispatch delivers it to the Attempt's process."""
    return active_attempts == 0 and run_status in _CANCELLABLE_AT_ONCE


def dispatch_run_eligible(execution_owner: str, status: str, cancel_requested_at_ms: int | None,
                          requested_at_ms: int) -> bool:
    """Whether a cancellation dispatch for the cancel request made at ``requested_at_ms`` may still
    be claimed for this Run: the runtime's, still active, and that request still the Run's."""
    return (execution_owner == RUNTIME_OWNER and status in ACTIVE_RUN_STATUSES
            and cancel_requested_at_ms == requested_at_ms)


def require_dispatch_fence(current: DispatchRecord, cmd: RecordResultCommand, token_digest: str) -> None:
    """Refuse a dispatch result whose lease no longer fences the dispatch: another Attempt, not
    ``leased``, another version or owner, or another token (compared in constant time). An expired
    lease that nobody took over is still fenced by version, owner and digest only."""
    if (
        current.attempt_id != cmd.attempt_id
        or current.status is not DispatchStatus.LEASED
        or current.version != cmd.expected_version
        or current.lease_owner != cmd.owner
        or not hmac.compare_digest(current.lease_token_digest, token_digest)
    ):
        raise FenceRejectedError(
            f"lease of run {cmd.run_id!r} at version {cmd.expected_version} by {cmd.owner!r} "
            f"no longer fences the dispatch (now {current.status.value} at version {current.version})"
        )


def grant_held(current: RunLeaseRecord | None, token_digest: str, **fence: object) -> bool:
    """Whether ``current`` is a live grant (``leased``) whose fields equal ``fence`` and whose token
    digest is ``token_digest`` (compared in constant time). The session fence names the session
    (``session_id``), the grant fence the grant (``lease_generation``): the rule is the same."""
    return (
        current is not None
        and current.status is LeaseStatus.LEASED
        and all(getattr(current, name) == value for name, value in fence.items())
        and hmac.compare_digest(current.token_digest, token_digest)
    )


def claim_replayed(existing: RunLeaseRecord | None, cmd: ClaimRunCommand, token_digest: str) -> bool:
    """Whether a claim is the replay of the one that made ``existing`` (same session, offer and
    token): it answers with that grant again instead of refusing it as leased."""
    return grant_held(existing, token_digest, worker_id=cmd.worker_id, session_id=cmd.session_id,
                      session_generation=cmd.session_generation, offer_id=cmd.offer_id)


def capacity_refusal(session: WorkerSessionRecord, active_leases: int) -> NoCapacityOutcome | None:
    """The refusal of a new grant when the session's other active leases already reach its
    ``max_concurrent_runs`` or its ``available_slots``; None when there is room."""
    if active_leases >= session.max_concurrent_runs or active_leases >= session.available_slots:
        return NoCapacityOutcome(active_leases=active_leases, max_concurrent_runs=session.max_concurrent_runs,
                                 available_slots=session.available_slots)
    return None


def new_grant(cmd: ClaimRunCommand | StartRunCommand, token_digest: str, now_ms: int, *,
              lease_generation: int = 1, version: int = 1) -> RunLeaseRecord:
    """The ``leased`` grant a claim (or the fenced start) makes at ``now_ms``: the first of its
    Attempt at generation and version 1, or one after an expired or released grant at the next
    ones (the store bumps them, refusing to pass the maximum)."""
    return RunLeaseRecord(
        attempt_id=cmd.attempt_id, run_id=cmd.run_id, worker_id=cmd.worker_id, session_id=cmd.session_id,
        session_generation=cmd.session_generation, lease_generation=lease_generation, version=version,
        token_digest=token_digest, offer_id=cmd.offer_id, status=LeaseStatus.LEASED,
        expires_at_ms=now_ms + cmd.lease_duration_ms, acquired_at_ms=now_ms, updated_at_ms=now_ms,
    )


class UnstartedRunAction(enum.Enum):
    """What becomes of the Run of an Attempt that ended without a recorded process."""

    REQUEUE = "requeue"  # back to ``queued`` (event ``run.requeued``): a later Attempt runs it
    END = "end"  # ends as ``UnstartedEnd.run_status`` (``cancelled`` or ``failed``), or retries
    KEEP = "keep"  # the Run had already ended: it stays as it is


class UnstartedEnd(NamedTuple):
    attempt_status: AttemptStatus
    reason: str
    run_action: UnstartedRunAction
    #: With ``END``: the Run's end status (``end_or_retry`` may still retry a ``failed`` one).
    run_status: RunStatus | None


def unstarted_end(run_status: RunStatus, *, cancel_requested: bool, reason: str, may_have_started: bool) -> UnstartedEnd:
    """The end of an Attempt whose process was never recorded (the start sequence's failures,
    docs/operating.md).

    A Run whose Attempt certainly started no process never fails for it: the Attempt ends ``lost``
    with ``reason`` and the Run goes back to the queue. When a process *may* have started (the
    Attempt crossed the start barrier and its owner is gone) the Run ends ``failed``, so a command
    never runs twice. Either way a pending cancel request ends the Attempt and the Run
    ``cancelled`` (with ``REASON_CANCELLED_BEFORE_START`` when no process can have started).
    """
    attempt_status = AttemptStatus.CANCELLED if cancel_requested else AttemptStatus.LOST
    if cancel_requested and not may_have_started:
        reason = REASON_CANCELLED_BEFORE_START
    if run_status not in ACTIVE_RUN_STATUSES:
        return UnstartedEnd(attempt_status, reason, UnstartedRunAction.KEEP, None)
    if cancel_requested or may_have_started:
        return UnstartedEnd(attempt_status, reason, UnstartedRunAction.END,
                            RunStatus.CANCELLED if cancel_requested else RunStatus.FAILED)
    return UnstartedEnd(attempt_status, reason, UnstartedRunAction.REQUEUE, None)


def run_status_after_attempt(attempt_status: AttemptStatus, *, cancel_requested: bool) -> RunStatus:
    """The status a Run ends with when its Attempt ends as ``attempt_status`` (before any retry):
    the Attempt's own outcome, except that a ``lost`` Attempt of a Run asked to cancel ends the Run
    ``cancelled``."""
    if attempt_status is AttemptStatus.LOST and cancel_requested:
        return RunStatus.CANCELLED
    return RUN_STATUS_AFTER_ATTEMPT[attempt_status]


def attempt_end_extra(attempt_status: AttemptStatus, exit_code: int | None, reason: str | None) -> dict[str, Any]:
    """The fields an Attempt's end adds to its Run's end event."""
    extra: dict[str, Any] = {"attempt_status": attempt_status.value}
    if exit_code is not None:
        extra["exit_code"] = exit_code
    if reason is not None:
        extra["reason"] = reason
    return extra
