"""Schedule expressions: the language, canonical text, refusals, next fire (with DST) and coalescing.

Expected instants are written as UTC calendar times worked out by hand from each POSIX rule.
"""

from __future__ import annotations

import calendar
import datetime as dt
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from edge_runtime.contract.cron import (
    MAX_EXPRESSION_LENGTH,
    SEARCH_YEARS,
    CronSchedule,
    DueFire,
    EverySchedule,
    InvalidCronExpressionError,
    KnownFireTimes,
    ScheduleNeverFiresError,
    due_fire,
    parse_schedule,
)
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.time_zones import PosixTimeZone, time_zone
from tests.support.tz import posix_tz

CET = "CET-1CEST,M3.5.0,M10.5.0/3"
US_EASTERN = "EST5EDT,M3.2.0,M11.1.0"
NEW_ZEALAND = "NZST-12NZDT,M9.5.0,M4.1.0/3"
LORD_HOWE = "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0"


def utc(*fields: int) -> int:
    """Milliseconds since the epoch of a UTC calendar time (year, month, day, hour, minute, second)."""
    return calendar.timegm((*fields, 0, 0, 0, 0, 0, 0)[:6] + (0, 0, 0)) * 1000


def show(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def fires(expression: str, after_ms: int, count: int) -> list[str]:
    schedule = parse_schedule(expression)
    out = []
    for _ in range(count):
        after_ms = schedule.next_fire_after(after_ms)
        out.append(show(after_ms))
    return out


# --------------------------------------------------------------------------- the language


@pytest.mark.parametrize(
    ("expression", "canonical"),
    [
        ("* * * * *", "* * * * *"),
        ("*/15 * * * *", "*/15 * * * *"),
        ("0,15,30,45 * * * *", "*/15 * * * *"),
        ("5-50/15 * * * *", "5-50/15 * * * *"),
        ("5/15 * * * *", "5-50/15 * * * *"),
        ("05 1,2,3,4 * * *", "5 1-4 * * *"),
        ("0 0 * * 1-7", "0 0 * * *"),
        ("0 0 1-31 * *", "0 0 * * *"),
        ("0 0 * jan-MAR,Jul *", "0 0 * 1-3,7 *"),
        ("0 9 * * Mon-fri", "0 9 * * 1-5"),
        ("0 9 * * sat,SUN", "0 9 * * 0,6"),
        ("0 9 * * 7", "0 9 * * 0"),
        ("0 9 * * 1/2", "0 9 * * 0-1,3,5"),  # 1-7/2: Monday, Wednesday, Friday and 7 = Sunday
        ("0 9 * * */2", "0 9 * * */2"),
        ("0 9 ? * 1", "0 9 * * 1"),
        ("0 0 */2 * *", "0 0 */2 * *"),
        ("0 0 0 * * *", "0 0 * * *"),  # 6 fields, second 0: the same as 5 fields
        ("30 */5 * * * *", "30 */5 * * * *"),
        ("  0\t0  * * *  ", "0 0 * * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@Midnight", "0 0 * * *"),
        ("@HOURLY", "0 * * * *"),
        ("@every 90s", "@every 1m30s"),
        ("@every 1h30m", "@every 1h30m"),
    ],
)
def test_canonical_text(expression: str, canonical: str) -> None:
    schedule = parse_schedule(expression)
    assert schedule.text == canonical
    assert parse_schedule(canonical) == schedule


def test_parsed_fields_are_value_sets() -> None:
    schedule = parse_schedule("0 0 9-17/4 1,15 feb-apr mon,wed")
    assert isinstance(schedule, CronSchedule)
    values = {
        name: [v for v in range(64) if getattr(schedule, name) >> v & 1]
        for name in ("seconds", "minutes", "hours", "days", "months", "weekdays")
    }
    assert values == {
        "seconds": [0], "minutes": [0], "hours": [9, 13, 17], "days": [1, 15], "months": [2, 3, 4], "weekdays": [1, 3]
    }
    assert parse_schedule("@every 2h") == EverySchedule(7_200_000)


@pytest.mark.parametrize(
    ("expression", "field", "reason"),
    [
        ("", "expression", "got 0"),
        ("* * * *", "expression", "got 4"),
        ("* * * * * * *", "expression", "got 7"),
        ("60 * * * *", "minute", "60 is out of range 0-59"),
        ("* 24 * * *", "hour", "24 is out of range 0-23"),
        ("* * 0 * *", "day-of-month", "0 is out of range 1-31"),
        ("* * 32 * *", "day-of-month", "32 is out of range 1-31"),
        ("* * * 13 *", "month", "13 is out of range 1-12"),
        ("* * * * 8", "day-of-week", "8 is out of range 0-7"),
        ("60 * * * * *", "second", "60 is out of range 0-59"),
        ("* * * * mon-", "day-of-week", "a number is missing"),
        ("1,,2 * * * *", "minute", "empty item"),
        ("1, * * * *", "minute", "empty item"),
        ("50-10 * * * *", "minute", "runs backwards"),
        ("* * * * fri-mon", "day-of-week", "runs backwards"),
        ("*/0 * * * *", "minute", "step '0'"),
        ("*/61 * * * *", "minute", "from 1 to 60"),
        ("*/ * * * *", "minute", "step ''"),
        ("1/2/3 * * * *", "minute", "step '2/3'"),
        ("*-5 * * * *", "minute", "'*' is not a number"),
        ("-5 * * * *", "minute", "a number is missing"),
        ("x * * * *", "minute", "'x' is not a number"),
        ("* * * foo *", "month", "'foo' is not a number or a name (jan, feb, mar, ...)"),
        ("* * * * monday", "day-of-week", "'monday' is not a number"),
        ("jan * * * *", "minute", "'jan' is not a number"),
        ("* * * * 1#6", "day-of-week", "k from 1 to 5"),
        ("* * * * 1-2#2", "day-of-week", "# takes one day"),
        ("* * * * L", "day-of-week", "nL and n#k"),
        ("* L * * *", "hour", "nL and n#k"),
        ("* * 15W * *", "day-of-month", "W (nearest weekday) is not supported"),
        ("* * LW * *", "day-of-month", "W (nearest weekday) is not supported"),
        ("1* * * * *", "minute", "`*` stands alone"),
        ("*/90 * * * *", "minute", "write `@every 90m`"),
        ("0 */25 * * *", "hour", "write `@every 25h`"),
        ("* * * *", "expression", "write every field"),
        ("0 0 */15 * 1#2", "day-of-month", "never fires"),
        ("? * * * *", "minute", "'?' is not a number"),
        ("* * ?/2 * *", "day-of-month", "'?' is not a number"),
        ("0 0 30 2 *", "day-of-month", "day 30 is in none"),
        ("0 0 31 2,4 *", "day-of-month", "write L"),
        ("0 0 31 4,6,9,11 *", "day-of-month", "day 31 is in none"),
        ("0 0 30,31 feb *", "day-of-month", "day 30 is in none"),
        ("@reboot now", "expression", "unknown or misused macro '@reboot'"),
        ("@daily 5", "expression", "unknown or misused macro"),
        ("@every", "@every", "write one duration"),
        ("@every 5 m", "@every", "write one duration"),
        ("@every 5x", "@every", "not valid"),
        ("@every 0s", "@every", "must be between 1s"),
        ("@every 400d", "@every", "out of range"),
        ("* * *\n* *", "expression", "only printable ASCII"),
        ("* * * * *\v", "expression", "only printable ASCII"),
        ("* * * * \u4e00", "expression", "only printable ASCII"),
        ("1" + "," * MAX_EXPRESSION_LENGTH + " * * * *", "expression", f"over {MAX_EXPRESSION_LENGTH} characters"),
    ],
)
def test_refusals_name_the_field_and_the_reason(expression: str, field: str, reason: str) -> None:
    with pytest.raises(InvalidCronExpressionError) as caught:
        parse_schedule(expression)
    error = caught.value
    assert (error.field, error.code) == (field, "INVALID_CRON_EXPRESSION")
    assert reason in error.reason
    assert f"{field}: {error.reason}" in str(error)
    assert isinstance(error, EdgeRuntimeError) and not error.retryable


def test_a_non_string_is_refused() -> None:
    with pytest.raises(InvalidCronExpressionError) as caught:
        parse_schedule(None)  # type: ignore[arg-type]
    assert caught.value.field == "expression"


def test_a_day_other_months_have_is_accepted() -> None:
    parse_schedule("0 0 30 1,2 *")  # January has a 30th
    parse_schedule("0 0 31 2 mon")  # both day fields restricted: every Monday of February fires
    parse_schedule("0 0 29 2 *")  # leap years


# --------------------------------------------------------------------------- next fire: fields and the day rule


@pytest.fixture
def utc_zone():
    with posix_tz("UTC0"):
        yield


def test_day_of_month_or_day_of_week_when_both_are_restricted(utc_zone) -> None:
    # 2026-01-01 is a Thursday. Fridays and the 13th; Friday 13 February fires once.
    assert [d[:10] for d in fires("0 12 13 * fri", utc(2026, 1, 1), 9)] == [
        "2026-01-02", "2026-01-09", "2026-01-13", "2026-01-16", "2026-01-23", "2026-01-30",
        "2026-02-06", "2026-02-13", "2026-02-20",
    ]


def test_a_day_field_starting_with_a_star_makes_the_days_match_both(utc_zone) -> None:
    # Vixie's rule by the text: */2 starts with *, so only odd-numbered Mondays fire: 5, 19 January.
    assert [d[:10] for d in fires("0 0 */2 * mon", utc(2026, 1, 1), 4)] == [
        "2026-01-05", "2026-01-19", "2026-02-09", "2026-02-23",
    ]


def test_a_whole_range_written_without_a_star_restricts(utc_zone) -> None:
    # 1-31 and 0-7 do not start with *: ORed with the other day field, every day fires.
    assert [d[:10] for d in fires("0 0 1-31 * mon", utc(2026, 1, 1), 3)] == ["2026-01-02", "2026-01-03", "2026-01-04"]
    assert [d[:10] for d in fires("0 0 13 * 0-7", utc(2026, 1, 1), 2)] == ["2026-01-02", "2026-01-03"]
    assert parse_schedule("0 0 1 * 0-6").text == "0 0 * * *"


def test_names_and_sunday_as_0_or_7(utc_zone) -> None:
    expected = fires("0 6 * * 0", utc(2026, 1, 1), 3)
    assert fires("0 6 * * 7", utc(2026, 1, 1), 3) == expected == fires("0 6 * * SUN", utc(2026, 1, 1), 3)
    assert expected == ["2026-01-04 06:00:00", "2026-01-11 06:00:00", "2026-01-18 06:00:00"]
    assert fires("0 0 1 Feb,aug *", utc(2026, 1, 1), 3) == [
        "2026-02-01 00:00:00", "2026-08-01 00:00:00", "2027-02-01 00:00:00"
    ]


def test_steps_and_ranges(utc_zone) -> None:
    assert fires("10-40/15 8-9 * * *", utc(2026, 1, 1), 5) == [
        "2026-01-01 08:10:00", "2026-01-01 08:25:00", "2026-01-01 08:40:00",
        "2026-01-01 09:10:00", "2026-01-01 09:25:00",
    ]
    assert fires("*/25 * * * *", utc(2026, 1, 1, 0, 51), 3) == [
        "2026-01-01 01:00:00", "2026-01-01 01:25:00", "2026-01-01 01:50:00"
    ]


def test_six_fields_put_the_second_first(utc_zone) -> None:
    assert fires("*/20 * * * * *", utc(2026, 1, 1, 0, 0, 50), 4) == [
        "2026-01-01 00:01:00", "2026-01-01 00:01:20", "2026-01-01 00:01:40", "2026-01-01 00:02:00"
    ]
    assert fires("30 0 0 * * *", utc(2026, 1, 1), 2) == ["2026-01-01 00:00:30", "2026-01-02 00:00:30"]


def test_next_fire_is_strictly_after_and_ignores_milliseconds_of_a_slot(utc_zone) -> None:
    schedule = parse_schedule("* * * * * *")
    assert schedule.next_fire_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 0, 0, 1)
    assert schedule.next_fire_after(utc(2026, 1, 1) - 1) == utc(2026, 1, 1)
    assert schedule.next_fire_after(utc(2026, 1, 1) + 999) == utc(2026, 1, 1, 0, 0, 1)


