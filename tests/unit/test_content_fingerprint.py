"""The content fingerprint behind the scrub's rollback gate: blind to VACUUM, sensitive to any write."""

from __future__ import annotations

from pathlib import Path

import apsw

from edge_runtime.local.content_fingerprint import fingerprint_tables, whole_fingerprint


def _db(path: Path) -> apsw.Connection:
    connection = apsw.Connection(str(path))
    connection.execute(
        "CREATE TABLE t (name TEXT, value INTEGER); "
        "CREATE TABLE device_events (id INTEGER PRIMARY KEY, type TEXT, payload TEXT)"
    )
    with connection:
        connection.executemany("INSERT INTO t VALUES (?, ?)", [(f"row-{i}", i) for i in range(2000)])
        connection.execute("INSERT INTO device_events (type, payload) VALUES ('clock.jump_detected', '{}')")
    return connection


def test_vacuum_and_row_order_leave_it_unchanged_and_any_write_changes_it(tmp_path: Path) -> None:
    connection = _db(tmp_path / "a.db")
    first = fingerprint_tables(connection)
    assert first["t"][0] == 2000 and first["device_events"][0] == 1
    with connection:
        connection.execute("DELETE FROM t WHERE value % 3 = 0")  # free pages, then renumbered by VACUUM
        connection.executemany("INSERT INTO t VALUES (?, ?)", [(f"row-{i}", i) for i in range(0, 2000, 3)])
    connection.execute("VACUUM")
    assert fingerprint_tables(connection) == first
    # The same rows inserted in another order, in another file: equal.
    other = apsw.Connection(str(tmp_path / "b.db"))
    other.execute(
        "CREATE TABLE t (name TEXT, value INTEGER); "
        "CREATE TABLE device_events (id INTEGER PRIMARY KEY, type TEXT, payload TEXT)"
    )
    with other:
        other.executemany("INSERT INTO t VALUES (?, ?)", [(f"row-{i}", i) for i in reversed(range(2000))])
        other.execute("INSERT INTO device_events (type, payload) VALUES ('clock.jump_detected', '{}')")
    assert whole_fingerprint(fingerprint_tables(other)) == whole_fingerprint(first)

    with connection:
        connection.execute("UPDATE t SET value = 7 WHERE name = 'row-1999'")
    changed = fingerprint_tables(connection)
    assert changed["t"] != first["t"] and changed["t"][0] == 2000
    assert {k for k in first if first[k] != changed[k]} == {"t"}


def test_ignored_device_events_do_not_count(tmp_path: Path) -> None:
    connection = _db(tmp_path / "a.db")
    before = fingerprint_tables(connection, ignored_device_events=("step.done",))
    with connection:
        connection.execute("INSERT INTO device_events (type, payload) VALUES ('step.done', '{}')")
    assert fingerprint_tables(connection, ignored_device_events=("step.done",)) == before
    assert fingerprint_tables(connection)["device_events"] != before["device_events"]
    connection.execute("CREATE INDEX t_value ON t (value)")
    assert fingerprint_tables(connection, ignored_device_events=("step.done",))["sqlite_schema"] != before["sqlite_schema"]


def test_an_id_taken_by_autoincrement_counts_even_when_its_row_is_gone(tmp_path: Path) -> None:
    """``sqlite_sequence`` keeps the last id an AUTOINCREMENT table gave (env entries' ids are
    never given again): an entry added then removed leaves no row, but a copy or rollback that
    lost the counter would give its id again."""
    connection = apsw.Connection(str(tmp_path / "a.db"))
    connection.execute("CREATE TABLE e (id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT)")
    before = fingerprint_tables(connection)
    with connection:
        connection.execute("INSERT INTO e (v) VALUES ('x')")
        connection.execute("DELETE FROM e")
    after = fingerprint_tables(connection)
    assert after["e"] == before.get("e") and after != before
