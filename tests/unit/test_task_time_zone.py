"""A task's clock and the times the CLI shows (docs/environment.md, docs/schedules.md: time zones):
a task without a ``TZ`` of its own gets the device's zone as ``serve`` reads it, a schedule's Runs
the schedule's zone unless its own variables set ``TZ``; a schedule's times are shown in its zone,
every other time in the device's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest

from edge_runtime.cli import common
from edge_runtime.cli.common import format_ms
from edge_runtime.cli.main import main
from edge_runtime.contract.schedules import ScheduleRecord, fired_run_env
from edge_runtime.contract.time_zones import time_zone
from edge_runtime.service.executor import task_environment

#: 2026-12-03 00:00:00 UTC.
INSTANT_MS = 1_796_256_000_000


def _cli(capsys: pytest.CaptureFixture[str], db: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--db", str(db), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def etc(tmp_path: Path) -> Path:
    made = tmp_path / "etc"
    made.mkdir()
    return made


def test_a_task_without_tz_gets_the_devices_zone_as_serve_reads_it(etc: Path) -> None:
    (etc / "TZ").write_text("CET-1CEST,M3.5.0,M10.5.0/3\n")  # OpenWrt's /etc/TZ, which musl does not read
    assert task_environment({"PATH": "/bin"}, etc=etc) == {"PATH": "/bin", "TZ": "CET-1CEST,M3.5.0,M10.5.0/3"}
    assert task_environment({"PATH": "/bin", "TZ": "EST5"}, etc=etc)["TZ"] == "EST5"  # the service's own stays
    assert task_environment({"TZ": " "}, etc=etc)["TZ"] == "CET-1CEST,M3.5.0,M10.5.0/3"  # a blank one is none
    (etc / "TZ").unlink()
    (etc / "localtime").write_bytes(b"TZif2" + b"\0" * 40 + b"\n<+0530>-5:30\n")  # a TZif file's own rule
    assert task_environment({}, etc=etc) == {"TZ": "<+0530>-5:30"}
    (etc / "localtime").unlink()
    assert task_environment({}, etc=etc) == {"TZ": "UTC0"}  # nothing says: UTC, said


def test_a_device_zone_that_is_no_zone_leaves_the_task_the_c_librarys_default(etc: Path) -> None:
    (etc / "TZ").write_text("not a zone\n")
    assert task_environment({"PATH": "/bin"}, etc=etc) == {"PATH": "/bin"}


def _schedule(**fields: object) -> ScheduleRecord:
    return msgspec.convert({"id": "s1", "expression": "@daily", "command": ["date"], "overlap": "skip",
                            "paused": False, "nextFireAtMs": 0, "firedCount": 0, "skippedCount": 0,
                            "coalescedCount": 0, "createdAtMs": 0, "updatedAtMs": 0, "number": 1, **fields}, ScheduleRecord)


def test_a_fired_run_gets_its_schedules_zone_unless_the_schedules_own_env_sets_tz() -> None:
    assert fired_run_env(_schedule(timeZone="Asia/Shanghai")) == {"TZ": "Asia/Shanghai"}
    assert fired_run_env(_schedule(timeZone="CST-8", env={"A": "1"})) == {"A": "1", "TZ": "CST-8"}
    assert fired_run_env(_schedule(timeZone="CST-8", env={"TZ": "EST5"})) == {"TZ": "EST5"}
    # Stored before zones were kept: the device's zone, which every task gets anyway.
    assert fired_run_env(_schedule()) is None
    assert fired_run_env(_schedule(env={"A": "1"})) == {"A": "1"}


@pytest.fixture
def device_zone(monkeypatch: pytest.MonkeyPatch):
    """Set the device's zone as ``device_time_zone`` reads it (no $TZ: /etc/TZ, /etc/localtime)."""
    import edge_runtime.contract.device as device

    monkeypatch.delenv("TZ", raising=False)
    common._device_zone.cache_clear()

    def set_zone(text: str) -> None:
        monkeypatch.setattr(device, "device_time_zone", lambda environ=None, etc=None: text)
        common._device_zone.cache_clear()

    yield set_zone
    common._device_zone.cache_clear()


def test_times_are_shown_in_the_devices_zone_as_serve_reads_it_and_a_schedules_in_its_own(device_zone) -> None:
    device_zone("<+0530>-5:30")
    assert format_ms(INSTANT_MS) == "2026-12-03 05:30:00 +05:30"
    assert format_ms(INSTANT_MS, time_zone("CST-8")) == "2026-12-03 08:00:00 +08:00"
    assert format_ms(INSTANT_MS, time_zone("EST5")) == "2026-12-02 19:00:00 -05:00"
    device_zone("not a zone")  # unreadable: the C library's local time, still with its offset
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d\d:\d\d", format_ms(INSTANT_MS))


def test_schedule_show_and_show_run_print_a_schedules_times_in_its_zone_and_the_rest_in_the_devices(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, device_zone
) -> None:
    device_zone("UTC0")
    db = tmp_path / "e.db"
    schedule_id = _cli(capsys, db, "schedule", "add", "--tz", "CST-8", "--overlap", "queue", "@daily", "--",
                       "date")[1].strip()
    run_id = _cli(capsys, db, "schedule", "run", schedule_id)[1].strip()
    assert _cli(capsys, db, "schedule", "run", schedule_id)[1].startswith("waiting:")  # a waiting slot
    shown = _cli(capsys, db, "schedule", "show", schedule_id)[1]
    for line in ("next fire  ", "waiting    slot ", "last fire  "):
        assert re.search(rf"^{line}\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d \+08:00\b", shown, re.M), (line, shown)
    assert "+00:00" not in shown  # never another zone beside them
    run_shown = _cli(capsys, db, "show", run_id)[1]
    assert re.search(r"^schedule   \S+  slot \S+ \S+ \+08:00$", run_shown, re.M), run_shown
    assert re.search(r"^created    \S+ \S+ \+00:00$", run_shown, re.M), run_shown  # the Run's own: the device's
    assert "env        TZ=CST-8" in run_shown  # what its task is given
    # The schedule removed, its Run's slot is shown in the device's zone (its offset says so).
    _cli(capsys, db, "schedule", "remove", schedule_id)
    assert re.search(r"^schedule   \S+  slot \S+ \S+ \+00:00$", _cli(capsys, db, "show", run_id)[1], re.M)
    assert json.loads(_cli(capsys, db, "show", run_id, "--json")[1])["env"] == {"TZ": "CST-8"}
