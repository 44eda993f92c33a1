"""Schedule expressions (cron and ``@every``): exact-shape parsing, canonical text, fire times.

Why a contract module: an expression is a value both profiles store and every layer reads (the
CLI refuses a bad one before anything is written, the repository stores its canonical text, the
service computes when it fires), and nothing here does I/O, reads a clock or touches a database.
Its one outside input is the process's time zone as the C library sees it (``time.localtime``,
which honours a POSIX ``TZ`` string such as ``CST-8`` or ``CET-1CEST,M3.5.0,M10.5.0/3`` without a
tz database): that is what "local time" means on the device.

The language (docs/schedules.md says the same for users):

- 5 fields ``minute hour day-of-month month day-of-week``, or 6 with ``second`` first (as QingLong
  accepts). Each field is ``*`` or a comma list of ``N``, ``A-B``, ``*/S``, ``A-B/S`` or ``A/S``
  (``A`` up to the field's end). Months ``jan``..``dec`` and days ``sun``..``sat`` may be written by
  name, in any case; day-of-week 7 is Sunday too; ``?`` is ``*`` in the two day fields.
- Day rule of classic cron: when both day fields are restricted (neither is the whole range), a
  day matching either fires; otherwise the restricted one decides. "Restricted" is decided on the
  values, not on the text, so ``*/2`` restricts and ``1-31`` does not (Vixie cron looks at whether
  the text starts with ``*``); that keeps the canonical form equivalent to what was typed.
- ``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/``@midnight``, ``@hourly`` are
  the usual 5-field expressions. ``@every D`` (D in the duration syntax of
  :mod:`edge_runtime.contract.durations`) fires at every instant that is a whole multiple of D
  since 1970-01-01T00:00:00Z: elapsed time, the same slots on every device and after every
  restart, never moved by DST.
- A day-of-month that no selected month has (``0 0 30 2 *``) is refused at parse time, so every
  accepted expression fires again within 8 years (29 February) and :meth:`next_fire_after`
  always returns an instant.

Local time and DST: each slot is a wall-clock time; it fires at the first instant the clock shows
it. A slot the clock skips (spring-forward gap) fires once, at the first instant after the gap; a
slot the clock shows twice (autumn overlap) fires once, at its first occurrence. ``time.mktime``
is not used to go from wall time to instant: what it does with such times is left to each C
library; offsets read with ``time.localtime`` are the same on glibc and musl.
"""

from __future__ import annotations

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

#: Longest expression text accepted (the longest useful ones are comma lists of a few dozen items).
MAX_EXPRESSION_LENGTH = 256

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
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_LONGEST_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class InvalidCronExpressionError(EdgeRuntimeError):
    """A schedule expression is malformed or can never fire; ``field`` and ``reason`` say why."""

    code = "INVALID_CRON_EXPRESSION"

    def __init__(self, text: str, field: str, reason: str) -> None:
        super().__init__(f"invalid schedule expression {text!r}: {field}: {reason}")
        self.field = field
        self.reason = reason