def test_month_and_year_carries(utc_zone) -> None:
    assert fires("59 23 31 * *", utc(2026, 1, 31, 23, 59), 3) == [
        "2026-03-31 23:59:00", "2026-05-31 23:59:00", "2026-07-31 23:59:00"
    ]
    assert fires("0 0 1 1 *", utc(2026, 12, 31, 23, 59, 59), 1) == ["2027-01-01 00:00:00"]


def test_a_leap_day_fires_every_leap_year_and_skips_2100(utc_zone) -> None:
    assert [d[:4] for d in fires("0 0 29 2 *", utc(2095, 1, 1), 3)] == ["2096", "2104", "2108"]


@pytest.mark.parametrize("zone", ["CST-8", CET, "<+0530>-5:30"])
def test_local_time_follows_the_posix_tz(zone: str) -> None:
    with posix_tz(zone):
        at_nine = fires("0 9 * * *", utc(2026, 1, 10), 1)[0]
    assert at_nine == {"CST-8": "2026-01-10 01:00:00", CET: "2026-01-10 08:00:00", "<+0530>-5:30": "2026-01-10 03:30:00"}[zone]


# --------------------------------------------------------------------------- next fire: DST


@pytest.mark.parametrize(
    ("zone", "expression", "after", "expected"),
    [
        # CET: 2026-03-29 02:00 CET (01:00Z) jumps to 03:00 CEST; 2026-10-25 03:00 CEST (01:00Z) falls back to 02:00 CET.
        (CET, "30 2 * * *", utc(2026, 3, 28, 12), ["2026-03-29 01:00:00", "2026-03-30 00:30:00"]),
        (CET, "0 * * * *", utc(2026, 3, 28, 23, 30), ["2026-03-29 00:00:00", "2026-03-29 01:00:00", "2026-03-29 02:00:00"]),
        (CET, "*/30 2-3 * * *", utc(2026, 3, 28, 23), ["2026-03-29 01:00:00", "2026-03-29 01:30:00", "2026-03-30 00:00:00"]),
        (CET, "30 2 * * *", utc(2026, 10, 24, 12), ["2026-10-25 00:30:00", "2026-10-26 01:30:00"]),
        (CET, "0 * * * *", utc(2026, 10, 24, 23, 30), ["2026-10-25 00:00:00", "2026-10-25 01:00:00", "2026-10-25 02:00:00"]),
        (CET, "*/20 2 * * *", utc(2026, 10, 25, 0, 30), ["2026-10-25 00:40:00", "2026-10-26 01:00:00"]),
        # US Eastern: 2026-03-08 02:00 EST (07:00Z) jumps to 03:00 EDT; 2026-11-01 02:00 EDT (06:00Z) falls back.
        (US_EASTERN, "15 2 * * *", utc(2026, 3, 7, 12), ["2026-03-08 07:00:00", "2026-03-09 06:15:00"]),
        (US_EASTERN, "15 1 * * *", utc(2026, 10, 31, 12), ["2026-11-01 05:15:00", "2026-11-02 06:15:00"]),
        # New Zealand (southern hemisphere): 2026-09-27 02:00 NZST (09-26 14:00Z) jumps to 03:00 NZDT;
        # 2026-04-05 03:00 NZDT (04-04 14:00Z) falls back to 02:00 NZST.
        (NEW_ZEALAND, "0 2 * * *", utc(2026, 9, 26), ["2026-09-26 14:00:00", "2026-09-27 13:00:00"]),
        (NEW_ZEALAND, "30 2 * * *", utc(2026, 4, 4), ["2026-04-04 13:30:00", "2026-04-05 14:30:00"]),
        # Lord Howe: a 30-minute shift. 2026-10-04 02:00 (+10:30, 10-03 15:30Z) jumps to 02:30 (+11);
        # 2026-04-05 02:00 (+11, 04-04 15:00Z) falls back to 01:30 (+10:30).
        (LORD_HOWE, "15 2 * * *", utc(2026, 10, 3), ["2026-10-03 15:30:00", "2026-10-04 15:15:00"]),
        (LORD_HOWE, "45 1 * * *", utc(2026, 4, 4), ["2026-04-04 14:45:00", "2026-04-05 15:15:00"]),
    ],
)
def test_dst_fixed_hours_fire_once_and_wildcard_hours_whenever_the_clock_shows_them(
    zone: str, expression: str, after: int, expected: list[str]
) -> None:
    with posix_tz(zone):
        assert fires(expression, after, len(expected)) == expected


