"""Schedule expressions (cron, ``@every`` and ``@reboot``): exact-shape parsing, canonical text, fire times.

Why a contract module: an expression is a value both profiles store and every layer reads (the
CLI refuses a bad one before anything is written, the repository stores its canonical text, the
service computes when it fires), and nothing here does I/O, reads a clock or touches a database.
Fire times are computed in a :class:`~edge_runtime.contract.time_zones.TimeZone` (a schedule's
own zone); without one, in the process's local time as the C library sees it (``time.localtime``).

The language is the cron QingLong's users write (docs/schedules.md says the same for users):

- 5 fields ``minute hour day-of-month month day-of-week``, or 6 with ``second`` first. Each field
  is ``*`` or a comma list of ``N``, ``A-B``, ``*/S``, ``A-B/S`` or ``A/S`` (``A`` up to the field's
  end); months and days by name in any case; day-of-week 7 is Sunday too; ``?`` is ``*`` in the
  two day fields. Day-of-month also takes ``L`` (the month's last day), day-of-week ``nL`` (the
  month's last weekday ``n``: ``5L`` is the last Friday) and ``n#k`` (its ``k``-th weekday ``n``,
  ``k`` 1-5: ``1#2`` is the second Monday), as node-schedule fires them. ``W`` is refused.
- Fields are separated by spaces or tabs, and by the full-width (U+3000) and no-break spaces
  people paste from chats and Chinese documents; a trailing newline or CR is dropped. The stored
  text is the canonical one (:attr:`CronSchedule.text`).
- The day rule is Vixie cron's, by the text: a day field is unrestricted when its text starts
  with ``*`` (or is ``?``). When both are restricted, a day matching either fires; otherwise a day
  must match both (so ``0 0 1 * 0-6`` fires every day, ``0 0 */2 * 1`` on odd-numbered Mondays).
- ``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/``@midnight``, ``@hourly`` and
  ``@minutely`` are the usual 5-field expressions. ``@every D`` fires at every whole multiple of D
  since 1970-01-01T00:00:00Z (elapsed time, never moved by DST). ``@reboot`` (or QingLong's
  ``@boot``) fires once per boot of the device, never by the clock (the service arms it when it
  sees a new boot id).
- An expression whose days can never occur (``0 0 30 2 *``) is refused at parse time. One whose
  days occur but whose every time falls where its zone's clock skips ahead (an hour starting with
  ``*`` on a day a DST rule jumps over, every year) is refused when its fire time is searched:
  every search looks at most :data:`SEARCH_YEARS` ahead, a whole cycle of the calendar and of any
  POSIX rule, and raises :class:`ScheduleNeverFiresError` when that cycle holds no fire.

Local time and DST: each slot is a wall-clock time. When the hour field starts with ``*``, a slot
fires whenever the clock shows it: twice in an autumn overlap, never in a spring gap. A slot with
a fixed hour fires once, at the first instant the clock shows it, or, when the clock skips it,
at the first instant after the gap. ``mktime`` is never used: offsets are read from the zone.
"""

from __future__ import annotations

import functools
import time

import msgspec

from edge_runtime.contract.durations import (
    MAX_DURATION_MS,
    MIN_DURATION_MS,
    InvalidDurationError,
    format_duration,
    parse_duration_ms,
)
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.time_zones import PASTED_BLANKS, PosixTimeZone, ProcessLocalTime, TimeZone
from edge_runtime.contract.time_zones import days_from_civil as _days_from_civil
from edge_runtime.contract.validation import MAX_SAFE_INTEGER

#: Longest expression text accepted: a list of all 60 minutes written out fits several times over.
MAX_EXPRESSION_LENGTH = 1024
#: The next fire time of a schedule the clock never fires (``@reboot``): the largest stored time.
NEVER_BY_THE_CLOCK_MS = MAX_SAFE_INTEGER
#: How far ahead a fire time is searched: 400 Gregorian years (146,097 days, a whole number of
#: weeks) are the period of the calendar, so of every cron expression and of every POSIX TZ rule
#: (its change dates are fixed by the year's length and weekdays alone). The fires of a schedule
#: in such a zone repeat every 400 years, so one with no fire in the 400 years after an instant
#: never fires after it. The rarest valid expressions wait 40 years (``0 0 29 2 */7``, the 29th of
#: February on a Sunday, from 2088 to 2128); a zone can only make a wait longer by skipping days.
SEARCH_YEARS = 400
_SEARCH_S = SEARCH_YEARS * 146_097 * 86_400 // 400

