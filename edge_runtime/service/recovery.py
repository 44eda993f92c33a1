"""Recovery: what the current worker session does with Attempts that no live service watches.

Run at start, after the new session is registered (generation + 1), and again every third of a
Run Lease while serving (so orphans are found within one Run Lease period, by whichever current
session sees them, not only at start). For every active Run Lease of this worker granted to an
earlier session, whose Attempt this service does not watch yet:

- ``claimed`` or ``starting``: left to the orphan sweep below (its owner may be a replaced
  service that is starting it right now).
- ``running`` on another boot -> ``lost`` (the device rebooted).
- ``running`` and the recorded identity still matches a live process -> re-adopted: watched until
  it exits (pidfd, or a slow ``/proc`` poll), still cancellable through its dispatch; its end is
  the one its monitor writes (docs/monitor.md).
- ``running`` and its process gone: it ended while no service ran; its end is settled from what
  its monitor wrote (its true exit status), and a cancelled one whose group still has members is
  kept until its SIGKILL step, so the group is still killed when the grace is over. Only without
  a status (its monitor killed, or a release without monitors) does it end ``lost``.

At start (a worker restarted with the same id), first the Attempts of this worker that another
session already ended ``lost`` on this boot (``RunStore.lost_with_process``): a process of one
that still runs is stopped (SIGTERM to its group, SIGKILL after the grace), and what its monitor
saw is recorded as a ``run.fenced_end`` event, never over the verdict (docs/monitor.md).

Then the starts of the current session that the service never saw confirmed (its COMMIT was
ambiguous: the connection was lost during it, PostgreSQL only): their Attempts hold this session's
grant but the service spawns only after a confirmed start, so it started nothing; they are undone
and their Runs requeued (``REASON_START_UNCONFIRMED``).

Then the orphan sweep (``LocalWorkerLeaseRepository.sweep_orphans``), over every worker's
Attempts: one that never crossed the start barrier goes back to the queue (never ``failed`` for
that reason); one that crossed it without a recorded process ends ``lost`` once its grant ran out
and its session is gone, and its Run fails, because a process may have started.

Overdue SIGKILL deadlines are enforced by the dispatcher's normal pass. Each step is its own short
transaction; nothing here holds one across /proc reads.
"""

from __future__ import annotations

import enum
from pathlib import Path

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.runs import FENCE_SCAN_LIMIT, AttemptRecord, AttemptStatus, RunStatus
from edge_runtime.contract.worker_lease import WorkerLeaseFenceRejectedError, WorkerSessionRejectedError
from edge_runtime.contract.ports import RunStore
from edge_runtime.service.attempts import AttemptSupervisor
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.journal import Journal
from edge_runtime.service.log_capture import status_path_of
from edge_runtime.service.worker import WorkerSession

_UNSET = msgspec.UNSET

REASON_REBOOTED = "the device rebooted while the attempt was running"
REASON_NO_IDENTITY = "the attempt is running but its process identity is missing"
REASON_START_UNCONFIRMED = (
    "its start was committed but the confirmation never reached the service (connection lost during COMMIT); "
    "no process was started"
)


def recover(
    *,
    runs: RunStore,
    worker: WorkerSession,
    supervisor: AttemptSupervisor,
    controller: LocalProcessController,
    journal: Journal,
    boot_id: str,
    abandon_after_ms: int,
    at_start: bool = False,
) -> dict[RecoveryOutcome, int]:
    """Adopt or end the Attempts of earlier sessions, then sweep orphans; counts by outcome. At
    start, first stop what still runs of this worker's Attempts that were ended ``lost`` elsewhere.

    Raises:
        WorkerLeaseFenceRejectedError, WorkerSessionRejectedError: this session is no longer the
            current one (the sweep is fenced); the caller stops taking work.
    """
    recovery = _Recovery(runs, worker, supervisor, controller, journal, boot_id)
    counts = dict.fromkeys(RecoveryOutcome, 0)
    if at_start:
        counts[RecoveryOutcome.FENCED] += recovery.fence_lost()
    for lease in worker.earlier_session_leases():
        if lease.attempt_id in supervisor.running:
            continue
        try:
            outcome = recovery.one(lease.attempt_id)
        except EdgeRuntimeError as exc:
            journal.error("recovery.failed", attempt=lease.attempt_id, error=exc.code, detail=str(exc))
            outcome = RecoveryOutcome.FAILED
        counts[outcome] += 1
    counts[RecoveryOutcome.REQUEUED] += recovery.unconfirmed_starts()
    try:
        swept = worker.sweep_orphans(abandon_after_ms)
    except (WorkerLeaseFenceRejectedError, WorkerSessionRejectedError):
        raise
    except EdgeRuntimeError as exc:
        journal.error("recovery.sweep_failed", error=exc.code, detail=str(exc))
        swept = []
    for attempt_id, run_status in swept:
        requeued = run_status is RunStatus.QUEUED
        counts[RecoveryOutcome.REQUEUED if requeued else RecoveryOutcome.LOST] += 1
        journal.info("recovery.orphan_ended", attempt=attempt_id, run_status=run_status.value)
    return counts


