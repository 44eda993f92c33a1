"""Local Run/Attempt repository: submit, cancel, Attempt lifecycle, and the service's scans.

Every mutation is one ``BEGIN IMMEDIATE`` transaction with the clock read after the lock, and
appends its event through :func:`append_run_event` (Run version CAS + sequence). The Worker/Run
lease authority (``local.worker_lease``) owns the ``claimed -> starting`` barrier, and the creation
of an Attempt: only its fenced ``start_run`` (``local.run_start``) creates one, in the transaction
that checks the caller's worker session (taking work is fenced: a fenced-out service takes nothing). This module
owns Run creation, cancel requests, ``starting -> running`` once the process identity is known, the
end of an Attempt, and the SIGKILL deadline bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw
import msgspec

from edge_runtime.contract.cancellation_dispatch import RUN_ID_MAX_LENGTH
from edge_runtime.contract.errors import StoredRowError
from edge_runtime.contract.run_events import RunEvent
from edge_runtime.contract.run_lease import EVENT_LEASE_COMPLETED, completed_grant_extra
from edge_runtime.contract.runs import (
    WAITING_TO_START_STATUSES,
    EVENT_CANCEL_ESCAPED,
    EVENT_FENCED_END,
    EVENT_CANCEL_REQUESTED,
    EVENT_KILL_SENT,
    EVENT_RUN_CREATED,
    EVENT_RUN_REQUEUED,
    EVENT_RUN_STARTED,
    EVENT_RETRY_QUEUED,
    EVENT_RETRY_SCHEDULED,
    ACTIVE_RUN_STATUSES,
    TERMINAL_ATTEMPT_STATUSES,
    AttemptRecord,
    AttemptStatus,
    CancellationCandidate,
    CancelRunCommand,
    InvalidRunCommandError,
    KillCandidate,
    ProcessIdentity,
    RunDetail,
    RunNotFoundError,
    RunRecord,
    RunStateConflictError,
    RunStatus,
    SubmitRunCommand,
    attempt_event_key,
    require_submit_batch,
    retry_wait_ms,
    run_ended_event,
)
from edge_runtime.contract.cancellation_dispatch import DispatchStatus
from edge_runtime.contract.transitions import (
    REASON_CANCELLED_BEFORE_ANY_ATTEMPT,
    UnstartedRunAction,
    attempt_end_extra,
    cancel_refusal,
    cancel_requested_payload,
    cancels_at_once,
    run_status_after_attempt,
    unstarted_end,
)
from edge_runtime.contract.sql_vocabulary import (
    ACTIVE_ATTEMPT_SQL,
    ACTIVE_RUN_SQL,
    WAITING_DISPATCH_SQL,
    sql_in,
    sql_literal,
)
from edge_runtime.contract.validation import identifier_problem
from edge_runtime.contract.ids import new_id
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import read_now_ms
from edge_runtime.local.notifications import enqueue_run_end
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.run_events import append_run_event, count_foreign_events, list_run_events
from edge_runtime.local.run_lease import complete_with_attempt_end, lease_event
from edge_runtime.local.run_rows import (
    ATTEMPT_COLUMNS,
    RUN_COLUMNS,
    attempt_from_row,
    run_from_row,
    run_repository_errors,
)

_UNSET = msgspec.UNSET
_encode_json = msgspec.json.Encoder().encode

#: Pids kept in a ``run.cancel_escaped`` event (the count is always exact).
_ESCAPED_PIDS_KEPT = 32


def _check_run_id(run_id: object) -> None:
    problem = identifier_problem("run_id", run_id, RUN_ID_MAX_LENGTH)
    if problem is not None:
        raise InvalidRunCommandError(problem)


def _new_id() -> str:
    return new_id()


class LocalRunRepository:
    """Runs, Attempts and the reads the CLI and the device service need (docs/runs.md)."""

    __slots__ = ("_db",)

    def __init__(self, db: LocalDatabase) -> None:
        self._db = db

    # ----------------------------------------------------------------- reads

    def _run_row(self, run_id: str) -> RunRecord | None:
        row = self._db.connection.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if row is None else run_from_row(row)

    def get(self, run_id: str) -> RunRecord:
        """The Run, or :class:`RunNotFoundError`."""
        _check_run_id(run_id)
        with run_repository_errors():
            run = self._run_row(run_id)
        if run is None:
            raise RunNotFoundError(f"no run with id {run_id!r}")
        return run

    def attempts(self, run_id: str) -> list[AttemptRecord]:
        with run_repository_errors():
            rows = self._db.connection.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM run_attempts WHERE run_id = ? ORDER BY attempt", (run_id,)
            ).fetchall()
            return [attempt_from_row(row) for row in rows]

    def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        with run_repository_errors():
            row = self._db.connection.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM run_attempts WHERE id = ?", (attempt_id,)
            ).fetchone()
            return None if row is None else attempt_from_row(row)

    def detail(self, run_id: str) -> RunDetail:
        """The Run with its Attempts and dispatch record, for ``show``."""
        with self._db.snapshot():
            run = self.get(run_id)
            attempts = self.attempts(run_id)
            dispatch = LocalCancellationDispatchRepository(self._db).find_by_run_id(run_id)
        return RunDetail(**msgspec.structs.asdict(run), attempts=attempts,
                         dispatch=msgspec.UNSET if dispatch is None else dispatch)

    def list_runs(self, *, limit: int = 50, status: RunStatus | None = None, name: str | None = None,
                  schedule_id: str | None = None, before_ms: int | None = None) -> list[RunRecord]:
        """Newest first; ``name`` and ``schedule_id`` filter exactly; ``before_ms`` (the panel's
        next page): only Runs created before then."""
        # A schedule's Runs are read through its index (``runs_schedule_slot``): the ``?3 IS NULL OR``
        # form would scan every Run from the newest (the QingLong crons list reads 700 schedules' Runs).
        by_schedule = "AND (?3 IS NULL OR schedule_id = ?3)" if schedule_id is None else "AND schedule_id = ?3"
        with run_repository_errors():
            if before_ms is not None:
                rows = self._db.connection.execute(
                    f"SELECT {RUN_COLUMNS} FROM runs WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR name = ?2) "
                    f"{by_schedule} AND created_at_ms < ?5 "
                    "ORDER BY created_at_ms DESC, rowid DESC LIMIT ?4",
                    (None if status is None else RunStatus(status).value, name, schedule_id, limit, before_ms),
                ).fetchall()
            elif name is not None or schedule_id is not None:
                rows = self._db.connection.execute(
                    f"SELECT {RUN_COLUMNS} FROM runs WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR name = ?2) "
                    f"{by_schedule} ORDER BY created_at_ms DESC, rowid DESC LIMIT ?4",
                    (None if status is None else RunStatus(status).value, name, schedule_id, limit),
                ).fetchall()
            elif status is None:
                rows = self._db.connection.execute(
                    f"SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at_ms DESC, rowid DESC LIMIT ?", (limit,)
                ).fetchall()
            else:
                rows = self._db.connection.execute(
                    f"SELECT {RUN_COLUMNS} FROM runs WHERE status = ? ORDER BY created_at_ms DESC, rowid DESC "
                    "LIMIT ?",
                    (RunStatus(status).value, limit),
                ).fetchall()
            return [run_from_row(row) for row in rows]

    def events(self, run_id: str) -> list[RunEvent]:
        self.get(run_id)
        with run_repository_errors():
            return list_run_events(self._db.connection, run_id)

    # ----------------------------------------------------------------- submit / cancel

    def submit(self, cmd: SubmitRunCommand, *, actor_id: str = "cli") -> RunRecord:
        """Create a queued, runtime-owned Run and its ``run.created`` event."""
        SubmitRunCommand.require(cmd, "submit")
        with run_repository_errors(), self._db.write() as now:
            return self._run_row(_insert_submitted(self._db.connection, cmd, now, actor_id))

    def submit_batch(self, cmds: list[SubmitRunCommand], *, actor_id: str = "cli") -> list[str]:
        """Create a queued Run (and its ``run.created`` event) for each command, all in one
        transaction: every Run is stored, or none. Their ids, in order."""
        require_submit_batch(cmds)
        with run_repository_errors(), self._db.write() as now:
            connection = self._db.connection
            return [_insert_submitted(connection, cmd, now, actor_id) for cmd in cmds]

    def request_cancel(self, cmd: CancelRunCommand, *, actor_id: str = "cli") -> RunRecord:
        """Record a durable cancel request (idempotent while one is pending).

        A Run that never got an Attempt is cancelled at once; otherwise the dispatcher delivers
        the request to the Attempt's process.

        Raises:
            RunNotFoundError: no such Run.
            RunStateConflictError: the Run already ended, or is not runtime-owned.
        """
        CancelRunCommand.require(cmd, "request_cancel")
        reason = None if cmd.reason is _UNSET else cmd.reason
        with run_repository_errors(), self._db.write() as now:
            connection = self._db.connection
            run = self._run_row(cmd.run_id)
            if run is None:
                raise RunNotFoundError(f"no run with id {cmd.run_id!r}")
            refusal = cancel_refusal(run)
            if refusal is not None:
                raise refusal
            if run.cancel_requested_at_ms is not _UNSET:
                return run
            active = connection.execute(
                f"SELECT count(*) FROM run_attempts WHERE run_id = ? AND status IN {ACTIVE_ATTEMPT_SQL}",
                (cmd.run_id,),
            ).fetchone()[0]
            connection.execute(
                "UPDATE runs SET cancel_requested_at_ms = ?, cancel_reason = ? WHERE id = ?",
                (now, reason, cmd.run_id),
            )
            _event(connection, cmd.run_id, EVENT_CANCEL_REQUESTED, EVENT_CANCEL_REQUESTED, actor_id,
                   cancel_requested_payload(now, reason), now)
            if cancels_at_once(run.status, active):
                end_run(connection, cmd.run_id, RunStatus.CANCELLED, now, actor_id, attempt_id=None,
                        extra={"reason": REASON_CANCELLED_BEFORE_ANY_ATTEMPT})
            return self._run_row(cmd.run_id)

    def set_aside(self, run_id: str, error: StoredRowError, *, actor_id: str) -> bool:
        """End a Run waiting to start (queued, or waiting for its retry) that a broken stored row
        keeps from starting: ``failed``, its ``run.failed`` event carrying the error's code and
        reason. Events another program appended to its log uncounted are counted first
        (``count_foreign_events``: they stay, the end is appended after them). False when it no
        longer waits (it started or ended meanwhile).

        Raises:
            RunRepositoryError: the database failed, or the Run's end could not be recorded either
                (the caller keeps it aside for as long as it runs).
        """
        with run_repository_errors(), self._db.write() as now:
            connection = self._db.connection
            row = connection.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None or RunStatus(row[0]) not in WAITING_TO_START_STATUSES:
                return False
            count_foreign_events(connection, run_id)
            connection.execute("UPDATE runs SET retry_at_ms = NULL WHERE id = ?", (run_id,))
            end_run(connection, run_id, RunStatus.FAILED, now, actor_id, attempt_id=None,
                    extra={"error": error.code, "reason": error.reason()})
            return True

    # ----------------------------------------------------------------- attempt lifecycle

    def requeue_unstarted(self, attempt_id: str, *, actor_id: str, reason: str) -> AttemptRecord:
        """An Attempt that never got its Run Lease: end it and put its Run back in the queue.

        Running out of slots is a scheduling condition, not a failure of the user's command, so
        the Attempt ends ``lost`` with ``reason`` and the Run goes back to ``queued`` for a later
        Attempt. If a cancel arrived meanwhile, the Attempt and the Run end ``cancelled`` instead
        (see :func:`end_unstarted`). Only a ``claimed`` Attempt of a ``dispatching`` Run qualifies.

        Raises:
            RunStateConflictError: the Attempt is not ``claimed`` or its Run is not ``dispatching``.
        """
        with run_repository_errors(), self._db.write() as now:
            attempt = self._attempt_row(attempt_id)
            if attempt is None or attempt.status is not AttemptStatus.CLAIMED:
                state = "missing" if attempt is None else attempt.status.value
                raise RunStateConflictError(f"attempt {attempt_id} is {state}, not claimed")
            run = self._run_row(attempt.run_id)
            if run.status is not RunStatus.DISPATCHING:
                raise RunStateConflictError(f"run {run.id} is {run.status.value}, not dispatching")
            end_unstarted(self._db.connection, attempt_id, run, reason=reason, now=now, actor_id=actor_id,
                          may_have_started=False)
            return self._attempt_row(attempt_id)

    def record_running(
        self, attempt_id: str, identity: ProcessIdentity, *, log_path: str, actor_id: str
    ) -> AttemptRecord:
        """The process exists: store its identity and move ``starting -> running``.

        Committed without a WAL sync (``synced=False``): the identity is what a restarted service
        needs to re-adopt or cancel a process that outlived the service, and a crash of the service
        keeps the commit (it is in the page cache). Only a power cut or a kernel crash can lose it,
        and those end the process too: the Attempt is then ``starting`` without an identity, and
        the orphan sweep ends it ``lost`` once its grant ran out, as it would have ended it for
        the reboot. Any later synced commit (the Attempt's end, the next start, a checkpoint) makes
        it durable, since WAL frames are replayed in order. One sync fewer per Run (fewer flash writes).

        Raises:
            RunStateConflictError: the Attempt is not ``starting``.
        """
        with run_repository_errors(), self._db.write(synced=False) as now:
            connection = self._db.connection
            attempt = self._attempt_row(attempt_id)
            if attempt is None or attempt.status is not AttemptStatus.STARTING:
                state = "missing" if attempt is None else attempt.status.value
                raise RunStateConflictError(f"attempt {attempt_id} is {state}, not starting")
            connection.execute(
                f"UPDATE run_attempts SET status = {sql_literal(AttemptStatus.RUNNING)}, pid = ?, pgid = ?, "
                "process_start_ticks = ?, boot_id = ?, log_path = ?, started_at_ms = ?, updated_at_ms = ? "
                f"WHERE id = ? AND status = {sql_literal(AttemptStatus.STARTING)}",
                (identity.pid, identity.pgid, identity.start_ticks, identity.boot_id, log_path, now, now, attempt_id),
            )
            connection.execute(
                f"UPDATE runs SET status = {sql_literal(RunStatus.RUNNING)} WHERE id = ? "
                f"AND status IN {sql_in(RunStatus, {RunStatus.QUEUED, RunStatus.DISPATCHING})}",
                (attempt.run_id,),
            )
            _event(connection, attempt.run_id, EVENT_RUN_STARTED, attempt_event_key(attempt.attempt, "running"),
                   actor_id, {"pid": identity.pid}, now, attempt_id=attempt_id)
            return self._attempt_row(attempt_id)

    def finish_attempt(
        self,
        attempt_id: str,
        status: AttemptStatus,
        *,
        actor_id: str,
        exit_code: int | None = None,
        reason: str | None = None,
    ) -> AttemptRecord:
        """End an active Attempt and its Run, with one event (idempotent for an ended Attempt), and
        complete the Attempt's Run Lease if one is still held, in the same transaction.

        A lost Attempt ends the Run as failed, or cancelled when a cancel was requested.
        """
        status = AttemptStatus(status)
        if status not in TERMINAL_ATTEMPT_STATUSES:
            raise InvalidRunCommandError(f"{status.value} is not a terminal attempt status")
        with run_repository_errors(), self._db.write() as now:
            connection = self._db.connection
            attempt = self._require_attempt(attempt_id)
            if attempt.status in TERMINAL_ATTEMPT_STATUSES:
                return attempt
            connection.execute(
                "UPDATE run_attempts SET status = ?, exit_code = ?, end_reason = ?, finished_at_ms = ?, "
                "updated_at_ms = ? WHERE id = ?",
                (status.value, exit_code, reason, now, now, attempt_id),
            )
            run = self._run_row(attempt.run_id)
            run_status = run_status_after_attempt(status, cancel_requested=run.cancel_requested_at_ms is not _UNSET)
            extra = attempt_end_extra(status, exit_code, reason)
            # One commit for the Attempt's end and its grant's (fewer flash writes: fewer syncs per Run), and
            # one event when the Run ends with it.
            completed = complete_with_attempt_end(connection, attempt_id, now)
            if run.status in ACTIVE_RUN_STATUSES:
                if completed is not None:
                    extra.update(completed_grant_extra(completed))
                end_or_retry(connection, run, attempt.attempt, run_status, now, actor_id, attempt_id=attempt_id,
                             extra=extra)
            elif completed is not None:
                lease_event(connection, None, completed, _new_id(), EVENT_LEASE_COMPLETED, "completed", now,
                            attempt_status=status.value)
            return self._attempt_row(attempt_id)

    def record_termination_requested(self, attempt_id: str, *, grace_ms: int) -> AttemptRecord:
        """Note that SIGTERM went to the group; the SIGKILL deadline is ``now + grace_ms``.

        The first deadline stands: a later retry never pushes it out.
        """
        with run_repository_errors(), self._db.write() as now:
            self._db.connection.execute(
                "UPDATE run_attempts SET term_sent_at_ms = coalesce(term_sent_at_ms, ?), "
                "kill_deadline_at_ms = coalesce(kill_deadline_at_ms, ?), updated_at_ms = ? WHERE id = ?",
                (now, now + grace_ms, now, attempt_id),
            )
            return self._require_attempt(attempt_id)

    def record_killed(self, attempt_id: str, *, actor_id: str, outcome: str = "killed") -> AttemptRecord:
        """Note that SIGKILL went to the group after the grace period, with a ``run.kill_sent`` event.

        ``outcome`` says what the SIGKILL step found (``killed``, ``already_exited``, ...); it is
        recorded once either way, so an enforced deadline is never enforced again.
        """
        with run_repository_errors(), self._db.write() as now:
            connection = self._db.connection
            attempt = self._require_attempt(attempt_id)
            if attempt.killed_at_ms is not _UNSET:
                return attempt
            connection.execute(
                "UPDATE run_attempts SET killed_at_ms = ?, updated_at_ms = ? WHERE id = ?", (now, now, attempt_id)
            )
            _event(connection, attempt.run_id, EVENT_KILL_SENT, attempt_event_key(attempt.attempt, "kill-sent"),
                   actor_id, {"kill_deadline_at_ms": attempt.kill_deadline_at_ms, "outcome": outcome},
                   now, attempt_id=attempt_id)
            return self._attempt_row(attempt_id)

    def record_escaped_processes(self, attempt_id: str, pids: list[int], *, actor_id: str) -> None:
        """A ``run.cancel_escaped`` event: these descendants had left the Attempt's process group
        when it was cancelled, so its signals do not reach them. Recorded once per Attempt."""
        self._event_once(attempt_id, "cancel-escaped", EVENT_CANCEL_ESCAPED, actor_id,
                         lambda attempt: {"count": len(pids), "pids": pids[:_ESCAPED_PIDS_KEPT]})

    def record_fenced_end(self, attempt_id: str, *, exit_code: int | None, reason: str | None,
                          actor_id: str) -> None:
        """A ``run.fenced_end`` event: a worker saw this Attempt's process end after the Attempt had
        already been ended (``lost``, by the orphan sweep): what it saw, never a new verdict (the
        Attempt and its Run are not touched). Recorded once per Attempt."""
        self._event_once(attempt_id, "fenced-end", EVENT_FENCED_END, actor_id,
                         lambda attempt: {"exit_code": exit_code, "reason": reason,
                                          "attempt_status": attempt.status.value})

    def _event_once(self, attempt_id: str, step: str, event_type: str, actor_id: str,
                    payload: Callable[[AttemptRecord], dict[str, Any]]) -> None:
        """Append the Attempt's ``step`` event unless it is already there (its dedupe key)."""
        with run_repository_errors(), self._db.write() as now:
            connection = self._db.connection
            attempt = self._require_attempt(attempt_id)
            dedupe_key = attempt_event_key(attempt.attempt, step)
            if connection.execute("SELECT 1 FROM run_events WHERE run_id = ? AND dedupe_key = ?",
                                  (attempt.run_id, dedupe_key)).fetchone():
                return
            _event(connection, attempt.run_id, event_type, dedupe_key, actor_id, payload(attempt), now,
                   attempt_id=attempt_id)

    # ----------------------------------------------------------------- the service's scans
    # Read-only queries over partial indexes (migration 0003), so an idle service costs almost
    # nothing. They read the store's time for "due" and decide nothing: the claim or transition
    # that follows re-checks under ``BEGIN IMMEDIATE``.

    def find_run_ids(self, form: str, limit: int) -> list[str]:
        """See the ``RunStore`` port; ``form`` is matched literally (no LIKE wildcards)."""
        with run_repository_errors():
            rows = self._db.connection.execute(
                "SELECT id FROM runs WHERE substr(id, 1, length(?1)) = ?1 OR substr(id, -length(?1)) = ?1 "
                "ORDER BY created_at_ms DESC LIMIT ?2", (form, limit),
            ).fetchall()
        return [row[0] for row in rows]

    def release_due_retries(self, *, actor_id: str) -> int:
        """Queue again every ``retry_wait`` Run whose wait is over (one event each); how many.
        Reads first: a tick with nothing due writes nothing."""
        with run_repository_errors():
            due = self._db.connection.execute(
                f"SELECT 1 FROM runs WHERE status = {sql_literal(RunStatus.RETRY_WAIT)} AND retry_at_ms <= ? LIMIT 1",
                (read_now_ms(self._db.clock),),
            ).fetchone()
        if due is None:
            return 0
        with run_repository_errors(), self._db.write() as now:
            connection = self._db.connection
            rows = connection.execute(
                f"UPDATE runs SET status = {sql_literal(RunStatus.QUEUED)}, retry_at_ms = NULL "
                f"WHERE status = {sql_literal(RunStatus.RETRY_WAIT)} AND retry_at_ms <= ? "
                "RETURNING id, (SELECT max(attempt) FROM run_attempts a WHERE a.run_id = runs.id)",
                (now,),
            ).fetchall()
            for run_id, number in rows:
                append_run_event(connection, run_id=run_id, event_id=_new_id(), event_type=EVENT_RETRY_QUEUED,
                                 dedupe_key=attempt_event_key((number or 0) + 1, "queued"), actor_type="worker",
                                 actor_id=actor_id, payload={"attempt": (number or 0) + 1}, now_ms=now)
            return len(rows)

    def queued_run_ids(self, limit: int) -> list[str]:
        """Oldest queued Runs without a cancel request, to start."""
        with run_repository_errors():
            rows = self._db.connection.execute(
                f"SELECT id FROM runs WHERE status = {sql_literal(RunStatus.QUEUED)} AND cancel_requested_at_ms IS NULL "
                "AND execution_owner = 'runtime' ORDER BY created_at_ms, rowid LIMIT ?",
                (limit,),
            ).fetchall()
            return [row[0] for row in rows]


    def active_attempts(self) -> list[AttemptRecord]:
        """Every Attempt that may still own a process (for watching and restart recovery)."""
        with run_repository_errors():
            rows = self._db.connection.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM run_attempts WHERE status IN {ACTIVE_ATTEMPT_SQL} ORDER BY created_at_ms"
            ).fetchall()
            return [attempt_from_row(row) for row in rows]

    def cancellation_candidates(self, limit: int = 32) -> list[CancellationCandidate]:
        """Cancel-requested active Runs whose active Attempt has no dispatch yet, or a due one.

        Due means: pending/retry_wait with ``next_attempt_at_ms <= now``, or a lease that expired.
        A read; the claim decides for real under the write lock.
        """
        now = read_now_ms(self._db.clock)
        with run_repository_errors():
            rows = self._db.connection.execute(
                f"""
                SELECT r.id, a.id, r.cancel_requested_at_ms
                FROM runs r
                JOIN run_attempts a ON a.run_id = r.id AND a.status IN {ACTIVE_ATTEMPT_SQL}
                LEFT JOIN run_cancellation_dispatches d ON d.run_id = r.id
                WHERE r.cancel_requested_at_ms IS NOT NULL AND r.status IN {ACTIVE_RUN_SQL}
                  AND r.execution_owner = 'runtime'
                  AND (d.run_id IS NULL
                       OR (d.attempt_id = a.id AND d.status IN {WAITING_DISPATCH_SQL} AND d.next_attempt_at_ms <= ?1)
                       OR (d.attempt_id = a.id AND d.status = {sql_literal(DispatchStatus.LEASED)}
                           AND d.lease_expires_at_ms <= ?1))
                ORDER BY r.cancel_requested_at_ms
                LIMIT ?2
                """,
                (now, limit),
            ).fetchall()
            return [CancellationCandidate(*row) for row in rows]

    def lost_with_process(self, worker_id: str, *, boot_id: str, limit: int) -> list[AttemptRecord]:
        """See ``RunStore.lost_with_process`` (the PostgreSQL query, in SQLite)."""
        columns = ", ".join(f"a.{name.strip()}" for name in ATTEMPT_COLUMNS.split(","))
        with run_repository_errors():
            rows = self._db.connection.execute(
                f"SELECT {columns} FROM run_attempts a "
                "JOIN run_dispatch_leases l ON l.attempt_id = a.id AND l.worker_id = ? "
                f"WHERE a.status = {sql_literal(AttemptStatus.LOST)} AND a.pid IS NOT NULL AND a.boot_id = ? "
                "AND NOT EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = a.run_id AND e.attempt_id = a.id "
                "AND e.type = ?) "
                "ORDER BY a.finished_at_ms DESC, a.id LIMIT ?", (worker_id, boot_id, EVENT_FENCED_END, limit)
            ).fetchall()
        return [attempt_from_row(row) for row in rows]

    def kill_candidates(self) -> list[KillCandidate]:
        """Active Attempts whose SIGKILL deadline has passed and that were not killed yet."""
        now = read_now_ms(self._db.clock)
        with run_repository_errors():
            rows = self._db.connection.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM run_attempts WHERE kill_deadline_at_ms IS NOT NULL "
                f"AND killed_at_ms IS NULL AND status IN {ACTIVE_ATTEMPT_SQL} AND kill_deadline_at_ms <= ?",
                (now,),
            ).fetchall()
        candidates = []
        for row in rows:
            attempt = attempt_from_row(row)
            identity = attempt.identity
            if identity is not None:
                candidates.append(KillCandidate(attempt.id, attempt.run_id, identity, attempt.kill_deadline_at_ms))
        return candidates

    def next_due_at_ms(self) -> int | None:
        """The earliest future time at which cancellation or kill work becomes due, or None.

        Lets the service sleep exactly until then instead of polling.
        """
        with run_repository_errors():
            row = self._db.connection.execute(
                f"""
                SELECT min(t) FROM (
                    SELECT min(d.next_attempt_at_ms) AS t FROM run_cancellation_dispatches d
                      JOIN runs r ON r.id = d.run_id AND r.status IN {ACTIVE_RUN_SQL}
                      WHERE d.status IN {WAITING_DISPATCH_SQL}
                    UNION ALL
                    SELECT min(d.lease_expires_at_ms) FROM run_cancellation_dispatches d
                      JOIN runs r ON r.id = d.run_id AND r.status IN {ACTIVE_RUN_SQL}
                      WHERE d.status = {sql_literal(DispatchStatus.LEASED)}
                    UNION ALL
                    SELECT min(retry_at_ms) FROM runs WHERE status = {sql_literal(RunStatus.RETRY_WAIT)}
                    UNION ALL
                    SELECT min(kill_deadline_at_ms) FROM run_attempts
                      WHERE kill_deadline_at_ms IS NOT NULL AND killed_at_ms IS NULL
                        AND status IN {ACTIVE_ATTEMPT_SQL}
                )
                """
            ).fetchone()
            return row[0]

    # ----------------------------------------------------------------- helpers

    def _require_attempt(self, attempt_id: str) -> AttemptRecord:
        attempt = self._attempt_row(attempt_id)
        if attempt is None:
            raise RunNotFoundError(f"no attempt with id {attempt_id!r}")
        return attempt

    def _attempt_row(self, attempt_id: str) -> AttemptRecord | None:
        row = self._db.connection.execute(
            f"SELECT {ATTEMPT_COLUMNS} FROM run_attempts WHERE id = ?", (attempt_id,)
        ).fetchone()
        return None if row is None else attempt_from_row(row)




