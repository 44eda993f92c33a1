"""Hypothesis: the cron QingLong's users write (L, nL, n#k, pasted separators) and DST, against
independent models.

- Days: expressions with ``L`` in day-of-month and ``nL``/``n#k`` in day-of-week, mixed with
  plain items and ``*``/``*/S`` (Vixie's rule by the text), fire on the days a calendar model
  written here from :mod:`calendar` selects, and at the instants ``cronsim`` gives.
- Separators: any mix of the pasted blanks between fields and a trailing newline parse to the
  same schedule as single spaces, whose canonical text is stored.
- DST, minute by minute through a window around each change of every rule: an hour starting
  with ``*`` fires at exactly the minutes whose wall time (as zoneinfo reads the same POSIX rule)
  matches, so twice in an overlap and never in a gap; a fixed hour fires once per matching wall
  time, at its first occurrence, and a matching wall time the clock skips fires at the gap's end.
"""

from __future__ import annotations

import calendar
import datetime as dt

from cronsim import CronSim
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_runtime.contract.cron import parse_schedule
from edge_runtime.contract.time_zones import time_zone
from tests.support.tz import DST_ZONES, transitions, wall_of, zone_of

DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


@st.composite
def day_of_month(draw: st.DrawFn) -> str:
    items = draw(st.lists(st.one_of(st.just("L"), st.integers(1, 31).map(str), st.integers(1, 28).map(lambda d: f"{d}-{d + 3}")),
                          min_size=1, max_size=3))
    if draw(st.booleans()):
        items.insert(0, draw(st.sampled_from(["*", "*/2", "*/7", "*/10"])))
    return ",".join(items)


@st.composite
def day_of_week(draw: st.DrawFn) -> str:
    def day() -> str:
        value = draw(st.integers(0, 7))
        return DAYS[value % 7] if draw(st.booleans()) else str(value)

    items = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["last", "nth", "plain"]))
        items.append(f"{day()}L" if kind == "last" else f"{day()}#{draw(st.integers(1, 5))}" if kind == "nth" else day())
    if draw(st.booleans()):
        items.insert(0, draw(st.sampled_from(["*", "*/2", "*/3"])))
    return ",".join(items)


def day_model(dom: str, dow: str):
    """Whether a date fires under ``dom``/``dow``, read from the text with calendar arithmetic."""

    def in_dom(date: dt.date) -> bool:
        last = calendar.monthrange(date.year, date.month)[1]
        for item in dom.split(","):
            if item == "L":
                if date.day == last:
                    return True
            elif item.startswith("*"):
                step = int(item[2:]) if "/" in item else 1
                if (date.day - 1) % step == 0:
                    return True
            elif "-" in item:
                low, high = map(int, item.split("-"))
                if low <= date.day <= high:
                    return True
            elif date.day == int(item):
                return True
        return False

    def weekday_of(text: str) -> int:
        return DAYS.index(text) if text in DAYS else int(text) % 7

    def in_dow(date: dt.date) -> bool:
        weekday = (date.weekday() + 1) % 7
        last = calendar.monthrange(date.year, date.month)[1]
        for item in dow.split(","):
            if item.startswith("*"):
                step = int(item[2:]) if "/" in item else 1
                if any(v % 7 == weekday for v in range(0, 8, step)):
                    return True
            elif item.endswith("L"):
                if weekday_of(item[:-1]) == weekday and date.day + 7 > last:
                    return True
            elif "#" in item:
                text, k = item.split("#")
                if weekday_of(text) == weekday and (date.day - 1) // 7 + 1 == int(k):
                    return True
            elif weekday_of(item) == weekday:
                return True
        return False

    either = not dom.startswith("*") and not dow.startswith("*")
    return lambda date: (in_dom(date) or in_dow(date)) if either else (in_dom(date) and in_dow(date))


