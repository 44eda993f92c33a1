"""Recording who a started process is, and the bound by which it must be recorded.

``record`` stores an Attempt's process identity (pid, pgid, start time, boot id) and moves it
``starting -> running``; only then is the Attempt reported running. A retryable failure (the
database busy, or away: a lost connection, a COMMIT whose outcome is unknown during a failover)
keeps the process, our own child watched by its pidfd, and the recording is retried with the
settlements' backoff (``retry``); a retry that finds the Attempt already ``running`` with this
very identity (the unknown COMMIT did commit) is a success. It must succeed while the Run Lease
still fences the ``starting`` Attempt from the orphan sweep (``RECORD_WITHIN_LEASE_SHARE`` of the
grant's term, moved on by each renewal) and before the service stops. Otherwise, and at once for
any other failure or a conflict (the Attempt ended, or runs with another identity), the group is
SIGKILLed (``give_up``: an unrecorded process could never be cancelled or re-adopted safely) and
the Attempt ends ``lost``, its Run ``failed``, since the command may have begun. A process that
exits before its identity is recorded has it recorded first (``record_before_end``), then ends
with its real status.

The state it keeps is the ``Unrecorded`` state of each such Attempt (``running.py``); the
deadlines are read from the watched Attempts and enforced without reading the store, so a kill
comes on time while the database is away.
"""

from __future__ import annotations

import time

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.runs import AttemptStatus, RunStateConflictError
from edge_runtime.service.attempts.running import RunningAttempt
from edge_runtime.service.attempts.settlement import Settlements
from edge_runtime.service.attempts.tools import Tools
from edge_runtime.service.worker import RunGrant

#: A process whose identity could not be recorded yet is killed once this share of its Run
#: Lease's term has passed (its grant is what keeps the orphan sweep off its ``starting``
#: Attempt). The rest of the term covers a database call blocked up to its timeouts and the
#: drift between this host's clock and the store's, so the kill comes before the lease expires.
RECORD_WITHIN_LEASE_SHARE = 2 / 3
#: Why an unrecorded process was killed when the service stopped (a restart could not re-adopt it).
REASON_STOPPED_UNRECORDED = "the service stopped before the process identity could be recorded"


def record_deadline(grant: RunGrant) -> float:
    """By when (monotonic) a process started under ``grant`` must have its identity recorded."""
    return grant.asked_at + (grant.held_until - grant.asked_at) * RECORD_WITHIN_LEASE_SHARE


class Identities:
    """Records the identities of the processes this service started, and gives up the ones that
    cannot be recorded in time."""

    def __init__(self, tools: Tools, *, settlements: Settlements) -> None:
        self._runs, self._worker, self._controller, self._journal, self._watched = tools
        #: Whose failure count a failed retry adds to (one backoff for everything to settle).
        self._settlements = settlements

    def record(self, running: RunningAttempt) -> str | None:
        """Store the process identity and move the Attempt ``starting -> running``: None once it is
        recorded, else why it never can be (a conflict). Idempotent: after a COMMIT whose outcome
        was unknown the Attempt may already be ``running`` with this very identity, which counts
        as recorded; ``running`` with another identity, or ended, is a conflict.

        Raises:
            EdgeRuntimeError: the store failed (``retryable`` when the same call may succeed).
        """
        attempt_id = running.attempt_id
        try:
            self._runs.record_running(attempt_id, running.identity, log_path=str(running.log_path),
                                      actor_id=self._worker.owner)
        except RunStateConflictError as exc:
            stored = self._runs.get_attempt(attempt_id)
            if stored is None or stored.status is not AttemptStatus.RUNNING or stored.identity != running.identity:
                return f"the process identity could not be recorded: {exc}"
            self._journal.info("attempt.identity_found", attempt=attempt_id, pid=running.identity.pid)
        running.recorded()
        return None

    def give_up(self, running: RunningAttempt, reason: str, *, error: str | None = None) -> None:
        """The identity will not be recorded: SIGKILL the group (nobody could cancel or re-adopt an
        unrecorded process safely later); its exit then ends the Attempt ``lost`` with ``reason``."""
        running.doom(reason)
        outcome = self._controller.force_kill(running.identity)
        self._journal.error("attempt.identity_not_recorded", attempt=running.attempt_id, pid=running.identity.pid,
                            error=error, detail=reason, kill=outcome.value)

    def extend(self, running: RunningAttempt, grant: RunGrant) -> None:
        """Its grant was renewed: an identity still unrecorded may take until the new bound."""
        if running.record_by is not None:
            running.await_record(record_deadline(grant), running.record_error)

    def retry(self) -> None:
        """Record the identities whose recording failed retryably while their processes run; give
        up the ones past their bound or failing for good."""
        self.enforce_deadlines()
        for running in [r for r in self._watched.values() if r.record_by is not None]:
            try:
                conflict = self.record(running)
            except EdgeRuntimeError as exc:
                if not exc.retryable:
                    self.give_up(running, f"the process identity could not be recorded: {exc}", error=exc.code)
                    continue
                running.await_record(running.record_by, str(exc))
                if self._settlements.failed():
                    self._journal.error("attempt.identity_retry_failed", attempt=running.attempt_id, error=exc.code,
                                        detail=str(exc), failures=self._settlements.failures)
                continue
            if conflict is not None:
                self.give_up(running, conflict)
            else:
                self._journal.info("attempt.running", run=running.run_id, attempt=running.attempt_id,
                                   pid=running.identity.pid, late=True)

    def enforce_deadlines(self) -> None:
        """Kill the unrecorded processes whose bound has passed. Reads no store (it must work
        while the database is away), so the service loop calls it on every pass."""
        now = time.monotonic()
        for running in list(self._watched.values()):
            if running.record_by is not None and now >= running.record_by:
                self.give_up(running, "the process identity could not be recorded before its Run Lease "
                                      f"could lapse: {running.record_error}")

    def seconds_to_deadline(self) -> float | None:
        """Seconds until the earliest unrecorded process must be given up; None when there is none."""
        due = min((r.record_by for r in self._watched.values() if r.record_by is not None), default=None)
        return None if due is None else max(0.0, due - time.monotonic())

    @property
    def unrecorded_count(self) -> int:
        """Processes of ours whose identity is not recorded yet."""
        return sum(1 for running in self._watched.values() if running.record_by is not None)

    def kill_unrecorded(self, reason: str) -> list[str]:
        """Give up every identity not recorded yet (the service stops, and a restart could not
        re-adopt such a process); the ids of their Attempts."""
        pending = [r for r in self._watched.values() if r.record_by is not None]
        for running in pending:
            self.give_up(running, reason)
        return [r.attempt_id for r in pending]

    def record_before_end(self, running: RunningAttempt) -> None:
        """The process exited before its identity was recorded: record it now, so the Attempt ends
        from ``running`` with its process known, as every other one does.

        Raises:
            EdgeRuntimeError: retryable: the end keeps the exit and is tried again later.
        """
        try:
            conflict = self.record(running)
        except EdgeRuntimeError as exc:
            if exc.retryable:
                raise
            # The process is gone, so its identity guards nothing any more: the Attempt ends from
            # ``starting`` with the real exit status (finish_attempt accepts any active Attempt).
            running.recorded()
            self._journal.warning("attempt.identity_not_recorded", attempt=running.attempt_id,
                                  pid=running.identity.pid, error=exc.code, detail=str(exc), exited=True)
            return
        if conflict is not None:
            running.doom(conflict)
        else:
            self._journal.info("attempt.running", run=running.run_id, attempt=running.attempt_id,
                               pid=running.identity.pid, late=True, exited=True)
