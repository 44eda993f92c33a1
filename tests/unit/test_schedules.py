"""Schedules: the repository (add/list/pause/resume/remove), one fire per slot, overlap and timeouts."""

from __future__ import annotations

import io
from pathlib import Path

import apsw
import msgspec
import pytest

from edge_runtime.contract.cron import InvalidCronExpressionError
from edge_runtime.contract.durations import InvalidDurationError
from edge_runtime.contract.cancellation_dispatch import DispatchResult
from edge_runtime.contract.runs import AttemptStatus, InvalidRunCommandError, RunStatus, SubmitRunCommand
from edge_runtime.contract.schedules import (
    AddScheduleCommand,
    FireOutcome,
    InvalidScheduleCommandError,
    Overlap,
    ScheduleNotFoundError,
    ScheduleRepositoryError,
)
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.schedules import LocalScheduleRepository
from edge_runtime.service.journal import Journal
from edge_runtime.service.scheduler import Scheduler
from tests.support.unfenced_attempts import take_queued_run
from tests.support.dispatcher import IDENTITY, FakeController, make_dispatcher, start_attempt

MINUTE = 60_000


def _add(db: LocalDatabase, expression: str = "* * * * *", **kw: object) -> str:
    return LocalScheduleRepository(db).add(AddScheduleCommand(expression=expression, argv=["true"], **kw)).id


def _runs(db: LocalDatabase, schedule_id: str) -> list[tuple[str, int, str]]:
    return db.connection.execute(
        "SELECT id, scheduled_for_ms, status FROM runs WHERE schedule_id = ? ORDER BY scheduled_for_ms", (schedule_id,)
    ).fetchall()


def _end(db: LocalDatabase, run_id: str, status: str = "succeeded") -> None:
    with db.write():
        db.connection.execute("UPDATE runs SET status = ? WHERE id = ?", (status, run_id))


def _scheduler(db: LocalDatabase) -> tuple[Scheduler, io.StringIO]:
    out = io.StringIO()
    return Scheduler(LocalScheduleRepository(db), Journal(out)), out


def test_add_stores_the_canonical_expression_and_the_first_slot(db: LocalDatabase, clock: ManualClock) -> None:
    repo = LocalScheduleRepository(db)
    record = repo.add(AddScheduleCommand(expression="0,15,30,45 * * * *", argv=["echo", "x"], name="n",
                                         overlap=Overlap.QUEUE, timeout_ms=90_000))
    assert record.expression == "*/15 * * * *"
    assert record.next_fire_at_ms > clock.now_ms() and record.next_fire_at_ms % (15 * MINUTE) == 0
    assert (record.name, record.overlap, record.timeout_ms, record.paused) == ("n", Overlap.QUEUE, 90_000, False)
    assert [r.id for r in repo.list()] == [record.id]
    encoded = msgspec.json.decode(msgspec.json.encode(repo.list()))
    assert encoded[0]["id"] == record.id and encoded[0]["nextFireAtMs"] == record.next_fire_at_ms


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"expression": "61 * * * *", "argv": ["x"]}, InvalidCronExpressionError),
        ({"expression": "* * * * *", "argv": []}, InvalidScheduleCommandError),
        ({"expression": "* * * * *", "argv": ["x"], "timeout_ms": 10}, InvalidScheduleCommandError),
        ({"expression": "* * * * *", "argv": ["x"], "name": ""}, InvalidScheduleCommandError),
    ],
)
def test_a_bad_schedule_is_refused_whole(db: LocalDatabase, kwargs: dict, error: type) -> None:
    with pytest.raises(error):
        AddScheduleCommand(**kwargs)
    assert db.connection.execute("SELECT count(*) FROM schedules").fetchone()[0] == 0


def test_refusal_names_the_field() -> None:
    with pytest.raises(InvalidCronExpressionError) as caught:
        AddScheduleCommand(expression="0 25 * * *", argv=["x"])
    assert caught.value.field == "hour"