@settings(max_examples=150, deadline=None)
@given(day_of_month(), day_of_week(), st.integers(0, 23), st.integers(1_704_067_200, 1_956_528_000))
def test_l_nl_and_nth_weekdays_fire_on_the_modelled_days_and_as_cronsim_does(dom, dow, hour, after_s) -> None:
    text = f"0 {hour} {dom} * {dow}"
    try:
        schedule = parse_schedule(text)
    except Exception as error:  # only an expression whose days never occur may be refused
        assert getattr(error, "field", None) == "day-of-month" and "never fires" in error.reason, error
        return
    assert parse_schedule(schedule.text) == schedule
    zone = time_zone("UTC0")
    fires = day_model(dom, dow)
    after_ms = after_s * 1000
    # cronsim reads no names with L or #: it is given the canonical text (numbers, same meaning).
    reference = CronSim(f"0 {schedule.text}", dt.datetime.fromtimestamp(after_s, dt.UTC).replace(tzinfo=None))
    for _ in range(3):
        after_ms = schedule.next_fire_after(after_ms, zone)
        fire = dt.datetime.fromtimestamp(after_ms / 1000, dt.UTC)
        assert fire.hour == hour and fire.minute == 0 and fires(fire.date()), (text, fire)
        assert fire.replace(tzinfo=None) == next(reference), text
    # No modelled day was skipped between the query and the first fire (checked for a month back).
    first = dt.datetime.fromtimestamp(schedule.next_fire_after(after_s * 1000, zone) / 1000, dt.UTC)
    day = max(dt.datetime.fromtimestamp(after_s, dt.UTC).date() + dt.timedelta(days=1), first.date() - dt.timedelta(days=31))
    while day < first.date():
        assert not fires(day), (text, day)
        day += dt.timedelta(days=1)


BLANKS = st.lists(st.sampled_from([" ", "\t", "\u3000", "\u00a0", "\u202f"]), min_size=1, max_size=3).map("".join)


@given(st.sampled_from(["*/5 * * * *", "0 9 * * 1-5", "30 8 L * *", "0 0 * * 5L", "0 7 * * 1#2", "15 3 1,15 * *"]),
       st.data())
def test_pasted_separators_parse_to_the_same_schedule(text, data) -> None:
    words = text.split()
    pasted = data.draw(st.sampled_from(["", " ", "\u3000"])) + "".join(w + data.draw(BLANKS) for w in words[:-1])
    pasted += words[-1] + data.draw(st.sampled_from(["", "\n", "\r\n", "\r", " \n"]))
    assert parse_schedule(pasted) == parse_schedule(text)
    assert parse_schedule(pasted).text == parse_schedule(text).text


# --------------------------------------------------------------------------- DST, minute by minute

CHANGES = [(rule, change) for rule in DST_ZONES for change in transitions(zone_of(rule), 2025, 2027)]


@st.composite
def minute_hour(draw: st.DrawFn, wildcard: bool) -> tuple[str, set[int], set[int]]:
    minutes = sorted(draw(st.sets(st.sampled_from([0, 1, 15, 29, 30, 31, 45, 59]), min_size=1, max_size=3)))
    if wildcard:
        step = draw(st.sampled_from([1, 1, 2, 3]))
        hours, hour_text = set(range(0, 24, step)), "*" if step == 1 else f"*/{step}"
    else:
        hours = draw(st.sets(st.integers(0, 23), min_size=1, max_size=3))
        hour_text = ",".join(map(str, sorted(hours)))
    return f"{','.join(map(str, minutes))} {hour_text} * * *", set(minutes), hours


def fires_in(text: str, rule: str, start: int, end: int) -> list[int]:
    schedule, zone, out = parse_schedule(text), time_zone(rule), []
    at = schedule.next_fire_after(start * 1000 - 1, zone) // 1000
    while at < end:
        out.append(at)
        at = schedule.next_fire_after(at * 1000, zone) // 1000
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CHANGES), minute_hour(wildcard=True))
def test_a_star_hour_fires_whenever_the_clock_shows_a_matching_minute(change, case) -> None:
    (rule, instant), (text, minutes, hours) = change, case
    zone = zone_of(rule)
    start, end = instant - instant % 60 - 3 * 3600, instant + 3 * 3600
    expected = [t for t in range(start, end, 60) if wall_of(t, zone).minute in minutes and wall_of(t, zone).hour in hours]
    assert fires_in(text, rule, start, end) == expected, (text, rule)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CHANGES), minute_hour(wildcard=False))
def test_a_fixed_hour_fires_once_per_wall_time_and_a_skipped_one_at_the_gap_end(change, case) -> None:
    (rule, instant), (text, minutes, hours) = change, case
    zone = zone_of(rule)
    start, end = instant - instant % 60 - 3 * 3600, instant + 3 * 3600
    expected, seen = [], set()
    for t in range(start, end, 60):
        wall = wall_of(t, zone)
        previous = wall_of(t - 60, zone)
        skipped = previous + dt.timedelta(minutes=1) < wall and any(  # the clock jumped over matching minutes
            (previous + dt.timedelta(minutes=k)).minute in minutes and (previous + dt.timedelta(minutes=k)).hour in hours
            for k in range(1, int((wall - previous).total_seconds() // 60)))
        shown = wall.minute in minutes and wall.hour in hours and wall not in seen
        seen.add(wall)
        if shown or skipped:
            expected.append(t)
    assert fires_in(text, rule, start, end) == expected, (text, rule)