class RecoveryOutcome(enum.StrEnum):
    """What recovery did with one Attempt of an earlier session (the counts of ``recovery.done``)."""

    ADOPTED = "adopted"  # its process still runs: watched again
    LOST = "lost"  # ended: no process can be found, or the Attempt had already ended
    SETTLING = "settling"  # its process is gone: ended with what its monitor kept
    PENDING = "pending"  # not started yet: the orphan sweep decides
    REQUEUED = "requeued"  # an orphan that certainly started no process: back in the queue
    FAILED = "failed"  # recovery of it failed (logged); tried again on the next pass
    FENCED = "fenced"  # ended ``lost`` elsewhere, yet its process ran on: stopped, its end an event


class _Recovery:
    """What one recovery pass works with, so each step reads it instead of threading it along."""

    __slots__ = ("runs", "worker", "supervisor", "controller", "journal", "boot_id")

    def __init__(self, runs: RunStore, worker: WorkerSession, supervisor: AttemptSupervisor,
                 controller: LocalProcessController, journal: Journal, boot_id: str) -> None:
        self.runs, self.worker, self.supervisor = runs, worker, supervisor
        self.controller, self.journal, self.boot_id = controller, journal, boot_id

    def one(self, attempt_id: str) -> RecoveryOutcome:
        runs, supervisor, controller = self.runs, self.supervisor, self.controller
        attempt = runs.get_attempt(attempt_id)
        if attempt is None or attempt.status not in (AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.RUNNING):
            self.worker.complete(attempt_id)  # the Attempt already ended; close the grant it left open
            return RecoveryOutcome.LOST
        if attempt.status is not AttemptStatus.RUNNING:
            return RecoveryOutcome.PENDING  # the orphan sweep decides, once its owner can no longer be starting it
        identity = attempt.identity
        if identity is None:
            return self._end(attempt, AttemptStatus.LOST, REASON_NO_IDENTITY)
        if identity.boot_id != self.boot_id:
            return self._end(attempt, AttemptStatus.LOST, REASON_REBOOTED)
        if supervisor.adopt(attempt):
            return RecoveryOutcome.ADOPTED
        return RecoveryOutcome.SETTLING

    def fence_lost(self) -> int:
        """A worker restarted with the same id: the Attempts of its earlier lives that another
        session ended ``lost`` (the worker was paused, cut off or dead past its leases) while their
        processes ran on under their monitors are no one's to run. Their groups are stopped and
        what they ended with is recorded as ``run.fenced_end`` events. How many still ran."""
        attempts = self.runs.lost_with_process(self.worker.worker_id, boot_id=self.boot_id, limit=FENCE_SCAN_LIMIT)
        return sum(self.supervisor.fence_lost(attempt, "it was ended lost while this worker was away")
                   for attempt in attempts)

    def unconfirmed_starts(self) -> int:
        """Undo the starts of this session that committed while the service saw an error (an
        ambiguous COMMIT on PostgreSQL): the Attempt holds this session's grant, but the service
        spawns only after a confirmed start, so it started nothing; left alone, it would keep a
        slot and its Run for ever. How many were undone."""
        undone = 0
        for lease in self.worker.current_session_leases():
            if self.supervisor.tracks(lease.attempt_id):
                continue
            attempt = self.runs.get_attempt(lease.attempt_id)
            if attempt is None or attempt.status not in (AttemptStatus.CLAIMED, AttemptStatus.STARTING):
                continue
            try:
                status = self.worker.abandon_unconfirmed(lease, REASON_START_UNCONFIRMED)
            except WorkerLeaseFenceRejectedError as exc:  # settled meanwhile by someone else
                self.journal.warning("recovery.unconfirmed_skipped", attempt=lease.attempt_id, detail=str(exc))
                continue
            undone += 1
            self.journal.info("recovery.unconfirmed_start", run=lease.run_id, attempt=lease.attempt_id,
                              run_status=status.value)
        return undone

    def _end(self, attempt: AttemptRecord, status: AttemptStatus, reason: str) -> RecoveryOutcome:
        journal = self.journal
        if attempt.log_path is not _UNSET:
            # Its process is gone (or unidentifiable), and so is its monitor: the files have served.
            for leftover in (Path(attempt.log_path).with_suffix(".fifo"), status_path_of(attempt.log_path)):
                try:
                    leftover.unlink(missing_ok=True)
                except OSError as exc:
                    journal.warning("recovery.file_not_removed", attempt=attempt.id, detail=str(exc))
        self.runs.finish_attempt(attempt.id, status, actor_id=self.worker.owner, reason=reason)
        if attempt.log_path is not _UNSET:
            self.supervisor.copy_log(attempt.id, Path(attempt.log_path))  # with the gap note, if any
        self.worker.complete(attempt.id)
        journal.info("recovery.ended", run=attempt.run_id, attempt=attempt.id, status=status.value, reason=reason)
        return RecoveryOutcome.LOST