def test_asked_inside_the_second_pass_of_an_overlap_a_fixed_hour_is_not_repeated() -> None:
    # 2026-10-25 02:10 CET (01:10Z): a fixed hour 2 already fired in the first pass; `*` hours go on.
    with posix_tz(CET):
        assert fires("* * * * *", utc(2026, 10, 25, 1, 10), 2) == ["2026-10-25 01:11:00", "2026-10-25 01:12:00"]
        assert fires("*/20 2 * * *", utc(2026, 10, 25, 1, 10), 1) == ["2026-10-26 01:00:00"]


def test_every_slot_in_a_gap_fires_once_together() -> None:
    with posix_tz(CET):
        assert fires("* * * * * *", utc(2026, 3, 29, 0, 59, 58), 3) == [
            "2026-03-29 00:59:59", "2026-03-29 01:00:00", "2026-03-29 01:00:01"
        ]


def test_every_counts_elapsed_time_from_the_epoch() -> None:
    five = parse_schedule("@every 5m")
    assert five.next_fire_after(utc(2026, 1, 1, 0, 2)) == utc(2026, 1, 1, 0, 5)
    assert five.next_fire_after(utc(2026, 1, 1, 0, 5)) == utc(2026, 1, 1, 0, 10)
    assert parse_schedule("@every 7m").next_fire_after(0) == 420_000
    with posix_tz(CET):  # not moved by DST: across the spring gap it still fires every hour
        assert fires("@every 1h", utc(2026, 3, 29, 0, 30), 3) == [
            "2026-03-29 01:00:00", "2026-03-29 02:00:00", "2026-03-29 03:00:00"
        ]


