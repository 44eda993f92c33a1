"""PostgreSQL Run/Attempt repository: the same operations and results as the Local one (docs/runs.md).

Every mutation is one READ COMMITTED transaction (cluster-profile.md §4): the rows it changes are
locked ``FOR NO KEY UPDATE`` in the global order Run -> Attempt, database time is read once after
the last lock, and each event is the Run's version CAS + sequence + insert of
:func:`cluster_postgres.run_events.append_run_event`, so a failure rolls all of it back. The scans
the service polls are plain reads that decide nothing; the queue scan skips Runs another
transaction holds (``SKIP LOCKED``), and the transition that follows re-checks under its locks.
Rows become records in :mod:`cluster_postgres.run_rows`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import psycopg

from edge_runtime.contract.cancellation_dispatch import RUN_ID_MAX_LENGTH, DispatchStatus
from edge_runtime.contract.errors import StoredRowError
from edge_runtime.contract.run_events import RunEvent
from edge_runtime.contract.run_lease import EVENT_LEASE_COMPLETED, completed_grant_extra
from edge_runtime.contract.runs import (
    WAITING_TO_START_STATUSES,
    ACTIVE_RUN_STATUSES,
    EVENT_CANCEL_ESCAPED,
    EVENT_FENCED_END,
    EVENT_CANCEL_REQUESTED,
    EVENT_KILL_SENT,
    EVENT_RUN_CREATED,
    EVENT_RUN_REQUEUED,
    EVENT_RUN_STARTED,
    EVENT_RETRY_QUEUED,
    EVENT_RETRY_SCHEDULED,
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
from edge_runtime.contract.sql_vocabulary import ACTIVE_ATTEMPT_SQL, ACTIVE_RUN_SQL, WAITING_DISPATCH_SQL, sql_literal
from edge_runtime.contract.validation import identifier_problem
from cluster_postgres.notifications import enqueue_run_end
from cluster_postgres.cancellation_dispatch import PostgresCancellationDispatchRepository
from cluster_postgres.connection import NOTIFY_WAKE
from cluster_postgres.errors import ClusterRunStorageError, Transaction, reading
from cluster_postgres.worker_lease_rows import complete_held_grant, held_grant, lease_event
from cluster_postgres.run_events import append_run_event, clamp, database_now
from cluster_postgres.run_rows import ATTEMPT_COLUMNS, RUN_COLUMNS, absent, attempt_from_row, run_from_row

_UNSET = msgspec.UNSET
_encode_json = msgspec.json.Encoder().encode
_decode_payload = msgspec.json.Decoder(dict[str, Any]).decode

EXECUTOR_LOCAL_PROCESS = "local_process"
#: Pids kept in a ``run.cancel_escaped`` event (the count is always exact).
_ESCAPED_PIDS_KEPT = 32


_SELECT_RUN = f"SELECT {RUN_COLUMNS} FROM ql3.runs WHERE id = %s"
_LOCK_RUN = _SELECT_RUN + " FOR NO KEY UPDATE"
_SELECT_ATTEMPT = f"SELECT {ATTEMPT_COLUMNS} FROM ql3.run_attempts WHERE id = %s"
_LOCK_ATTEMPT = _SELECT_ATTEMPT + " FOR NO KEY UPDATE"
_ATTEMPT_RUN_ID = "SELECT run_id FROM ql3.run_attempts WHERE id = %s"  # immutable: read before locking the Run
_EVENT_COLUMNS = "id, run_id, sequence, type, dedupe_key, actor_type, actor_id, attempt_id, payload, created_at_ms"


def _check_run_id(run_id: object) -> None:
    problem = identifier_problem("run_id", run_id, RUN_ID_MAX_LENGTH)
    if problem is not None:
        raise InvalidRunCommandError(problem)


def _new_id() -> str:
    return str(uuid.uuid4())


#: The scans of a worker see only the Attempts whose Run Lease it holds (any session of it):
#: their processes are on its host; a cancel or SIGKILL sent from another host could reach
#: nothing, or worse, an unrelated process with the same pid there.
_OWNED_BY = "EXISTS (SELECT 1 FROM ql3.run_dispatch_leases ol WHERE ol.attempt_id = {attempt} AND ol.worker_id = %s)"


class PostgresRunRepository:
    """Runs, Attempts and the reads the CLI and the service need, on a ``ql3_runtime`` connection.

    ``scan_worker_id``: the worker whose service calls the scans (``cancellation_candidates``,
    ``kill_candidates``, ``next_due_at_ms``); they then return only that worker's Attempts. None:
    every Attempt (tools, tests, one host).
    """

    __slots__ = ("_conn", "_cur", "_scan_worker_id")

    def __init__(self, conn: psycopg.Connection[Any], *, scan_worker_id: str | None = None) -> None:
        self._conn = conn
        self._cur = conn.cursor()
        self._scan_worker_id = scan_worker_id

    def _owned(self, attempt: str) -> tuple[str, tuple[str, ...]]:
        """The scans' worker filter on the Attempt id column ``attempt``, and its parameters."""
        if self._scan_worker_id is None:
            return "", ()
        return " AND " + _OWNED_BY.format(attempt=attempt), (self._scan_worker_id,)

    def _tx(self) -> Transaction:
        return Transaction(self._conn, ClusterRunStorageError)

    # ----------------------------------------------------------------- reads

    def _run_row(self, run_id: str) -> RunRecord | None:
        row = self._cur.execute(_SELECT_RUN, (run_id,)).fetchone()
        return None if row is None else run_from_row(row)

    def _attempt_row(self, attempt_id: str) -> AttemptRecord | None:
        row = self._cur.execute(_SELECT_ATTEMPT, (attempt_id,)).fetchone()
        return None if row is None else attempt_from_row(row)

    def get(self, run_id: str) -> RunRecord:
        """The Run, or :class:`RunNotFoundError`."""
        _check_run_id(run_id)
        with reading(ClusterRunStorageError):
            run = self._run_row(run_id)
        if run is None:
            raise RunNotFoundError(f"no run with id {run_id!r}")
        return run

    def attempts(self, run_id: str) -> list[AttemptRecord]:
        with reading(ClusterRunStorageError):
            rows = self._cur.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM ql3.run_attempts WHERE run_id = %s ORDER BY attempt", (run_id,)
            ).fetchall()
        return [attempt_from_row(row) for row in rows]

    def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        with reading(ClusterRunStorageError):
            return self._attempt_row(attempt_id)

    def detail(self, run_id: str) -> RunDetail:
        """The Run with its Attempts and dispatch record, for ``show``, from one snapshot."""
        _check_run_id(run_id)
        with self._tx():
            self._cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            run = self.get(run_id)
            attempts = self.attempts(run_id)
            dispatch = PostgresCancellationDispatchRepository(self._conn).find_by_run_id(run_id)
        return RunDetail(**msgspec.structs.asdict(run), attempts=attempts,
                         dispatch=_UNSET if dispatch is None else dispatch)

    def list_runs(self, *, limit: int = 50, status: RunStatus | None = None, name: str | None = None,
                  schedule_id: str | None = None) -> list[RunRecord]:
        """Newest first; ``name`` and ``schedule_id`` filter exactly."""
        with reading(ClusterRunStorageError):
            if name is not None or schedule_id is not None:
                rows = self._cur.execute(
                    f"SELECT {RUN_COLUMNS} FROM ql3.runs WHERE (%(s)s::text IS NULL OR status = %(s)s) "
                    "AND (%(n)s::text IS NULL OR name = %(n)s) AND (%(i)s::text IS NULL OR schedule_id = %(i)s) "
                    "ORDER BY created_at_ms DESC, id DESC LIMIT %(l)s",
                    {"s": None if status is None else RunStatus(status).value, "n": name, "i": schedule_id,
                     "l": limit},
                ).fetchall()
            elif status is None:
                rows = self._cur.execute(
                    f"SELECT {RUN_COLUMNS} FROM ql3.runs ORDER BY created_at_ms DESC, id DESC LIMIT %s", (limit,)
                ).fetchall()
            else:
                rows = self._cur.execute(
                    f"SELECT {RUN_COLUMNS} FROM ql3.runs WHERE status = %s ORDER BY created_at_ms DESC, id DESC "
                    "LIMIT %s", (RunStatus(status).value, limit),
                ).fetchall()
        return [run_from_row(row) for row in rows]

    def events(self, run_id: str) -> list[RunEvent]:
        self.get(run_id)
        with reading(ClusterRunStorageError):
            rows = self._cur.execute(
                f"SELECT {_EVENT_COLUMNS} FROM ql3.run_events WHERE run_id = %s ORDER BY sequence", (run_id,)
            ).fetchall()
        return [RunEvent(id=r[0], run_id=r[1], sequence=r[2], type=r[3], dedupe_key=r[4], actor_type=r[5],
                         actor_id=r[6], attempt_id=absent(r[7]),
                         payload=r[8] if isinstance(r[8], dict) else _decode_payload(r[8]), created_at_ms=r[9])
                for r in rows]

    # ----------------------------------------------------------------- submit / cancel

    def submit(self, cmd: SubmitRunCommand, *, actor_id: str = "cli") -> RunRecord:
        """Create a queued, runtime-owned Run and its ``run.created`` event."""
        if not isinstance(cmd, SubmitRunCommand):
            raise InvalidRunCommandError(f"submit expects a SubmitRunCommand, got {type(cmd).__name__}")
        with self._tx():
            run_id = _insert_submitted(self._cur, cmd, database_now(self._cur), actor_id)
            self._cur.execute(NOTIFY_WAKE)
            return self._run_row(run_id)

    def submit_batch(self, cmds: list[SubmitRunCommand], *, actor_id: str = "cli") -> list[str]:
        """Create a queued Run for each command in one transaction (all or none), one wake-up for
        the batch; their ids, in order."""
        require_submit_batch(cmds)
        with self._tx():
            now = database_now(self._cur)
            run_ids = [_insert_submitted(self._cur, cmd, now, actor_id) for cmd in cmds]
            self._cur.execute(NOTIFY_WAKE)
            return run_ids

    def request_cancel(self, cmd: CancelRunCommand, *, actor_id: str = "cli") -> RunRecord:
        """Record a durable cancel request (idempotent while one is pending); see the Local repository.

        Raises:
            RunNotFoundError: no such Run.
            RunStateConflictError: the Run already ended, or is not runtime-owned.
        """
        CancelRunCommand.require(cmd, "request_cancel")
        _check_run_id(cmd.run_id)
        reason = None if cmd.reason is _UNSET else cmd.reason
        with self._tx():
            cur = self._cur
            row = cur.execute(_LOCK_RUN, (cmd.run_id,)).fetchone()
            if row is None:
                raise RunNotFoundError(f"no run with id {cmd.run_id!r}")
            run = run_from_row(row)
            refusal = cancel_refusal(run)
            if refusal is not None:
                raise refusal
            if run.cancel_requested_at_ms is not _UNSET:
                return run
            now = database_now(cur)
            active = cur.execute(
                f"SELECT count(*) FROM ql3.run_attempts WHERE run_id = %s AND status IN {ACTIVE_ATTEMPT_SQL}",
                (cmd.run_id,),
            ).fetchone()[0]
            cur.execute("UPDATE ql3.runs SET cancel_requested_at_ms = %s, cancel_reason = %s WHERE id = %s",
                        (now, reason, cmd.run_id))
            fence = [run.version, run.event_sequence]
            _event(cur, fence, cmd.run_id, EVENT_CANCEL_REQUESTED, EVENT_CANCEL_REQUESTED, actor_id,
                   cancel_requested_payload(now, reason), now)
            if cancels_at_once(run.status, active):
                end_run(cur, fence, cmd.run_id, RunStatus.CANCELLED, now, actor_id, attempt_id=None,
                        extra={"reason": REASON_CANCELLED_BEFORE_ANY_ATTEMPT})
            cur.execute(NOTIFY_WAKE)
            return self._run_row(cmd.run_id)

    def set_aside(self, run_id: str, error: StoredRowError, *, actor_id: str) -> bool:
        """End a Run waiting to start that a broken stored row keeps from starting; see the Local repository.
        Events appended to its log uncounted are counted first (they stay; the end follows them)."""
        _check_run_id(run_id)
        with self._tx():
            cur = self._cur
            row = cur.execute(_LOCK_RUN, (run_id,)).fetchone()
            if row is None or run_from_row(row).status not in WAITING_TO_START_STATUSES:
                return False
            run = run_from_row(row)
            highest = cur.execute("SELECT coalesce(max(sequence), 0) FROM ql3.run_events WHERE run_id = %s",
                                  (run_id,)).fetchone()[0]
            counted = max(run.event_sequence, highest)
            cur.execute("UPDATE ql3.runs SET event_sequence = %s, retry_at_ms = NULL WHERE id = %s", (counted, run_id))
            end_run(cur, [run.version, counted], run_id, RunStatus.FAILED, database_now(cur), actor_id,
                    attempt_id=None, extra={"error": error.code, "reason": error.reason()})
            return True

    # ----------------------------------------------------------------- attempt lifecycle

    def _lock_run_and_attempt(self, attempt_id: str) -> tuple[RunRecord, AttemptRecord] | None:
        """Lock the Attempt's Run, then the Attempt (the global order); None when it does not exist."""
        found = self._cur.execute(_ATTEMPT_RUN_ID, (attempt_id,)).fetchone()
        if found is None:
            return None
        run = run_from_row(self._cur.execute(_LOCK_RUN, (found[0],)).fetchone())
        return run, attempt_from_row(self._cur.execute(_LOCK_ATTEMPT, (attempt_id,)).fetchone())

    def _require(self, attempt_id: str) -> tuple[RunRecord, AttemptRecord]:
        locked = self._lock_run_and_attempt(attempt_id)
        if locked is None:
            raise RunNotFoundError(f"no attempt with id {attempt_id!r}")
        return locked

    def requeue_unstarted(self, attempt_id: str, *, actor_id: str, reason: str) -> AttemptRecord:
        """End a ``claimed`` Attempt that never got its Run Lease and requeue its ``dispatching`` Run
        (or cancel both when a cancel is pending; see :func:`end_unstarted`).

        Raises:
            RunStateConflictError: the Attempt is not ``claimed`` or its Run is not ``dispatching``.
        """
        with self._tx():
            locked = self._lock_run_and_attempt(attempt_id)
            if locked is None or locked[1].status is not AttemptStatus.CLAIMED:
                state = "missing" if locked is None else locked[1].status.value
                raise RunStateConflictError(f"attempt {attempt_id} is {state}, not claimed")
            run, _ = locked
            if run.status is not RunStatus.DISPATCHING:
                raise RunStateConflictError(f"run {run.id} is {run.status.value}, not dispatching")
            now = database_now(self._cur)
            end_unstarted(self._cur, attempt_id, run, reason=reason, now=now, actor_id=actor_id,
                          may_have_started=False)
            return self._attempt_row(attempt_id)

    def record_running(
        self, attempt_id: str, identity: ProcessIdentity, *, log_path: str, actor_id: str
    ) -> AttemptRecord:
        """The process exists: store its identity durably and move ``starting -> running``.

        Raises:
            RunStateConflictError: the Attempt is not ``starting``.
        """
        with self._tx():
            cur = self._cur
            locked = self._lock_run_and_attempt(attempt_id)
            if locked is None or locked[1].status is not AttemptStatus.STARTING:
                state = "missing" if locked is None else locked[1].status.value
                raise RunStateConflictError(f"attempt {attempt_id} is {state}, not starting")
            run, attempt = locked
            now = database_now(cur)
            cur.execute(
                "UPDATE ql3.run_attempts SET status = %s, pid = %s, pgid = %s, process_start_ticks = %s, "
                "boot_id = %s, log_path = %s, started_at_ms = %s, updated_at_ms = %s WHERE id = %s",
                (AttemptStatus.RUNNING.value, identity.pid, identity.pgid, identity.start_ticks, identity.boot_id, log_path, now, now, attempt_id),
            )
            if run.status in (RunStatus.DISPATCHING, RunStatus.QUEUED):
                cur.execute("UPDATE ql3.runs SET status = %s WHERE id = %s", (RunStatus.RUNNING.value, run.id))
            _event(cur, [run.version, run.event_sequence], run.id, EVENT_RUN_STARTED,
                   attempt_event_key(attempt.attempt, "running"), actor_id, {"pid": identity.pid}, now,
                   attempt_id=attempt_id)
            return self._attempt_row(attempt_id)

    def finish_attempt(
        self, attempt_id: str, status: AttemptStatus, *, actor_id: str, exit_code: int | None = None,
        reason: str | None = None,
    ) -> AttemptRecord:
        """End an active Attempt and its Run, with one event (idempotent for an ended Attempt), and
        complete the Attempt's Run Lease if one is still held, in the same transaction (as the
        Local store does: the end event names the grant; ``complete`` then finds nothing to do).

        A lost Attempt ends the Run as failed, or cancelled when a cancel was requested.
        """
        status = AttemptStatus(status)
        if status not in TERMINAL_ATTEMPT_STATUSES:
            raise InvalidRunCommandError(f"{status.value} is not a terminal attempt status")
        with self._tx():
            cur = self._cur
            run, attempt = self._require(attempt_id)
            if attempt.status in TERMINAL_ATTEMPT_STATUSES:
                return attempt
            fence = [run.version, run.event_sequence]
            grant = held_grant(cur, attempt_id)
            # The grant row is changed too: its time is clamped as ``complete`` clamps it (§4).
            now = clamp(cur, database_now(cur), None if grant is None else grant.updated_at_ms, fence, run.id,
                        actor_id)
            completed = None if grant is None else complete_held_grant(cur, grant, now)
            cur.execute(
                "UPDATE ql3.run_attempts SET status = %s, exit_code = %s, end_reason = %s, finished_at_ms = %s, "
                "updated_at_ms = %s WHERE id = %s", (status.value, exit_code, reason, now, now, attempt_id),
            )
            run_status = run_status_after_attempt(status, cancel_requested=run.cancel_requested_at_ms is not _UNSET)
            extra = attempt_end_extra(status, exit_code, reason)
            if run.status in ACTIVE_RUN_STATUSES:
                if completed is not None:
                    extra.update(completed_grant_extra(completed))
                end_or_retry(cur, fence, run, attempt.attempt, run_status, now, actor_id, attempt_id=attempt_id,
                             extra=extra)
            elif completed is not None:
                lease_event(cur, fence, completed, _new_id(), EVENT_LEASE_COMPLETED, "completed", now,
                            attempt_status=status.value)
            return self._attempt_row(attempt_id)

    def record_termination_requested(self, attempt_id: str, *, grace_ms: int) -> AttemptRecord:
        """SIGTERM went to the group; the SIGKILL deadline is ``now + grace_ms``. The first one stands."""
        with self._tx():
            cur = self._cur
            if cur.execute(_LOCK_ATTEMPT, (attempt_id,)).fetchone() is None:
                raise RunNotFoundError(f"no attempt with id {attempt_id!r}")
            now = database_now(cur)
            cur.execute(
                "UPDATE ql3.run_attempts SET term_sent_at_ms = coalesce(term_sent_at_ms, %s), "
                "kill_deadline_at_ms = coalesce(kill_deadline_at_ms, %s), updated_at_ms = %s WHERE id = %s",
                (now, now + grace_ms, now, attempt_id),
            )
            return self._attempt_row(attempt_id)

    def record_killed(self, attempt_id: str, *, actor_id: str, outcome: str = "killed") -> AttemptRecord:
        """SIGKILL went to the group after the grace period: recorded once, with ``run.kill_sent``."""
        with self._tx():
            cur = self._cur
            run, attempt = self._require(attempt_id)
            if attempt.killed_at_ms is not _UNSET:
                return attempt
            now = database_now(cur)
            cur.execute("UPDATE ql3.run_attempts SET killed_at_ms = %s, updated_at_ms = %s WHERE id = %s",
                        (now, now, attempt_id))
            _event(cur, [run.version, run.event_sequence], run.id, EVENT_KILL_SENT,
                   attempt_event_key(attempt.attempt, "kill-sent"), actor_id,
                   {"kill_deadline_at_ms": _none(attempt.kill_deadline_at_ms), "outcome": outcome}, now,
                   attempt_id=attempt_id)
            return self._attempt_row(attempt_id)

    def record_escaped_processes(self, attempt_id: str, pids: list[int], *, actor_id: str) -> None:
        """A ``run.cancel_escaped`` event (descendants outside the process group), once per Attempt."""
        self._event_once(attempt_id, "cancel-escaped", EVENT_CANCEL_ESCAPED, actor_id,
                         lambda attempt: {"count": len(pids), "pids": pids[:_ESCAPED_PIDS_KEPT]})

    def record_fenced_end(self, attempt_id: str, *, exit_code: int | None, reason: str | None,
                          actor_id: str) -> None:
        """A ``run.fenced_end`` event (an end seen after the Attempt was ended elsewhere), once per
        Attempt; the Attempt and its Run are not touched."""
        self._event_once(attempt_id, "fenced-end", EVENT_FENCED_END, actor_id,
                         lambda attempt: {"exit_code": exit_code, "reason": reason,
                                          "attempt_status": attempt.status.value})

    def _event_once(self, attempt_id: str, step: str, event_type: str, actor_id: str,
                    payload: Callable[[AttemptRecord], dict[str, Any]]) -> None:
        """Append the Attempt's ``step`` event unless it is already there (its dedupe key)."""
        with self._tx():
            cur = self._cur
            run, attempt = self._require(attempt_id)
            dedupe_key = attempt_event_key(attempt.attempt, step)
            if cur.execute("SELECT 1 FROM ql3.run_events WHERE run_id = %s AND dedupe_key = %s",
                           (run.id, dedupe_key)).fetchone():
                return
            now = database_now(cur)
            _event(cur, [run.version, run.event_sequence], run.id, event_type, dedupe_key, actor_id,
                   payload(attempt), now, attempt_id=attempt_id)

    # ----------------------------------------------------------------- the service's scans

    def find_run_ids(self, form: str, limit: int) -> list[str]:
        """See the ``RunStore`` port; ``form`` is matched literally (no LIKE wildcards)."""
        with reading(ClusterRunStorageError):
            rows = self._cur.execute(
                "SELECT id FROM ql3.runs WHERE left(id, length(%(f)s)) = %(f)s OR right(id, length(%(f)s)) = %(f)s "
                "ORDER BY created_at_ms DESC LIMIT %(n)s", {"f": form, "n": limit},
            ).fetchall()
        return [row[0] for row in rows]

    def release_due_retries(self, *, actor_id: str) -> int:
        """Queue again every ``retry_wait`` Run whose wait is over (one event each); how many.
        Reads first, so a tick with nothing due writes nothing; Runs another worker is releasing
        are skipped."""
        with reading(ClusterRunStorageError):
            due = self._cur.execute(
                f"SELECT 1 FROM ql3.runs WHERE status = {sql_literal(RunStatus.RETRY_WAIT)} "
                "AND retry_at_ms <= ql3.now_ms() LIMIT 1").fetchone()
        if due is None:
            return 0
        released = 0
        with self._tx():
            cur = self._cur
            now = database_now(cur)
            rows = cur.execute(
                f"SELECT {RUN_COLUMNS} FROM ql3.runs WHERE status = {sql_literal(RunStatus.RETRY_WAIT)} "
                "AND retry_at_ms <= %s ORDER BY retry_at_ms, id LIMIT 64 FOR NO KEY UPDATE SKIP LOCKED", (now,),
            ).fetchall()
            for row in rows:
                run = run_from_row(row)
                number = cur.execute("SELECT coalesce(max(attempt), 0) + 1 FROM ql3.run_attempts WHERE run_id = %s",
                                     (run.id,)).fetchone()[0]
                cur.execute("UPDATE ql3.runs SET status = %s, retry_at_ms = NULL WHERE id = %s",
                            (RunStatus.QUEUED.value, run.id))
                append_run_event(cur, [run.version, run.event_sequence], run_id=run.id, event_id=_new_id(),
                                 event_type=EVENT_RETRY_QUEUED, dedupe_key=attempt_event_key(number, "queued"),
                                 actor_type="worker", actor_id=actor_id, payload={"attempt": number}, now_ms=now)
                released += 1
            if released:
                cur.execute(NOTIFY_WAKE)
        return released

    def queued_run_ids(self, limit: int) -> list[str]:
        """Oldest queued Runs without a cancel request; Runs another transaction is taking are skipped."""
        with self._tx():
            rows = self._cur.execute(
                f"SELECT id FROM ql3.runs WHERE status = {sql_literal(RunStatus.QUEUED)} AND cancel_requested_at_ms IS NULL "
                "AND execution_owner = 'runtime' ORDER BY created_at_ms, id LIMIT %s FOR NO KEY UPDATE SKIP LOCKED",
                (limit,),
            ).fetchall()
        return [row[0] for row in rows]

    def active_attempts(self) -> list[AttemptRecord]:
        """Every Attempt that may still own a process (for watching and restart recovery)."""
        with reading(ClusterRunStorageError):
            rows = self._cur.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM ql3.run_attempts WHERE status IN {ACTIVE_ATTEMPT_SQL} "
                "ORDER BY created_at_ms, id"
            ).fetchall()
        return [attempt_from_row(row) for row in rows]

    def cancellation_candidates(self, limit: int = 32) -> list[CancellationCandidate]:
        """Cancel-requested active Runs whose active Attempt has no dispatch yet, or a due one."""
        owned, params = self._owned("a.id")
        with reading(ClusterRunStorageError):
            rows = self._cur.execute(
                f"""
                SELECT r.id, a.id, r.cancel_requested_at_ms
                FROM ql3.runs r
                JOIN ql3.run_attempts a ON a.run_id = r.id AND a.status IN {ACTIVE_ATTEMPT_SQL}
                LEFT JOIN ql3.run_cancellation_dispatches d ON d.run_id = r.id
                CROSS JOIN (SELECT ql3.now_ms() AS now) t
                WHERE r.cancel_requested_at_ms IS NOT NULL AND r.status IN {ACTIVE_RUN_SQL}
                  AND r.execution_owner = 'runtime'
                  AND (d.run_id IS NULL
                       OR (d.attempt_id = a.id AND d.status IN {WAITING_DISPATCH_SQL}
                           AND d.next_attempt_at_ms <= t.now)
                       OR (d.attempt_id = a.id AND d.status = {sql_literal(DispatchStatus.LEASED)}
                           AND d.lease_expires_at_ms <= t.now))
                  {owned}
                ORDER BY r.cancel_requested_at_ms, r.id
                LIMIT %s
                """,
                (*params, limit),
            ).fetchall()
        return [CancellationCandidate(*row) for row in rows]

    def timed_out_run_ids(self) -> list[str]:
        """Runs whose active Attempt has run longer than the Run's timeout by database time and
        that have no cancel request yet (this worker's Attempts only, when scoped)."""
        owned, params = self._owned("a.id")
        with reading(ClusterRunStorageError):
            rows = self._cur.execute(
                f"SELECT r.id FROM ql3.run_attempts a JOIN ql3.runs r ON r.id = a.run_id "
                f"WHERE a.status IN {ACTIVE_ATTEMPT_SQL} AND a.started_at_ms IS NOT NULL "
                "AND r.timeout_ms IS NOT NULL AND r.cancel_requested_at_ms IS NULL "
                f"AND a.started_at_ms + r.timeout_ms <= ql3.now_ms(){owned} ORDER BY r.id",
                params,
            ).fetchall()
        return [row[0] for row in rows]

    def next_timeout_at_ms(self) -> int | None:
        """The earliest timeout deadline (database time) among the Attempts ``timed_out_run_ids`` watches."""
        owned, params = self._owned("a.id")
        with reading(ClusterRunStorageError):
            return self._cur.execute(
                f"SELECT min(a.started_at_ms + r.timeout_ms) FROM ql3.run_attempts a JOIN ql3.runs r ON r.id = a.run_id "
                f"WHERE a.status IN {ACTIVE_ATTEMPT_SQL} AND a.started_at_ms IS NOT NULL "
                f"AND r.timeout_ms IS NOT NULL AND r.cancel_requested_at_ms IS NULL{owned}",
                params,
            ).fetchone()[0]

    def lost_with_process(self, worker_id: str, *, boot_id: str, limit: int) -> list[AttemptRecord]:
        """See ``RunStore.lost_with_process``: read-only, one short statement."""
        columns = ", ".join(f"a.{name.strip()}" for name in ATTEMPT_COLUMNS.split(","))
        with reading(ClusterRunStorageError):
            rows = self._cur.execute(
                f"SELECT {columns} FROM ql3.run_attempts a "
                "JOIN ql3.run_dispatch_leases l ON l.attempt_id = a.id AND l.worker_id = %s "
                f"WHERE a.status = {sql_literal(AttemptStatus.LOST)} AND a.pid IS NOT NULL AND a.boot_id = %s "
                "AND NOT EXISTS (SELECT 1 FROM ql3.run_events e WHERE e.run_id = a.run_id AND e.attempt_id = a.id "
                "AND e.type = %s) "
                "ORDER BY a.finished_at_ms DESC, a.id LIMIT %s", (worker_id, boot_id, EVENT_FENCED_END, limit)
            ).fetchall()
        return [attempt_from_row(row) for row in rows]

    def kill_candidates(self) -> list[KillCandidate]:
        """Active Attempts whose SIGKILL deadline has passed and that were not killed yet."""
        owned, params = self._owned("run_attempts.id")
        with reading(ClusterRunStorageError):
            rows = self._cur.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM ql3.run_attempts WHERE kill_deadline_at_ms IS NOT NULL "
                f"AND killed_at_ms IS NULL AND status IN {ACTIVE_ATTEMPT_SQL} AND kill_deadline_at_ms <= ql3.now_ms()"
                f"{owned}", params,
            ).fetchall()
        candidates = []
        for row in rows:
            attempt = attempt_from_row(row)
            if attempt.identity is not None:
                candidates.append(KillCandidate(attempt.id, attempt.run_id, attempt.identity,
                                                attempt.kill_deadline_at_ms))
        return candidates

    def next_due_at_ms(self) -> int | None:
        """The earliest time at which cancellation or kill work becomes due, or None."""
        dispatch_owned, params = self._owned("d.attempt_id")
        attempt_owned, _ = self._owned("run_attempts.id")
        with reading(ClusterRunStorageError):
            return self._cur.execute(
                f"""
                SELECT min(t) FROM (
                    SELECT min(d.next_attempt_at_ms) AS t FROM ql3.run_cancellation_dispatches d
                      JOIN ql3.runs r ON r.id = d.run_id AND r.status IN {ACTIVE_RUN_SQL}
                      WHERE d.status IN {WAITING_DISPATCH_SQL}{dispatch_owned}
                    UNION ALL
                    SELECT min(d.lease_expires_at_ms) FROM ql3.run_cancellation_dispatches d
                      JOIN ql3.runs r ON r.id = d.run_id AND r.status IN {ACTIVE_RUN_SQL}
                      WHERE d.status = {sql_literal(DispatchStatus.LEASED)}{dispatch_owned}
                    UNION ALL
                    SELECT min(kill_deadline_at_ms) FROM ql3.run_attempts
                      WHERE kill_deadline_at_ms IS NOT NULL AND killed_at_ms IS NULL
                        AND status IN {ACTIVE_ATTEMPT_SQL}{attempt_owned}
                    UNION ALL
                    SELECT min(retry_at_ms) FROM ql3.runs WHERE status = {sql_literal(RunStatus.RETRY_WAIT)}
                ) due
                """, params * 3,
            ).fetchone()[0]


