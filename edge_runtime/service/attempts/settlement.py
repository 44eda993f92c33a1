"""Settling what failed to settle: the undo of a start that made no process, the end of an Attempt
whose process exited, and the completion of a Run Lease, each retried until it succeeds.

A settlement that fails (the database busy, a full disk, a lost connection) is never forgotten:
it is kept here and retried on the supervisor's next pass, after a backoff that doubles while
failures go on (``next_retry_s``); a failure is logged at the 1st, 2nd, 4th, 8th... in a row, so
a full disk cannot flood the log. The grant of an unsettled start keeps its slot meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from edge_runtime.contract.backoff import capped_backoff, worth_logging
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.ports import RunStore
from edge_runtime.contract.runs import AttemptStatus
from edge_runtime.contract.worker_lease import WorkerLeaseFenceRejectedError
from edge_runtime.service.journal import Journal
from edge_runtime.service.worker import RunGrant, WorkerSession

#: How soon a failed settlement (a requeue, an Attempt's end, a grant's completion) is retried.
RETRY_INTERVAL_S = 1.0
#: The longest wait between two retries of failed settlements.
RETRY_MAX_S = 30.0
#: When the service stops, the undos of failed starts still pending are retried for this long, this
#: often, before it exits: each is the Run's way back to the queue (a passing busy database
#: usually clears within it), and the rest of a stop must stay short for procd's/systemd's timeout.
UNDO_AT_STOP_S = 3.0
UNDO_AT_STOP_INTERVAL_S = 0.1


class Unstarted(NamedTuple):
    """A start that recorded no process: back to the queue (``end`` None) or ended for good."""

    grant: RunGrant
    reason: str
    end: AttemptStatus | None


class Settlements:
    """The settlements still to do, and the backoff of their retries."""

    def __init__(self, *, runs: RunStore, worker: WorkerSession, journal: Journal) -> None:
        self._runs = runs
        self._worker = worker
        self._journal = journal
        #: Starts that made no process and whose undoing failed.
        self.unstarted: dict[str, Unstarted] = {}
        #: Ends of exited processes that could not be recorded: attempt id -> a retry of the end.
        self.unfinished: dict[str, Callable[[], None]] = {}
        #: Ended Attempts whose Run Lease could not be completed yet.
        self.uncompleted: set[str] = set()
        #: Consecutive failed settlements: their retry backs off.
        self.failures = 0

    @property
    def pending(self) -> bool:
        return bool(self.unstarted or self.unfinished or self.uncompleted)

    def tracks(self, attempt_id: str) -> bool:
        return attempt_id in self.unstarted or attempt_id in self.unfinished

    def failed(self) -> bool:
        """Count one failed settlement; whether to log it (the 1st, 2nd, 4th, 8th...)."""
        self.failures += 1
        return worth_logging(self.failures)

    def forget_failures(self) -> None:
        """Nothing is left to settle: the next failure is a first one again."""
        self.failures = 0

    def next_retry_s(self) -> float | None:
        """Seconds until a retry is due (a backoff that doubles while they keep failing); None
        when nothing is pending."""
        if not self.pending:
            return None
        return self.backoff_s()

    def backoff_s(self) -> float:
        """The wait before the next retry: ``RETRY_INTERVAL_S`` with no failure yet, doubling
        with each failure in a row, at most ``RETRY_MAX_S``."""
        return capped_backoff(RETRY_INTERVAL_S, self.failures + 1, RETRY_MAX_S)

    # ----------------------------------------------------------------- starts that made no process

    def not_started(self, grant: RunGrant, reason: str, end: AttemptStatus | None) -> None:
        self.unstarted[grant.lease.attempt_id] = Unstarted(grant, reason, end)
        self.retry_unstarted()

    def retry_unstarted(self) -> None:
        """Settle the starts that recorded no process (again, if an earlier try failed)."""
        for attempt_id, (grant, reason, end) in list(self.unstarted.items()):
            try:
                if end is None:
                    status = self._worker.abandon_start(grant, reason).value
                else:
                    self._runs.finish_attempt(attempt_id, end, actor_id=self._worker.owner, reason=reason)
                    self._worker.complete(attempt_id)
                    status = end.value
            except WorkerLeaseFenceRejectedError as exc:
                # Someone else settled it (an orphan sweep after our grant expired): nothing to undo.
                self._journal.warning("attempt.requeue_skipped", attempt=attempt_id, detail=str(exc))
            except EdgeRuntimeError as exc:
                if self.failed():
                    self._journal.error("attempt.requeue_failed", attempt=attempt_id, error=exc.code,
                                        detail=str(exc), retryable=exc.retryable, failures=self.failures)
                continue
            else:
                self._journal.info("attempt.unstarted", run=grant.lease.run_id, attempt=attempt_id, status=status)
            del self.unstarted[attempt_id]

    def undo_before_exit(self) -> None:
        """The service stops: retry the pending undos of failed starts until none is left or
        ``UNDO_AT_STOP_S`` passed; each one still pending is logged. Those keep their grant, so
        the next service's orphan sweep ends them once it ran out: within one Run Lease."""
        deadline = time.monotonic() + UNDO_AT_STOP_S
        tries = 0
        while self.unstarted:
            if tries:
                time.sleep(min(UNDO_AT_STOP_INTERVAL_S, max(0.0, deadline - time.monotonic())))
            tries += 1
            self.retry_unstarted()
            if time.monotonic() >= deadline:
                break
        for attempt_id, (grant, reason, _) in self.unstarted.items():
            self._journal.error(
                "attempt.undo_left", run=grant.lease.run_id, attempt=attempt_id, detail=reason, tries=tries,
                next_step="the next service's orphan sweep ends it once its Run Lease ran out")

    # ----------------------------------------------------------------- ends and completions

    def end_failed(self, attempt_id: str, retry: Callable[[], None], exc: EdgeRuntimeError) -> None:
        """An exited process's end could not be recorded: ``retry`` it on the next pass."""
        if self.failed():
            self._journal.error("attempt.finish_failed", attempt=attempt_id, error=exc.code, detail=str(exc),
                                failures=self.failures)
        self.unfinished[attempt_id] = retry

    def complete_lease(self, attempt_id: str) -> None:
        try:
            self._worker.complete(attempt_id)
            self.uncompleted.discard(attempt_id)
        except EdgeRuntimeError as exc:
            # An open grant would keep counting against this session's slots: retry it each pass.
            self.uncompleted.add(attempt_id)
            if self.failed():
                self._journal.error("lease.complete_failed", attempt=attempt_id, error=exc.code, detail=str(exc),
                                    retryable=exc.retryable, failures=self.failures)

    def retry_ends_and_completions(self) -> None:
        for attempt_id, retry in list(self.unfinished.items()):
            del self.unfinished[attempt_id]
            retry()
        for attempt_id in list(self.uncompleted):
            self.complete_lease(attempt_id)