# --------------------------------------------------------------------------- coalescing


def test_nothing_is_due_before_the_stored_next_fire_time() -> None:
    with posix_tz("UTC0"):
        assert due_fire(parse_schedule("0 * * * *"), utc(2026, 1, 1, 1), utc(2026, 1, 1, 0, 59, 59)) is None


def test_a_slot_fires_on_time_without_coalescing() -> None:
    with posix_tz("UTC0"):
        due = due_fire(parse_schedule("0 * * * *"), utc(2026, 1, 1, 1), utc(2026, 1, 1, 1, 0, 0) + 250)
    assert due == DueFire(fire_at_ms=utc(2026, 1, 1, 1), next_fire_at_ms=utc(2026, 1, 1, 2), coalesced=False)


def test_missed_slots_fire_once_and_the_next_time_is_after_now() -> None:
    # Down from 01:00 to 05:30: the 01:00..05:00 slots are one fire, named by the stored 01:00.
    with posix_tz("UTC0"):
        due = due_fire(parse_schedule("0 * * * *"), utc(2026, 1, 1, 1), utc(2026, 1, 1, 5, 30))
    assert due == DueFire(fire_at_ms=utc(2026, 1, 1, 1), next_fire_at_ms=utc(2026, 1, 1, 6), coalesced=True)


