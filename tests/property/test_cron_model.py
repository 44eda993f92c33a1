"""Hypothesis: schedule expressions against independent references.

- Parsing: random expressions (lists, ranges, steps, names in any case, 5 or 6 fields) parse to
  the value sets the generator meant and to the sets ``cronsim`` (a separate implementation, in
  the test extra only) reads from the same text; the canonical text parses back to the same
  schedule; a broken field is refused naming that field.
- Next fire: equal to a reference built from ``cronsim`` (the wall-clock slots, no time zone) and
  ``zoneinfo``'s reading of the same POSIX ``TZ`` rule (tests/support/tz.py), which maps each
  slot of a fixed hour to the first instant the clock shows it, or after a skipped hour to the
  first instant past it, and each slot of an hour starting with ``*`` to every instant showing
  it; and the contract's own POSIX evaluator gives the same instant as the C library.
- Firing with coalescing, with the clock jumping both ways: a slot never fires twice, a tick
  fires exactly when some slot came due since the previous tick, and then once.
- The search bound, in zones anyone may write (offsets up to a day either side, changes of a day
  or more, on any date, at any hour): every search ends; a fire found lies within ``SEARCH_YEARS``
  and recurs exactly one period (400 years) later; "never fires" is the same from any instant;
  a fire of an hour starting with ``*`` is an instant whose clock shows a matching time.
"""

from __future__ import annotations

import datetime as dt
import itertools
import time

import pytest
from cronsim import CronSim, CronSimError
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from edge_runtime.contract.cron import (
    SEARCH_YEARS,
    CronSchedule,
    EverySchedule,
    InvalidCronExpressionError,
    ScheduleNeverFiresError,
    due_fire,
    parse_schedule,
)
from edge_runtime.contract.time_zones import time_zone
from tests.support.tz import (
    DST_ZONES,
    POSIX_ZONES,
    first_instant_showing,
    instants_showing,
    posix_tz,
    transitions,
    wall_of,
    zone_of,
)

# name, low, high, names (the language's, written out again here rather than imported)
FIELDS = (
    ("second", 0, 59, ()),
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
    ("day-of-week", 0, 7, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")),
)
MASK_NAMES = ("seconds", "minutes", "hours", "days", "months", "weekdays")


def values_of(schedule: CronSchedule) -> list[set[int]]:
    return [{v for v in range(64) if getattr(schedule, name) >> v & 1} for name in MASK_NAMES]


def week(values: set[int]) -> set[int]:
    return {v % 7 for v in values}


@st.composite
def field_text(draw: st.DrawFn, index: int) -> tuple[str, set[int], str]:
    """A valid field text, the values it selects (day-of-week 7 kept as 7), and the text for cronsim.

    cronsim reads a one-value range with a step (``5-5/2``) as ``5/2``; Vixie cron and the runtime
    read it as ``5``, so cronsim is given ``5`` there.
    """
    _, low, high, names = FIELDS[index]

    def number() -> tuple[str, int]:
        value = draw(st.integers(low, high))
        if names and value - low < len(names) and draw(st.booleans()):
            name = names[value - low]
            return "".join(c.lower() if draw(st.booleans()) else c for c in name), value
        return (f"0{value}" if value < 10 and draw(st.integers(0, 9)) == 0 else str(value)), value

    items, values, reference = [], set(), []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["star", "value", "range", "star_step", "range_step", "start_step"]))
        step = draw(st.integers(1, high - low + 1))
        reference.append(None)
        if kind == "star":
            items.append("*")
            values |= set(range(low, high + 1))
        elif kind == "value":
            text, value = number()
            items.append(text)
            values.add(value)
        elif kind == "star_step":
            items.append(f"*/{step}")
            values |= set(range(low, high + 1, step))
        else:
            (first_text, first), (last_text, last) = sorted([number(), number()], key=lambda pair: pair[1])
            if kind == "range":
                items.append(f"{first_text}-{last_text}")
                values |= set(range(first, last + 1))
            elif kind == "range_step":
                items.append(f"{first_text}-{last_text}/{step}")
                values |= set(range(first, last + 1, step))
                reference[-1] = first_text if first == last else None
            else:
                items.append(f"{first_text}/{step}")
                values |= set(range(first, high + 1, step))
    return ",".join(items), values, ",".join(r or item for r, item in zip(reference, items))


