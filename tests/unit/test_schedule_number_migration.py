"""Local migration 0015 on a database that already holds schedules: each gets its number in the
order `schedule list` shows them, and the next schedule added gets the number after the highest."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from edge_runtime.contract.schedules import AddScheduleCommand
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.migrations import apply_pending, known_migrations
from edge_runtime.local.schedules import LocalScheduleRepository

NUMBERING = "0015_schedule_number_labels"


def test_stored_schedules_are_numbered_in_list_order_and_the_counter_continues_after_them(tmp_path: Path) -> None:
    path = tmp_path / "edge-runtime.db"
    known = known_migrations()
    before = [m for m in known if m.id < NUMBERING]
    assert NUMBERING in {m.id for m in known}
    connection = apsw.Connection(str(path))
    apply_pending(connection, str(path), before, ManualClock(1_000))
    for schedule_id, created in (("c", 300), ("b", 100), ("a", 200), ("d", 100)):
        connection.execute("INSERT INTO schedules (id, expression, command, overlap, next_fire_at_ms, created_at_ms, "
                           "updated_at_ms) VALUES (?, '@daily', '[\"true\"]', 'skip', 0, ?, ?)",
                           (schedule_id, created, created))
    connection.close()
    db = open_database(str(path), clock=ManualClock(1_000))  # applies 0015 and the rest
    try:
        numbers = db.connection.execute("SELECT id, number FROM schedules ORDER BY number").fetchall()
        assert numbers == [("b", 1), ("d", 2), ("a", 3), ("c", 4)]  # creation time, then insertion (rowid)
        assert db.connection.execute("SELECT last_number FROM schedule_numbers").fetchall() == [(4,)]
        repository = LocalScheduleRepository(db, device_zone="UTC0")
        assert [r.number for r in repository.list()] == [1, 2, 3, 4]
        assert repository.add(AddScheduleCommand(expression="@daily", argv=["true"])).number == 5
        # A row another program inserts gets the next number too; one it numbers itself is refused,
        # and a number never changes.
        db.connection.execute("INSERT INTO schedules (id, expression, command, overlap, next_fire_at_ms, created_at_ms, "
                              "updated_at_ms) VALUES ('foreign', '@daily', '[\"true\"]', 'skip', 0, 5, 5)")
        assert repository.get("foreign").number == 6
        for statement in ("INSERT INTO schedules (id, expression, command, overlap, next_fire_at_ms, created_at_ms, "
                          "updated_at_ms, number) VALUES ('n', '@daily', '[\"true\"]', 'skip', 0, 5, 5, 99)",
                          "UPDATE schedules SET number = 1 WHERE id = 'foreign'"):
            with pytest.raises(apsw.ConstraintError, match="number"):
                db.connection.execute(statement)
        assert sorted(r.number for r in repository.list()) == [1, 2, 3, 4, 5, 6]
    finally:
        db.close()