def test_pause_resume_remove(db: LocalDatabase, clock: ManualClock) -> None:
    repo = LocalScheduleRepository(db)
    schedule_id = _add(db)
    assert repo.set_paused(schedule_id, True).paused
    assert repo.due_schedule_ids() == []
    clock.advance(10 * MINUTE)
    assert repo.due_schedule_ids() == []  # paused: nothing due however late
    resumed = repo.set_paused(schedule_id, False)
    assert not resumed.paused and resumed.next_fire_at_ms > clock.now_ms()  # slots missed while paused are dropped
    repo.remove(schedule_id)
    with pytest.raises(ScheduleNotFoundError):
        repo.get(schedule_id)
    with pytest.raises(ScheduleNotFoundError):
        repo.remove(schedule_id)


def test_a_slot_fires_once_and_the_run_records_schedule_and_slot(db: LocalDatabase, clock: ManualClock) -> None:
    schedule_id = _add(db, name="hourly-ish")
    slot = LocalScheduleRepository(db).get(schedule_id).next_fire_at_ms
    scheduler, _ = _scheduler(db)
    assert not scheduler.tick()
    clock.set(slot)
    assert scheduler.tick()
    assert not scheduler.tick()  # same instant: nothing more
    (run_id, scheduled_for, status), = _runs(db, schedule_id)
    assert (scheduled_for, status) == (slot, "queued")
    run = LocalRunRepository(db).get(run_id)
    assert (run.schedule_id, run.scheduled_for_ms, run.name) == (schedule_id, slot, "hourly-ish")


def test_two_services_never_fire_one_slot_twice(db_path: Path, db: LocalDatabase, clock: ManualClock) -> None:
    schedule_id = _add(db)
    slot = LocalScheduleRepository(db).get(schedule_id).next_fire_at_ms
    clock.set(slot)
    with open_database(db_path, clock=clock) as other:
        first, second = LocalScheduleRepository(db), LocalScheduleRepository(other)
        listed = first.due_schedule_ids(), second.due_schedule_ids()  # both saw it due
        assert listed == ([schedule_id], [schedule_id])
        assert first.fire(schedule_id, actor_id="a") is not None
        assert second.fire(schedule_id, actor_id="b") is None  # the compare-and-set lost
    assert len(_runs(db, schedule_id)) == 1


def test_the_slot_key_is_unique_even_if_the_schedule_row_were_rewound(db: LocalDatabase, clock: ManualClock) -> None:
    schedule_id = _add(db)
    repo = LocalScheduleRepository(db)
    slot = repo.get(schedule_id).next_fire_at_ms
    clock.set(slot)
    repo.fire(schedule_id, actor_id="a")
    _end(db, _runs(db, schedule_id)[0][0])
    with db.write():
        db.connection.execute("UPDATE schedules SET next_fire_at_ms = ? WHERE id = ?", (slot, schedule_id))
    with pytest.raises(ScheduleRepositoryError):
        repo.fire(schedule_id, actor_id="a")  # UNIQUE (schedule_id, scheduled_for_ms)
    assert len(_runs(db, schedule_id)) == 1


def test_downtime_coalesces_missed_slots_into_one_fire(db: LocalDatabase, clock: ManualClock) -> None:
    schedule_id = _add(db, "*/5 * * * *")
    repo = LocalScheduleRepository(db)
    first = repo.get(schedule_id).next_fire_at_ms
    clock.set(first + 3 * 60 * MINUTE + 1)  # three hours down
    plan = repo.fire(schedule_id, actor_id="t")
    assert plan is not None and plan.due.coalesced and plan.due.fire_at_ms == first
    assert plan.due.next_fire_at_ms > clock.now_ms()
    assert repo.fire(schedule_id, actor_id="t") is None
    assert len(_runs(db, schedule_id)) == 1 and repo.get(schedule_id).coalesced_count == 1


def test_overlap_skip_records_the_slot_as_skipped(db: LocalDatabase, clock: ManualClock) -> None:
    schedule_id = _add(db)
    repo = LocalScheduleRepository(db)
    clock.set(repo.get(schedule_id).next_fire_at_ms)
    assert repo.fire(schedule_id, actor_id="t").outcome is FireOutcome.STARTED
    clock.advance(MINUTE)
    assert repo.fire(schedule_id, actor_id="t").outcome is FireOutcome.SKIPPED
    record = repo.get(schedule_id)
    assert (record.last_outcome, record.skipped_count, record.fired_count) == (FireOutcome.SKIPPED, 1, 1)
    assert len(_runs(db, schedule_id)) == 1