def test_a_forward_clock_jump_of_years_still_fires_once() -> None:
    with posix_tz(CET):
        due = due_fire(parse_schedule("* * * * * *"), utc(1970, 1, 1, 0, 0, 1), utc(2026, 6, 1, 12) + 500)
    assert due == DueFire(fire_at_ms=1_000, next_fire_at_ms=utc(2026, 6, 1, 12, 0, 1), coalesced=True)


def test_every_coalesces_and_keeps_its_phase() -> None:
    due = due_fire(parse_schedule("@every 10m"), utc(2026, 1, 1, 0, 10), utc(2026, 1, 1, 0, 47))
    assert due == DueFire(fire_at_ms=utc(2026, 1, 1, 0, 10), next_fire_at_ms=utc(2026, 1, 1, 0, 50), coalesced=True)


@pytest.mark.parametrize(
    ("masks", "field"),
    [
        ((0, 1, 1, 2, 2, 1), "second"),
        ((1, 1 << 60, 1, 2, 2, 1), "minute"),
        ((1, 1, 1, 1, 2, 1), "day-of-month"),  # bit 0: there is no day 0
        ((1, 1, 1, 2, 1 << 13, 1), "month"),
        ((1, 1, 1, 2, 2, 1 << 7), "day-of-week"),  # 7 is stored as 0
        ((1, 1, 1, 1 << 30, 1 << 2, (1 << 7) - 1), "day-of-month"),  # 30 February
    ],
)
def test_a_schedule_built_directly_is_held_to_the_same_rules(masks: tuple[int, ...], field: str) -> None:
    with pytest.raises(InvalidCronExpressionError) as caught:
        CronSchedule(*masks)
    assert caught.value.field == field