def _event(
    connection: apsw.Connection, run_id: str, event_type: str, dedupe_key: str, actor_id: str,
    payload: dict[str, Any], now: int, *, attempt_id: str | None = None,
) -> None:
    """Append one event of the Run: by the worker when it concerns an Attempt, else by the user."""
    append_run_event(connection, run_id=run_id, event_id=_new_id(), event_type=event_type, dedupe_key=dedupe_key,
                     actor_type="user" if attempt_id is None else "worker", actor_id=actor_id,
                     attempt_id=attempt_id, payload=payload, now_ms=now)


def end_unstarted(
    connection: apsw.Connection,
    attempt_id: str,
    run: RunRecord,
    *,
    reason: str,
    now: int,
    actor_id: str,
    may_have_started: bool,
) -> RunStatus:
    """End an Attempt whose process was never recorded, as ``transitions.unstarted_end`` decides,
    inside the caller's write transaction; the Run's new status."""
    end = unstarted_end(run.status, cancel_requested=run.cancel_requested_at_ms is not _UNSET, reason=reason,
                        may_have_started=may_have_started)
    number = connection.execute(
        "UPDATE run_attempts SET status = ?, end_reason = ?, finished_at_ms = ?, updated_at_ms = ? WHERE id = ? "
        "RETURNING attempt",
        (end.attempt_status.value, end.reason, now, now, attempt_id),
    ).fetchone()[0]
    if end.run_action is UnstartedRunAction.KEEP:
        return run.status
    if end.run_action is UnstartedRunAction.END:
        return end_or_retry(connection, run, number, end.run_status, now, actor_id, attempt_id=attempt_id,
                            extra={"attempt_status": end.attempt_status.value, "reason": end.reason})
    connection.execute("UPDATE runs SET status = ? WHERE id = ?", (RunStatus.QUEUED.value, run.id))
    _event(connection, run.id, EVENT_RUN_REQUEUED, attempt_event_key(number, "requeued"), actor_id,
           {"reason": end.reason}, now, attempt_id=attempt_id)
    return RunStatus.QUEUED


