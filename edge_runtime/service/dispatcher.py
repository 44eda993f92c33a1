"""The cancellation dispatcher: deliver due cancel requests to processes, then enforce SIGKILL.

For each due candidate the dispatcher claims the Run's CancellationDispatch with a fresh random
token (``secrets``; held in memory only, for the seconds the delivery takes), asks the controller
to SIGTERM the Attempt's process group, and records the result with a fresh event id under the
same fence. Retryable results come back after a capped exponential backoff stored in the dispatch
itself (``next_attempt_at_ms``), so the schedule survives a restart.

After a ``termination_requested`` the Attempt's SIGKILL deadline (now + grace) is stored before
the result is recorded; a crash in between leaves the dispatch lease to expire, and the retry
sends SIGTERM again and stores the deadline then. The first deadline stands, so retries never
push it out. Deadlines are enforced by whichever service sees them due, after a restart too.

No transaction is open while a signal is sent: claim, signal, record are three steps.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from edge_runtime.contract.backoff import capped_backoff
from edge_runtime.contract.cancellation_dispatch import (
    MAX_RETRY_DELAY_MS,
    RETRYABLE_RESULTS,
    BindingConflictError,
    ClaimCommand,
    ClaimedOutcome,
    DispatchResult,
    FenceRejectedError,
    RecordResultCommand,
)
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.runs import CancellationCandidate, KillCandidate, ProcessIdentity
from edge_runtime.contract.ports import CancellationDispatchStore, RunStore
from edge_runtime.service.controller import KillOutcome, LocalProcessController
from edge_runtime.service.journal import Journal
from edge_runtime.service.worker import new_event_id

#: Backoff for a SIGKILL that failed (EPERM, unreadable /proc): kept in memory, short and capped.
_KILL_RETRY_BASE_MS = 500
_KILL_RETRY_MAX_MS = 30_000


def retry_delay_ms(dispatch_count: int, base_ms: int, max_ms: int) -> int:
    """``base * 2**(count-1)``, capped by ``max_ms`` and the contract's maximum."""
    return max(1, capped_backoff(base_ms, dispatch_count, min(max_ms, MAX_RETRY_DELAY_MS)))


