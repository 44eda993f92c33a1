"""Restart recovery: what a new worker session does with the Attempts of earlier sessions.

Run once at start, after the new session is registered (generation + 1). For every active Run
Lease of this worker granted to an earlier session:

- Attempt still ``claimed``: the old service died before the start barrier; no process was ever
  started -> ``lost``.
- ``starting``: it died between the barrier and recording the identity; a process may exist but
  cannot be identified, so it is never signalled -> ``lost``, with that reason.
- ``running`` on another boot -> ``lost`` (the device rebooted).
- ``running`` and the recorded identity still matches a live process -> re-adopted: watched until
  it exits (pidfd, or a slow ``/proc`` poll), still cancellable through its dispatch.
- ``running``, leader gone but members of its group alive, and a cancel requested -> kept until
  its SIGKILL step, so the group is still killed when the grace is over.
- otherwise the process is gone -> ``lost``, with the reason.

An Attempt left ``claimed`` with no Run Lease at all (its service died between creating it and
taking the lease) is ended as ``lost`` by any service once it is older than a Run Lease: a live
service takes the lease milliseconds after creating the Attempt.

Overdue SIGKILL deadlines are then enforced by the dispatcher's normal pass, which runs right
after recovery. Each step is its own short transaction; nothing here holds one across /proc reads.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.runs import AttemptRecord, AttemptStatus
from edge_runtime.local.clock import Clock, read_now_ms
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.attempts import AttemptSupervisor
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.journal import Journal
from edge_runtime.service.log_capture import mark_gap
from edge_runtime.service.worker import WorkerSession

_UNSET = msgspec.UNSET

REASON_NEVER_STARTED = "the service stopped before the process was started"
REASON_STARTING = "the service stopped while starting the process; its identity was never recorded"
REASON_REBOOTED = "the device rebooted while the attempt was running"
REASON_GONE = "the process exited while no service was watching it; its exit status is unknown"
REASON_ABANDONED = "abandoned before a run lease was taken (its service stopped)"


def recover(
    *,
    runs: LocalRunRepository,
    worker: WorkerSession,
    supervisor: AttemptSupervisor,
    controller: LocalProcessController,
    journal: Journal,
    clock: Clock,
    boot_id: str,
    abandon_after_ms: int,
) -> dict[str, int]:
    """Adopt or end the Attempts of earlier sessions; counts by outcome, for the log."""
    counts = {"adopted": 0, "lost": 0, "awaiting_kill": 0, "failed": 0}
    for lease in worker.earlier_session_leases():
        try:
            outcome = _recover_one(lease.attempt_id, runs, worker, supervisor, controller, journal, boot_id)
        except EdgeRuntimeError as exc:
            journal.error("recovery.failed", attempt=lease.attempt_id, error=exc.code, detail=str(exc))
            outcome = "failed"
        counts[outcome] = counts.get(outcome, 0) + 1
    counts["lost"] += end_abandoned(runs=runs, worker=worker, journal=journal, clock=clock,
                                    abandon_after_ms=abandon_after_ms)
    return counts


def end_abandoned(
    *, runs: LocalRunRepository, worker: WorkerSession, journal: Journal, clock: Clock, abandon_after_ms: int
) -> int:
    """End ``claimed`` Attempts that never got a Run Lease and are older than a lease; how many.

    Run at start and at every fallback poll: a service that failed between creating an Attempt
    and taking its lease (crash, busy database) would otherwise leave its Run ``dispatching``.
    """
    ended = 0
    now = read_now_ms(clock)
    for attempt in runs.active_attempts():
        if attempt.status is not AttemptStatus.CLAIMED or attempt.created_at_ms > now - abandon_after_ms:
            continue
        try:
            if worker.lease_of(attempt.id) is None:
                _end(runs, worker, journal, attempt, AttemptStatus.LOST, REASON_ABANDONED)
                ended += 1
        except EdgeRuntimeError as exc:
            journal.error("recovery.failed", attempt=attempt.id, error=exc.code, detail=str(exc))
    return ended


def _recover_one(
    attempt_id: str,
    runs: LocalRunRepository,
    worker: WorkerSession,
    supervisor: AttemptSupervisor,
    controller: LocalProcessController,
    journal: Journal,
    boot_id: str,
) -> str:
    attempt = runs.get_attempt(attempt_id)
    if attempt is None or attempt.status not in (AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.RUNNING):
        worker.complete(attempt_id)  # the Attempt already ended; close the grant it left open
        return "lost"
    if attempt.status is AttemptStatus.CLAIMED:
        return _end(runs, worker, journal, attempt, AttemptStatus.LOST, REASON_NEVER_STARTED)
    identity = attempt.identity
    if attempt.status is AttemptStatus.STARTING or identity is None:
        return _end(runs, worker, journal, attempt, AttemptStatus.LOST, REASON_STARTING)
    if identity.boot_id != boot_id:
        return _end(runs, worker, journal, attempt, AttemptStatus.LOST, REASON_REBOOTED)
    if controller.leader_alive(identity) and supervisor.adopt(attempt):
        return "adopted"
    run = runs.get(attempt.run_id)
    cancelled = run.cancel_requested_at_ms is not _UNSET
    if cancelled and attempt.killed_at_ms is _UNSET and controller.group_alive(identity):
        supervisor.adopt_deferred(attempt, AttemptStatus.CANCELLED, REASON_GONE)
        return "awaiting_kill"
    return _end(runs, worker, journal, attempt, AttemptStatus.LOST, REASON_GONE)


def _end(
    runs: LocalRunRepository,
    worker: WorkerSession,
    journal: Journal,
    attempt: AttemptRecord,
    status: AttemptStatus,
    reason: str,
) -> str:
    if attempt.log_path is not _UNSET:
        # Its process is gone (or unidentifiable): nobody will write to or re-open the FIFO.
        fifo = Path(attempt.log_path).with_suffix(".fifo")
        try:
            if reason in (REASON_GONE, REASON_REBOOTED) and fifo.exists():
                # What the pipe held when the process ended went with it: say so where it is read.
                mark_gap(attempt.log_path, f"output gap: the attempt ended while no service was reading its "
                                           f"output ({reason}); what it wrote after the service stopped, up to "
                                           f"64 KiB, is lost")
            fifo.unlink(missing_ok=True)
        except OSError as exc:
            journal.warning("recovery.log_not_marked", attempt=attempt.id, detail=str(exc))
    runs.finish_attempt(attempt.id, status, actor_id=worker.owner, reason=reason)
    worker.complete(attempt.id)
    journal.info("recovery.ended", run=attempt.run_id, attempt=attempt.id, status=status.value, reason=reason)
    return "lost"
