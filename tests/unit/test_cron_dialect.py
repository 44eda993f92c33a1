"""The cron QingLong's users write, and schedules that keep their time zone: a table of the
decided cases (accepted syntax with node-schedule's fire times, DST as the other
implementations fire it, the refusals we keep with what to write instead), then the stores:
a schedule's zone is stored and used whatever the service's own ``TZ``, ``@reboot`` fires once
per boot, and a database of the previous migration keeps its schedules.

Expected instants are UTC calendar times worked out by hand from each POSIX rule.
"""

from __future__ import annotations

import calendar
import datetime as dt
import io
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest

from edge_runtime.contract.cron import (
    MAX_EXPRESSION_LENGTH,
    NEVER_BY_THE_CLOCK_MS,
    BootSchedule,
    InvalidCronExpressionError,
    parse_schedule,
)
from edge_runtime.contract.schedules import AddScheduleCommand
from edge_runtime.contract.time_zones import InvalidTimeZoneError, time_zone
from edge_runtime.local import migrations as migrations_module
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.schedules import LocalScheduleRepository
from edge_runtime.service.journal import Journal
from edge_runtime.service.scheduler import Scheduler

CET = "CET-1CEST,M3.5.0,M10.5.0/3"


def utc(*fields: int) -> int:
    return calendar.timegm((*fields, 0, 0, 0, 0, 0, 0)[:6] + (0, 0, 0)) * 1000