@st.composite
def expressions(draw: st.DrawFn, sparse_seconds: bool = False) -> tuple[str, list[set[int]], bool, str]:
    """(text, the six value sets, whether the text has the second field, the text for cronsim)."""
    with_seconds = draw(st.booleans())
    fields = [draw(field_text(index)) for index in range(6)]
    if not with_seconds:
        fields[0] = ("0", {0}, "0")
    elif sparse_seconds and len(fields[0][1]) > 3:
        second = min(fields[0][1])
        fields[0] = (str(second), {second}, str(second))
    words = [field[0] for field in fields]
    reference = [field[2] for field in fields]
    if not with_seconds:
        words, reference = words[1:], reference[1:]
    return " ".join(words), [field[1] for field in fields], with_seconds, " ".join(reference)


def expected_values(text: str, values: list[set[int]]) -> list[set[int]]:
    """The value sets the schedule holds: Vixie's OR with a day field of every value is every day."""
    expected = [*values[:5], week(values[5])]
    words = text.split()[-5:]
    if not words[2].startswith("*") and not words[4].startswith("*") and (
            expected[3] == set(range(1, 32)) or expected[5] == set(range(7))):
        expected[3], expected[5] = set(range(1, 32)), set(range(7))
    return expected


def never_fires(text: str, values: list[set[int]]) -> bool:
    """Whether no day of the selected months can ever match. Vixie's rule goes by the text: when
    neither day field starts with `*` a day matches either field, and a day-of-week field always
    matches some day (`30 ... 00,*` fires every day of February); otherwise a day must match both,
    and every month starts on every weekday, so only the day-of-month can rule every day out."""
    longest = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}
    words = text.split()[-5:]
    either = not words[2].startswith("*") and not words[4].startswith("*")
    return not either and all(longest[m] < min(values[3]) for m in values[4])


# --------------------------------------------------------------------------- parsing


@settings(max_examples=200)
@given(expressions())
def test_parsing_selects_what_the_text_says_and_what_cronsim_reads(case) -> None:
    text, values, _, reference_text = case
    if never_fires(text, values):
        with pytest.raises(InvalidCronExpressionError) as caught:
            parse_schedule(text)
        assert caught.value.field == "day-of-month"
        return
    schedule = parse_schedule(text)
    expected = expected_values(text, values)
    assert values_of(schedule) == expected
    reference = CronSim(reference_text, dt.datetime(2026, 1, 1))
    got = [reference.seconds, reference.minutes, reference.hours, reference.days, reference.months,
           week(reference.weekdays)]
    if expected[3] == set(range(1, 32)) and expected[5] == set(range(7)):
        got[3], got[5] = expected[3], expected[5]  # cronsim keeps the ORed sets; every day either way
    assert got == expected


@settings(max_examples=200)
@given(expressions())
def test_the_canonical_text_round_trips(case) -> None:
    text, values, _, _ = case
    assume(not never_fires(text, values))
    schedule = parse_schedule(text)
    canonical = schedule.text
    assert parse_schedule(canonical) == schedule
    assert parse_schedule(canonical).text == canonical
    assert len(canonical.split()) == (5 if values[0] == {0} else 6)


BAD_TOKENS = {
    "out of range": lambda low, high: [str(high + 1), str(high + 37)] + (["0"] if low == 1 else []),
    "backwards": lambda low, high: [f"{high}-{low}", f"{low + 1}-{low}"],
    "step": lambda low, high: ["*/0", f"*/{high - low + 2}", f"{low}-{high}/", "*/x"],
    "shape": lambda low, high: [f"{low},,{high}", f"{low},", f",{low}", f"{low}-", "-1", "1.5", "abc", "L", f"{low}#1", "*-1", "**"],
}


@settings(max_examples=200)
@given(expressions(), st.sampled_from(sorted(BAD_TOKENS)), st.data())
def test_a_broken_field_is_refused_naming_that_field(case, kind, data) -> None:
    text, _, with_seconds, _ = case
    words = text.split()
    index = data.draw(st.integers(0 if with_seconds else 1, 5))
    name, low, high, _ = FIELDS[index]
    token = data.draw(st.sampled_from(BAD_TOKENS[kind](low, high)))
    assume(not (index == 3 and token == "L") and not (index == 5 and token.endswith("#1")))  # L and n#k are cron
    words[index - (not with_seconds)] = token
    with pytest.raises(InvalidCronExpressionError) as caught:
        parse_schedule(" ".join(words))
    assert caught.value.field == name


# --------------------------------------------------------------------------- next fire


ZONE_TRANSITIONS = {rule: transitions(zone_of(rule), 2025, 2028) for rule in DST_ZONES}