def end_or_retry(
    connection: apsw.Connection,
    run: RunRecord,
    attempt_number: int,
    status: RunStatus,
    now: int,
    actor_id: str,
    *,
    attempt_id: str,
    extra: dict[str, Any],
) -> RunStatus:
    """An Attempt of the active ``run`` ended: end the Run in ``status`` (what the Attempt's end
    leads to), or, when it failed, no cancel was requested (a timeout is one) and retries are
    left, put it in ``retry_wait`` for its next Attempt. The Run's new status."""
    wait_ms = None
    if status is RunStatus.FAILED and run.cancel_requested_at_ms is _UNSET:
        wait_ms = retry_wait_ms(None if run.retries is _UNSET else run.retries,
                                None if run.retry_delay_ms is _UNSET else run.retry_delay_ms, attempt_number)
    if wait_ms is None:
        end_run(connection, run.id, status, now, actor_id, attempt_id=attempt_id, extra=extra)
        return status
    connection.execute("UPDATE runs SET status = ?, retry_at_ms = ? WHERE id = ?",
                       (RunStatus.RETRY_WAIT.value, now + wait_ms, run.id))
    _event(connection, run.id, EVENT_RETRY_SCHEDULED, attempt_event_key(attempt_number, "retry"), actor_id,
           {**extra, "retry_at_ms": now + wait_ms, "delay_ms": wait_ms, "retries_left": run.retries - attempt_number},
           now, attempt_id=attempt_id)
    return RunStatus.RETRY_WAIT


