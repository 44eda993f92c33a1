"""QingLong's SQLite database read as hostile input (edge_runtime/qinglong/sqlite_reader.py):
every schema version of the fixtures (built from QingLong's own Sequelize models), columns read
by name, the version told from the schema, and the refusals: not SQLite, not QingLong's (with
what was found), a view posing as a table, a cell too large, too many rows, too many steps,
cells of the wrong type."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from edge_runtime.qinglong import sqlite_reader
from edge_runtime.qinglong.errors import QingLongSchemaError, QingLongSourceError
from edge_runtime.qinglong.sqlite_reader import read_database
from tests.support.qinglong_fixtures import VERSIONS, realistic_crons, write_database

EXPECTED_VERSION = {"2.11.0": "2.11 to 2.12", "2.16.3": "2.16.3 to 2.19", "2.21.0": "2.21 or newer",
                    "2.21.0-upgraded": "2.21 or newer"}


@pytest.mark.parametrize("version", VERSIONS)
def test_each_schema_version_is_read_by_column_name(tmp_path: Path, version: str) -> None:
    db = read_database(write_database(tmp_path / "database.sqlite", version, time_zone="Asia/Shanghai"))
    assert db.version == EXPECTED_VERSION[version]
    assert len(db.crons) == len(realistic_crons(version)) and len(db.envs) == 11
    first = db.crons[0]
    assert (first.name, first.command, first.schedule, first.disabled, first.labels) == (
        "京豆变动通知", "task jd_bean_change.js", "15 8 * * *", False, ("京东", "通知"))
    by_name = {c.name: c for c in db.crons}
    assert by_name["京喜工厂"].disabled and by_name["旧的已停用任务"].disabled  # isDisabled=1; legacy status 2
    assert by_name["更新面板"].is_system and not by_name["东东农场"].is_system
    if version != "2.11.0":
        assert by_name["极速版签到"].extra_schedules == ("30 21 * * *",)
        assert by_name["我是大老板"].task_before == "export JD_WSDLB_NUM=3"
    if version.startswith("2.21"):
        assert by_name["在子目录运行"].work_dir == "shufflewzc_faker2_main"
        assert by_name["并行任务"].allow_multiple_instances == 1
        assert by_name["东东农场"].allow_multiple_instances == (0 if version == "2.21.0" else None)
        assert db.envs[3].pinned
    cookies = [e for e in db.envs if e.name == "JD_COOKIE"]
    assert [e.enabled for e in cookies] == [True, True, False, True] and cookies[0].remarks == "大号"
    assert db.time_zone == "Asia/Shanghai" and db.unknown_columns == () and db.unknown_tables == ()
    assert db.row_counts["Apps"] == 1 and db.row_counts["Crontabs"] == len(db.crons)


def test_the_schema_version_follows_the_columns_each_release_added() -> None:
    base = {"Crontabs": ("id",), "Envs": ("id",)}
    assert sqlite_reader.schema_version(base) == "2.11 to 2.12"
    assert sqlite_reader.schema_version({**base, "Subscriptions": ("id",)}) == "2.13"
    assert sqlite_reader.schema_version({**base, "Subscriptions": ("id",), "CrontabViews": ("id",)}) == "2.14"
    assert sqlite_reader.schema_version({**base, "Subscriptions": ("proxy",)}) == "2.15.0 to 2.15.6"
    assert sqlite_reader.schema_version({**base, "Subscriptions": ("autoAddCron",)}) == "2.15.7"
    assert sqlite_reader.schema_version({"Crontabs": ("sub_id",), "Envs": ()}) == "2.15.8 to 2.16.2"
    assert sqlite_reader.schema_version({"Crontabs": ("log_name",), "Envs": ()}) == "2.20"
    assert sqlite_reader.schema_version({"Crontabs": (), "Envs": ("labels",)}) == "2.21 or newer"


def _sqlite(path: Path, *statements: str) -> Path:
    connection = apsw.Connection(str(path))
    for statement in statements:
        connection.execute(statement)
    connection.close()
    return path


def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "database.sqlite"
    path.write_bytes(b"not a database at all, though long enough" * 10)
    with pytest.raises(QingLongSourceError, match="is not an SQLite database"):
        read_database(path)


def test_an_sqlite_database_of_something_else_is_refused_with_what_was_found(tmp_path: Path) -> None:
    path = _sqlite(tmp_path / "other.sqlite", "CREATE TABLE users (id INTEGER, email TEXT)",
                   "CREATE TABLE Crontabs (id INTEGER, cmd TEXT)")
    with pytest.raises(QingLongSchemaError) as refused:
        read_database(path, shown="other.sqlite")
    message = str(refused.value)
    assert "missing Crontabs.name, Crontabs.command, Crontabs.schedule, Crontabs.isDisabled, table Envs" in message
    assert "found: Crontabs (id, cmd); users (id, email)" in message


def test_a_view_posing_as_a_table_is_refused_not_run(tmp_path: Path) -> None:
    path = write_database(tmp_path / "database.sqlite", "2.21.0")
    connection = apsw.Connection(str(path))
    connection.execute("ALTER TABLE Envs RENAME TO RealEnvs")
    connection.execute("CREATE VIEW Envs AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) "
                       "SELECT x AS id, x AS name, x AS value, 0 AS status, 0 AS position, '' AS remarks FROM n")
    connection.close()
    with pytest.raises(QingLongSchemaError, match="Envs is a view, not a table"):
        read_database(path)


def test_a_cell_too_large_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_reader, "MAX_CELL_BYTES", 4096)
    path = write_database(tmp_path / "database.sqlite", "2.21.0", envs=[
        {"name": "BIG", "value": "x" * 5000, "status": 0, "position": 1, "remarks": "", "createdAt": "t",
         "updatedAt": "t"}])
    with pytest.raises(QingLongSourceError, match="holds a cell larger than 4 KiB"):
        read_database(path)


def test_too_many_rows_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_reader, "MAX_ROWS", 5)
    path = write_database(tmp_path / "database.sqlite", "2.21.0")
    with pytest.raises(QingLongSourceError, match="Crontabs holds 20 rows, more than 5"):
        read_database(path)


def test_a_query_that_runs_too_long_is_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_database(tmp_path / "database.sqlite", "2.21.0")
    read_database(path)  # within the bound
    monkeypatch.setattr(sqlite_reader, "MAX_VM_STEPS", 300)
    with pytest.raises(QingLongSourceError, match="took more than 300 steps"):
        read_database(path)


def test_cells_of_the_wrong_type_are_recorded_never_guessed(tmp_path: Path) -> None:
    path = write_database(tmp_path / "database.sqlite", "2.21.0", crons=[
        {"name": "ok", "command": "task a.js", "schedule": "0 9 * * *", "createdAt": "t", "updatedAt": "t",
         "labels": "not json", "extra_schedules": '[{"schedule": 5}]'},
        {"name": b"\x00binary", "command": "task b.js", "schedule": "0 9 * * *", "createdAt": "t", "updatedAt": "t"},
        {"name": "n", "command": 42, "schedule": "0 9 * * *", "createdAt": "t", "updatedAt": "t",
         "isDisabled": "yes"},
    ], envs=[{"name": "A", "value": b"\xff", "status": 0, "createdAt": "t", "updatedAt": "t"}])
    db = read_database(path)
    ok, binary, number = db.crons
    assert ok.problems == () and ok.labels == () and ok.extra_schedules == ()
    assert "labels is not valid JSON: ignored" in ok.notes and "extra_schedules holds an entry that is not schedule: " \
        "ignored" in ok.notes
    assert binary.problems == ("name holds binary data, not text",)
    assert number.command == "42" and not number.disabled and "isDisabled holds str, not an integer" in number.notes
    assert db.envs[0].problems == ("value holds binary data, not text",)


def test_unknown_columns_and_tables_are_reported_not_read(tmp_path: Path) -> None:
    path = write_database(tmp_path / "database.sqlite", "2.21.0", extra_sql=[
        "ALTER TABLE Crontabs ADD COLUMN future_field TEXT", "CREATE TABLE Plugins (id INTEGER)",
        "INSERT INTO Plugins VALUES (1)"])
    db = read_database(path)
    assert db.unknown_columns == (("Crontabs", "future_field"),)
    assert db.unknown_tables == ("Plugins",) and db.row_counts["Plugins"] == 1