@pytest.mark.parametrize("period_ms", [0, -1_000, 1_500, 366 * 86_400_000, 2.0])
def test_an_every_schedule_built_directly_is_held_to_the_duration_limits(period_ms: object) -> None:
    with pytest.raises(InvalidCronExpressionError) as caught:
        EverySchedule(period_ms)  # type: ignore[arg-type]
    assert caught.value.field == "@every"


# --------------------------------------------------------------------------- the search is bounded

#: DST (UTC-12) from 1 January to the 100th day, which ends at 00:00 by jumping 24 hours ahead to
#: UTC+12: the clock never shows 10 April (9 April in leap years), every year.
SKIPS_A_DAY = "AAA-12BBB12,J1,J100/0"
#: The same jump at the 60th day counted from 0, the 29th of February in a leap year (1 March otherwise).
SKIPS_DAY_59 = "AAA-12BBB12,J1,59/0"
#: Lebanon's rule: DST starts at midnight of the last Sunday of March, so 00:00-00:59 never shows.
BEIRUT = "EET-2EEST,M3.5.0/0,M10.5.0/0"


@contextmanager
def ends_within(seconds: int) -> Iterator[None]:
    """Turn a search that never ends (the defect under test) into a failure instead of a hung run.

    Not a timing test: the bound is far above what a bounded search takes; the cost itself is
    checked by counting the zone's offset reads.
    """
    def stop(*_: object) -> None:
        raise AssertionError(f"the fire-time search was still running after {seconds}s: it has no bound")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(
    ("expression", "zone"),
    [
        ("0 * 10 4 *", SKIPS_A_DAY),  # every hour of a day the clock skips
        ("*/30 * 10 4 *", SKIPS_A_DAY),
        ("* * 29 2 *", SKIPS_DAY_59),  # the 29th of February never shows; 1 March in other years is no match
        ("0 */24 * 3 0L", BEIRUT),  # midnight, whenever the clock shows it, of a night that starts at 01:00
    ],
)
def test_an_expression_whose_every_time_its_zone_skips_never_fires(expression: str, zone: str) -> None:
    schedule = parse_schedule(expression)
    with ends_within(60), pytest.raises(ScheduleNeverFiresError) as caught:
        schedule.next_fire_after(utc(2026, 6, 1), time_zone(zone))
    error = caught.value
    assert (error.code, error.field, error.retryable) == ("SCHEDULE_NEVER_FIRES", "expression", False)
    assert isinstance(error, InvalidCronExpressionError)  # refused where any bad expression is
    assert str(error) == (
        f"schedule expression {schedule.text!r} never fires in time zone {zone!r}: that zone's clock skips every "
        f"time the expression names (none shows in the {SEARCH_YEARS} years searched, a whole cycle of the calendar "
        "and of the zone's rule); choose other times or another zone")


def test_the_same_expressions_fire_where_the_clock_shows_their_times() -> None:
    assert show(parse_schedule("0 * 10 4 *").next_fire_after(utc(2026, 6, 1), time_zone("CST-8"))) == \
        "2027-04-09 16:00:00"
    assert show(parse_schedule("0 * 11 4 *").next_fire_after(utc(2026, 6, 1), time_zone(SKIPS_A_DAY))) == \
        "2027-04-10 12:00:00"  # the day after the skipped one, 00:00 at UTC+12
    # A fixed hour fires at the end of the gap that skips it, as in any spring gap.
    assert show(parse_schedule("0 3 10 4 *").next_fire_after(utc(2026, 6, 1), time_zone(SKIPS_A_DAY))) == \
        "2027-04-10 12:00:00"