def show(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M")


def fires(expression: str, after_ms: int, count: int, zone: str = "UTC0") -> list[str]:
    schedule, tz, out = parse_schedule(expression), time_zone(zone), []
    for _ in range(count):
        after_ms = schedule.next_fire_after(after_ms, tz)
        out.append(show(after_ms))
    return out


# --------------------------------------------------------------------------- the table


ACCEPTED = [
    # (expression, canonical text, zone, after, first fires in UTC)
    ("0 0 L * *", "0 0 L * *", "UTC0", utc(2028, 1, 15),
     ["2028-01-31 00:00", "2028-02-29 00:00", "2028-03-31 00:00", "2028-04-30 00:00"]),
    ("0 12 1,L * *", "0 12 1,L * *", "UTC0", utc(2026, 2, 2),
     ["2026-02-28 12:00", "2026-03-01 12:00", "2026-03-31 12:00"]),
    ("0 18 * * 5L", "0 18 * * 5L", "UTC0", utc(2026, 1, 1),
     ["2026-01-30 18:00", "2026-02-27 18:00", "2026-03-27 18:00"]),
    ("0 18 * * friL", "0 18 * * 5L", "UTC0", utc(2026, 1, 1),
     ["2026-01-30 18:00", "2026-02-27 18:00", "2026-03-27 18:00"]),
    ("0 9 * * 1#2", "0 9 * * 1#2", "UTC0", utc(2026, 1, 1),
     ["2026-01-12 09:00", "2026-02-09 09:00", "2026-03-09 09:00"]),
    ("0 9 * * mon#1,MON#3", "0 9 * * 1#1,1#3", "UTC0", utc(2026, 1, 1),
     ["2026-01-05 09:00", "2026-01-19 09:00", "2026-02-02 09:00"]),
    ("0 9 * * 7#1", "0 9 * * 0#1", "UTC0", utc(2026, 1, 1),
     ["2026-01-04 09:00", "2026-02-01 09:00", "2026-03-01 09:00"]),
    # Pasted separators and line ends; the stored text is normalised.
    ("0\u30009 * * *", "0 9 * * *", "UTC0", utc(2026, 1, 1), ["2026-01-01 09:00"]),
    ("0\u00a09\u00a0*\u00a0*\u00a0*", "0 9 * * *", "UTC0", utc(2026, 1, 1), ["2026-01-01 09:00"]),
    ("0 9 * * *\n", "0 9 * * *", "UTC0", utc(2026, 1, 1), ["2026-01-01 09:00"]),
    ("0 9 * * *\r\n", "0 9 * * *", "UTC0", utc(2026, 1, 1), ["2026-01-01 09:00"]),
    ("@minutely", "* * * * *", "UTC0", utc(2026, 1, 1), ["2026-01-01 00:01", "2026-01-01 00:02"]),
    # Vixie's day rule by the text.
    ("0 0 1 * 0-6", "0 0 * * *", "UTC0", utc(2026, 1, 1), ["2026-01-02 00:00", "2026-01-03 00:00"]),
    ("0 0 */2 * 1", "0 0 */2 * 1", "UTC0", utc(2026, 1, 1), ["2026-01-05 00:00", "2026-01-19 00:00"]),
    # Neither day field starts with `*`: a day matches either, so a day 30 that February lacks
    # does not stop a day-of-week list holding `*` from firing every day of it.
    ("0 0 30 2 0,*", "0 0 * 2 *", "UTC0", utc(2026, 1, 1), ["2026-02-01 00:00", "2026-02-02 00:00"]),
    ("0 0 13 * 5", "0 0 13 * 5", "UTC0", utc(2026, 2, 1),
     ["2026-02-06 00:00", "2026-02-13 00:00", "2026-02-20 00:00"]),
    # A day-of-week step over a range to 7 does not add Sunday (cron-parser's bug is not copied).
    ("0 0 * * 3/3", "0 0 * * 3,6", "UTC0", utc(2026, 1, 1),
     ["2026-01-03 00:00", "2026-01-07 00:00", "2026-01-10 00:00"]),
    # Autumn DST (CET, 2026-10-25 03:00 CEST = 01:00Z falls back to 02:00 CET): a `*` hour fires
    # in both passes of the repeated hour; a fixed hour once, in the first.
    ("0 * * * *", "0 * * * *", CET, utc(2026, 10, 24, 23, 30),
     ["2026-10-25 00:00", "2026-10-25 01:00", "2026-10-25 02:00"]),
    ("30 2 * * *", "30 2 * * *", CET, utc(2026, 10, 24, 12), ["2026-10-25 00:30", "2026-10-26 01:30"]),
    # Spring DST (2026-03-29 02:00 CET = 01:00Z jumps to 03:00 CEST): a `*` hour fires at 03:30
    # only; a fixed time in the gap fires once when the gap ends (03:00).
    ("30 * * * *", "30 * * * *", CET, utc(2026, 3, 29, 0, 45), ["2026-03-29 01:30", "2026-03-29 02:30"]),
    ("30 2 * * *", "30 2 * * *", CET, utc(2026, 3, 28, 12), ["2026-03-29 01:00", "2026-03-30 00:30"]),
]


@pytest.mark.parametrize(("expression", "canonical", "zone", "after", "expected"), ACCEPTED)
def test_accepted_expressions_fire_as_decided(expression, canonical, zone, after, expected) -> None:
    schedule = parse_schedule(expression)
    assert schedule.text == canonical and parse_schedule(canonical) == schedule
    assert fires(expression, after, len(expected), zone) == expected


def test_every_minute_fires_in_both_passes_of_the_repeated_hour() -> None:
    minutes = fires("* * * * *", utc(2026, 10, 25, 0, 58), 4, CET)
    assert minutes == ["2026-10-25 00:59", "2026-10-25 01:00", "2026-10-25 01:01", "2026-10-25 01:02"]
    # 00:59Z is 02:59 CEST, 01:00Z is 02:00 CET: the wall clock went back and every minute fires again.
    assert len(fires("* * * * *", utc(2026, 10, 25, 0), 120, CET)) == 120  # no minute of the two hours skipped


def test_a_list_of_every_minute_and_second_fits_the_1_kib_limit() -> None:
    every = ",".join(f"{v:02d}" for v in range(60))
    text = f"{every} {every} * * * *"
    assert 256 < len(text) <= MAX_EXPRESSION_LENGTH == 1024
    assert parse_schedule(text).text == "* * * * * *"
    with pytest.raises(InvalidCronExpressionError, match="over 1024 characters"):
        parse_schedule(text + " " * (MAX_EXPRESSION_LENGTH - len(text) + 1))


@pytest.mark.parametrize("text", ["@reboot", "@boot", "@REBOOT", " @boot\n"])
def test_reboot_and_boot_fire_only_by_boot(text: str) -> None:
    schedule = parse_schedule(text)
    assert schedule == BootSchedule() and schedule.text == "@reboot"
    assert schedule.next_fire_after(utc(2026, 1, 1)) == NEVER_BY_THE_CLOCK_MS


REFUSED = [
    # (expression, field, what the error says to write)
    ("0 0 15W * *", "day-of-month", "W (nearest weekday) is not supported"),
    ("0 0 * * L", "day-of-week", "5L: the last Friday"),
    ("*/61 * * * *", "minute", "write `@every 61m`"),
    ("*/90 * * * *", "minute", "write `@every 90m`"),
    ("*/90 * * * * *", "second", "write `@every 90s`"),
    ("* * * *", "expression", "write every field"),
    ("1* * * * *", "minute", "write a number, `A-B` or `*`"),
    ("0 0 31 2,4 *", "day-of-month", "write L"),
    ("0 0 * * 1#6", "day-of-week", "k from 1 to 5"),
]


@pytest.mark.parametrize(("expression", "field", "hint"), REFUSED)
def test_kept_refusals_say_what_to_write_instead(expression: str, field: str, hint: str) -> None:
    with pytest.raises(InvalidCronExpressionError) as caught:
        parse_schedule(expression)
    assert caught.value.field == field and hint in caught.value.reason


# --------------------------------------------------------------------------- the stores


def _scheduler(db: LocalDatabase, *, device_zone: str = "UTC0", boot_id: str | None = None) -> Scheduler:
    return Scheduler(LocalScheduleRepository(db, device_zone=device_zone, boot_id=boot_id), Journal(io.StringIO()),
                     boot_id)


def test_a_schedule_keeps_the_zone_it_was_added_in_whatever_the_service_reads(db: LocalDatabase) -> None:
    # The CLI reads TZ=CST-8; the service reads no zone at all (UTC): 14:00 stays 14:00 CST (06:00Z).
    clock = db.clock
    assert isinstance(clock, ManualClock)
    clock.set(utc(2026, 6, 1))
    cli = LocalScheduleRepository(db, device_zone="CST-8")
    record = cli.add(AddScheduleCommand(expression="0 14 * * *", argv=["true"]))
    assert record.time_zone == "CST-8" and record.next_fire_at_ms == utc(2026, 6, 1, 6)
    service = LocalScheduleRepository(db, device_zone="UTC0")
    for day in (1, 2, 3):
        clock.set(utc(2026, 6, day, 6))
        plan = service.fire(record.id, actor_id="t")
        assert plan is not None and plan.due.fire_at_ms == utc(2026, 6, day, 6)
        assert plan.due.next_fire_at_ms == utc(2026, 6, day + 1, 6)


def test_tz_given_is_normalised_stored_and_used(db: LocalDatabase) -> None:
    clock = db.clock
    clock.set(utc(2026, 10, 24, 12))
    repo = LocalScheduleRepository(db, device_zone="CST-8")
    record = repo.add(AddScheduleCommand(expression="30 2 * * *", argv=["true"], time_zone=f" {CET}\n"))
    assert record.time_zone == CET and record.next_fire_at_ms == utc(2026, 10, 25, 0, 30)
    assert repo.get(record.id).time_zone == CET


@pytest.mark.parametrize("zone", ["CST-99", "Mars/Olympus_Mons", "../../etc/passwd"])
def test_a_bad_zone_is_refused_before_anything_is_written(db: LocalDatabase, zone: str) -> None:
    with pytest.raises(InvalidTimeZoneError):
        LocalScheduleRepository(db).add(AddScheduleCommand(expression="* * * * *", argv=["true"], time_zone=zone))
    assert db.connection.execute("SELECT count(*) FROM schedules").fetchone()[0] == 0


def _reboot_runs(db: LocalDatabase, schedule_id: str) -> int:
    return db.connection.execute("SELECT count(*) FROM runs WHERE schedule_id = ?", (schedule_id,)).fetchone()[0]


def test_reboot_fires_once_per_new_boot_id_never_on_a_restart(db: LocalDatabase) -> None:
    clock = db.clock
    repo = LocalScheduleRepository(db, device_zone="UTC0", boot_id="boot-1")
    schedule_id = repo.add(AddScheduleCommand(expression="@boot", argv=["true"])).id
    assert repo.get(schedule_id).next_fire_at_ms == NEVER_BY_THE_CLOCK_MS
    assert repo.next_due_at_ms() is None  # never by the clock: the service's sleep ignores it

    # The service restarts within the boot the schedule was added in: nothing fires.
    assert not _scheduler(db, boot_id="boot-1").tick()
    assert _reboot_runs(db, schedule_id) == 0

    # A new boot: it fires once, whatever the ticks and restarts that follow within that boot.
    clock.advance(60_000)
    scheduler = _scheduler(db, boot_id="boot-2")
    assert scheduler.tick()
    assert _reboot_runs(db, schedule_id) == 1
    clock.advance(60_000)
    assert not scheduler.tick() and not _scheduler(db, boot_id="boot-2").tick()
    assert _reboot_runs(db, schedule_id) == 1
    assert repo.get(schedule_id).next_fire_at_ms == NEVER_BY_THE_CLOCK_MS

    with db.write():  # its Run ended (overlap skip would skip the next boot's slot otherwise)
        db.connection.execute("UPDATE runs SET status = 'succeeded' WHERE schedule_id = ?", (schedule_id,))
    clock.advance(60_000)
    assert _scheduler(db, boot_id="boot-3").tick()
    assert _reboot_runs(db, schedule_id) == 2


def test_a_paused_reboot_schedule_takes_the_boot_without_firing(db: LocalDatabase) -> None:
    repo = LocalScheduleRepository(db, device_zone="UTC0", boot_id="boot-1")
    schedule_id = repo.add(AddScheduleCommand(expression="@reboot", argv=["true"])).id
    repo.set_paused(schedule_id, True)
    assert not _scheduler(db, boot_id="boot-2").tick()
    repo.set_paused(schedule_id, False)
    assert not _scheduler(db, boot_id="boot-2").tick()  # resumed in the same boot: its next boot fires it
    assert _reboot_runs(db, schedule_id) == 0
    assert _scheduler(db, boot_id="boot-3").tick() and _reboot_runs(db, schedule_id) == 1


@pytest.fixture
def build_with(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], None]]:
    """Make this process a build whose migrations are the files of a given directory."""

    def use(directory: Path) -> None:
        monkeypatch.setattr(migrations_module, "migrations_dir", lambda: directory)
        migrations_module.known_migrations.cache_clear()
        migrations_module.opt_in_migrations.cache_clear()

    yield use
    migrations_module.known_migrations.cache_clear()
    migrations_module.opt_in_migrations.cache_clear()


