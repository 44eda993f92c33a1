"""Hypothesis: a stored schedule fires once per slot across restarts, two services and clock jumps.

The clock is injected (a ManualClock shared by every connection, moved by the test; deliberately
not the guarded clock, so backward jumps reach the repository as they are). Steps: the clock moves
a little, jumps forward (downtime, NTP) or backward; a service ticks; the database is closed and
reopened (a restart, the crash case: nothing is kept in memory); a second service ticks on its own
connection. Runs end at once, so overlap never holds a slot back.

Checked against a model after every tick (the model: the stored slot fires when the clock has
reached it, once, and the next slot is the first after now):
- a due tick fires exactly the stored slot, once (missed slots coalesce, never a burst); a tick
  before the slot (a backward jump lands there) fires nothing;
- the stored next fire time equals the model's and lies after now;
- in the end no slot fired twice, slots fired in increasing order, each is a real slot of the
  expression and none lies after the latest time the clock showed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_runtime.contract.cron import parse_schedule
from edge_runtime.contract.schedules import AddScheduleCommand
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.schedules import LocalScheduleRepository

EXPRESSIONS = ("*/7 * * * *", "@every 90s", "0 */2 * * *", "*/20 * * * * *", "30 9 * * mon-fri", "@every 1d")
START_MS = 1_700_000_000_000

steps = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.integers(1, 10 * 60_000)),
        st.tuples(st.just("jump"), st.integers(60_000, 40 * 86_400_000)),
        st.tuples(st.just("back"), st.integers(1, 3 * 86_400_000)),
        st.tuples(st.sampled_from(("tick", "restart", "second_service")), st.just(0)),
    ),
    min_size=1,
    max_size=30,
)


def _fired(db) -> list[int]:
    return [row[0] for row in db.connection.execute("SELECT scheduled_for_ms FROM runs ORDER BY rowid")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expression=st.sampled_from(EXPRESSIONS), plan=steps)
def test_each_slot_fires_once_across_restarts_and_clock_jumps(expression: str, plan: list[tuple[str, int]]) -> None:
    schedule = parse_schedule(expression)
    clock = ManualClock(START_MS)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "edge-runtime.db"
        db = open_database(path, clock=clock)
        other = open_database(path, clock=clock)
        try:
            schedule_id = LocalScheduleRepository(db).add(AddScheduleCommand(expression=expression, argv=["true"])).id
            model_next = schedule.next_fire_after(START_MS)  # the model: the one slot that fires next
            latest_now = clock.now_ms()
            for action, amount in plan:
                if action in ("advance", "jump"):
                    clock.advance(amount)
                elif action == "back":
                    clock.set(max(0, clock.now_ms() - amount))
                elif action == "restart":  # nothing in memory survives: only what was stored
                    db.close()
                    db = open_database(path, clock=clock)
                    continue
                now = clock.now_ms()
                latest_now = max(latest_now, now)
                firer = LocalScheduleRepository(other if action == "second_service" else db)
                before = _fired(db)
                for due_id in firer.due_schedule_ids():
                    firer.fire(due_id, actor_id=action)
                with db.write():  # the Runs end at once: overlap holds nothing back
                    db.connection.execute("UPDATE runs SET status = 'succeeded' WHERE status = 'queued'")
                new = _fired(db)[len(before):]
                if now >= model_next:  # due: exactly one fire, for the stored slot, the rest coalesced
                    assert new == [model_next], f"at {now}: fired {new}, expected [{model_next}]"
                    model_next = schedule.next_fire_after(now)
                else:  # not due (a backward jump lands here): nothing fires
                    assert new == [], f"at {now}: fired {new} before the slot {model_next}"
                assert LocalScheduleRepository(db).get(schedule_id).next_fire_at_ms == model_next > now
            fired = _fired(db)
            assert fired == sorted(set(fired)), "a slot fired twice or out of order"
            for slot in fired:
                assert schedule.next_fire_after(slot - 1) == slot, f"{slot} is not a slot of {expression}"
                assert slot <= latest_now
        finally:
            db.close()
            other.close()