class CronSchedule(msgspec.Struct, frozen=True, gc=False):
    """A parsed cron expression: one bit mask per field (bit ``v`` set = value ``v`` fires).

    Day-of-week uses bits 0..6 (Sunday = 0). Build one with :func:`parse_schedule`.
    """

    seconds: int
    minutes: int
    hours: int
    days: int
    months: int
    weekdays: int

    def __post_init__(self) -> None:
        # Held here, not only in the parser, so that no CronSchedule exists whose search never ends.
        masks = (self.seconds, self.minutes, self.hours, self.days, self.months, self.weekdays)
        for (name, *_), mask, full in zip(_FIELDS, masks, _FULL):
            if type(mask) is not int or mask <= 0 or mask & ~full:
                raise InvalidCronExpressionError(repr(self), name, "the value set is empty or out of range")
        if self.weekdays == _FULL[5]:
            earliest = (self.days & -self.days).bit_length() - 1
            if all(_LONGEST_MONTH[m] < earliest for m in range(1, 13) if self.months >> m & 1):
                raise InvalidCronExpressionError(
                    self.text, "day-of-month", f"day {earliest} is in none of the selected months, so this never fires"
                )

    @property
    def text(self) -> str:
        """The canonical expression: 5 fields when the second is 0, else 6; numbers, no names."""
        masks = (self.seconds, self.minutes, self.hours, self.days, self.months, self.weekdays)
        fields = [_render(index, mask) for index, mask in enumerate(masks)]
        return " ".join(fields[1:] if self.seconds == 1 else fields)

    def next_fire_after(self, after_ms: int) -> int:
        """The first fire instant (ms since the epoch) strictly after ``after_ms``, in local time."""
        after_s = after_ms // 1000  # slots are whole seconds: the first one after after_ms is after after_s
        wall = after_s + _utc_offset(after_s)
        while True:
            wall = self._next_wall_second(wall)
            instant, repeated_until = _instant_of(wall)
            if instant > after_s:
                return instant * 1000
            # The slot's first occurrence is already past (after_ms lies in the second pass of an
            # autumn overlap): every wall time up to the overlap's end is past too.
            wall = max(wall, repeated_until)

    def _next_wall_second(self, wall: int) -> int:
        """The first matching wall-clock time after ``wall`` (seconds of a naive, UTC-like clock).

        Skips by field: a month, day, hour or minute that cannot match is passed over whole.
        """
        wall += 1
        tm = time.gmtime(wall)
        year, month, day, hour, minute, second = tm[:6]
        either_day = self.days != _FULL[3] and self.weekdays != _FULL[5]
        while True:
            found = _next_bit(self.months, month)
            if found is None:
                year, month, day, hour, minute, second = year + 1, 1, 1, 0, 0, 0
                continue
            if found != month:
                month, day, hour, minute, second = found, 1, 0, 0, 0
            first_day = _days_from_civil(year, month, 1)
            month_length = _days_from_civil(year + month // 12, month % 12 + 1, 1) - first_day
            while day <= month_length:
                in_days = self.days >> day & 1
                in_weekdays = self.weekdays >> (first_day + day + 3) % 7 & 1  # 1970-01-01 was a Thursday (4)
                if (in_days or in_weekdays) if either_day else (in_days and in_weekdays):
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
            return _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + found


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

    def next_fire_after(self, after_ms: int) -> int:
        return (after_ms // self.period_ms + 1) * self.period_ms


ScheduleExpression = CronSchedule | EverySchedule


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


def due_fire(schedule: ScheduleExpression, next_fire_at_ms: int, now_ms: int) -> DueFire | None:
    """The single fire due at ``now_ms`` for a schedule whose stored next fire time is given.

    None when that time is still ahead. Otherwise every slot from it up to ``now_ms`` fires once,
    as one fire; the returned ``next_fire_at_ms`` is the first slot strictly after ``now_ms``, so
    missed slots never fire as a burst.
    """
    if now_ms < next_fire_at_ms:
        return None
    coalesced = schedule.next_fire_after(next_fire_at_ms) <= now_ms
    return DueFire(next_fire_at_ms, schedule.next_fire_after(now_ms), coalesced)


def parse_schedule(text: str) -> ScheduleExpression:
    """Parse a cron expression, a macro or ``@every D``; refuse anything else, naming the field.

    Raises:
        InvalidCronExpressionError: with ``field`` (a field name, ``expression`` or ``@every``)
            and ``reason``; nothing is half-accepted.
    """
    if type(text) is not str:
        raise InvalidCronExpressionError(repr(text), "expression", f"must be a string, got {type(text).__name__}")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise InvalidCronExpressionError(text[:40] + "...", "expression", f"over {MAX_EXPRESSION_LENGTH} characters")
    if not text.isascii() or not text.replace("\t", " ").isprintable():
        raise InvalidCronExpressionError(text, "expression", "only printable ASCII, spaces and tabs are allowed")
    words = text.split()
    if words and words[0].startswith("@"):
        macro = words[0].lower()
        if macro == "@every":
            if len(words) != 2:
                raise InvalidCronExpressionError(text, "@every", "write one duration after @every, e.g. @every 5m")
            try:
                return EverySchedule(parse_duration_ms(words[1]))
            except InvalidDurationError as error:
                raise InvalidCronExpressionError(text, "@every", error.message) from error
        if macro not in _MACROS or len(words) != 1:
            known = ", ".join(sorted(_MACROS)) + ", @every D"
            raise InvalidCronExpressionError(text, "expression", f"unknown or misused macro {words[0]!r} ({known})")
        words = _MACROS[macro].split()
    if len(words) not in (5, 6):
        raise InvalidCronExpressionError(
            text, "expression",
            f"expected 5 fields (minute hour day-of-month month day-of-week) or 6 (second first), got {len(words)}"
            + (" (quote the whole expression, e.g. '*/5 * * * *': unquoted, the shell splits it and expands *)"
               if len(words) < 5 else ""),
        )
    if len(words) == 5:
        words.insert(0, "0")
    masks = [_parse_field(text, index, word) for index, word in enumerate(words)]
    try:
        return CronSchedule(*masks)
    except InvalidCronExpressionError as error:  # the same refusal, about the text the user wrote
        raise InvalidCronExpressionError(text, error.field, error.reason) from None


# --------------------------------------------------------------------------- field syntax


def _parse_field(text: str, index: int, word: str) -> int:
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
        kind = " or a name (" + ", ".join(names[:3]) + ", ...)" if names else ""
        unsupported = "; L, W and # are not supported" if any(mark in token.upper() for mark in "LW#") else ""
        raise refuse(f"{token!r} is not a number{kind}{unsupported}")

    if index in (3, 5) and word == "?":
        word = "*"
    mask = 0
    for item in word.split(","):
        if not item:
            raise refuse(f"empty item in list {word!r}")
        base, slash, step_text = item.partition("/")
        if base == "*":
            first, last = low, high
        else:
            start, dash, end = base.partition("-")
            first = value(start)
            last = value(end) if dash else high if slash else first
            if last < first:
                raise refuse(f"range {base!r} runs backwards (write two ranges)")
        step = 1
        if slash:
            span = high - low + 1
            if not step_text.isdigit() or not 1 <= int(step_text) <= span:
                raise refuse(f"step {step_text!r} in {item!r} must be a number from 1 to {span}")
            step = int(step_text)
        for number in range(first, last + 1, step):
            mask |= 1 << number
    if index == 5 and mask >> 7:  # day-of-week 7 is Sunday
        mask = (mask | 1) & _FULL[5]
    return mask


def _render(index: int, mask: int) -> str:
    """The canonical text of one field: ``*``, ``*/S``, ``A-B/S`` or a list of ``N`` and ``A-B``.

    Whatever it returns parses back to ``mask`` (dow ``*/S`` is only used where it means the same).
    """
    low, high = _FIELDS[index][1:3]
    if mask == _FULL[index]:
        return "*"
    values = [v for v in range(low, high + 1) if mask >> v & 1]
    if len(values) >= 3:
        step = values[1] - values[0]
        if step > 1 and all(b - a == step for a, b in zip(values, values[1:])):
            if values[0] == low and _parse_field("", index, f"*/{step}") == mask:
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


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (March-based years put 29 Feb last)."""
    year -= month <= 2
    era, year_of_era = divmod(year, 400)
    day_of_year = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    return era * 146_097 + year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year - 719_468


def _utc_offset(instant: int) -> int:
    """Seconds east of UTC that local time has at ``instant`` (seconds since the epoch)."""
    return time.localtime(instant).tm_gmtoff


# Offsets are sampled this far either side of a wall time: every instant showing that wall time
# lies within 25 h of it (POSIX offsets are at most 24:59:59), and no real rule changes the offset
# twice within 2.3 days.
_OFFSET_REACH = 100_000


def _instant_of(wall: int) -> tuple[int, int]:
    """The instant (s) at which local wall time ``wall`` fires, and the last wall second of its repeat.

    The instant is the first one at which the clock shows ``wall``, or, when the clock skips it,
    the first instant after the skip. The second value is ``wall`` itself unless ``wall`` falls
    in an autumn overlap; then it is the overlap's last wall second.
    """
    before, after = _utc_offset(wall - _OFFSET_REACH), _utc_offset(wall + _OFFSET_REACH)
    hits = sorted(wall - offset for offset in {before, after} if _utc_offset(wall - offset) == offset)
    if not hits:  # a gap: the clock jumps over wall; fire at the jump
        return _offset_change(wall - max(before, after), wall - min(before, after)), wall
    if len(hits) == 1:
        return hits[0], wall
    first_offset = wall - hits[0]
    return hits[0], _offset_change(hits[0], hits[1]) + first_offset - 1


def _offset_change(early: int, late: int) -> int:
    """The first instant in ``(early, late]`` whose UTC offset differs from ``early``'s (bisection)."""
    offset = _utc_offset(early)
    while late - early > 1:
        middle = (early + late) // 2
        if _utc_offset(middle) == offset:
            early = middle
        else:
            late = middle
    return late