def end_run(
    connection: apsw.Connection,
    run_id: str,
    status: RunStatus,
    now: int,
    actor_id: str,
    *,
    attempt_id: str | None,
    extra: dict[str, Any],
) -> None:
    """Move a Run to a terminal ``status`` with its one ``run.<status>`` event, and write the
    notifications its end calls for into the outbox, in the same transaction: an end is never
    durable without them (docs/notifications.md)."""
    connection.execute("UPDATE runs SET status = ?, finished_at_ms = ? WHERE id = ?", (status.value, now, run_id))
    _event(connection, run_id, run_ended_event(status), "run.finished", actor_id,
           {"status": status.value, **extra}, now, attempt_id=attempt_id)
    enqueue_run_end(connection, run_id, now)


def _insert_submitted(connection: apsw.Connection, cmd: SubmitRunCommand, now: int, actor_id: str) -> str:
    """Insert the Run a user submitted with ``cmd`` (inside the caller's transaction); its id."""
    return insert_run(connection, cmd.argv, name=None if cmd.name is _UNSET else cmd.name, now=now,
                      actor_type="user", actor_id=actor_id,
                      timeout_ms=None if cmd.timeout_ms is _UNSET else cmd.timeout_ms,
                      env=None if cmd.env is _UNSET else cmd.env, cwd=None if cmd.cwd is _UNSET else cmd.cwd,
                      retries=None if cmd.retries is _UNSET else cmd.retries,
                      retry_delay_ms=None if cmd.retry_delay_ms is _UNSET else cmd.retry_delay_ms,
                      task_user=None if cmd.task_user is _UNSET else cmd.task_user)