# name, lowest value, highest value (also the end of `*` and `A/S`), names (value = index + lowest).
# Day-of-week runs to 7 (Sunday again) as in Vixie cron, so `1/2` is Mon, Wed, Fri, Sun.
_FIELDS = (
    ("second", 0, 59, ()),
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    ("month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")),
    ("day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)
_FULL = (1 << 60) - 1, (1 << 60) - 1, (1 << 24) - 1, ((1 << 31) - 1) << 1, ((1 << 12) - 1) << 1, (1 << 7) - 1
# What a step too large for a field should be written as instead.
_LARGE_STEP_HINT = (
    "for every {S} seconds write `@every {S}s`",
    "for every {S} minutes write `@every {S}m`",
    "for every {S} hours write `@every {S}h`",
    "for every {S} days write `@every {S}d`",
    "list the months instead",
    "list the days instead",
)
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
    "@minutely": "* * * * *",
}
_BOOT_MACROS = ("@reboot", "@boot")
_LONGEST_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MONTH_LENGTHS = {m: (28, 29) if m == 2 else (_LONGEST_MONTH[m],) for m in range(1, 13)}
_LOCAL = ProcessLocalTime()
# Separators other than space and tab, read as a space.
_PASTED_SEPARATORS = str.maketrans({c: " " for c in PASTED_BLANKS if c not in " \t\r\n"})


class InvalidCronExpressionError(EdgeRuntimeError, code="INVALID_CRON_EXPRESSION"):
    """A schedule expression is malformed or can never fire; ``field`` and ``reason`` say why."""

    def __init__(self, text: str, field: str, reason: str) -> None:
        super().__init__(f"invalid schedule expression {text!r}: {field}: {reason}")
        self.field = field
        self.reason = reason


class ScheduleNeverFiresError(InvalidCronExpressionError, code="SCHEDULE_NEVER_FIRES"):
    """A valid expression that never fires in its zone: every time it names falls where the zone's
    clock skips ahead (an hour starting with ``*`` on a day a DST rule jumps over, every year).

    Raised by a fire-time search after :data:`SEARCH_YEARS` without a fire; a schedule is refused
    when added, edited or resumed, and a stored one is paused with this as its reason.
    """

    def __init__(self, text: str, zone: str) -> None:
        reason = (f"never fires in time zone {zone!r}: that zone's clock skips every time the expression names "
                  f"(none shows in the {SEARCH_YEARS} years searched, a whole cycle of the calendar and of the "
                  "zone's rule); choose other times or another zone")
        EdgeRuntimeError.__init__(self, f"schedule expression {text!r} {reason}")
        self.field = "expression"
        self.reason = reason


def _star_step_mask(index: int, step: int) -> int:
    """The values ``*/step`` selects in field ``index`` (day-of-week 7 folded into 0)."""
    low, high = _FIELDS[index][1:3]
    mask = 0
    for value in range(low, high + 1, step):
        mask |= 1 << (0 if index == 5 and value == 7 else value)
    return mask