def test_the_never_fires_search_reads_the_zone_a_few_times_a_year(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = 0
    offset_of = PosixTimeZone.utc_offset

    def counted(zone: PosixTimeZone, instant: int) -> int:
        nonlocal reads
        reads += 1
        return offset_of(zone, instant)

    monkeypatch.setattr(PosixTimeZone, "utc_offset", counted)
    with ends_within(60), pytest.raises(ScheduleNeverFiresError):
        parse_schedule("0 * 10 4 *").next_fire_after(utc(2026, 6, 1), time_zone(SKIPS_A_DAY))
    # Its two changes a year and the rule's new year, not one read a day (146,097 in 400 years).
    assert reads <= 10 * SEARCH_YEARS


@pytest.mark.parametrize(
    ("expression", "zone", "after", "expected"),
    [
        # The 29th of February on a Sunday: from 2088 the next is 2128 (2100 is no leap year).
        ("0 0 29 2 */7", "UTC0", utc(2088, 3, 1), "2128-02-29 00:00:00"),
        ("0 0 29 2 */7", CET, utc(2088, 3, 1), "2128-02-28 23:00:00"),
        ("0 * 29 2 */7", CET, utc(2088, 3, 1), "2128-02-28 23:00:00"),  # an hour starting with *
        ("0 0 * 2 0#5", "UTC0", utc(2088, 3, 1), "2128-02-29 00:00:00"),  # a fifth Sunday of February
        ("0 0 * 2 1#5", "UTC0", utc(2072, 3, 1), "2112-02-29 00:00:00"),
        ("0 0 L 2 *", "UTC0", utc(2099, 3, 1), "2100-02-28 00:00:00"),
        ("0 0 * 2 5L", "UTC0", utc(2026, 3, 1), "2027-02-26 00:00:00"),
        ("0 9 * 6 1#2", NEW_ZEALAND, utc(2026, 6, 9), "2027-06-13 21:00:00"),
        # A zone that skips a day every year leaves only the leap years' 1 March (day 60 there).
        ("0 * 1 3 *", SKIPS_DAY_59, utc(2096, 3, 2), "2104-02-29 12:00:00"),
    ],
)
def test_rare_expressions_are_found_within_the_bound(expression: str, zone: str, after: int, expected: str) -> None:
    with ends_within(60):
        assert show(parse_schedule(expression).next_fire_after(after, time_zone(zone))) == expected


def test_known_fire_times_answer_inside_a_transaction_what_was_searched_before_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    searches: list[int] = []
    search = CronSchedule.next_fire_after

    def counted(schedule: CronSchedule, after_ms: int, zone=None) -> int:
        searches.append(after_ms)
        return search(schedule, after_ms, zone)

    monkeypatch.setattr(CronSchedule, "next_fire_after", counted)
    known, zone, hourly = KnownFireTimes(), time_zone(CET), parse_schedule("0 * * * *")
    before = utc(2026, 1, 1, 0, 10)
    assert known.next_fire_after(hourly, before, zone) == utc(2026, 1, 1, 1)  # before BEGIN: searched
    assert known.next_fire_after(hourly, before + 5, zone) == utc(2026, 1, 1, 1)  # inside, a little later
    assert known.next_fire_after(parse_schedule("0 * * * *"), utc(2026, 1, 1, 0, 59, 59), zone) == utc(2026, 1, 1, 1)
    assert searches == [before]
    assert known.next_fire_after(hourly, utc(2026, 1, 1, 1), zone) == utc(2026, 1, 1, 2)  # a slot passed: searched
    assert known.next_fire_after(hourly, before - 1, zone) == utc(2026, 1, 1, 1)  # the clock went back: searched
    assert len(searches) == 3
    # A due fire searched before its transaction is looked up inside it.
    assert due_fire(hourly, utc(2026, 1, 1, 1), utc(2026, 1, 1, 1, 0, 5), zone, known).next_fire_at_ms == \
        utc(2026, 1, 1, 2)
    assert len(searches) == 3
    # That a pair never fires is kept: asking again raises without a second 400-year search.
    skipped = parse_schedule("0 * 10 4 *")
    for _ in range(2):
        with pytest.raises(ScheduleNeverFiresError):
            known.next_fire_after(skipped, before, time_zone(SKIPS_A_DAY))
    assert len(searches) == 4


def test_the_bound_is_stated_in_the_schedules_page() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "schedules.md").read_text()
    assert f"{SEARCH_YEARS} years" in page and "SCHEDULE_NEVER_FIRES" in page
