"""``schedule edit`` (in place: id, counts and Runs stay) and ``schedule run`` (a Run now, overlap
applying) on the device store, and the options a schedule gives the Runs it fires."""

from __future__ import annotations

import pytest

from edge_runtime.contract.runs import RunStatus
from edge_runtime.contract.schedules import (
    AddScheduleCommand,
    EditScheduleCommand,
    FireOutcome,
    InvalidScheduleCommandError,
    Overlap,
    ScheduleNotFoundError,
)
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.schedules import LocalScheduleRepository

MINUTE = 60_000


def _add(db: LocalDatabase, **kw: object) -> str:
    command = AddScheduleCommand(expression="0 * * * *", argv=["echo", "x"], env={"A": "1"}, cwd="/srv",
                                 retries=2, retry_delay_ms=5_000, **kw)
    return LocalScheduleRepository(db).add(command).id


def test_run_now_starts_a_run_with_the_schedules_command_and_options(db: LocalDatabase, clock: ManualClock) -> None:
    schedule_id = _add(db, time_zone="CST-8")
    repo = LocalScheduleRepository(db)
    outcome = repo.run_now(schedule_id, actor_id="cli")
    assert outcome.outcome is FireOutcome.STARTED
    run = LocalRunRepository(db).get(outcome.run_id)
    assert (run.command, run.env, run.cwd, run.retries, run.retry_delay_ms) == (
        ["echo", "x"], {"A": "1", "TZ": "CST-8"}, "/srv", 2, 5_000)  # its task's clock in the schedule's zone
    assert (run.schedule_id, run.scheduled_for_ms, run.status) == (schedule_id, clock.now_ms(), RunStatus.QUEUED)
    record = repo.get(schedule_id)
    assert (record.fired_count, record.last_run_id) == (1, outcome.run_id)


def test_run_now_applies_the_overlap(db: LocalDatabase, clock: ManualClock) -> None:
    repo = LocalScheduleRepository(db)
    skip = _add(db)
    first = repo.run_now(skip, actor_id="cli").run_id
    skipped = repo.run_now(skip, actor_id="cli")
    assert (skipped.outcome, skipped.active_run_ids) == (FireOutcome.SKIPPED, [first])
    queue = _add(db, overlap=Overlap.QUEUE)
    active = repo.run_now(queue, actor_id="cli").run_id
    waiting = repo.run_now(queue, actor_id="cli")
    assert waiting.outcome is FireOutcome.WAITING
    assert repo.get(queue).waiting_fire_at_ms == clock.now_ms()
    replace = _add(db, overlap=Overlap.REPLACE)
    old = repo.run_now(replace, actor_id="cli").run_id
    assert repo.run_now(replace, actor_id="cli").outcome is FireOutcome.WAITING
    # The old Run never had an Attempt: its cancel ends it at once, so the waiting slot can start.
    assert LocalRunRepository(db).get(old).status is RunStatus.CANCELLED
    assert LocalRunRepository(db).get(active).status is RunStatus.QUEUED


def test_run_now_of_a_paused_schedule_starts_a_run(db: LocalDatabase) -> None:
    repo = LocalScheduleRepository(db)
    schedule_id = _add(db)
    repo.set_paused(schedule_id, True)
    assert repo.run_now(schedule_id, actor_id="cli").outcome is FireOutcome.STARTED


def test_edit_changes_only_the_given_fields_and_keeps_the_id_counts_and_runs(db: LocalDatabase, clock: ManualClock) -> None:
    repo = LocalScheduleRepository(db)
    schedule_id = _add(db, name="old")
    run_id = repo.run_now(schedule_id, actor_id="cli").run_id
    clock.advance(MINUTE)
    edited = repo.edit(EditScheduleCommand(schedule_id=schedule_id, expression="*/5 * * * *", env={"B": "2"},
                                           argv=["echo", "y"], timeout_ms=90_000))
    assert edited.id == schedule_id
    assert (edited.expression, edited.env, edited.command, edited.timeout_ms) == ("*/5 * * * *", {"B": "2"},
                                                                                   ["echo", "y"], 90_000)
    assert (edited.name, edited.cwd, edited.retries, edited.fired_count, edited.last_run_id) == (
        "old", "/srv", 2, 1, run_id)
    assert edited.next_fire_at_ms > clock.now_ms()
    assert edited.next_fire_at_ms - clock.now_ms() <= 5 * MINUTE
    assert LocalRunRepository(db).get(run_id).schedule_id == schedule_id


def test_edit_refuses_nothing_to_change_a_bad_expression_and_an_unknown_id(db: LocalDatabase) -> None:
    repo = LocalScheduleRepository(db)
    schedule_id = _add(db)
    with pytest.raises(InvalidScheduleCommandError, match="nothing to change"):
        repo.edit(EditScheduleCommand(schedule_id=schedule_id))
    with pytest.raises(Exception, match="expression|field"):
        repo.edit(EditScheduleCommand(schedule_id=schedule_id, expression="61 * * * *"))
    with pytest.raises(ScheduleNotFoundError):
        repo.edit(EditScheduleCommand(schedule_id="nope", name="x"))
    with pytest.raises(ScheduleNotFoundError):
        repo.run_now("nope", actor_id="cli")
    assert repo.get(schedule_id).expression == "0 * * * *"