def _none(value: Any) -> Any:
    return None if value is _UNSET else value


def _event(cur: psycopg.Cursor[Any], fence: list[int], run_id: str, event_type: str, dedupe_key: str, actor_id: str,
           payload: dict[str, Any], now: int, *, attempt_id: str | None = None) -> None:
    """Append one event of the locked Run (``fence``: its ``[version, event_sequence]``, advanced):
    by the worker when it concerns an Attempt, else by the user."""
    append_run_event(cur, fence, run_id=run_id, event_id=_new_id(), event_type=event_type, dedupe_key=dedupe_key,
                     actor_type="user" if attempt_id is None else "worker", actor_id=actor_id,
                     attempt_id=attempt_id, payload=payload, now_ms=now)


def end_unstarted(cur: psycopg.Cursor[Any], attempt_id: str, run: RunRecord, *, reason: str, now: int,
                  actor_id: str, may_have_started: bool, fence: list[int] | None = None) -> RunStatus:
    """End an Attempt whose process was never recorded, as ``transitions.unstarted_end`` decides,
    inside the caller's transaction with the Run and the Attempt locked; the Run's new status."""
    fence = [run.version, run.event_sequence] if fence is None else fence
    end = unstarted_end(run.status, cancel_requested=run.cancel_requested_at_ms is not _UNSET, reason=reason,
                        may_have_started=may_have_started)
    number = cur.execute(
        "UPDATE ql3.run_attempts SET status = %s, end_reason = %s, finished_at_ms = %s, updated_at_ms = %s "
        "WHERE id = %s RETURNING attempt", (end.attempt_status.value, end.reason, now, now, attempt_id)).fetchone()[0]
    if end.run_action is UnstartedRunAction.KEEP:
        return run.status
    if end.run_action is UnstartedRunAction.END:
        return end_or_retry(cur, fence, run, number, end.run_status, now, actor_id, attempt_id=attempt_id,
                            extra={"attempt_status": end.attempt_status.value, "reason": end.reason})
    cur.execute("UPDATE ql3.runs SET status = %s WHERE id = %s", (RunStatus.QUEUED.value, run.id))
    _event(cur, fence, run.id, EVENT_RUN_REQUEUED, attempt_event_key(number, "requeued"), actor_id,
           {"reason": end.reason}, now, attempt_id=attempt_id)
    return RunStatus.QUEUED


