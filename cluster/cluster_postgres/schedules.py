"""PostgreSQL schedule repository: the CLI's schedule commands and the service's ``ScheduleStore``.

The same commands, records and rules as :mod:`edge_runtime.local.schedules` (docs/schedules.md),
fired by database time by every worker of the database at once, each slot exactly once:

- A fire is one READ COMMITTED transaction: the schedule row locked ``FOR NO KEY UPDATE SKIP
  LOCKED`` (a worker firing it already makes the others pass it by), database time read after
  the lock, the contract's :func:`~edge_runtime.contract.schedules.plan_fire` decided on what
  was read, then the slot's fire record inserted (primary key (schedule, slot): a slot is
  claimed once, ever), the Run created (unique on (schedule, slot) too) and the next fire time
  moved with a compare-and-set on the value read. A worker killed before its COMMIT leaves
  nothing behind and the slot still due; one killed after it left the slot fired.
- Missed slots (every worker away) coalesce into one fire (``due_fire``), as on a device.
- Fire times are searched before the transaction, from the row and database time read just
  before it, and looked up inside (:class:`~edge_runtime.contract.cron.KnownFireTimes`), so no
  row lock is held across a search; ``add``, ``edit`` and ``resume`` refuse a schedule that
  never fires in its zone before their transaction. A stored schedule that cannot fire is paused
  by its fire, with the reason (``pause_reason``), and the other schedules fire on.
- The overlap rule reads the schedule's active Runs under the schedule's lock, so two workers
  never both start a slot of one schedule; ``replace`` cancels through the Run repository's
  durable cancel request after the commit (the CancellationDispatch delivers it).
- Timeouts are read by database time among the Attempts this worker holds the Run Lease of.

Differences from a device, each for the same reason (no single device behind a cluster): every
schedule stores its zone (without ``--tz`` the zone of the host running ``schedule add``, read
as the device reads its own); ``@reboot`` is refused (a cluster has no one boot); ``remove``
marks the schedule removed (the runtime role has no DELETE) and it is neither listed nor fired.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import psycopg

from cluster_postgres.connection import NOTIFY_WAKE
from cluster_postgres.errors import ClusterScheduleStorageError, Transaction, reading
from cluster_postgres.runs import insert_run
from cluster_postgres.run_events import database_now
from edge_runtime.contract.cron import NEVER_BY_THE_CLOCK_MS, BootSchedule, KnownFireTimes, parse_schedule
from edge_runtime.contract.runs import CancelRunCommand, RunStateConflictError
from edge_runtime.contract.schedules import (
    UNFIREABLE_ERRORS,
    AddScheduleCommand,
    EditScheduleCommand,
    FireOutcome,
    FirePlan,
    InvalidScheduleCommandError,
    Overlap,
    PausedUnfireable,
    RunNowOutcome,
    ScheduleNotFoundError,
    ScheduleRecord,
    ScheduleRepositoryError,
    check_schedule_id,
    fired_run_env,
    check_schedule_number,
    next_fire_on_pause_change,
    plan_fire,
    replaced_reason,
    search_before_fire,
    slot_decision,
    unfireable_reason,
)
from edge_runtime.contract.sql_vocabulary import ACTIVE_RUN_SQL
from edge_runtime.contract.stored_records import stored_record
from edge_runtime.contract.time_zones import TimeZone, time_zone, time_zone_text

_UNSET = msgspec.UNSET

_COLUMNS = (
    "id, name, expression, command, overlap, timeout_ms, paused, next_fire_at_ms, waiting_fire_at_ms, "
    "last_fire_at_ms, last_outcome, last_run_id, fired_count, skipped_count, coalesced_count, created_at_ms, "
    "updated_at_ms, time_zone, env, cwd, retries, retry_delay_ms, pause_reason, number, labels, task_user"
)
_FIELDS = tuple(_COLUMNS.split(", "))
_LIVE = "removed_at_ms IS NULL"
_SELECT = f"SELECT {_COLUMNS} FROM ql3.schedules WHERE id = %s AND {_LIVE}"
#: Due schedules fired per tick (as on a device); the rest are due at once and fire next pass.
FIRE_BATCH = 64
#: What ``@reboot`` would mean on a cluster is not defined: refused when added or edited.
BOOT_REFUSED = ("@reboot fires once per boot of a device; a cluster of workers has no one boot "
                "(write a cron expression, or run `schedule run ID` after a start)")
_encode_json = msgspec.json.Encoder().encode


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _record(row: tuple[Any, ...]) -> ScheduleRecord:
    values = dict(zip(_FIELDS, row))
    return stored_record(lambda: msgspec.convert({_camel(k): v for k, v in values.items() if v is not None},
                                                 ScheduleRecord),
                         "schedule", values["id"], ScheduleRepositoryError)


def _refuse_boot(expression: Any) -> None:
    if isinstance(expression, BootSchedule):
        raise InvalidScheduleCommandError(BOOT_REFUSED)


class PostgresScheduleRepository:
    """Schedules on a ``ql3_runtime`` connection.

    ``runs``: the Run repository of the same connection (cancels and timeouts go through it; a
    worker's is scoped to the Attempts it holds the Run Lease of). ``host_zone``: the zone text of
    a schedule added without one (called only then: the CLI's host's zone). ``worker_id``: the
    serving worker, recorded in its fire records (else the caller's ``actor_id`` is).
    """

    __slots__ = ("_conn", "_cur", "_runs", "_host_zone", "_zones", "_worker_id", "_known")

    def __init__(self, conn: psycopg.Connection[Any], runs: Any, *,
                 host_zone: Callable[[], str] | None = None, worker_id: str | None = None) -> None:
        self._conn = conn
        self._cur = conn.cursor()
        self._runs = runs
        self._host_zone = host_zone
        self._worker_id = worker_id
        self._zones: dict[str, TimeZone] = {}
        self._known = KnownFireTimes()

    def _tx(self) -> Transaction:
        return Transaction(self._conn, ClusterScheduleStorageError)

    def device_zone(self) -> str:
        """The zone a schedule added without ``--tz`` gets (the host's, as a device reads its own)."""
        if self._host_zone is None:
            from edge_runtime.contract.device import device_time_zone

            return device_time_zone()
        return self._host_zone()

    def zone_of(self, record: ScheduleRecord) -> TimeZone:
        """The zone ``record`` fires in: always its own on the cluster."""
        text = record.time_zone
        if text is _UNSET:  # cannot happen (the column is NOT NULL); never guess a zone
            raise ScheduleRepositoryError(f"stored schedule {record.id!r} has no time zone")
        zone = self._zones.get(text)
        if zone is None:
            zone = self._zones[text] = time_zone(text)
        return zone

    def _zone(self, record: ScheduleRecord, changes: dict[str, object]) -> TimeZone:
        """The zone ``record`` fires in once ``changes`` (an edit's) are made."""
        text = changes.get("time_zone")
        if not isinstance(text, str):
            return self.zone_of(record)
        zone = self._zones.get(text)
        if zone is None:
            zone = self._zones[text] = time_zone(text)
        return zone

    # ----------------------------------------------------------------- the CLI's commands

    def _row(self, schedule_id: str, *, lock: bool = False) -> ScheduleRecord | None:
        row = self._cur.execute(_SELECT + (" FOR NO KEY UPDATE" if lock else ""), (schedule_id,)).fetchone()
        return None if row is None else _record(row)

    def _now_before(self) -> int:
        """Database time read before a transaction: where its fire-time searches start."""
        with reading(ClusterScheduleStorageError):
            return database_now(self._cur)

    def _locked(self, schedule_id: str) -> ScheduleRecord:
        record = self._row(schedule_id, lock=True)
        if record is None:
            raise ScheduleNotFoundError(f"no schedule with id {schedule_id!r}")
        return record

    def get(self, schedule_id: str) -> ScheduleRecord:
        check_schedule_id(schedule_id)
        with reading(ClusterScheduleStorageError):
            record = self._row(schedule_id)
        if record is None:
            raise ScheduleNotFoundError(f"no schedule with id {schedule_id!r}")
        return record

    def find_schedule_ids(self, form: str, limit: int) -> list[str]:
        """See :class:`~edge_runtime.contract.schedules.ScheduleAdmin`; no LIKE wildcards; a
        removed schedule is not found, as by ``get``."""
        with reading(ClusterScheduleStorageError):
            rows = self._cur.execute(
                f"SELECT id FROM ql3.schedules WHERE {_LIVE} AND (left(id, length(%(f)s)) = %(f)s "
                "OR right(id, length(%(f)s)) = %(f)s) ORDER BY created_at_ms DESC, id LIMIT %(n)s",
                {"f": form, "n": limit},
            ).fetchall()
        return [row[0] for row in rows]
    def get_by_number(self, number: int) -> ScheduleRecord:
        """See :class:`~edge_runtime.contract.schedules.ScheduleAdmin`."""
        check_schedule_number(number)
        with reading(ClusterScheduleStorageError):
            row = self._cur.execute(f"SELECT {_COLUMNS} FROM ql3.schedules WHERE number = %s AND {_LIVE}",
                                    (number,)).fetchone()
        if row is None:
            raise ScheduleNotFoundError(f"no schedule with number {number}")
        return _record(row)

    def list(self) -> list[ScheduleRecord]:
        with reading(ClusterScheduleStorageError):
            rows = self._cur.execute(
                f"SELECT {_COLUMNS} FROM ql3.schedules WHERE {_LIVE} ORDER BY created_at_ms, number").fetchall()
        return [_record(row) for row in rows]

    def add(self, cmd: AddScheduleCommand) -> ScheduleRecord:
        AddScheduleCommand.require(cmd, "add")
        expression = parse_schedule(cmd.expression)
        _refuse_boot(expression)
        zone_text = self.device_zone() if cmd.time_zone is _UNSET else time_zone_text(cmd.time_zone)
        zone = time_zone(zone_text)  # an IANA name this host has no zoneinfo for is refused here
        self._known.next_fire_after(expression, self._now_before(), zone)  # one that never fires: refused here
        schedule_id = str(uuid.uuid4())
        with self._tx():
            now = database_now(self._cur)
            self._cur.execute(
                "INSERT INTO ql3.schedules (id, name, expression, command, overlap, timeout_ms, next_fire_at_ms, "
                "created_at_ms, updated_at_ms, time_zone, env, cwd, retries, retry_delay_ms, paused, labels, "
                "task_user) "
                "VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s::jsonb, %s)",
                (schedule_id, None if cmd.name is _UNSET else cmd.name, expression.text,
                 _encode_json(cmd.argv).decode(), Overlap(cmd.overlap).value,
                 None if cmd.timeout_ms is _UNSET else cmd.timeout_ms,
                 self._known.next_fire_after(expression, now, zone), now, now, zone_text,
                 None if cmd.env is _UNSET or not cmd.env else _encode_json(cmd.env).decode(),
                 None if cmd.cwd is _UNSET else cmd.cwd, None if cmd.retries is _UNSET else cmd.retries,
                 None if cmd.retry_delay_ms is _UNSET else cmd.retry_delay_ms, cmd.paused,
                 None if cmd.labels is _UNSET or not cmd.labels else _encode_json(cmd.labels).decode(),
                 None if cmd.task_user is _UNSET else cmd.task_user),
            )  # number: the identity column's next value (never one given before)
            self._cur.execute(NOTIFY_WAKE)  # every worker recomputes its sleep at the commit
            return self._row(schedule_id)

    def edit(self, cmd: EditScheduleCommand) -> ScheduleRecord:
        """See :class:`~edge_runtime.contract.schedules.ScheduleAdmin`."""
        EditScheduleCommand.require(cmd, "edit")
        changes = cmd.changes()
        retimed = "expression" in changes or "time_zone" in changes
        if retimed:  # one that never fires in the schedule's zone: refused before the transaction
            before = self.get(cmd.schedule_id)
            expression = parse_schedule(changes.get("expression", before.expression))
            _refuse_boot(expression)
            self._known.next_fire_after(expression, self._now_before(), self._zone(before, changes))
        with self._tx():
            record = self._locked(cmd.schedule_id)
            now = database_now(self._cur)
            columns: dict[str, object] = {}
            if retimed:
                expression = parse_schedule(changes.get("expression", record.expression))
                columns["pause_reason"] = None  # the reason was the old expression's or zone's
                # Looked up (searched above), and checked even for a paused one, which computes
                # its next fire when resumed.
                next_fire = self._known.next_fire_after(expression, now, self._zone(record, changes))
                if not record.paused:
                    columns["next_fire_at_ms"] = next_fire
            for name, value in changes.items():
                if name == "expression":
                    columns["expression"] = parse_schedule(value).text
                elif name in ("command", "env", "labels"):
                    columns[name] = None if not value else _encode_json(value).decode()
                elif name == "overlap":
                    columns[name] = Overlap(value).value
                else:
                    columns[name] = value
            columns["updated_at_ms"] = now
            # Column names come from the command's own fields, never from the user's text.
            assignments = ", ".join(f"{name} = %s::jsonb" if name in ("command", "env", "labels") else f"{name} = %s"
                                    for name in columns)
            self._cur.execute(f"UPDATE ql3.schedules SET {assignments} WHERE id = %s",
                              (*columns.values(), cmd.schedule_id))
            self._cur.execute(NOTIFY_WAKE)
            return self._row(cmd.schedule_id)

    def run_now(self, schedule_id: str, *, actor_id: str) -> RunNowOutcome:
        """See :class:`~edge_runtime.contract.schedules.ScheduleAdmin`."""
        check_schedule_id(schedule_id)
        with self._tx():
            record = self._locked(schedule_id)
            now = database_now(self._cur)
            active = self._active(schedule_id)
            outcome, to_cancel = slot_decision(record.overlap, active)
            if outcome is FireOutcome.WAITING:
                self._cur.execute(
                    "UPDATE ql3.schedules SET waiting_fire_at_ms = coalesce(waiting_fire_at_ms, %s), "
                    "last_outcome = %s, updated_at_ms = %s WHERE id = %s",
                    (now, FireOutcome.WAITING.value, now, schedule_id))
            elif outcome is FireOutcome.STARTED:
                # One Run per (schedule, slot): a slot fired in this very millisecond moves this one on.
                slot = self._cur.execute(
                    "SELECT coalesce(max(slot_ms) + 1, %(n)s) FROM ql3.schedule_fires "
                    "WHERE schedule_id = %(s)s AND slot_ms >= %(n)s", {"s": schedule_id, "n": now}).fetchone()[0]
                run_id = self._start(record, slot, now, actor_id)
                self._record_fire(schedule_id, slot, FireOutcome.STARTED, run_id, False, now, actor_id)
                self._cur.execute(
                    "UPDATE ql3.schedules SET last_fire_at_ms = %s, last_outcome = %s, last_run_id = %s, "
                    "fired_count = fired_count + 1, updated_at_ms = %s WHERE id = %s",
                    (now, FireOutcome.STARTED.value, run_id, now, schedule_id))
                self._cur.execute(NOTIFY_WAKE)
                return RunNowOutcome(schedule_id=schedule_id, outcome=FireOutcome.STARTED, run_id=run_id)
        for run_id in to_cancel:  # after the commit: each cancel is its own transaction
            self.request_cancel(run_id, replaced_reason(schedule_id), actor_id=actor_id)
        return RunNowOutcome(schedule_id=schedule_id, outcome=outcome, active_run_ids=[run_id for run_id, _ in active])

    def set_paused(self, schedule_id: str, paused: bool) -> ScheduleRecord:
        """Pause or resume; resuming restarts from the first slot after now (slots missed while
        paused are not fired); one that cannot fire is refused (before the transaction) and stays
        paused, with its reason."""
        check_schedule_id(schedule_id)
        if not paused:
            before = self.get(schedule_id)
            if before.paused:
                next_fire_on_pause_change(before, False, self._now_before(), self.zone_of(before), self._known)
        with self._tx():
            record = self._locked(schedule_id)
            now = database_now(self._cur)
            if record.paused != paused:
                next_fire = next_fire_on_pause_change(record, paused, now, None if paused else self.zone_of(record),
                                                      self._known)
                self._cur.execute(
                    "UPDATE ql3.schedules SET paused = %s, next_fire_at_ms = %s, waiting_fire_at_ms = NULL, "
                    "pause_reason = NULL, updated_at_ms = %s WHERE id = %s", (paused, next_fire, now, schedule_id))
                self._cur.execute(NOTIFY_WAKE)
            return self._row(schedule_id)

    def remove(self, schedule_id: str) -> None:
        """Mark the schedule removed: it is neither listed nor fired again; its Runs stay (they
        keep its id) and an active one runs to its end."""
        check_schedule_id(schedule_id)
        with self._tx():
            self._locked(schedule_id)
            now = database_now(self._cur)
            self._cur.execute("UPDATE ql3.schedules SET removed_at_ms = %s, waiting_fire_at_ms = NULL, "
                              "updated_at_ms = %s WHERE id = %s", (now, now, schedule_id))
            self._cur.execute(NOTIFY_WAKE)

    # ----------------------------------------------------------------- the service's port

    def _active(self, schedule_id: str) -> list[tuple[str, bool]]:
        rows = self._cur.execute(
            f"SELECT id, cancel_requested_at_ms FROM ql3.runs WHERE schedule_id = %s AND status IN {ACTIVE_RUN_SQL} "
            "ORDER BY created_at_ms, id", (schedule_id,)).fetchall()
        return [(run_id, requested is not None) for run_id, requested in rows]

    def _start(self, record: ScheduleRecord, slot_ms: int, now: int, actor_id: str) -> str:
        return insert_run(
            self._cur, record.command, name=None if record.name is _UNSET else record.name, now=now,
            actor_type="schedule", actor_id=actor_id,
            timeout_ms=None if record.timeout_ms is _UNSET else record.timeout_ms, schedule_id=record.id,
            scheduled_for_ms=slot_ms, env=fired_run_env(record),
            cwd=None if record.cwd is _UNSET else record.cwd,
            retries=None if record.retries is _UNSET else record.retries,
            retry_delay_ms=None if record.retry_delay_ms is _UNSET else record.retry_delay_ms,
            task_user=None if record.task_user is _UNSET else record.task_user,
        )

    def _record_fire(self, schedule_id: str, slot_ms: int, outcome: FireOutcome, run_id: str | None,
                     coalesced: bool, now: int, actor_id: str) -> None:
        """The slot's claim: a second claim of the same (schedule, slot) fails the transaction (23505)."""
        self._cur.execute(
            "INSERT INTO ql3.schedule_fires (schedule_id, slot_ms, outcome, run_id, coalesced_slots, fired_at_ms, "
            "actor_id) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (schedule_id, slot_ms, outcome.value, run_id, coalesced, now, self._worker_id or actor_id))

    def due_schedule_ids(self, limit: int = FIRE_BATCH) -> list[str]:
        with reading(ClusterScheduleStorageError):
            rows = self._cur.execute(
                f"SELECT id FROM ql3.schedules WHERE NOT paused AND {_LIVE} AND next_fire_at_ms <= ql3.now_ms() "
                "ORDER BY next_fire_at_ms, id LIMIT %s", (limit,)).fetchall()
        return [row[0] for row in rows]

    def fire(self, schedule_id: str, *, actor_id: str) -> FirePlan | PausedUnfireable | None:
        """Fire one due schedule in one transaction; None when another worker is firing it, fired
        it already, or it was paused or removed since it was listed. One that cannot fire is
        paused instead, with the reason."""
        with reading(ClusterScheduleStorageError):
            row = self._cur.execute(f"SELECT {_COLUMNS}, ql3.now_ms() FROM ql3.schedules WHERE id = %s AND {_LIVE}",
                                    (schedule_id,)).fetchone()
        if row is not None:
            search_before_fire(_record(row[:-1]), row[-1], self.zone_of, self._known)
        with self._tx():
            row = self._cur.execute(_SELECT + " FOR NO KEY UPDATE SKIP LOCKED", (schedule_id,)).fetchone()
            if row is None:
                return None
            record = _record(row)
            if record.paused:
                return None
            now = database_now(self._cur)
            try:
                plan = plan_fire(record.expression, record.overlap, record.next_fire_at_ms, now,
                                 self._active(schedule_id), self.zone_of(record), self._known)
            except UNFIREABLE_ERRORS as error:
                # Paused, not retried at every tick: the schedules behind it in the due order fire on.
                reason = unfireable_reason(error)
                self._cur.execute(
                    "UPDATE ql3.schedules SET paused = true, pause_reason = %s, waiting_fire_at_ms = NULL, "
                    "updated_at_ms = %s WHERE id = %s", (reason, now, schedule_id))
                return PausedUnfireable(reason)
            if plan is None:
                return None  # another worker fired it first
            due = plan.due
            run_id = self._start(record, due.fire_at_ms, now, actor_id) if plan.outcome is FireOutcome.STARTED else None
            self._record_fire(schedule_id, due.fire_at_ms, plan.outcome, run_id, due.coalesced, now, actor_id)
            self._cur.execute(
                "UPDATE ql3.schedules SET next_fire_at_ms = %s, last_fire_at_ms = %s, last_outcome = %s, "
                "last_run_id = coalesce(%s, last_run_id), fired_count = fired_count + %s, "
                "skipped_count = skipped_count + %s, coalesced_count = coalesced_count + %s, "
                "waiting_fire_at_ms = CASE WHEN %s THEN coalesce(waiting_fire_at_ms, %s) ELSE waiting_fire_at_ms END, "
                "updated_at_ms = %s WHERE id = %s AND next_fire_at_ms = %s",
                (due.next_fire_at_ms, due.fire_at_ms, plan.outcome.value, run_id,
                 int(plan.outcome is FireOutcome.STARTED), int(plan.outcome is FireOutcome.SKIPPED),
                 int(due.coalesced), plan.outcome is FireOutcome.WAITING, due.fire_at_ms, now, schedule_id,
                 record.next_fire_at_ms))
            if self._cur.rowcount != 1:
                raise ScheduleRepositoryError(f"schedule {schedule_id} changed under its row lock")
            if run_id is not None:
                self._cur.execute(NOTIFY_WAKE)  # the new Run is for whichever worker is free
            return plan

    def start_waiting(self, *, actor_id: str) -> list[str]:
        with reading(ClusterScheduleStorageError):
            waiting = [row[0] for row in self._cur.execute(
                f"SELECT id FROM ql3.schedules WHERE waiting_fire_at_ms IS NOT NULL AND {_LIVE} "
                "ORDER BY waiting_fire_at_ms, id LIMIT %s", (FIRE_BATCH,)).fetchall()]
        to_cancel: list[str] = []
        for schedule_id in waiting:
            with self._tx():
                row = self._cur.execute(_SELECT + " FOR NO KEY UPDATE SKIP LOCKED", (schedule_id,)).fetchone()
                if row is None:
                    continue  # another worker has it
                record = _record(row)
                if record.waiting_fire_at_ms is _UNSET:
                    continue
                now = database_now(self._cur)
                outcome, replaced = slot_decision(record.overlap, self._active(schedule_id))
                if outcome is not FireOutcome.STARTED:  # still waiting for its active Runs to end
                    to_cancel += replaced
                    continue
                run_id = self._start(record, record.waiting_fire_at_ms, now, actor_id)
                self._cur.execute(
                    "UPDATE ql3.schedules SET waiting_fire_at_ms = NULL, last_outcome = %s, last_run_id = %s, "
                    "fired_count = fired_count + 1, updated_at_ms = %s WHERE id = %s",
                    (FireOutcome.STARTED.value, run_id, now, schedule_id))
                self._cur.execute(NOTIFY_WAKE)
        return to_cancel

    def arm_boot_schedules(self, boot_id: str) -> list[str]:
        """Nothing to arm: ``@reboot`` is refused on the cluster (see the module's docstring), so
        no schedule of this store waits for a boot."""
        return []

    def timed_out_run_ids(self) -> list[str]:
        return self._runs.timed_out_run_ids()

    def request_cancel(self, run_id: str, reason: str, *, actor_id: str) -> None:
        try:
            self._runs.request_cancel(CancelRunCommand(run_id=run_id, reason=reason), actor_id=actor_id)
        except RunStateConflictError:
            pass  # it ended meanwhile: nothing left to cancel

    def next_due_at_ms(self) -> int | None:
        with reading(ClusterScheduleStorageError):
            fire = self._cur.execute(
                f"SELECT min(next_fire_at_ms) FROM ql3.schedules WHERE NOT paused AND {_LIVE} "
                f"AND next_fire_at_ms < {NEVER_BY_THE_CLOCK_MS}").fetchone()[0]
        timeout = self._runs.next_timeout_at_ms()
        due = [t for t in (fire, timeout) if t is not None]
        return min(due) if due else None