def insert_run(
    connection: apsw.Connection,
    argv: list[str],
    *,
    name: str | None,
    now: int,
    actor_type: str,
    actor_id: str,
    timeout_ms: int | None = None,
    schedule_id: str | None = None,
    scheduled_for_ms: int | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    retries: int | None = None,
    retry_delay_ms: int | None = None,
    task_user: str | None = None,
) -> str:
    """Insert a queued, runtime-owned Run with its ``run.created`` event; its id.

    Runs inside the caller's write transaction (``submit``, and a schedule's fire).
    """
    run_id = _new_id()
    connection.execute(
        "INSERT INTO runs (id, execution_owner, status, version, event_sequence, name, command, created_at_ms, "
        "updated_at_ms, timeout_ms, schedule_id, scheduled_for_ms, env, cwd, retries, retry_delay_ms, task_user) "
        "VALUES (?, 'runtime', ?, 0, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (run_id, RunStatus.QUEUED.value, name, _encode_json(argv).decode(), now, now, timeout_ms, schedule_id,
         scheduled_for_ms, None if not env else _encode_json(env).decode(), cwd, retries or None,
         retry_delay_ms if retries else None, task_user),
    )
    payload: dict[str, Any] = {"status": RunStatus.QUEUED.value, "argc": len(argv)}
    if schedule_id is not None:
        payload |= {"schedule_id": schedule_id, "scheduled_for_ms": scheduled_for_ms}
    if timeout_ms is not None:
        payload["timeout_ms"] = timeout_ms
    append_run_event(
        connection,
        run_id=run_id,
        event_id=_new_id(),
        event_type=EVENT_RUN_CREATED,
        dedupe_key=EVENT_RUN_CREATED,
        actor_type=actor_type,
        actor_id=actor_id,
        payload=payload,
        now_ms=now,
    )
    return run_id