def test_schedules_of_the_previous_migration_survive_and_fire_in_the_device_zone(
    tmp_path: Path, build_with: Callable[[Path], None]
) -> None:
    this_build = migrations_module.migrations_dir()
    older = tmp_path / "migrations"
    older.mkdir()
    for path in this_build.glob("*.sql"):
        if path.name < "0010" or path.name.startswith("9"):
            shutil.copy(path, older / path.name)
    clock = ManualClock(utc(2026, 6, 1))
    build_with(older)
    with open_database(tmp_path / "old.db", clock=clock) as db:
        with db.write():
            db.connection.execute(
                "INSERT INTO schedules (id, expression, command, overlap, next_fire_at_ms, created_at_ms, updated_at_ms) "
                "VALUES ('s1', '0 14 * * *', '[\"true\"]', 'skip', ?, ?, ?)",
                (utc(2026, 6, 1, 6), utc(2026, 6, 1), utc(2026, 6, 1)),
            )
    build_with(this_build)
    with open_database(tmp_path / "old.db", clock=clock) as db:
        repo = LocalScheduleRepository(db, device_zone="CST-8")
        record = repo.get("s1")
        assert record.expression == "0 14 * * *" and record.time_zone is msgspec.UNSET
        assert "timeZone" not in msgspec.json.decode(msgspec.json.encode(record))
        clock.set(utc(2026, 6, 1, 6))
        plan = repo.fire("s1", actor_id="t")
        assert plan is not None and plan.due.next_fire_at_ms == utc(2026, 6, 2, 6)  # 14:00 in the device's CST-8
        # The rebuilt table takes a canonical text over the old 256-character limit.
        irregular = [",".join(str(v) for v in range(high) if v % 3 != 2) for high in (60, 60, 24)]
        record = repo.add(AddScheduleCommand(expression=" ".join(irregular) + " * * *", argv=["true"]))
        assert len(record.expression) > 256 and parse_schedule(record.expression) == parse_schedule(
            " ".join(irregular) + " * * *")


