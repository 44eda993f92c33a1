"""The schedule store on both adapters: the same bodies against Local and PostgreSQL.

What a user and the service see of a schedule (docs/schedules.md): add and the stored zone, due
and fire by the store's time, one Run per slot, missed slots coalesced into one fire, the overlap
rules (skip, queue, replace), pause and resume, edit, run now, remove, the number each schedule
gets (never given twice) and its labels. Time moves only by
``backend.advance(ms)``.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from tests.support.conformance_backends import HOST_ZONE
from edge_runtime.contract.cron import InvalidCronExpressionError, ScheduleNeverFiresError, parse_schedule
from edge_runtime.contract.schedules import (
    AddScheduleCommand,
    EditScheduleCommand,
    FireOutcome,
    InvalidScheduleCommandError,
    Overlap,
    PausedUnfireable,
    ScheduleNotFoundError,
)
from edge_runtime.contract.time_zones import InvalidTimeZoneError, time_zone

MINUTE = 60_000


def _add(backend: Any, **fields: Any) -> Any:
    fields = {"expression": "@every 1m", "argv": ["echo", "hi"], **fields}
    return backend.schedules.add(AddScheduleCommand(**fields))


#: The clock of this zone jumps over 10 April every year (DST at UTC-12 ends by 24 hours).
SKIPS_10_APRIL = "AAA-12BBB12,J1,J100/0"


def _fire_due(backend: Any) -> list[Any]:
    return [plan for sid in backend.schedules.due_schedule_ids(64)
            if (plan := backend.schedules.fire(sid, actor_id="w1")) is not None]


def _schedule_runs(backend: Any, schedule_id: str) -> list[Any]:
    return sorted(backend.runs.list_runs(schedule_id=schedule_id), key=lambda r: r.scheduled_for_ms)


def test_add_stores_the_canonical_expression_the_zone_and_the_first_slot_after_now(backend: Any) -> None:
    now = backend.now()
    record = _add(backend, expression="0,15,30,45 * * * *", name="report", timeout_ms=90_000)
    assert (record.expression, record.name, record.timeout_ms, record.overlap) == ("*/15 * * * *", "report", 90_000,
                                                                                   Overlap.SKIP)
    assert record.time_zone == HOST_ZONE  # no --tz: the host's zone, stored with it
    assert record.next_fire_at_ms == parse_schedule("*/15 * * * *").next_fire_after(now, time_zone(HOST_ZONE))
    assert (record.fired_count, record.skipped_count, record.coalesced_count, record.paused) == (0, 0, 0, False)
    assert [r.id for r in backend.schedules.list()] == [record.id]
    assert backend.schedules.get(record.id) == record
    zoned = _add(backend, time_zone="UTC")
    assert zoned.time_zone == "UTC0"


def test_a_due_slot_fires_once_as_one_run_of_the_schedule(backend: Any) -> None:
    record = _add(backend, name="tick", timeout_ms=5000, env={"A": "1"}, retries=2)
    assert backend.schedules.due_schedule_ids(64) == []
    assert backend.schedules.fire(record.id, actor_id="w1") is None  # not due yet
    backend.advance(record.next_fire_at_ms - backend.now())
    assert backend.schedules.due_schedule_ids(64) == [record.id]
    plan = backend.schedules.fire(record.id, actor_id="w1")
    assert plan is not None and plan.outcome is FireOutcome.STARTED and not plan.due.coalesced
    assert plan.due.fire_at_ms == record.next_fire_at_ms
    assert plan.due.next_fire_at_ms == record.next_fire_at_ms + MINUTE
    # The same slot again, from this or any other worker: nothing.
    assert backend.schedules.fire(record.id, actor_id="w2") is None
    assert backend.schedules.due_schedule_ids(64) == []
    [run] = _schedule_runs(backend, record.id)
    assert (run.status.value, run.name, run.timeout_ms, run.scheduled_for_ms, run.env, run.retries) == (
        "queued", "tick", 5000, record.next_fire_at_ms, {"A": "1", "TZ": HOST_ZONE}, 2)
    after = backend.schedules.get(record.id)
    assert (after.fired_count, after.last_outcome, after.last_run_id, after.last_fire_at_ms) == (
        1, FireOutcome.STARTED, run.id, record.next_fire_at_ms)


def test_slots_missed_while_no_one_fired_coalesce_into_one_fire(backend: Any) -> None:
    record = _add(backend)
    backend.advance(record.next_fire_at_ms - backend.now() + 5 * MINUTE + 7_000)  # six slots passed
    [plan] = _fire_due(backend)
    assert plan.due.coalesced and plan.due.fire_at_ms == record.next_fire_at_ms
    assert plan.due.next_fire_at_ms == record.next_fire_at_ms + 6 * MINUTE  # the first slot after now
    assert _fire_due(backend) == []
    assert len(_schedule_runs(backend, record.id)) == 1
    after = backend.schedules.get(record.id)
    assert (after.fired_count, after.coalesced_count) == (1, 1)


def test_overlap_skip_records_the_slot_as_skipped_while_a_run_is_active(backend: Any) -> None:
    record = _add(backend)
    backend.advance(record.next_fire_at_ms - backend.now())
    [first] = _fire_due(backend)
    backend.advance(MINUTE)
    [second] = _fire_due(backend)
    assert (first.outcome, second.outcome) == (FireOutcome.STARTED, FireOutcome.SKIPPED)
    assert len(_schedule_runs(backend, record.id)) == 1
    after = backend.schedules.get(record.id)
    assert (after.fired_count, after.skipped_count, after.last_outcome) == (1, 1, FireOutcome.SKIPPED)


def test_overlap_queue_waits_for_the_active_run_then_starts_the_waiting_slot(backend: Any) -> None:
    record = _add(backend, overlap=Overlap.QUEUE)
    backend.advance(record.next_fire_at_ms - backend.now())
    _fire_due(backend)
    backend.advance(MINUTE)
    [waiting] = _fire_due(backend)
    backend.advance(MINUTE)
    [joined] = _fire_due(backend)  # a later slot joins the one waiting
    assert (waiting.outcome, joined.outcome) == (FireOutcome.WAITING, FireOutcome.WAITING)
    assert backend.schedules.get(record.id).waiting_fire_at_ms == record.next_fire_at_ms + MINUTE
    assert backend.schedules.start_waiting(actor_id="w1") == []
    assert len(_schedule_runs(backend, record.id)) == 1  # still one: the first is active
    backend.set_run_status(_schedule_runs(backend, record.id)[0].id, "succeeded")
    assert backend.schedules.start_waiting(actor_id="w1") == []
    runs = _schedule_runs(backend, record.id)
    assert [r.scheduled_for_ms for r in runs] == [record.next_fire_at_ms, record.next_fire_at_ms + MINUTE]
    after = backend.schedules.get(record.id)
    assert after.waiting_fire_at_ms is msgspec.UNSET and after.fired_count == 2
    assert backend.schedules.start_waiting(actor_id="w1") == []
    assert len(_schedule_runs(backend, record.id)) == 2


def test_overlap_replace_cancels_the_active_run_through_the_run_store(backend: Any) -> None:
    record = _add(backend, overlap=Overlap.REPLACE)
    backend.advance(record.next_fire_at_ms - backend.now())
    _fire_due(backend)
    [active] = _schedule_runs(backend, record.id)
    backend.advance(MINUTE)
    [plan] = _fire_due(backend)
    assert plan.outcome is FireOutcome.WAITING and plan.cancel_run_ids == (active.id,)
    backend.schedules.request_cancel(active.id, f"replaced by schedule {record.id}", actor_id="scheduler")
    cancelled = backend.runs.get(active.id)
    assert cancelled.cancel_reason == f"replaced by schedule {record.id}"
    # Requested once: a waiting replace slot asks again only for Runs without a request.
    assert backend.schedules.start_waiting(actor_id="w1") == []
    backend.set_run_status(active.id, "cancelled")
    backend.schedules.start_waiting(actor_id="w1")
    assert len(_schedule_runs(backend, record.id)) == 2


def test_pause_stops_firing_and_resume_starts_from_the_first_slot_after_now(backend: Any) -> None:
    record = _add(backend)
    paused = backend.schedules.set_paused(record.id, True)
    assert paused.paused
    backend.advance(record.next_fire_at_ms - backend.now() + 3 * MINUTE)
    assert backend.schedules.due_schedule_ids(64) == []
    resumed = backend.schedules.set_paused(record.id, False)
    assert not resumed.paused
    assert resumed.next_fire_at_ms == record.next_fire_at_ms + 4 * MINUTE  # the missed slots are not fired
    assert _fire_due(backend) == []


def test_a_schedule_added_paused_never_fires_until_resumed(backend: Any) -> None:
    record = _add(backend, paused=True)
    assert record.paused and backend.schedules.get(record.id).paused
    backend.advance(record.next_fire_at_ms - backend.now() + 3 * MINUTE)
    assert backend.schedules.due_schedule_ids(64) == [] and _fire_due(backend) == []
    assert backend.schedules.next_due_at_ms() is None
    resumed = backend.schedules.set_paused(record.id, False)
    assert not resumed.paused and resumed.next_fire_at_ms > backend.now()


def test_edit_changes_only_what_is_given_and_a_new_expression_moves_the_next_fire(backend: Any) -> None:
    record = _add(backend, name="old")
    now = backend.now()
    edited = backend.schedules.edit(EditScheduleCommand(schedule_id=record.id, expression="@every 5m",
                                                        argv=["true"], env={"K": "v"}))
    assert (edited.id, edited.name, edited.expression, edited.command, edited.env) == (
        record.id, "old", "@every 5m", ["true"], {"K": "v"})
    assert edited.next_fire_at_ms == parse_schedule("@every 5m").next_fire_after(now, time_zone(HOST_ZONE))
    renamed = backend.schedules.edit(EditScheduleCommand(schedule_id=record.id, name="new"))
    assert (renamed.name, renamed.next_fire_at_ms) == ("new", edited.next_fire_at_ms)
    with pytest.raises(ScheduleNotFoundError):
        backend.schedules.edit(EditScheduleCommand(schedule_id="missing", name="x"))


def test_a_new_zone_moves_the_next_fire_to_the_expression_s_slot_in_that_zone(backend: Any) -> None:
    record = _add(backend, expression="30 7 * * *", time_zone="Asia/Shanghai")
    now = backend.now()
    moved = backend.schedules.edit(EditScheduleCommand(schedule_id=record.id, time_zone="Europe/Berlin"))
    assert (moved.time_zone, moved.expression) == ("Europe/Berlin", "30 7 * * *")
    assert moved.next_fire_at_ms == parse_schedule("30 7 * * *").next_fire_after(now, time_zone("Europe/Berlin"))
    assert moved.next_fire_at_ms != record.next_fire_at_ms
    # Both at once: the new expression's slot in the new zone.
    both = backend.schedules.edit(EditScheduleCommand(schedule_id=record.id, expression="0 9 * * *", time_zone="UTC"))
    assert both.next_fire_at_ms == parse_schedule("0 9 * * *").next_fire_after(backend.now(), time_zone("UTC"))
    # A paused one keeps its zone for its resume; nothing fires in between.
    backend.schedules.set_paused(record.id, True)
    paused = backend.schedules.edit(EditScheduleCommand(schedule_id=record.id, time_zone="Asia/Shanghai"))
    assert paused.paused and paused.time_zone == "Asia/Shanghai"
    with pytest.raises(InvalidTimeZoneError):
        backend.schedules.edit(EditScheduleCommand(schedule_id=record.id, time_zone="Mars/Olympus"))
    with pytest.raises(ScheduleNeverFiresError):  # April 10 never shows in that zone
        backend.schedules.edit(EditScheduleCommand(schedule_id=record.id, expression="0 * 10 4 *",
                                                   time_zone=SKIPS_10_APRIL))
    assert backend.schedules.get(record.id).time_zone == "Asia/Shanghai"


def test_run_now_starts_a_run_and_its_overlap_applies(backend: Any) -> None:
    record = _add(backend, overlap=Overlap.SKIP)
    started = backend.schedules.run_now(record.id, actor_id="cli")
    assert started.outcome is FireOutcome.STARTED
    [run] = _schedule_runs(backend, record.id)
    assert run.id == started.run_id and run.scheduled_for_ms == backend.now()
    skipped = backend.schedules.run_now(record.id, actor_id="cli")
    assert skipped.outcome is FireOutcome.SKIPPED and skipped.active_run_ids == [run.id]
    backend.set_run_status(run.id, "succeeded")
    again = backend.schedules.run_now(record.id, actor_id="cli")  # the same millisecond: the next slot
    assert again.outcome is FireOutcome.STARTED
    assert len({r.scheduled_for_ms for r in _schedule_runs(backend, record.id)}) == 2


def test_remove_ends_the_schedule_and_keeps_its_runs(backend: Any) -> None:
    record = _add(backend)
    backend.advance(record.next_fire_at_ms - backend.now())
    _fire_due(backend)
    backend.schedules.remove(record.id)
    with pytest.raises(ScheduleNotFoundError):
        backend.schedules.get(record.id)
    with pytest.raises(ScheduleNotFoundError):
        backend.schedules.remove(record.id)
    assert backend.schedules.list() == []
    backend.advance(10 * MINUTE)
    assert backend.schedules.due_schedule_ids(64) == []
    assert len(_schedule_runs(backend, record.id)) == 1


def test_the_next_due_time_is_the_earliest_next_fire_of_an_unpaused_schedule(backend: Any) -> None:
    assert backend.schedules.next_due_at_ms() is None
    soon = _add(backend, expression="@every 1m")
    _add(backend, expression="@every 1h")
    assert backend.schedules.next_due_at_ms() == soon.next_fire_at_ms
    backend.schedules.set_paused(soon.id, True)
    assert backend.schedules.next_due_at_ms() != soon.next_fire_at_ms


def test_an_expression_that_never_fires_in_its_zone_is_refused_by_add_edit_and_resume(backend: Any) -> None:
    with pytest.raises(ScheduleNeverFiresError) as caught:
        _add(backend, expression="0 * 10 4 *", time_zone=SKIPS_10_APRIL)
    assert caught.value.code == "SCHEDULE_NEVER_FIRES" and SKIPS_10_APRIL in str(caught.value)
    assert backend.schedules.list() == []
    record = _add(backend, expression="0 * 11 4 *", time_zone=SKIPS_10_APRIL)  # the next day shows
    for paused in (False, True):
        backend.schedules.set_paused(record.id, paused)
        with pytest.raises(ScheduleNeverFiresError):
            backend.schedules.edit(EditScheduleCommand(schedule_id=record.id, expression="0 * 10 4 *"))
        assert backend.schedules.get(record.id).expression == "0 * 11 4 *"
    # A fixed hour fires when the gap ends, as in any spring gap: accepted.
    edited = backend.schedules.edit(EditScheduleCommand(schedule_id=record.id, expression="0 3 10 4 *"))
    assert edited.expression == "0 3 10 4 *"


def test_a_stored_schedule_that_cannot_fire_is_paused_with_the_reason_and_the_others_fire(backend: Any) -> None:
    good = _add(backend)
    due = backend.now()
    backend.store_foreign_schedule("never", "0 * 10 4 *", SKIPS_10_APRIL, due - 2)
    backend.store_foreign_schedule("unread", "61 * * * *", "UTC0", due - 1)
    backend.store_foreign_schedule("nowhere", "@hourly", "Nowhere/Atlantis", due)
    backend.advance(good.next_fire_at_ms - backend.now())
    assert backend.schedules.due_schedule_ids(64)[:3] == ["never", "unread", "nowhere"]
    plans = {sid: backend.schedules.fire(sid, actor_id="w1") for sid in backend.schedules.due_schedule_ids(64)}
    assert plans[good.id].outcome is FireOutcome.STARTED
    reasons = {sid: plan.reason for sid, plan in plans.items() if isinstance(plan, PausedUnfireable)}
    assert sorted(reasons) == ["never", "nowhere", "unread"]
    assert reasons["never"].endswith("choose other times or another zone [SCHEDULE_NEVER_FIRES]")
    assert reasons["unread"].endswith("minute: 61 is out of range 0-59 [INVALID_CRON_EXPRESSION]")
    assert "Nowhere/Atlantis" in reasons["nowhere"] and reasons["nowhere"].endswith("[INVALID_TIME_ZONE]")
    for sid, reason in reasons.items():
        record = backend.schedules.get(sid)
        assert (record.paused, record.pause_reason) == (True, reason)
    assert backend.schedules.due_schedule_ids(64) == []
    assert backend.schedules.next_due_at_ms() == backend.schedules.get(good.id).next_fire_at_ms
    # Resuming one that still cannot fire is refused: it stays paused, with its reason.
    for sid, error in (("never", ScheduleNeverFiresError), ("unread", InvalidCronExpressionError),
                       ("nowhere", InvalidTimeZoneError)):
        with pytest.raises(error):
            backend.schedules.set_paused(sid, False)
        assert backend.schedules.get(sid).pause_reason == reasons[sid]
    # A new expression that fires clears the reason; resuming then fires it from the next slot.
    fixed = backend.schedules.edit(EditScheduleCommand(schedule_id="unread", expression="1 * * * *"))
    assert fixed.paused and fixed.pause_reason is msgspec.UNSET
    resumed = backend.schedules.set_paused("unread", False)
    assert not resumed.paused and resumed.next_fire_at_ms > backend.now()
    # A schedule its user paused has no reason.
    assert backend.schedules.set_paused(good.id, True).pause_reason is msgspec.UNSET


def test_a_schedule_is_found_by_a_prefix_or_a_suffix_of_its_id_newest_first(backend: Any) -> None:
    records = []
    for _ in range(17):  # 17 random ids over 16 hex digits: at least two begin with the same one
        records.append(_add(backend))
        backend.advance(1)
    first = records[0]
    find = backend.schedules.find_schedule_ids
    assert find(first.id[:8], 6) == [first.id] == find(first.id[-12:], 6)
    shared = next(r.id[0] for r in records if sum(o.id[0] == r.id[0] for o in records) > 1)
    named = [r.id for r in reversed(records) if r.id.startswith(shared) or r.id.endswith(shared)]
    assert len(named) > 1 and find(shared, 100) == named and find(shared, 1) == named[:1]
    assert find("%", 6) == [] and find("_", 6) == []  # matched literally, never as a LIKE pattern
    backend.schedules.remove(first.id)
    assert find(first.id[:8], 6) == []


def test_a_fired_run_gets_the_schedules_zone_as_tz_unless_the_schedules_own_env_sets_it(backend: Any) -> None:
    zoned = _add(backend, time_zone="CST-8", env={"A": "1"})
    own = _add(backend, time_zone="CST-8", env={"TZ": "EST5"})
    for record in (zoned, own):
        started = backend.schedules.run_now(record.id, actor_id="cli")
        backend.set_run_status(started.run_id, "succeeded")  # overlap skip: the due slot starts too
    backend.advance(MINUTE)
    _fire_due(backend)
    for record, env in ((zoned, {"A": "1", "TZ": "CST-8"}), (own, {"TZ": "EST5"})):
        runs = _schedule_runs(backend, record.id)
        assert len(runs) == 2 and [r.env for r in runs] == [env, env]  # run now, then the due slot
    assert backend.schedules.get(zoned.id).env == {"A": "1"}  # the schedule's own variables are unchanged


def test_each_schedule_gets_the_next_number_and_a_removed_ones_number_is_never_given_again(backend: Any) -> None:
    first, second, third = (_add(backend, name=n) for n in ("a", "b", "c"))
    assert (first.number, second.number, third.number) == (1, 2, 3)
    assert [r.number for r in backend.schedules.list()] == [1, 2, 3]
    assert backend.schedules.get_by_number(2) == second
    backend.schedules.remove(third.id)  # the highest number: a counter taken from max() would reuse it
    backend.schedules.remove(first.id)
    fourth = _add(backend, name="d")
    assert fourth.number == 4
    for gone in (1, 3):
        with pytest.raises(ScheduleNotFoundError):
            backend.schedules.get_by_number(gone)
    edited = backend.schedules.edit(EditScheduleCommand(schedule_id=second.id, name="b2", expression="@every 5m"))
    assert edited.number == 2  # an edit keeps it
    for bad in (0, -1, True, "2"):
        with pytest.raises(InvalidScheduleCommandError):
            backend.schedules.get_by_number(bad)


def test_labels_are_stored_replaced_as_a_whole_and_removed(backend: Any) -> None:
    plain = _add(backend)
    assert plain.labels == []
    labelled = _add(backend, labels=["jd", "京东 daily"])
    assert backend.schedules.get(labelled.id).labels == ["jd", "京东 daily"]
    replaced = backend.schedules.edit(EditScheduleCommand(schedule_id=labelled.id, labels=["other"]))
    assert replaced.labels == ["other"]
    renamed = backend.schedules.edit(EditScheduleCommand(schedule_id=labelled.id, name="kept"))
    assert renamed.labels == ["other"]  # an edit without labels keeps them
    cleared = backend.schedules.edit(EditScheduleCommand(schedule_id=labelled.id, labels=[]))
    assert cleared.labels == [] and backend.schedules.get(labelled.id).labels == []
    for bad in (["a", "a"], [""], ["x" * 65], ["a\nb"], [str(n) for n in range(33)]):
        with pytest.raises(InvalidScheduleCommandError):
            _add(backend, labels=bad)
        with pytest.raises(InvalidScheduleCommandError):
            EditScheduleCommand(schedule_id=plain.id, labels=bad)
    assert [r.id for r in backend.schedules.list()] == [plain.id, labelled.id]  # nothing stored by a refusal