def end_or_retry(cur: psycopg.Cursor[Any], fence: list[int], run: RunRecord, attempt_number: int, status: RunStatus,
                 now: int, actor_id: str, *, attempt_id: str, extra: dict[str, Any]) -> RunStatus:
    """End the locked active Run in ``status``, or put it in ``retry_wait`` (the Local rule of
    ``edge_runtime.local.runs.end_or_retry``: a failed or lost Attempt, no cancel, retries left)."""
    wait_ms = None
    if status is RunStatus.FAILED and run.cancel_requested_at_ms is _UNSET:
        wait_ms = retry_wait_ms(_none(run.retries), _none(run.retry_delay_ms), attempt_number)
    if wait_ms is None:
        end_run(cur, fence, run.id, status, now, actor_id, attempt_id=attempt_id, extra=extra)
        return status
    cur.execute("UPDATE ql3.runs SET status = %s, retry_at_ms = %s WHERE id = %s",
                (RunStatus.RETRY_WAIT.value, now + wait_ms, run.id))
    _event(cur, fence, run.id, EVENT_RETRY_SCHEDULED, attempt_event_key(attempt_number, "retry"), actor_id,
           {**extra, "retry_at_ms": now + wait_ms, "delay_ms": wait_ms, "retries_left": run.retries - attempt_number},
           now, attempt_id=attempt_id)
    return RunStatus.RETRY_WAIT