# --------------------------------------------------------------------------- the CLI


def _cli(capsys: pytest.CaptureFixture[str], db_path: Path, *argv: str) -> tuple[int, str, str]:
    from edge_runtime.cli.main import main

    code = main(["--db", str(db_path), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_schedule_add_tz_and_the_zone_and_next_fire_in_list_and_show(
    capsys: pytest.CaptureFixture[str], db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "UTC0")  # the device's zone: not the schedule's
    code, out, _ = _cli(capsys, db_path, "schedule", "add", "--tz", "CST-8", "0\u300014 * * *\n", "--", "true")
    assert code == 0
    schedule_id = out.strip()
    code, out, _ = _cli(capsys, db_path, "schedule", "list")
    assert code == 0 and "tz=CST-8" in out and "14:00:00 +08:00" in out and "'0 14 * * *'" in out
    code, out, _ = _cli(capsys, db_path, "schedule", "show", schedule_id)
    # Every time of a schedule in its own zone, never beside another zone's (docs/schedules.md).
    assert "time zone  CST-8" in out and "next fire  20" in out and "14:00:00 +08:00\n" in out and "+00:00" not in out
    code, out, _ = _cli(capsys, db_path, "schedule", "show", schedule_id, "--json")
    assert json.loads(out)["timeZone"] == "CST-8"
    code, out, _ = _cli(capsys, db_path, "schedule", "add", "@boot", "--", "true")
    assert code == 0
    code, out, _ = _cli(capsys, db_path, "schedule", "list")
    assert "next=next-boot  tz=UTC0  '@reboot'" in out


def test_schedule_add_without_tz_takes_the_device_zone(
    capsys: pytest.CaptureFixture[str], db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "CET-1CEST,M3.5.0,M10.5.0/3")
    code, out, _ = _cli(capsys, db_path, "schedule", "add", "--json", "0 9 * * 1#2", "--", "true")
    assert code == 0 and json.loads(out)["timeZone"] == "CET-1CEST,M3.5.0,M10.5.0/3"


@pytest.mark.parametrize(("argv", "says"), [
    (["--tz", "Mars/Olympus_Mons"], "write the zone's POSIX TZ string"),
    (["--tz", "CST-99"], "out of range"),
])
def test_schedule_add_refuses_a_bad_zone_with_what_to_write(
    capsys: pytest.CaptureFixture[str], db_path: Path, argv: list[str], says: str
) -> None:
    code, out, err = _cli(capsys, db_path, "schedule", "add", *argv, "* * * * *", "--", "true")
    assert code != 0 and err.startswith("Error: ") and says in err and out == ""