def test_overlap_queue_starts_one_waiting_slot_when_the_previous_run_ends(db: LocalDatabase, clock: ManualClock) -> None:
    schedule_id = _add(db, overlap=Overlap.QUEUE)
    repo = LocalScheduleRepository(db)
    scheduler, _ = _scheduler(db)
    first = repo.get(schedule_id).next_fire_at_ms
    clock.set(first)
    scheduler.tick()
    for _ in range(3):  # three more slots while the first Run is active: one waits, the rest join it
        clock.advance(MINUTE)
        scheduler.tick()
    assert repo.get(schedule_id).waiting_fire_at_ms == first + MINUTE
    assert len(_runs(db, schedule_id)) == 1
    _end(db, _runs(db, schedule_id)[0][0])
    scheduler.tick()
    assert [slot for _, slot, _ in _runs(db, schedule_id)] == [first, first + MINUTE]
    assert repo.get(schedule_id).waiting_fire_at_ms is msgspec.UNSET


def test_overlap_replace_cancels_the_previous_run_then_starts(db: LocalDatabase, clock: ManualClock) -> None:
    schedule_id = _add(db, overlap=Overlap.REPLACE)
    repo, runs = LocalScheduleRepository(db), LocalRunRepository(db)
    scheduler, journal = _scheduler(db)
    first = repo.get(schedule_id).next_fire_at_ms
    clock.set(first)
    scheduler.tick()
    previous = _runs(db, schedule_id)[0][0]
    with db.write():  # it is running (an Attempt exists), so a cancel request waits for the dispatch
        db.connection.execute("UPDATE runs SET status = 'running' WHERE id = ?", (previous,))
    clock.advance(MINUTE)
    scheduler.tick()
    run = runs.get(previous)
    assert run.cancel_requested_at_ms is not msgspec.UNSET and "replaced" in run.cancel_reason
    assert len(_runs(db, schedule_id)) == 1  # the new slot waits for the previous Run to end
    _end(db, previous, "cancelled")
    scheduler.tick()
    assert [slot for _, slot, _ in _runs(db, schedule_id)] == [first, first + MINUTE]
    assert "schedule.cancel_requested" in journal.getvalue()


def test_submit_timeout_is_validated_and_stored(db: LocalDatabase) -> None:
    with pytest.raises(InvalidRunCommandError):
        SubmitRunCommand(argv=["x"], timeout_ms=999)
    with pytest.raises(InvalidDurationError):
        from edge_runtime.contract.durations import parse_duration_ms

        parse_duration_ms("5 m")
    run = LocalRunRepository(db).submit(SubmitRunCommand(argv=["x"], timeout_ms=90_000))
    assert run.timeout_ms == 90_000


def test_a_run_past_its_timeout_is_cancelled_with_reason_timeout(db: LocalDatabase, clock: ManualClock) -> None:
    runs = LocalRunRepository(db)
    run = runs.submit(SubmitRunCommand(argv=["sleep", "60"], timeout_ms=5_000))
    attempt = take_queued_run(db, run.id, actor_id="t")
    with db.write() as now:
        db.connection.execute("UPDATE run_attempts SET status = 'running', started_at_ms = ? WHERE id = ?",
                              (now, attempt.id))
        db.connection.execute("UPDATE runs SET status = 'running' WHERE id = ?", (run.id,))
    scheduler, _ = _scheduler(db)
    assert scheduler.next_due_at_ms() == clock.now_ms() + 5_000
    clock.advance(4_999)
    scheduler.tick()
    assert runs.get(run.id).cancel_requested_at_ms is msgspec.UNSET
    clock.advance(1)
    assert scheduler.tick()
    cancelled = runs.get(run.id)
    assert cancelled.cancel_reason == "timeout"
    assert [e.payload.get("reason") for e in runs.events(run.id) if e.type == "run.cancel_requested"] == ["timeout"]
    assert scheduler.next_due_at_ms() is None  # asked once; the dispatch delivers it


def test_next_due_is_the_earliest_unpaused_fire(db: LocalDatabase, clock: ManualClock) -> None:
    repo = LocalScheduleRepository(db)
    early, late = _add(db, "* * * * *"), _add(db, "0 * * * *")
    assert repo.next_due_at_ms() == repo.get(early).next_fire_at_ms
    repo.set_paused(early, True)
    assert repo.next_due_at_ms() == repo.get(late).next_fire_at_ms