def end_run(cur: psycopg.Cursor[Any], fence: list[int], run_id: str, status: RunStatus, now: int, actor_id: str, *,
            attempt_id: str | None, extra: dict[str, Any]) -> None:
    """Move the locked Run to a terminal ``status`` with its one ``run.<status>`` event, and write
    the notifications its end calls for into the outbox, in the same transaction
    (docs/notifications.md)."""
    cur.execute("UPDATE ql3.runs SET status = %s, finished_at_ms = %s WHERE id = %s", (status.value, now, run_id))
    _event(cur, fence, run_id, run_ended_event(status), "run.finished", actor_id, {"status": status.value, **extra},
           now, attempt_id=attempt_id)
    enqueue_run_end(cur, run_id, now)


def insert_attempt(cur: psycopg.Cursor[Any], run_id: str, attempt_id: str, *, now: int) -> int:
    """Insert the locked Run's next Attempt as ``claimed``; its number (``start_run``'s one event
    records it)."""
    number = cur.execute("SELECT coalesce(max(attempt), 0) + 1 FROM ql3.run_attempts WHERE run_id = %s",
                         (run_id,)).fetchone()[0]
    cur.execute(
        "INSERT INTO ql3.run_attempts (id, run_id, attempt, status, executor_type, created_at_ms, updated_at_ms) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (attempt_id, run_id, number, AttemptStatus.CLAIMED.value, EXECUTOR_LOCAL_PROCESS, now, now),
    )
    return number