@st.composite
def query_instants(draw: st.DrawFn, rule: str) -> int:
    """Milliseconds since the epoch: anywhere in 2000..2040, or within two days of a DST change."""
    if rule in ZONE_TRANSITIONS and draw(st.booleans()):
        change = draw(st.sampled_from(ZONE_TRANSITIONS[rule]))
        return (change + draw(st.integers(-2 * 86_400, 2 * 86_400))) * 1000 + draw(st.integers(0, 999))
    return draw(st.integers(946_684_800_000, 2_208_988_800_000))


def reference_next(text: str, after_ms: int, rule: str) -> int:
    """cronsim's slots of the schedule's canonical text, mapped to instants with zoneinfo.

    A fixed hour: each slot fires at the first instant showing it (or the gap's end). An hour
    starting with `*`: at every instant the clock shows it (twice in an overlap, never in a gap),
    so slots from before the query's wall time count too (the clock may go back to them), and
    the earliest instant wins among slots up to an hour past the first one found.
    """
    zone = zone_of(rule)
    words = text.split()
    if len(words) == 5:
        words.insert(0, "0")
    after_s = after_ms // 1000
    if not words[2].startswith("*"):
        for slot in CronSim(" ".join(words), wall_of(after_s, zone)):
            instant = first_instant_showing(slot, zone)
            if instant > after_s:
                return instant * 1000
        raise AssertionError("unreachable: cronsim iterates forever")
    best, horizon = None, None
    for slot in CronSim(" ".join(words), wall_of(after_s, zone) - dt.timedelta(hours=2)):
        if horizon is not None and slot > horizon:
            return best * 1000
        for instant in instants_showing(slot, zone):
            if instant > after_s and (best is None or instant < best):
                best, horizon = instant, wall_of(instant, zone) + dt.timedelta(hours=2)
    raise AssertionError("unreachable: cronsim iterates forever")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(POSIX_ZONES), expressions(sparse_seconds=True), st.data())
def test_next_fire_matches_the_reference_in_every_zone(rule, case, data) -> None:
    text, values, _, _ = case
    assume(not never_fires(text, values))
    after_ms = data.draw(query_instants(rule))
    schedule = parse_schedule(text)
    with posix_tz(rule):
        got = schedule.next_fire_after(after_ms)
    assert got == reference_next(schedule.text, after_ms, rule), (text, rule, after_ms)
    assert schedule.next_fire_after(after_ms, time_zone(rule)) == got  # the evaluator agrees with the C library


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(DST_ZONES), expressions(), st.data())
def test_next_fire_is_the_first_slot_after_any_instant_before_it(rule, case, data) -> None:
    text, values, _, _ = case
    assume(not never_fires(text, values))
    after_ms = data.draw(query_instants(rule))
    with posix_tz(rule):
        schedule = parse_schedule(text)
        fire = schedule.next_fire_after(after_ms)
        assert fire > after_ms and fire % 1000 == 0
        assert schedule.next_fire_after(fire - 1) == fire
        between = data.draw(st.integers(after_ms, fire - 1))
        assert schedule.next_fire_after(between) == fire


@given(st.integers(1, 365 * 86_400), st.integers(-(10**15), 10**15))
def test_every_fires_on_whole_multiples_of_its_period(period_s, after_ms) -> None:
    schedule = parse_schedule(f"@every {period_s}s")
    assert isinstance(schedule, EverySchedule)
    fire = schedule.next_fire_after(after_ms)
    assert fire % (period_s * 1000) == 0 and after_ms < fire <= after_ms + period_s * 1000


# --------------------------------------------------------------------------- firing with coalescing


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(POSIX_ZONES),
    st.sampled_from(["* * * * *", "*/7 * * * * *", "0 */3 * * *", "30 2 * * *", "0 0 29 2 *", "0 9 13 * fri", "@every 45s"]),
    st.lists(st.one_of(st.integers(0, 90_000), st.integers(0, 40 * 86_400_000), st.integers(-3_600_000, 0)), max_size=40),
    st.data(),
)
def test_each_slot_fires_at_most_once_and_missed_slots_fire_once(rule, text, steps, data) -> None:
    with posix_tz(rule):
        schedule = parse_schedule(text)
        now = data.draw(query_instants(rule))
        stored = schedule.next_fire_after(now)  # the schedule is added at `now`
        fired, latest_now = [], now
        for step in steps:
            now += step  # negative steps: a clock that went back (the guarded clock prevents it; fire anyway never repeats)
            came_due = stored <= now
            due = due_fire(schedule, stored, now)
            assert (due is not None) == came_due
            if due is None:
                continue
            assert due.fire_at_ms == stored and schedule.next_fire_after(stored - 1) == stored  # a real slot
            assert due.next_fire_at_ms == schedule.next_fire_after(now) > now
            assert due.coalesced == (schedule.next_fire_after(stored) <= now)
            fired.append(due.fire_at_ms)
            stored = due.next_fire_at_ms
            latest_now = max(latest_now, now)
        assert fired == sorted(set(fired))  # strictly increasing: no slot twice
        # Every slot up to the latest clock reading was either fired or folded into a fire.
        assert stored > latest_now
        for earlier, later in itertools.pairwise(fired):
            assert schedule.next_fire_after(earlier) <= later