class CancellationDispatcher:
    """Delivers due cancellations and enforces due SIGKILL deadlines. One per service."""

    __slots__ = (
        "_dispatches", "_runs", "_controller", "_owner", "_now_ms", "_journal", "_grace_ms", "_lease_ms",
        "_retry_base_ms", "_retry_max_ms", "_kill_retry",
    )

    def __init__(
        self,
        *,
        dispatches: CancellationDispatchStore,
        runs: RunStore,
        controller: LocalProcessController,
        owner: Callable[[], str],
        now_ms: Callable[[], int],
        journal: Journal,
        grace_ms: int,
        lease_ms: int,
        retry_base_ms: int,
        retry_max_ms: int,
    ) -> None:
        self._dispatches = dispatches
        self._runs = runs
        self._controller = controller
        self._owner = owner
        self._now_ms = now_ms
        self._journal = journal
        self._grace_ms = grace_ms
        self._lease_ms = lease_ms
        self._retry_base_ms = retry_base_ms
        self._retry_max_ms = retry_max_ms
        #: attempt id -> (failures so far, not before ms) for SIGKILLs that failed.
        self._kill_retry: dict[str, tuple[int, int]] = {}

    # ----------------------------------------------------------------- SIGTERM

    def dispatch_due(self) -> int:
        """Deliver every due cancellation once; how many were delivered (any result)."""
        delivered = 0
        for candidate in self._runs.cancellation_candidates():
            try:
                if self._dispatch_one(candidate):
                    delivered += 1
            except BindingConflictError as exc:
                self._journal.error("cancel.binding_conflict", run=candidate.run_id, error=exc.code, detail=str(exc))
            except FenceRejectedError as exc:
                # Our lease expired and another owner took over: its result stands.
                self._journal.warning("cancel.fence_rejected", run=candidate.run_id, detail=str(exc))
            except EdgeRuntimeError as exc:
                self._journal.error("cancel.failed", run=candidate.run_id, error=exc.code, detail=str(exc),
                                    retryable=exc.retryable)
        return delivered

    def _dispatch_one(self, candidate: CancellationCandidate) -> bool:
        owner = self._owner()
        # Whose dispatch and who delivers it: the claim takes it, the result presents it again.
        held = {"run_id": candidate.run_id, "attempt_id": candidate.attempt_id, "owner": owner}
        outcome = self._dispatches.claim(
            ClaimCommand(
                **held,
                requested_at_ms=candidate.requested_at_ms,
                lease_token=secrets.token_urlsafe(32),
                lease_duration_ms=self._lease_ms,
            )
        )
        if not isinstance(outcome, ClaimedOutcome):
            return False
        attempt = self._runs.get_attempt(candidate.attempt_id)
        identity = None if attempt is None else attempt.identity
        # Before the signal: once the leader dies, what it left outside its group is re-parented
        # and can no longer be told apart from anyone else's processes.
        escaped = self._escaped(candidate, identity)
        result = self._controller.request_termination(identity)
        if result is DispatchResult.TERMINATION_REQUESTED:
            self._runs.record_termination_requested(candidate.attempt_id, grace_ms=self._grace_ms)
        dispatch = outcome.dispatch
        retryable = result in RETRYABLE_RESULTS
        delay = retry_delay_ms(dispatch.dispatch_count, self._retry_base_ms, self._retry_max_ms) if retryable else None
        recorded = self._dispatches.record_result(
            RecordResultCommand(
                **held,
                lease_token=outcome.lease_token,
                expected_version=dispatch.version,
                result=result,
                event_id=new_event_id(),
                **({"retry_delay_ms": delay} if retryable else {}),
            )
        )
        self._journal.info(
            "cancel.dispatched",
            run=candidate.run_id,
            attempt=candidate.attempt_id,
            result=result.value,
            status=recorded.dispatch.status.value,
            count=recorded.dispatch.dispatch_count,
            retry_in_ms=delay,
            pid=None if identity is None else identity.pid,
        )
        if escaped and result is DispatchResult.TERMINATION_REQUESTED:
            # The group's SIGTERM (and the later SIGKILL) does not reach these; ``show`` says so.
            self._runs.record_escaped_processes(candidate.attempt_id, escaped, actor_id=owner)
            self._journal.warning("cancel.escaped_processes", run=candidate.run_id, attempt=candidate.attempt_id,
                                  pids=" ".join(map(str, escaped)))
        return True

    def _escaped(self, candidate: CancellationCandidate, identity: ProcessIdentity | None) -> list[int]:
        """Live descendants of the Attempt's group that left it (``setsid``), for the record."""
        if identity is None:
            return []
        try:
            return self._controller.escaped_descendants(identity)
        except EdgeRuntimeError as exc:  # cannot tell: deliver the cancel anyway and say so
            self._journal.error("cancel.escaped_unknown", attempt=candidate.attempt_id, error=exc.code, detail=str(exc))
            return []

    # ----------------------------------------------------------------- SIGKILL

    def enforce_kills(self) -> list[str]:
        """SIGKILL every group whose grace period is over; the attempt ids that were handled."""
        handled: list[str] = []
        now = self._now_ms()
        for candidate in self._runs.kill_candidates():
            retry = self._kill_retry.get(candidate.attempt_id)
            if retry is not None and retry[1] > now:
                continue
            try:
                if self._kill_one(candidate, now):
                    handled.append(candidate.attempt_id)
            except EdgeRuntimeError as exc:
                self._journal.error("kill.failed", attempt=candidate.attempt_id, error=exc.code, detail=str(exc))
                self._schedule_kill_retry(candidate.attempt_id, now)
        return handled

    def _kill_one(self, candidate: KillCandidate, now: int) -> bool:
        outcome = self._controller.force_kill(candidate.identity)
        if outcome is KillOutcome.ERROR:
            self._journal.warning("kill.retry", attempt=candidate.attempt_id, pgid=candidate.identity.pgid)
            self._schedule_kill_retry(candidate.attempt_id, now)
            return False
        self._kill_retry.pop(candidate.attempt_id, None)
        self._runs.record_killed(candidate.attempt_id, actor_id=self._owner(), outcome=outcome.value)
        self._journal.info(
            "kill.enforced", run=candidate.run_id, attempt=candidate.attempt_id, outcome=outcome.value,
            pgid=candidate.identity.pgid,
        )
        return True

    def _schedule_kill_retry(self, attempt_id: str, now: int) -> None:
        failures = self._kill_retry.get(attempt_id, (0, 0))[0] + 1
        delay = capped_backoff(_KILL_RETRY_BASE_MS, failures, _KILL_RETRY_MAX_MS)
        self._kill_retry[attempt_id] = (failures, now + delay)

    def next_kill_retry_at_ms(self) -> int | None:
        """When an in-memory SIGKILL retry is due (durable deadlines come from the repository)."""
        return min((at for _, at in self._kill_retry.values()), default=None)

