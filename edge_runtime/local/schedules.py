"""Local schedule repository: the CLI's add/list/show/pause/resume/remove and the service's
:class:`~edge_runtime.contract.schedules.ScheduleStore` (fires, waiting slots, timeouts).

Every change is one ``BEGIN IMMEDIATE`` transaction with the clock read after the lock. A fire
re-reads the schedule inside its transaction and moves ``next_fire_at_ms`` forward only from the
value it read, and the Run it creates is unique on (schedule, slot): two services, or a service
restarted after a crash, never fire one slot twice.

Fire times are searched before ``BEGIN`` (from the row and the clock as they were just before)
and looked up inside (:class:`~edge_runtime.contract.cron.KnownFireTimes`): the write lock every
other writer waits for is never held across a search. ``add``, ``edit`` and ``resume`` refuse a
schedule that never fires in its zone before the transaction; a stored one that cannot fire is
paused by its fire, with the reason (``pause_reason``).

Each schedule fires in its own zone (``time_zone``); one stored before zones were kept fires in
the device's zone (:func:`edge_runtime.contract.device.device_time_zone`, read once per repository).
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

import msgspec

from edge_runtime.contract.cron import NEVER_BY_THE_CLOCK_MS, BootSchedule, KnownFireTimes, parse_schedule
from edge_runtime.contract.runs import CancelRunCommand, RunStateConflictError
from edge_runtime.contract.sql_vocabulary import ACTIVE_ATTEMPT_SQL, ACTIVE_RUN_SQL
from edge_runtime.contract.schedules import (
    UNFIREABLE_ERRORS,
    AddScheduleCommand,
    EditScheduleCommand,
    FireOutcome,
    FirePlan,
    Overlap,
    PausedUnfireable,
    ScheduleNotFoundError,
    ScheduleRecord,
    MalformedScheduleError,
    ScheduleRepositoryError,
    RunNowOutcome,
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
from edge_runtime.contract.stored_records import stored_record
from edge_runtime.contract.time_zones import TimeZone, time_zone, time_zone_text
from edge_runtime.local.clock import read_now_ms
from edge_runtime.contract.device import device_time_zone, read_boot_id
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.errors import StorageErrors
from edge_runtime.local.runs import LocalRunRepository, insert_run

_UNSET = msgspec.UNSET
_encode_json = msgspec.json.Encoder().encode
_decode_argv = msgspec.json.Decoder(list[str]).decode
_decode_env = msgspec.json.Decoder(dict[str, str]).decode

_COLUMNS = (
    "id, name, expression, command, overlap, timeout_ms, paused, next_fire_at_ms, waiting_fire_at_ms, "
    "last_fire_at_ms, last_outcome, last_run_id, fired_count, skipped_count, coalesced_count, created_at_ms, "
    "updated_at_ms, time_zone, env, cwd, retries, retry_delay_ms, pause_reason, number, labels, task_user"
)
#: Due schedules fired per tick; the rest are due at once and fire on the next pass.
FIRE_BATCH = 64


class PreparedAdd(NamedTuple):
    """A schedule to add, checked and its first fire searched before the transaction
    (:meth:`LocalScheduleRepository.prepare_add`)."""

    cmd: AddScheduleCommand
    expression: Any
    zone_text: str
    zone: TimeZone
    boot_id: str | None


def _record(row: tuple[Any, ...]) -> ScheduleRecord:
    values = dict(zip(_COLUMNS.split(", "), row))

    def build() -> ScheduleRecord:
        values["command"] = _decode_argv(values["command"])
        if values["env"] is not None:
            values["env"] = _decode_env(values["env"])
        if values["labels"] is not None:
            values["labels"] = _decode_argv(values["labels"])
        values["paused"] = bool(values["paused"])
        camel = {k.split("_")[0] + "".join(w.title() for w in k.split("_")[1:]): v for k, v in values.items()
                 if k != "env"} | {"env": values["env"]}
        return msgspec.convert({k: v for k, v in camel.items() if v is not None}, ScheduleRecord)

    return stored_record(build, "schedule", values["id"],
                         lambda message: MalformedScheduleError(message, row_id=values["id"]))


def broken_schedules(connection: Any) -> tuple[int, list[str]]:
    """How many schedules are stored, and why each one that makes no schedule record fails (for
    ``check``): every row projected through the one reader the service fires them by."""
    problems, total = [], 0
    for row in connection.execute(f"SELECT {_COLUMNS} FROM schedules ORDER BY id"):
        total += 1
        try:
            _record(row)
        except MalformedScheduleError as exc:
            problems.append(str(exc))
    return total, problems


#: Storage failures (and a bad clock value) become :class:`ScheduleRepositoryError`, retryable when
#: the database was busy; the contract's refusals pass through.
schedule_repository_errors = StorageErrors(ScheduleRepositoryError)


class LocalScheduleRepository:
    """Schedules in the local SQLite database.

    ``device_zone`` is the zone text of schedules stored without one and of new schedules added
    without one (default: :func:`~edge_runtime.contract.device.device_time_zone`, read when first
    needed); ``boot_id`` is the current boot's (default: the kernel's), given to new ``@reboot``
    schedules so that they first fire at the next boot.
    """

    __slots__ = ("_db", "_device_zone", "_boot_id", "_zones", "_known")

    def __init__(self, db: LocalDatabase, *, device_zone: str | None = None, boot_id: str | None = None) -> None:
        self._db = db
        self._device_zone = device_zone
        self._boot_id = boot_id
        self._zones: dict[str, TimeZone] = {}
        self._known = KnownFireTimes()

    def device_zone(self) -> str:
        if self._device_zone is None:
            self._device_zone = device_time_zone()
        return self._device_zone

    def zone_of(self, record: ScheduleRecord) -> TimeZone:
        """The zone ``record`` fires in (its own, or the device's for one stored without)."""
        return self._zone_of_text(self.device_zone() if record.time_zone is _UNSET else record.time_zone)

    # ----------------------------------------------------------------- CLI

    def _row(self, schedule_id: str) -> ScheduleRecord | None:
        row = self._db.connection.execute(f"SELECT {_COLUMNS} FROM schedules WHERE id = ?", (schedule_id,)).fetchone()
        return None if row is None else _record(row)

    def find(self, schedule_id: str) -> ScheduleRecord | None:
        """The schedule, or None; inside a caller's transaction too."""
        return self._row(schedule_id)

    def get(self, schedule_id: str) -> ScheduleRecord:
        check_schedule_id(schedule_id)
        with schedule_repository_errors():
            record = self._row(schedule_id)
        if record is None:
            raise ScheduleNotFoundError(f"no schedule with id {schedule_id!r}")
        return record

    def find_schedule_ids(self, form: str, limit: int) -> list[str]:
        """See :class:`~edge_runtime.contract.schedules.ScheduleAdmin`; no LIKE wildcards."""
        with schedule_repository_errors():
            rows = self._db.connection.execute(
                "SELECT id FROM schedules WHERE substr(id, 1, length(?1)) = ?1 OR substr(id, -length(?1)) = ?1 "
                "ORDER BY created_at_ms DESC, rowid DESC LIMIT ?2", (form, limit),
            ).fetchall()
        return [row[0] for row in rows]

    def get_by_number(self, number: int) -> ScheduleRecord:
        """See :class:`~edge_runtime.contract.schedules.ScheduleAdmin`."""
        check_schedule_number(number)
        with schedule_repository_errors():
            row = self._db.connection.execute(f"SELECT {_COLUMNS} FROM schedules WHERE number = ?", (number,)).fetchone()
        if row is None:
            raise ScheduleNotFoundError(f"no schedule with number {number}")
        return _record(row)

    def list(self) -> list[ScheduleRecord]:
        with schedule_repository_errors():
            rows = self._db.connection.execute(
                f"SELECT {_COLUMNS} FROM schedules ORDER BY created_at_ms, rowid"
            ).fetchall()
            return [_record(row) for row in rows]

    def add(self, cmd: AddScheduleCommand) -> ScheduleRecord:
        prepared = self.prepare_add(cmd)
        with schedule_repository_errors(), self._db.write() as now:
            return self._row(self.insert_prepared(prepared, now))

    def prepare_add(self, cmd: AddScheduleCommand) -> PreparedAdd:
        """Everything of adding ``cmd`` that comes before the transaction: its checks, its zone and
        the search of its first fire time (:meth:`insert_prepared` looks it up inside). A
        subscription's pull adds several schedules this way in its one transaction.

        Raises:
            InvalidScheduleCommandError, InvalidCronExpressionError, InvalidTimeZoneError: refused.
        """
        AddScheduleCommand.require(cmd, "add")
        expression = parse_schedule(cmd.expression)
        zone_text = self.device_zone() if cmd.time_zone is _UNSET else time_zone_text(cmd.time_zone)
        zone = time_zone(zone_text)  # an IANA name this system has no zoneinfo for is refused here
        # A new @reboot schedule belongs to this boot already: it first fires at the next one.
        boot_id = (self._boot_id or read_boot_id()) if isinstance(expression, BootSchedule) else None
        with schedule_repository_errors():
            before = read_now_ms(self._db.clock)
        self._known.next_fire_after(expression, before, zone)  # one that never fires in its zone: refused here
        return PreparedAdd(cmd, expression, zone_text, zone, boot_id)

    def insert_prepared(self, prepared: PreparedAdd, now: int) -> str:
        """Insert a schedule :meth:`prepare_add` prepared, inside the caller's write transaction
        (``now``: its time); the new schedule's id."""
        cmd, expression = prepared.cmd, prepared.expression
        schedule_id = str(uuid.uuid4())
        # number: the next of the counter that only grows, given by migration 0015's trigger (a
        # removed schedule's number is never given again).
        self._db.connection.execute(
            "INSERT INTO schedules (id, name, expression, command, overlap, timeout_ms, next_fire_at_ms, "
            "created_at_ms, updated_at_ms, time_zone, boot_id, env, cwd, retries, retry_delay_ms, paused, labels, "
            "task_user) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (schedule_id, None if cmd.name is _UNSET else cmd.name, expression.text,
             _encode_json(cmd.argv).decode(), Overlap(cmd.overlap).value,
             None if cmd.timeout_ms is _UNSET else cmd.timeout_ms,
             self._known.next_fire_after(expression, now, prepared.zone), now, now, prepared.zone_text,
             prepared.boot_id, None if cmd.env is _UNSET or not cmd.env else _encode_json(cmd.env).decode(),
             None if cmd.cwd is _UNSET else cmd.cwd, None if cmd.retries is _UNSET else cmd.retries,
             None if cmd.retry_delay_ms is _UNSET else cmd.retry_delay_ms, int(cmd.paused),
             None if cmd.labels is _UNSET or not cmd.labels else _encode_json(cmd.labels).decode(),
             None if cmd.task_user is _UNSET else cmd.task_user),
        )
        return schedule_id

    def edit(self, cmd: EditScheduleCommand) -> ScheduleRecord:
        """See :class:`~edge_runtime.contract.schedules.ScheduleAdmin`."""
        EditScheduleCommand.require(cmd, "edit")
        changes = cmd.changes()
        if "expression" in changes or "time_zone" in changes:  # one that never fires: refused before BEGIN
            record = self.get(cmd.schedule_id)
            self.search_new_expression(record, changes.get("expression", record.expression),
                                       changes.get("time_zone"))
        with schedule_repository_errors(), self._db.write() as now:
            record = self._row(cmd.schedule_id)
            if record is None:
                raise ScheduleNotFoundError(f"no schedule with id {cmd.schedule_id!r}")
            self.update_in_transaction(record, changes, now)
            return self._row(cmd.schedule_id)

    def search_new_expression(self, record: ScheduleRecord, expression: str, zone_text: str | None = None) -> None:
        """Before the transaction that gives ``record`` the new ``expression`` (or the new zone
        ``zone_text``): search its next fire (refusing one that never fires in its zone)."""
        with schedule_repository_errors():
            before_ms = read_now_ms(self._db.clock)
        zone = self.zone_of(record) if zone_text is None else self._zone_of_text(zone_text)
        self._known.next_fire_after(parse_schedule(expression), before_ms, zone)

    def _zone_of_text(self, text: str) -> TimeZone:
        zone = self._zones.get(text)
        if zone is None:
            zone = self._zones[text] = time_zone(text)
        return zone

    def update_in_transaction(self, record: ScheduleRecord, changes: dict[str, object], now: int) -> None:
        """Apply ``changes`` (:meth:`EditScheduleCommand.changes` names) to ``record``, inside the
        caller's write transaction; a new expression was searched first (:meth:`search_new_expression`)."""
        columns: dict[str, object] = {}
        if "expression" in changes or "time_zone" in changes:
            expression = parse_schedule(changes.get("expression", record.expression))
            zone = self.zone_of(record) if "time_zone" not in changes else self._zone_of_text(changes["time_zone"])
            columns["pause_reason"] = None  # the reason was the old expression's or zone's
            # Looked up (searched above), and checked even for a paused one, which computes
            # its next fire when resumed.
            next_fire = self._known.next_fire_after(expression, now, zone)
            if not record.paused:
                columns["next_fire_at_ms"] = next_fire
        for name, value in changes.items():
            if name == "expression":
                columns["expression"] = parse_schedule(value).text
            elif name in ("command", "env", "labels"):
                columns[name] = _encode_json(value).decode() if value else None
            elif name == "overlap":
                columns[name] = Overlap(value).value
            else:
                columns[name] = value
        columns["updated_at_ms"] = now
        assignments = ", ".join(f"{name} = ?" for name in columns)  # names from the command's own fields
        self._db.connection.execute(f"UPDATE schedules SET {assignments} WHERE id = ?", (*columns.values(), record.id))

    def run_now(self, schedule_id: str, *, actor_id: str) -> RunNowOutcome:
        """See :class:`~edge_runtime.contract.schedules.ScheduleAdmin`."""
        check_schedule_id(schedule_id)
        with schedule_repository_errors(), self._db.write() as now:
            record = self._row(schedule_id)
            if record is None:
                raise ScheduleNotFoundError(f"no schedule with id {schedule_id!r}")
            active = self._active(schedule_id)
            outcome, to_cancel = slot_decision(record.overlap, active)
            if outcome is FireOutcome.WAITING:
                self._db.connection.execute(
                    "UPDATE schedules SET waiting_fire_at_ms = coalesce(waiting_fire_at_ms, ?), last_outcome = ?, "
                    "updated_at_ms = ? WHERE id = ?", (now, FireOutcome.WAITING.value, now, schedule_id))
            elif outcome is FireOutcome.STARTED:
                # One Run per (schedule, slot): a slot fired in this very millisecond moves this one on.
                slot = now
                while self._db.connection.execute(
                        "SELECT 1 FROM runs WHERE schedule_id = ? AND scheduled_for_ms = ?", (schedule_id, slot)).fetchone():
                    slot += 1
                run_id = self._start(record, slot, now, actor_id)
                self._db.connection.execute(
                    "UPDATE schedules SET last_fire_at_ms = ?, last_outcome = ?, last_run_id = ?, "
                    "fired_count = fired_count + 1, updated_at_ms = ? WHERE id = ?",
                    (now, FireOutcome.STARTED.value, run_id, now, schedule_id))
                return RunNowOutcome(schedule_id=schedule_id, outcome=FireOutcome.STARTED, run_id=run_id)
        for run_id in to_cancel:  # after the commit: each cancel is its own transaction
            self.request_cancel(run_id, replaced_reason(schedule_id), actor_id=actor_id)
        return RunNowOutcome(schedule_id=schedule_id, outcome=outcome, active_run_ids=[run_id for run_id, _ in active])

    def set_paused(self, schedule_id: str, paused: bool) -> ScheduleRecord:
        """Pause or resume. Resuming restarts from the first slot after now: slots missed while
        paused are not fired (a pause means "not these"); one that cannot fire is refused (before
        the transaction) and stays paused, with its reason."""
        check_schedule_id(schedule_id)
        if not paused:
            before = self.get(schedule_id)
            if before.paused:
                with schedule_repository_errors():
                    before_ms = read_now_ms(self._db.clock)
                next_fire_on_pause_change(before, False, before_ms, self.zone_of(before), self._known)
        with schedule_repository_errors(), self._db.write() as now:
            record = self._row(schedule_id)
            if record is None:
                raise ScheduleNotFoundError(f"no schedule with id {schedule_id!r}")
            if record.paused != paused:
                next_fire = next_fire_on_pause_change(record, paused, now, None if paused else self.zone_of(record),
                                                      self._known)
                self._db.connection.execute(
                    "UPDATE schedules SET paused = ?, next_fire_at_ms = ?, waiting_fire_at_ms = NULL, "
                    "pause_reason = NULL, updated_at_ms = ? WHERE id = ?",
                    (int(paused), next_fire, now, schedule_id),
                )
            return self._row(schedule_id)

    def remove(self, schedule_id: str) -> None:
        """Delete the schedule; its Runs stay (they keep its id), active ones run to their end."""
        check_schedule_id(schedule_id)
        with schedule_repository_errors(), self._db.write():
            self._db.connection.execute("DELETE FROM schedules WHERE id = ?", (schedule_id,))
            if self._db.connection.changes() != 1:
                raise ScheduleNotFoundError(f"no schedule with id {schedule_id!r}")

    # ----------------------------------------------------------------- the service's port

    def _active(self, schedule_id: str) -> list[tuple[str, bool]]:
        return [
            (run_id, requested is not None)
            for run_id, requested in self._db.connection.execute(
                f"SELECT id, cancel_requested_at_ms FROM runs WHERE schedule_id = ? AND schedule_id IS NOT NULL "
                f"AND status IN {ACTIVE_RUN_SQL}",
                (schedule_id,),
            )
        ]

    def due_schedule_ids(self, limit: int = FIRE_BATCH) -> list[str]:
        with schedule_repository_errors():
            now = read_now_ms(self._db.clock)
            return [row[0] for row in self._db.connection.execute(
                "SELECT id FROM schedules WHERE paused = 0 AND next_fire_at_ms <= ? ORDER BY next_fire_at_ms LIMIT ?",
                (now, limit),
            )]

    def _pause_malformed(self, schedule_id: str, error: MalformedScheduleError) -> PausedUnfireable | None:
        """Pause a row that makes no schedule, with the reason, as one that cannot fire is paused:
        never retried at every tick, never in the way of the others. None when it was paused or
        removed meanwhile."""
        reason = unfireable_reason(error)
        with schedule_repository_errors(), self._db.write() as now:
            self._db.connection.execute(
                "UPDATE schedules SET paused = 1, pause_reason = ?, waiting_fire_at_ms = NULL, updated_at_ms = ? "
                "WHERE id = ? AND (paused = 0 OR waiting_fire_at_ms IS NOT NULL)", (reason, now, schedule_id))
            return PausedUnfireable(reason) if self._db.connection.changes() else None

    def fire(self, schedule_id: str, *, actor_id: str) -> FirePlan | PausedUnfireable | None:
        try:
            return self._fire(schedule_id, actor_id)
        except MalformedScheduleError as error:  # the row itself, written by another program
            return self._pause_malformed(schedule_id, error)

    def _fire(self, schedule_id: str, actor_id: str) -> FirePlan | PausedUnfireable | None:
        with schedule_repository_errors():
            before = self._row(schedule_id)
            before_ms = read_now_ms(self._db.clock)
        if before is not None:
            search_before_fire(before, before_ms, self.zone_of, self._known)
        with schedule_repository_errors(), self._db.write() as now:
            record = self._row(schedule_id)
            if record is None or record.paused:
                return None  # removed or paused since it was listed
            try:
                plan = plan_fire(record.expression, record.overlap, record.next_fire_at_ms, now,
                                 self._active(schedule_id), self.zone_of(record), self._known)
            except UNFIREABLE_ERRORS as error:
                # Paused, not retried at every tick: the schedules behind it in the due order fire on.
                reason = unfireable_reason(error)
                self._db.connection.execute(
                    "UPDATE schedules SET paused = 1, pause_reason = ?, waiting_fire_at_ms = NULL, updated_at_ms = ? "
                    "WHERE id = ?", (reason, now, schedule_id))
                return PausedUnfireable(reason)
            if plan is None:
                return None  # another service fired it first
            due, connection = plan.due, self._db.connection
            run_id = None
            if plan.outcome is FireOutcome.STARTED:
                run_id = self._start(record, due.fire_at_ms, now, actor_id)
            connection.execute(
                "UPDATE schedules SET next_fire_at_ms = ?, last_fire_at_ms = ?, last_outcome = ?, "
                "last_run_id = coalesce(?, last_run_id), fired_count = fired_count + ?, "
                "skipped_count = skipped_count + ?, coalesced_count = coalesced_count + ?, "
                "waiting_fire_at_ms = CASE WHEN ? THEN coalesce(waiting_fire_at_ms, ?) ELSE waiting_fire_at_ms END, "
                "updated_at_ms = ? WHERE id = ? AND next_fire_at_ms = ?",
                (due.next_fire_at_ms, due.fire_at_ms, plan.outcome.value, run_id,
                 int(plan.outcome is FireOutcome.STARTED), int(plan.outcome is FireOutcome.SKIPPED),
                 int(due.coalesced), plan.outcome is FireOutcome.WAITING, due.fire_at_ms, now, schedule_id,
                 record.next_fire_at_ms),
            )
            return plan

    def _start(self, record: ScheduleRecord, slot_ms: int, now: int, actor_id: str) -> str:
        return insert_run(
            self._db.connection, record.command, name=None if record.name is _UNSET else record.name, now=now,
            actor_type="schedule", actor_id=actor_id, timeout_ms=None if record.timeout_ms is _UNSET else record.timeout_ms,
            schedule_id=record.id, scheduled_for_ms=slot_ms, env=fired_run_env(record),
            cwd=None if record.cwd is _UNSET else record.cwd, retries=None if record.retries is _UNSET else record.retries,
            retry_delay_ms=None if record.retry_delay_ms is _UNSET else record.retry_delay_ms,
            task_user=None if record.task_user is _UNSET else record.task_user,
        )

    def start_waiting(self, *, actor_id: str) -> list[str]:
        with schedule_repository_errors():
            waiting = [row[0] for row in self._db.connection.execute(
                "SELECT id FROM schedules WHERE waiting_fire_at_ms IS NOT NULL ORDER BY waiting_fire_at_ms"
            )]
        to_cancel: list[str] = []
        for schedule_id in waiting:
            try:
                to_cancel += self._start_waiting_one(schedule_id, actor_id)
            except MalformedScheduleError as error:  # paused and left: the others' slots still start
                self._pause_malformed(schedule_id, error)
        return to_cancel

    def _start_waiting_one(self, schedule_id: str, actor_id: str) -> list[str]:
        """Start the waiting slot of one schedule when its overlap allows; the Runs it replaces."""
        with schedule_repository_errors(), self._db.write() as now:
            record = self._row(schedule_id)
            if record is None or record.waiting_fire_at_ms is _UNSET:
                return []
            outcome, replaced = slot_decision(record.overlap, self._active(schedule_id))
            if outcome is not FireOutcome.STARTED:  # still waiting for its active Runs to end
                return list(replaced)
            run_id = self._start(record, record.waiting_fire_at_ms, now, actor_id)
            self._db.connection.execute(
                "UPDATE schedules SET waiting_fire_at_ms = NULL, last_outcome = ?, last_run_id = ?, "
                "fired_count = fired_count + 1, updated_at_ms = ? WHERE id = ?",
                (FireOutcome.STARTED.value, run_id, now, schedule_id),
            )
            return []

    def arm_boot_schedules(self, boot_id: str) -> list[str]:
        """Each ``@reboot`` schedule whose stored boot is not ``boot_id`` gets ``boot_id``, and, when
        it is not paused, the slot "now" (due at once, fired by the next tick like any slot).

        A restart of the service within the same boot finds every boot id already equal: nothing
        fires again. A paused one takes the boot id too, so resuming it later in this boot does
        not make the next restart fire it. A crash between this commit and the fire leaves the
        slot due, and the next start fires it (the slot's Run is unique on (schedule, slot)).
        """
        with schedule_repository_errors(), self._db.write() as now:
            rows = self._db.connection.execute(
                "SELECT id FROM schedules WHERE expression = ? AND (boot_id IS NULL OR boot_id != ?)",
                (BootSchedule().text, boot_id),
            ).fetchall()
            self._db.connection.execute(
                "UPDATE schedules SET boot_id = ?1, "
                "next_fire_at_ms = CASE WHEN paused = 0 THEN ?2 ELSE next_fire_at_ms END, updated_at_ms = ?2 "
                "WHERE expression = ?3 AND (boot_id IS NULL OR boot_id != ?1)",
                (boot_id, now, BootSchedule().text),
            )
            return [row[0] for row in rows]

    def timed_out_run_ids(self) -> list[str]:
        with schedule_repository_errors():
            now = read_now_ms(self._db.clock)
            return [row[0] for row in self._db.connection.execute(
                f"SELECT r.id FROM run_attempts a JOIN runs r ON r.id = a.run_id WHERE a.status IN {ACTIVE_ATTEMPT_SQL} "
                "AND a.started_at_ms IS NOT NULL AND r.timeout_ms IS NOT NULL AND r.cancel_requested_at_ms IS NULL "
                "AND a.started_at_ms + r.timeout_ms <= ?",
                (now,),
            )]

    def request_cancel(self, run_id: str, reason: str, *, actor_id: str) -> None:
        try:
            LocalRunRepository(self._db).request_cancel(CancelRunCommand(run_id=run_id, reason=reason), actor_id=actor_id)
        except RunStateConflictError:
            pass  # it ended meanwhile: nothing left to cancel

    def next_due_at_ms(self) -> int | None:
        with schedule_repository_errors():
            return self._db.connection.execute(
                f"""SELECT min(t) FROM (
                    SELECT min(next_fire_at_ms) AS t FROM schedules WHERE paused = 0 AND next_fire_at_ms < {NEVER_BY_THE_CLOCK_MS}
                    UNION ALL
                    SELECT min(a.started_at_ms + r.timeout_ms) FROM run_attempts a JOIN runs r ON r.id = a.run_id
                      WHERE a.status IN {ACTIVE_ATTEMPT_SQL} AND a.started_at_ms IS NOT NULL
                        AND r.timeout_ms IS NOT NULL AND r.cancel_requested_at_ms IS NULL)"""
            ).fetchone()[0]