def test_a_schedules_timeout_reaches_its_run_and_cancels_it_through_the_dispatch(
    db: LocalDatabase, clock: ManualClock
) -> None:
    repo, runs = LocalScheduleRepository(db), LocalRunRepository(db)
    schedule_id = _add(db, "0 * * * *", timeout_ms=5_000)
    scheduler, journal = _scheduler(db)
    clock.set(repo.get(schedule_id).next_fire_at_ms)
    assert scheduler.tick()
    (run_id, _, _), = _runs(db, schedule_id)
    assert runs.get(run_id).timeout_ms == 5_000  # the fire copied the schedule's timeout to its Run
    attempt_id = start_attempt(db, run_id)
    controller, log = FakeController(DispatchResult.TERMINATION_REQUESTED), io.StringIO()
    dispatcher = make_dispatcher(db, clock, controller, log)
    started = runs.get_attempt(attempt_id).started_at_ms
    assert scheduler.next_due_at_ms() == started + 5_000  # the service sleeps until then, not until the next slot

    clock.advance(4_999)
    scheduler.tick()
    assert dispatcher.dispatch_due() == 0 and controller.terminated == []
    clock.advance(1)
    assert scheduler.tick()
    assert dispatcher.dispatch_due() == 1
    assert controller.terminated == [IDENTITY]  # SIGTERM to the Run's process, through its dispatch
    dispatch = LocalCancellationDispatchRepository(db).find_by_run_id(run_id)
    assert (dispatch.status.value, dispatch.last_result.value) == ("dispatched", "termination_requested")
    # The process exits on the SIGTERM: the service ends an Attempt whose Run has a cancel request as cancelled.
    runs.finish_attempt(attempt_id, AttemptStatus.CANCELLED, actor_id="w", exit_code=None, reason="signal 15")
    run = runs.get(run_id)
    assert (run.status, run.cancel_reason) == (RunStatus.CANCELLED, "timeout")
    events = runs.events(run_id)
    assert [e.payload.get("reason") for e in events if e.type == "run.cancel_requested"] == ["timeout"]
    assert "run.cancel_dispatched" in [e.type for e in events]
    assert f"run={run_id}" in journal.getvalue() and "reason=timeout" in journal.getvalue()


def test_a_tick_pauses_a_stored_schedule_that_cannot_fire_and_fires_the_ones_behind_it(
    db: LocalDatabase, clock: ManualClock
) -> None:
    good = _add(db, "* * * * *")
    now = clock.now_ms()
    with db.write():  # another program's row, first in the due order: its zone never shows 10 April
        db.connection.execute(
            "INSERT INTO schedules (id, expression, command, overlap, next_fire_at_ms, created_at_ms, updated_at_ms, "
            "time_zone) VALUES ('hostile', '0 * 10 4 *', '[\"true\"]', 'skip', ?, ?, ?, 'AAA-12BBB12,J1,J100/0')",
            (now - 1, now, now))
    scheduler, journal = _scheduler(db)
    clock.set(LocalScheduleRepository(db).get(good).next_fire_at_ms)
    assert scheduler.tick()
    assert len(_runs(db, good)) == 1 and _runs(db, "hostile") == []
    assert "warn schedule.paused_unfireable schedule=hostile reason=" in journal.getvalue()
    hostile = LocalScheduleRepository(db).get("hostile")
    assert hostile.paused and hostile.pause_reason.endswith("[SCHEDULE_NEVER_FIRES]")
    _end(db, _runs(db, good)[0][0])
    clock.advance(MINUTE)
    before = journal.getvalue()
    assert scheduler.tick() and len(_runs(db, good)) == 2
    assert journal.getvalue().count("paused_unfireable") == before.count("paused_unfireable")  # once, not each tick


def test_the_pause_reason_is_only_kept_with_a_paused_schedule(db: LocalDatabase) -> None:
    schedule_id = _add(db)
    with pytest.raises(apsw.ConstraintError), db.write():
        db.connection.execute("UPDATE schedules SET pause_reason = 'x' WHERE id = ?", (schedule_id,))