# --------------------------------------------------------------------------- the search bound

#: 400 Gregorian years in milliseconds: the period of the calendar and of every POSIX rule.
PERIOD_MS = 146_097 * 86_400_000
_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@st.composite
def written_zones(draw: st.DrawFn) -> str:
    """A POSIX rule as anyone may write one: offsets up to a day either side of UTC (so a change
    may jump a whole day or more), change dates in the three forms, change times from -167 to 167 h."""
    def offset() -> str:
        return str(draw(st.integers(-24, 24)))

    def date() -> str:
        kind = draw(st.sampled_from("MJn"))
        if kind == "M":
            return f"M{draw(st.integers(1, 12))}.{draw(st.integers(1, 5))}.{draw(st.integers(0, 6))}"
        return f"J{draw(st.integers(1, 365))}" if kind == "J" else str(draw(st.integers(0, 365)))

    def change() -> str:
        return f"{date()}/{draw(st.integers(-167, 167))}"

    return f"AAA{offset()}BBB{offset()},{change()},{change()}"


@st.composite
def skipped_day_cases(draw: st.DrawFn) -> tuple[str, str]:
    """A zone whose clock jumps over one day every year and an expression on that day (or near it),
    so that many of these never fire."""
    day_of_year = draw(st.integers(2, 365))
    month, day = 1, day_of_year
    while day > _MONTH_DAYS[month - 1]:
        day -= _MONTH_DAYS[month - 1]
        month += 1
    day = max(1, min(28 if month == 2 else 30, day + draw(st.sampled_from([0, 0, 0, 1, -1]))))
    hours = draw(st.sampled_from(["*", "*/24", "*/12", "*/5", "3", "0-22"]))
    return f"AAA-12BBB12,J1,J{day_of_year}/0", f"{draw(st.integers(0, 59))} {hours} {day} {month} *"


def _outcome(schedule, after_ms: int, zone) -> int | None:
    try:
        return schedule.next_fire_after(after_ms, zone)
    except ScheduleNeverFiresError:
        return None


def _check_bounded_search(rule: str, text: str, after_ms: int, other_ms: int) -> None:
    schedule, zone = parse_schedule(text), time_zone(rule)
    fire = _outcome(schedule, after_ms, zone)
    later = _outcome(schedule, after_ms + PERIOD_MS, zone)
    assert (_outcome(schedule, other_ms, zone) is None) == (fire is None), (rule, text)
    if fire is None:
        assert later is None
        return
    assert after_ms < fire <= after_ms + PERIOD_MS  # within SEARCH_YEARS
    assert later == fire + PERIOD_MS, (rule, text, after_ms)
    if schedule.hour_star:  # a time the clock shows: the wall time at the fire matches every field
        wall = time.gmtime(fire // 1000 + zone.utc_offset(fire // 1000))
        assert schedule.next_fire_after(fire - 1000, zone) == fire
        for name, value in (("seconds", wall.tm_sec), ("minutes", wall.tm_min), ("hours", wall.tm_hour),
                            ("months", wall.tm_mon)):
            assert getattr(schedule, name) >> value & 1, (rule, text, fire, name)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(written_zones(), expressions(sparse_seconds=True), st.integers(946_684_800_000, 4_102_444_800_000),
       st.integers(946_684_800_000, 4_102_444_800_000))
def test_every_search_ends_and_its_answer_recurs_one_period_later(rule, case, after_ms, other_ms) -> None:
    text, values, _, _ = case
    assume(not never_fires(text, values))
    _check_bounded_search(rule, text, after_ms, other_ms)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(skipped_day_cases(), st.integers(946_684_800_000, 4_102_444_800_000),
       st.integers(946_684_800_000, 4_102_444_800_000))
def test_a_zone_that_skips_a_day_either_lets_an_expression_fire_or_never(case, after_ms, other_ms) -> None:
    rule, text = case
    _check_bounded_search(rule, text, after_ms, other_ms)