def _insert_submitted(cur: psycopg.Cursor[Any], cmd: SubmitRunCommand, now: int, actor_id: str) -> str:
    """Insert the Run a user submitted with ``cmd`` (inside the caller's transaction); its id."""
    return insert_run(cur, cmd.argv, name=None if cmd.name is _UNSET else cmd.name, now=now, actor_type="user",
                      actor_id=actor_id, timeout_ms=None if cmd.timeout_ms is _UNSET else cmd.timeout_ms,
                      env=None if cmd.env is _UNSET else cmd.env, cwd=None if cmd.cwd is _UNSET else cmd.cwd,
                      retries=None if cmd.retries is _UNSET else cmd.retries,
                      retry_delay_ms=None if cmd.retry_delay_ms is _UNSET else cmd.retry_delay_ms,
                      task_user=None if cmd.task_user is _UNSET else cmd.task_user)


def insert_run(cur: psycopg.Cursor[Any], argv: list[str], *, name: str | None, now: int, actor_type: str,
               actor_id: str, timeout_ms: int | None = None, schedule_id: str | None = None,
               scheduled_for_ms: int | None = None, env: dict[str, str] | None = None, cwd: str | None = None,
               retries: int | None = None, retry_delay_ms: int | None = None, task_user: str | None = None) -> str:
    """Insert a queued, runtime-owned Run with its ``run.created`` event; its id."""
    run_id = _new_id()
    cur.execute(
        "INSERT INTO ql3.runs (id, execution_owner, status, version, event_sequence, name, command, created_at_ms, "
        "updated_at_ms, timeout_ms, schedule_id, scheduled_for_ms, env, cwd, retries, retry_delay_ms, task_user) "
        "VALUES (%s, 'runtime', %s, 0, 0, %s, %s::jsonb, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s)",
        (run_id, RunStatus.QUEUED.value, name, _encode_json(argv).decode(), now, now, timeout_ms, schedule_id,
         scheduled_for_ms, None if not env else _encode_json(env).decode(), cwd, retries or None,
         retry_delay_ms if retries else None, task_user),
    )
    payload: dict[str, Any] = {"status": RunStatus.QUEUED.value, "argc": len(argv)}
    if schedule_id is not None:
        payload |= {"schedule_id": schedule_id, "scheduled_for_ms": scheduled_for_ms}
    if timeout_ms is not None:
        payload["timeout_ms"] = timeout_ms
    append_run_event(cur, [0, 0], run_id=run_id, event_id=_new_id(), event_type=EVENT_RUN_CREATED,
                     dedupe_key=EVENT_RUN_CREATED, actor_type=actor_type, actor_id=actor_id, payload=payload,
                     now_ms=now)
    return run_id
