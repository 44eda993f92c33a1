"""Schedule expressions: the language, canonical text, refusals, next fire (with DST) and coalescing.

Expected instants are written as UTC calendar times worked out by hand from each POSIX rule.
"""

from __future__ import annotations

import calendar
import datetime as dt

import pytest

from edge_runtime.contract.cron import (
    MAX_EXPRESSION_LENGTH,
    CronSchedule,
    DueFire,
    EverySchedule,
    InvalidCronExpressionError,
    due_fire,
    parse_schedule,
)
from edge_runtime.contract.errors import EdgeRuntimeError
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