class CronSchedule(msgspec.Struct, frozen=True, gc=False):
    """A parsed cron expression: one bit mask per field (bit ``v`` set = value ``v`` fires).

    Day-of-week uses bits 0..6 (Sunday = 0). ``last_day`` is ``L`` in day-of-month,
    ``nth_weekdays`` bit ``7 * (k - 1) + n`` is ``n#k``, ``last_weekdays`` bit ``n`` is ``nL``.
    The ``*_star`` flags say whether the field's text started with ``*``: the day rule and the
    DST rule read them, and a field of every value counts as starting with ``*`` (the parser
    folds a day field of every value in an ORed pair into "every day", where that differs).
    Build one with :func:`parse_schedule`.
    """

    seconds: int
    minutes: int
    hours: int
    days: int
    months: int
    weekdays: int
    last_day: bool = False
    nth_weekdays: int = 0
    last_weekdays: int = 0
    hour_star: bool = False
    days_star: bool = False
    weekdays_star: bool = False

    def __post_init__(self) -> None:
        # Held here, not only in the parser, so that no CronSchedule exists whose search never ends.
        masks = (self.seconds, self.minutes, self.hours, self.days, self.months, self.weekdays)
        specials = (0, 0, 0, int(self.last_day is True), 0, self.nth_weekdays | self.last_weekdays)
        for (name, *_), mask, full, special in zip(_FIELDS, masks, _FULL, specials):
            if type(mask) is not int or mask < 0 or mask & ~full or not (mask or special):
                raise InvalidCronExpressionError(repr(self), name, "the value set is empty or out of range")
        if type(self.nth_weekdays) is not int or not 0 <= self.nth_weekdays < 1 << 35 or \
                type(self.last_weekdays) is not int or not 0 <= self.last_weekdays < 1 << 7:
            raise InvalidCronExpressionError(repr(self), "day-of-week", "the # or L values are out of range")
        for index, star, mask in ((2, self.hour_star, self.hours), (3, self.days_star, self.days),
                                  (5, self.weekdays_star, self.weekdays)):
            if type(star) is not bool:
                raise InvalidCronExpressionError(repr(self), _FIELDS[index][0], "the * flag must be a bool")
            if star and not any(_star_step_mask(index, s) & ~mask == 0 for s in range(1, 33)):
                raise InvalidCronExpressionError(repr(self), _FIELDS[index][0], "a field starting with * has no */S")
        if not self._some_day_fires():
            earliest = (self.days & -self.days).bit_length() - 1
            if not self.last_day and self._star(5) and not (self.nth_weekdays | self.last_weekdays):
                reason = (f"day {earliest} is in none of the selected months, so this never fires "
                          "(for the last day of each month write L)")
            else:
                reason = ("no day of the selected months matches both day-of-month and day-of-week (a day field "
                          "starting with * makes a day match both), so this never fires")
            raise InvalidCronExpressionError(self.text, "day-of-month", reason)

    def _star(self, index: int) -> bool:
        """Whether field ``index`` (hour, day-of-month or day-of-week) counts as starting with ``*``."""
        # Read for every day a search passes (a dict built per call cost a third of a 400-year search).
        if index == 2:
            return self.hour_star or self.hours == _FULL[2]
        if index == 3:
            return self.days_star or self.days == _FULL[3]
        return self.weekdays_star or self.weekdays == _FULL[5]

    def _either_day(self) -> bool:
        return not self._star(3) and not self._star(5)

    def _day_matches(self, day: int, length: int, weekday: int) -> bool:
        in_days = self.days >> day & 1 or (self.last_day and day == length)
        in_weekdays = (self.weekdays >> weekday & 1 or self.nth_weekdays >> (7 * ((day - 1) // 7) + weekday) & 1
                       or (self.last_weekdays >> weekday & 1 and day + 7 > length))
        return bool(in_days or in_weekdays) if self._either_day() else bool(in_days and in_weekdays)

    def _some_day_fires(self) -> bool:
        """Whether some day of some selected month ever matches (every month starts on every weekday,
        in leap and common years, within the Gregorian 400-year cycle)."""
        if self._either_day():
            return True  # the day-of-week side alone fires (a 5th weekday: in some year of every month)
        months = [m for m in range(1, 13) if self.months >> m & 1]
        if not (self.nth_weekdays | self.last_weekdays) or self.weekdays == _FULL[5]:
            # A plain day-of-week set meets every date in some year: only the month lengths matter.
            return self.last_day or any(self.days >> d & 1 for m in months for d in range(1, _LONGEST_MONTH[m] + 1))
        return any(
            self._day_matches(day, length, (first + day - 1) % 7)
            for m in months for length in _MONTH_LENGTHS[m] for first in range(7) for day in range(1, length + 1)
        )

    @property
    def text(self) -> str:
        """The canonical expression: 5 fields when the second is 0, else 6; numbers, no names."""
        fields = [
            _render(0, self.seconds, None),
            _render(1, self.minutes, None),
            _render(2, self.hours, self._star(2)),
            ",".join(filter(None, [self.days and _render(3, self.days, self._star(3)), "L" * self.last_day])),
            _render(4, self.months, None),
            ",".join(filter(None, [
                self.weekdays and _render(5, self.weekdays, self._star(5)),
                *(f"{n % 7}#{n // 7 + 1}" for n in range(35) if self.nth_weekdays >> n & 1),
                *(f"{n}L" for n in range(7) if self.last_weekdays >> n & 1),
            ])),
        ]
        return " ".join(fields[1:] if self.seconds == 1 else fields)

    def next_fire_after(self, after_ms: int, zone: TimeZone | None = None) -> int:
        """The first fire instant (ms since the epoch) strictly after ``after_ms``, in ``zone``
        (default: the process's local time).

        Raises:
            ScheduleNeverFiresError: no fire in the :data:`SEARCH_YEARS` after ``after_ms``: the
                zone's clock skips every time the expression names, so it never fires.
        """
        zone = zone or _LOCAL
        after_s = after_ms // 1000  # slots are whole seconds: the first one after after_ms is after after_s
        limit = after_s + _SEARCH_S
        found = self._next_shown_after(after_s, zone, limit) if self._star(2) else self._next_first_shown(
            after_s, zone.utc_offset, limit)
        if found is None:
            raise ScheduleNeverFiresError(self.text, zone.text)
        return found * 1000

    def _next_first_shown(self, after_s: int, offset, limit: int) -> int | None:
        """A fixed hour: the first instant after ``after_s`` at which a matching wall time fires
        (first shown, or the end of the gap that skips it); None when none does by ``limit``."""
        wall = after_s + offset(after_s)
        while True:
            wall = self._next_wall_second(wall, limit + _OFFSET_REACH)
            if wall is None:
                return None
            instant, repeated_until = _instant_of(wall, offset)
            if instant > after_s:
                return instant
            # The slot's first occurrence is already past (after_ms lies in the second pass of an
            # autumn overlap): every wall time up to the overlap's end is past too.
            wall = max(wall, repeated_until)

    def _next_shown_after(self, after_s: int, zone: TimeZone, limit: int) -> int | None:
        """The first instant after ``after_s`` at which the clock shows a matching wall time, or
        None when none does by ``limit``.

        Walks the stretches of constant UTC offset: within one, wall time is the instant plus the
        offset; a stretch that ends before its next match hands over to the next one, whose clock
        starts where the change put it (back an hour: the repeated hour matches again; forward:
        the skipped times never show). An instant up to ``limit`` shows a wall time below
        ``limit + _OFFSET_REACH``, so no match below that means no fire by ``limit``.
        """
        offset = zone.utc_offset
        start = after_s + 1
        current = offset(start)
        while start <= limit:
            wall = self._next_wall_second(start + current - 1, limit + _OFFSET_REACH)
            if wall is None:
                return None
            candidate = wall - current
            change = _first_change(start, candidate, current, zone)
            if change is None:
                return candidate
            start, current = change, offset(change)
        return None

    def _next_wall_second(self, wall: int, limit: int) -> int | None:
        """The first matching wall-clock time after ``wall`` (seconds of a naive, UTC-like clock),
        or None when there is none up to ``limit``.

        Skips by field: a month, day, hour or minute that cannot match is passed over whole.
        """
        wall += 1
        tm = time.gmtime(wall)
        year, month, day, hour, minute, second = tm[:6]
        last_year = time.gmtime(limit).tm_year
        day_matches = self._day_matches
        while True:
            if year > last_year:
                return None
            found = _next_bit(self.months, month)
            if found is None:
                year, month, day, hour, minute, second = year + 1, 1, 1, 0, 0, 0
                continue
            if found != month:
                month, day, hour, minute, second = found, 1, 0, 0, 0
            first_day = _days_from_civil(year, month, 1)
            month_length = _days_from_civil(year + month // 12, month % 12 + 1, 1) - first_day
            while day <= month_length:
                if day_matches(day, month_length, (first_day + day + 3) % 7):  # 1970-01-01 was a Thursday (4)
                    break
                day, hour, minute, second = day + 1, 0, 0, 0
            else:
                year, month, day, hour, minute, second = year + month // 12, month % 12 + 1, 1, 0, 0, 0
                continue
            found = _next_bit(self.hours, hour)
            if found is None:
                day, hour, minute, second = day + 1, 0, 0, 0
                continue
            if found != hour:
                hour, minute, second = found, 0, 0
            found = _next_bit(self.minutes, minute)
            if found is None:
                hour, minute, second = hour + 1, 0, 0
                continue
            if found != minute:
                minute, second = found, 0
            found = _next_bit(self.seconds, second)
            if found is None:
                minute, second = minute + 1, 0
                continue
            matching = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + found
            return matching if matching <= limit else None


class BootSchedule(msgspec.Struct, frozen=True, gc=False):
    """``@reboot``: fires once per boot of the device, never by the clock.

    Its next fire time is :data:`NEVER_BY_THE_CLOCK_MS` until the service, seeing a boot id it has
    not fired the schedule for, stores the start of its run as the slot.
    """

    @property
    def text(self) -> str:
        return "@reboot"

    def next_fire_after(self, after_ms: int, zone: TimeZone | None = None) -> int:
        return NEVER_BY_THE_CLOCK_MS


class EverySchedule(msgspec.Struct, frozen=True, gc=False):
    """``@every D``: fires at every whole multiple of ``period_ms`` since the Unix epoch."""

    period_ms: int

    def __post_init__(self) -> None:
        period = self.period_ms
        if type(period) is not int or period % 1000 or not MIN_DURATION_MS <= period <= MAX_DURATION_MS:
            limits = f"from {format_duration(MIN_DURATION_MS)} to {format_duration(MAX_DURATION_MS)}"
            raise InvalidCronExpressionError(repr(self), "@every", f"the period must be whole seconds, {limits}")

    @property
    def text(self) -> str:
        return f"@every {format_duration(self.period_ms)}"

    def next_fire_after(self, after_ms: int, zone: TimeZone | None = None) -> int:
        return (after_ms // self.period_ms + 1) * self.period_ms


ScheduleExpression = CronSchedule | EverySchedule | BootSchedule


class DueFire(msgspec.Struct, frozen=True, gc=False):
    """What to fire now: one Run for ``fire_at_ms``, then store ``next_fire_at_ms``.

    ``fire_at_ms`` is the stored next fire time itself, not "now", so the (schedule, fire time)
    key that deduplicates fires depends only on what is stored: two firers reading the same row
    name the same slot, whatever their clocks say. ``coalesced`` is true when later slots up to
    now were missed (downtime, a forward clock jump) and are folded into this one fire.
    """

    fire_at_ms: int
    next_fire_at_ms: int
    coalesced: bool


def due_fire(
    schedule: ScheduleExpression, next_fire_at_ms: int, now_ms: int, zone: TimeZone | None = None,
    known: KnownFireTimes | None = None,
) -> DueFire | None:
    """The single fire due at ``now_ms`` for a schedule whose stored next fire time is given.

    None when that time is still ahead. Otherwise every slot from it up to ``now_ms`` fires once,
    as one fire; the returned ``next_fire_at_ms`` is the first slot strictly after ``now_ms``, so
    missed slots never fire as a burst. ``known``: fire times searched before (see
    :class:`KnownFireTimes`), looked up instead of searched again.

    Raises:
        ScheduleNeverFiresError: the schedule never fires in ``zone``.
    """
    if now_ms < next_fire_at_ms:
        return None
    search = schedule.next_fire_after if known is None else functools.partial(known.next_fire_after, schedule)
    coalesced = search(next_fire_at_ms, zone) <= now_ms
    return DueFire(next_fire_at_ms, search(now_ms, zone), coalesced)


class KnownFireTimes:
    """Fire times already searched, so that a write transaction looks them up instead of searching.

    A store searches before its ``BEGIN``, from the row it read and its clock then, and asks again
    inside, at the transaction's own now: the first fire strictly after ``t`` being ``f`` answers
    for every instant in ``[t, f)`` (no slot lies between), so the second ask is a lookup unless a
    slot passed or the clock went back meanwhile (then it searches again: bounded, and quick for
    an expression known to fire). That an expression never fires in a zone is kept too, and asking
    again raises at once. Holds the latest answers of the :data:`KNOWN_PAIRS` (expression, zone)
    pairs asked last; not shared between threads.
    """

    __slots__ = ("_known",)

    #: (expression, zone) pairs kept, the least recently searched dropped first.
    KNOWN_PAIRS = 256

    def __init__(self) -> None:
        self._known: dict[tuple[CronSchedule, str], tuple[tuple[int, int], ...] | None] = {}

    def next_fire_after(self, schedule: ScheduleExpression, after_ms: int, zone: TimeZone | None) -> int:
        """``schedule.next_fire_after(after_ms, zone)``, looked up when an earlier search answers it.

        Raises:
            ScheduleNeverFiresError: as :meth:`CronSchedule.next_fire_after`.
        """
        if not isinstance(schedule, CronSchedule):  # @every and @reboot: arithmetic, nothing to keep
            return schedule.next_fire_after(after_ms, zone)
        zone = zone or _LOCAL
        key = (schedule, zone.text)
        spans = self._known.get(key, ())
        if spans is None:
            raise ScheduleNeverFiresError(schedule.text, zone.text)
        for start, found in spans:
            if start <= after_ms < found:
                return found
        try:
            found = schedule.next_fire_after(after_ms, zone)
        except ScheduleNeverFiresError:
            self._keep(key, None)
            raise
        # A fire keeps two: from its stored slot and from now.
        self._keep(key, ((after_ms, found), *spans[:1]))
        return found

    def _keep(self, key: tuple[CronSchedule, str], spans: tuple[tuple[int, int], ...] | None) -> None:
        self._known.pop(key, None)
        if len(self._known) >= self.KNOWN_PAIRS:
            del self._known[next(iter(self._known))]
        self._known[key] = spans


def parse_schedule(text: str) -> ScheduleExpression:
    """Parse a cron expression, a macro, ``@every D`` or ``@reboot``; refuse anything else, naming the field.

    Raises:
        InvalidCronExpressionError: with ``field`` (a field name, ``expression`` or ``@every``)
            and ``reason`` (with what to write instead); nothing is half-accepted.
    """
    if type(text) is not str:
        raise InvalidCronExpressionError(repr(text), "expression", f"must be a string, got {type(text).__name__}")
    return _parse(text)


@functools.lru_cache(maxsize=512)  # the service parses a schedule's stored text at each fire
def _parse(text: str) -> ScheduleExpression:
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise InvalidCronExpressionError(text[:40] + "...", "expression", f"over {MAX_EXPRESSION_LENGTH} characters")
    pasted = text.rstrip("\r\n").translate(_PASTED_SEPARATORS)
    if not pasted.isascii() or not pasted.replace("\t", " ").isprintable():
        raise InvalidCronExpressionError(
            text, "expression", "only printable ASCII separated by spaces or tabs (full-width and no-break spaces "
            "count as spaces; a newline only at the end) is allowed"
        )
    words = pasted.split()
    if words and words[0].startswith("@"):
        macro = words[0].lower()
        if macro == "@every":
            if len(words) != 2:
                raise InvalidCronExpressionError(text, "@every", "write one duration after @every, e.g. @every 5m")
            try:
                return EverySchedule(parse_duration_ms(words[1]))
            except InvalidDurationError as error:
                raise InvalidCronExpressionError(text, "@every", error.message) from error
        if macro in _BOOT_MACROS and len(words) == 1:
            return BootSchedule()
        if macro not in _MACROS or len(words) != 1:
            known = ", ".join(sorted([*_MACROS, *_BOOT_MACROS])) + ", @every D"
            raise InvalidCronExpressionError(text, "expression", f"unknown or misused macro {words[0]!r} ({known})")
        words = _MACROS[macro].split()
    if len(words) not in (5, 6):
        hint = " (for an interval write @every D, e.g. @every 5m)" if len(words) < 5 else ""
        raise InvalidCronExpressionError(
            text, "expression",
            f"expected 5 fields (minute hour day-of-month month day-of-week) or 6 (second first), got {len(words)}; "
            f"write every field, `*` for any value{hint}"
            + (" (quote the whole expression, e.g. '*/5 * * * *': unquoted, the shell splits it and expands *)"
               if len(words) < 5 else ""),
        )
    if len(words) == 5:
        words.insert(0, "0")
    fields = [_parse_field(text, index, word) for index, word in enumerate(words)]
    (seconds, _, _), (minutes, _, _), (hours, hour_star, _), (days, days_star, last_day), (months, _, _) = fields[:5]
    weekdays, weekdays_star, (nth, last) = fields[5]
    if not days_star and not weekdays_star and (days == _FULL[3] or weekdays == _FULL[5]):
        # Vixie's OR with a day field of every value (`0 0 1 * 0-6`): every day fires.
        days, last_day, weekdays, nth, last, days_star, weekdays_star = _FULL[3], False, _FULL[5], 0, 0, True, True
    # A field of every value counts as `*` (one schedule, one canonical text, whichever was typed).
    hour_star, days_star, weekdays_star = (hour_star or hours == _FULL[2], days_star or days == _FULL[3],
                                           weekdays_star or weekdays == _FULL[5])
    try:
        return CronSchedule(seconds, minutes, hours, days, months, weekdays, bool(last_day), nth, last,
                            hour_star, days_star, weekdays_star)
    except InvalidCronExpressionError as error:  # the same refusal, about the text the user wrote
        raise InvalidCronExpressionError(text, error.field, error.reason) from None


# --------------------------------------------------------------------------- field syntax


def _parse_field(text: str, index: int, word: str) -> tuple[int, bool, object]:
    """(the value mask, whether the text starts with ``*``, the field's specials: ``L`` for
    day-of-month, (``#`` mask, ``L`` mask) for day-of-week, else None)."""
    name, low, high, names = _FIELDS[index]

    def refuse(reason: str) -> InvalidCronExpressionError:
        return InvalidCronExpressionError(text, name, reason)

    def value(token: str) -> int:
        if token.isdigit():
            number = int(token)
            if not low <= number <= high:
                raise refuse(f"{token} is out of range {low}-{high}")
            return number
        if token.lower() in names:
            return names.index(token.lower()) + low
        if not token:
            raise refuse(f"a number is missing in {word!r}")
        if "*" in token:
            raise refuse(f"{token!r} is not a number: `*` stands alone or as `*/S`; write a number, `A-B` or `*`")
        kind = " or a name (" + ", ".join(names[:3]) + ", ...)" if names else ""
        upper = token.upper()
        if "W" in upper and index == 3:
            unsupported = "; W (nearest weekday) is not supported: list the days, or write L for the last day"
        elif "L" in upper or "#" in upper:
            unsupported = ("; L is accepted alone in day-of-month, nL and n#k alone in a day-of-week item "
                           "(5L: the last Friday, 1#2: the second Monday)")
        else:
            unsupported = ""
        raise refuse(f"{token!r} is not a number{kind}{unsupported}")

    star = word.startswith("*") or (index in (3, 5) and word == "?")
    if index in (3, 5) and word == "?":
        word = "*"
    mask, last_day, nth, last = 0, False, 0, 0
    for item in word.split(","):
        if not item:
            raise refuse(f"empty item in list {word!r}")
        if index == 3 and item.upper() == "L":
            last_day = True
            continue
        if index == 5 and "#" in item:
            day_text, _, occurrence = item.partition("#")
            if not occurrence.isdigit() or not 1 <= int(occurrence) <= 5:
                raise refuse(f"{item!r}: write n#k with k from 1 to 5 (1#2: the second Monday)")
            if not day_text or any(mark in day_text for mark in "-/*"):
                raise refuse(f"{item!r}: # takes one day (write 1#2,3#2 for the second Monday and Wednesday)")
            nth |= 1 << (7 * (int(occurrence) - 1) + value(day_text) % 7)
            continue
        if index == 5 and len(item) > 1 and item[-1] in "lL" and not any(mark in item for mark in "-/*"):
            last |= 1 << value(item[:-1]) % 7
            continue
        base, slash, step_text = item.partition("/")
        if base == "*":
            first, last_value = low, high
        else:
            start, dash, end = base.partition("-")
            first = value(start)
            last_value = value(end) if dash else high if slash else first
            if last_value < first:
                raise refuse(f"range {base!r} runs backwards (write two ranges)")
        step = 1
        if slash:
            span = high - low + 1
            if not step_text.isdigit() or not 1 <= int(step_text) <= span:
                hint = ""
                if step_text.isdigit() and int(step_text) > span:
                    hint = "; " + _LARGE_STEP_HINT[index].format(S=int(step_text))
                raise refuse(f"step {step_text!r} in {item!r} must be a number from 1 to {span}{hint}")
            step = int(step_text)
        for number in range(first, last_value + 1, step):
            mask |= 1 << number
    if index == 5 and mask >> 7:  # day-of-week 7 is Sunday
        mask = (mask | 1) & _FULL[5]
    if index == 3:
        return mask, star, last_day
    if index == 5:
        return mask, star, (nth, last)
    return mask, star, None


def _render(index: int, mask: int, star: bool | None) -> str:
    """The canonical text of one field: ``*``, ``*/S``, ``A-B/S`` or a list of ``N`` and ``A-B``.

    ``star`` is whether the text must start with ``*`` (None: a field where that means nothing).
    Whatever it returns parses back to ``mask`` and ``star`` (dow ``*/S`` only where it means the same).
    """
    low, high = _FIELDS[index][1:3]
    if mask == _FULL[index]:
        return "*"
    if star:  # the smallest */S the values hold, then the rest
        step = next(s for s in range(2, high - low + 2) if _star_step_mask(index, s) & ~mask == 0)
        rest = mask & ~_star_step_mask(index, step)
        return f"*/{step}" + (f",{_render(index, rest, False)}" if rest else "")
    values = [v for v in range(low, high + 1) if mask >> v & 1]
    if len(values) >= 3:
        step = values[1] - values[0]
        if step > 1 and all(b - a == step for a, b in zip(values, values[1:])):
            if star is None and values[0] == low and _star_step_mask(index, step) == mask:
                return f"*/{step}"
            return f"{values[0]}-{values[-1]}/{step}"
    runs: list[str] = []
    for v in values:
        if runs and v - 1 in values:
            runs[-1] = f"{runs[-1].split('-')[0]}-{v}"
        else:
            runs.append(str(v))
    return ",".join(runs)


# --------------------------------------------------------------------------- time arithmetic


def _next_bit(mask: int, start: int) -> int | None:
    """The lowest set bit of ``mask`` at or above ``start``, or None."""
    rest = mask >> start
    return None if rest == 0 else start + (rest & -rest).bit_length() - 1


# Offsets are sampled this far either side of a wall time: every instant showing that wall time
# lies within 25 h of it (POSIX offsets are at most 24:59:59), and no real rule changes the offset
# twice within 2.3 days.
_OFFSET_REACH = 100_000


def _instant_of(wall: int, _utc_offset) -> tuple[int, int]:
    """The instant (s) at which local wall time ``wall`` fires, and the last wall second of its repeat.

    The instant is the first one at which the clock shows ``wall``, or, when the clock skips it,
    the first instant after the skip. The second value is ``wall`` itself unless ``wall`` falls
    in an autumn overlap; then it is the overlap's last wall second.
    """
    before, after = _utc_offset(wall - _OFFSET_REACH), _utc_offset(wall + _OFFSET_REACH)
    hits = sorted(wall - offset for offset in {before, after} if _utc_offset(wall - offset) == offset)
    if not hits:  # a gap: the clock jumps over wall; fire at the jump
        return _offset_change(wall - max(before, after), wall - min(before, after), _utc_offset), wall
    if len(hits) == 1:
        return hits[0], wall
    first_offset = wall - hits[0]
    return hits[0], _offset_change(hits[0], hits[1], _utc_offset) + first_offset - 1


def _first_change(start: int, end: int, offset: int, zone: TimeZone) -> int | None:
    """The first instant in ``(start, end]`` whose UTC offset is not ``offset``, or None.

    A POSIX rule knows its change instants (:meth:`PosixTimeZone.first_change`). Any other zone is
    sampled a day apart, then bisected: no real rule changes the offset twice within a day.
    """
    if isinstance(zone, PosixTimeZone):
        return zone.first_change(start, end)
    _utc_offset = zone.utc_offset
    early = start
    while early < end:
        late = min(early + 86_400, end)
        if _utc_offset(late) != offset:
            return _offset_change(early, late, _utc_offset)
        early = late
    return None


def _offset_change(early: int, late: int, _utc_offset) -> int:
    """The first instant in ``(early, late]`` whose UTC offset differs from ``early``'s (bisection)."""
    offset = _utc_offset(early)
    while late - early > 1:
        middle = (early + late) // 2
        if _utc_offset(middle) == offset:
            early = middle
        else:
            late = middle
    return late
