"""Time zones of schedules: the zone's text (one function, :func:`time_zone_text`), a POSIX ``TZ``
rule evaluator that needs no tz database, and IANA names where the system has zoneinfo.

Why a contract module: a schedule keeps its zone, and every layer and both profiles read it the
same way (the CLI refuses a bad zone before anything is written, the stores keep its text, the
service computes fire times in it). The POSIX rules are computed here, not by the C library: the
C library only knows the one ``TZ`` of the process, while each schedule has its own, and a router
has no tz database to look names up in. Nothing here does I/O except :func:`time_zone` for an IANA
name, which reads the system's zoneinfo through :mod:`zoneinfo` (the one outside input, as
``time.localtime`` is for :mod:`edge_runtime.contract.cron`).

Zone text (docs/schedules.md says the same for users):

- a POSIX ``TZ`` string ``std offset [dst [offset] [,start[/time],end[/time]]]``: ``CST-8``,
  ``CET-1CEST,M3.5.0,M10.5.0/3``, ``<+0530>-5:30``. Names are 3 or more letters, or ``<...>``
  quoted (letters, digits, ``+``, ``-``); offsets ``[+-]hh[:mm[:ss]]`` west of UTC (so ``-8`` is
  UTC+8); the DST offset defaults to one hour ahead of standard time; dates are ``Mm.w.d`` (day
  ``d`` of week ``w`` of month ``m``, ``w`` 5 = the last), ``Jn`` (1..365, 29 February never
  counted) or ``n`` (0..365, counted); times default to 02:00 and may be negative or up to 167
  hours (RFC 8536). A DST name without a rule uses the US rule ``M3.2.0,M11.1.0``, as glibc and
  musl do without a tz database.
- ``UTC`` and ``GMT`` alone mean ``UTC0`` and ``GMT0`` (they need no tz database).
- otherwise an IANA name (``Europe/Berlin``; a leading ``:`` as in ``TZ=:Europe/Berlin`` is
  dropped), accepted only where the system has zoneinfo for it.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Protocol

from edge_runtime.contract.errors import EdgeRuntimeError

#: Longest zone text accepted (the longest real POSIX strings are about 40 characters).
MAX_TIME_ZONE_LENGTH = 64

#: What to write instead, in every refusal.
_EXAMPLES = "write a POSIX TZ string such as CST-8 or CET-1CEST,M3.5.0,M10.5.0/3, or an IANA name such as Asia/Shanghai"

# Separators people paste around a value (chat, Chinese documents): stripped from both ends.
PASTED_BLANKS = " \t\r\n\u3000\u00a0\u202f"


class InvalidTimeZoneError(EdgeRuntimeError, code="INVALID_TIME_ZONE"):
    """A zone text is neither a POSIX TZ string nor an IANA name this system knows."""


class TimeZone(Protocol):
    """What the fire-time computation needs of a zone: its text and its UTC offset at an instant."""

    @property
    def text(self) -> str: ...

    def utc_offset(self, instant: int) -> int:
        """Seconds east of UTC that local time has at ``instant`` (whole seconds since the epoch)."""
        ...


class ProcessLocalTime:
    """The process's own local time, as the C library sees it (``time.localtime``, ``TZ``)."""

    __slots__ = ()
    text = "local"

    def utc_offset(self, instant: int) -> int:
        return time.localtime(instant).tm_gmtoff


class IanaTimeZone:
    """An IANA zone read from the system's zoneinfo."""

    __slots__ = ("text", "_zone")

    def __init__(self, name: str, zone: dt.tzinfo) -> None:
        self.text = name
        self._zone = zone

    def utc_offset(self, instant: int) -> int:
        moment = dt.datetime.fromtimestamp(instant, self._zone)
        return int(moment.utcoffset().total_seconds())  # type: ignore[union-attr]


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (March-based years put 29 Feb last)."""
    year -= month <= 2
    era, year_of_era = divmod(year, 400)
    day_of_year = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    return era * 146_097 + year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year - 719_468


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


class _Date:
    """One POSIX rule date: ``kind`` is ``M`` (month, week, weekday), ``J`` (Julian, no leap day)
    or ``D`` (zero-based day of the year); ``seconds`` is the local time of the change."""

    __slots__ = ("kind", "a", "b", "c", "seconds")

    def __init__(self, kind: str, a: int, b: int, c: int, seconds: int) -> None:
        self.kind, self.a, self.b, self.c, self.seconds = kind, a, b, c, seconds

    def day_of_year(self, year: int) -> int:
        """Zero-based day of ``year`` (counting 29 February) on which the change happens."""
        if self.kind == "J":
            return self.a - 1 + (_is_leap(year) and self.a >= 60)
        if self.kind == "D":
            return self.a
        month, week, weekday = self.a, self.b, self.c
        first = days_from_civil(year, month, 1)
        length = days_from_civil(year + month // 12, month % 12 + 1, 1) - first
        day = 1 + (weekday - (first + 4) % 7) % 7 + 7 * (week - 1)  # 1970-01-01 was a Thursday (4)
        while day > length:
            day -= 7
        return first + day - 1 - days_from_civil(year, 1, 1)


class PosixTimeZone:
    """A POSIX ``TZ`` rule, evaluated here (no tz database, no C library)."""

    __slots__ = ("text", "std_offset", "dst_offset", "start", "end", "_years")

    def __init__(self, text: str, std_offset: int, dst_offset: int | None, start: _Date | None, end: _Date | None):
        self.text = text
        self.std_offset = std_offset  # seconds east of UTC
        self.dst_offset = dst_offset
        self.start, self.end = start, end
        self._years: dict[int, tuple[int, int]] = {}

    def transitions(self, year: int) -> tuple[int, int]:
        """The instants DST starts and ends in ``year`` (only for a zone with DST)."""
        found = self._years.get(year)
        if found is None:
            base = days_from_civil(year, 1, 1) * 86400
            start = base + self.start.day_of_year(year) * 86400 + self.start.seconds - self.std_offset
            end = base + self.end.day_of_year(year) * 86400 + self.end.seconds - self.dst_offset
            if len(self._years) > 64:
                self._years.clear()
            found = self._years[year] = (start, end)
        return found

    def utc_offset(self, instant: int) -> int:
        if self.dst_offset is None:
            return self.std_offset
        year = time.gmtime(instant + self.std_offset).tm_year
        start, end = self.transitions(year)
        if start < end:
            in_dst = start <= instant < end
        else:  # southern hemisphere: DST spans the new year
            in_dst = not end <= instant < start
        return self.dst_offset if in_dst else self.std_offset

    def first_change(self, after: int, until: int) -> int | None:
        """The first instant in ``(after, until]`` whose UTC offset differs from ``after``'s, or None.

        Exact and cheap (a few offsets per year, whatever the span): the offset can only change
        at a year's two transitions and where :meth:`utc_offset` moves on to the next year's rule
        (standard time's new year), so only those instants are read. A fire-time search over
        centuries (:data:`edge_runtime.contract.cron.SEARCH_YEARS`) thus costs hundreds of reads,
        not one a day, and a rule that changes twice within a day is not missed.
        """
        if self.dst_offset is None:
            return None
        offset = self.utc_offset(after)
        year = time.gmtime(after + self.std_offset).tm_year
        while True:
            year_start = days_from_civil(year, 1, 1) * 86400 - self.std_offset
            next_year = days_from_civil(year + 1, 1, 1) * 86400 - self.std_offset
            changes = sorted(t for t in self.transitions(year) if year_start < t < next_year)
            for candidate in (*changes, next_year):
                if candidate > until:
                    return None
                if candidate > after and self.utc_offset(candidate) != offset:
                    return candidate
            year += 1


_NAME = r"(?:[A-Za-z]{3,}|<[A-Za-z0-9+-]{3,}>)"
_OFFSET = r"[+-]?\d{1,2}(?::\d{1,2}(?::\d{1,2})?)?"
_TIME = r"[+-]?\d{1,3}(?::\d{1,2}(?::\d{1,2})?)?"
_DATE = r"(?:M\d{1,2}\.\d\.\d|J\d{1,3}|\d{1,3})"
_POSIX = re.compile(
    rf"(?P<std>{_NAME})(?P<std_off>{_OFFSET})"
    rf"(?:(?P<dst>{_NAME})(?P<dst_off>{_OFFSET})?"
    rf"(?:,(?P<start>{_DATE})(?:/(?P<start_time>{_TIME}))?,(?P<end>{_DATE})(?:/(?P<end_time>{_TIME}))?)?)?"
)
_IANA = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")
#: A DST name with no rule: the US rule, as glibc and musl use without a tz database.
_DEFAULT_RULE = ("M3.2.0", None, "M11.1.0", None)


def _seconds(text: str, limit_hours: int, what: str, zone: str) -> int:
    sign = -1 if text.startswith("-") else 1
    parts = [int(p) for p in text.lstrip("+-").split(":")]
    hours, minutes, seconds = (parts + [0, 0])[:3]
    if hours > limit_hours or minutes > 59 or seconds > 59:
        raise InvalidTimeZoneError(f"invalid time zone {zone!r}: {what} {text!r} is out of range; {_EXAMPLES}")
    return sign * (hours * 3600 + minutes * 60 + seconds)


def _date(text: str, time_text: str | None, zone: str) -> _Date:
    seconds = 7200 if time_text is None else _seconds(time_text, 167, "rule time", zone)

    def refuse(reason: str) -> InvalidTimeZoneError:
        return InvalidTimeZoneError(f"invalid time zone {zone!r}: rule date {text!r}: {reason}; {_EXAMPLES}")

    if text.startswith("M"):
        month, week, weekday = (int(p) for p in text[1:].split("."))
        if not (1 <= month <= 12 and 1 <= week <= 5 and 0 <= weekday <= 6):
            raise refuse("Mm.w.d needs month 1-12, week 1-5, weekday 0-6")
        return _Date("M", month, week, weekday, seconds)
    if text.startswith("J"):
        if not 1 <= int(text[1:]) <= 365:
            raise refuse("Jn needs n from 1 to 365")
        return _Date("J", int(text[1:]), 0, 0, seconds)
    if not 0 <= int(text) <= 365:
        raise refuse("n needs n from 0 to 365")
    return _Date("D", int(text), 0, 0, seconds)


def parse_posix_time_zone(text: str) -> PosixTimeZone | None:
    """The POSIX rule ``text`` spells, or None when it is not POSIX syntax at all.

    Raises:
        InvalidTimeZoneError: POSIX syntax with a value out of range.
    """
    match = _POSIX.fullmatch(text)
    if match is None:
        return None
    std = -_seconds(match["std_off"], 24, "offset", text)
    if match["dst"] is None:
        return PosixTimeZone(text, std, None, None, None)
    dst = std + 3600 if match["dst_off"] is None else -_seconds(match["dst_off"], 24, "DST offset", text)
    rule = (match["start"], match["start_time"], match["end"], match["end_time"])
    if rule[0] is None:
        rule = _DEFAULT_RULE
    return PosixTimeZone(text, std, dst, _date(rule[0], rule[1], text), _date(rule[2], rule[3], text))


def time_zone_text(text: object) -> str:
    """The normalised text of a zone, as stored with a schedule; refuses what no rule could read.

    Surrounding blanks (spaces, tabs, a trailing newline, full-width and no-break spaces) are
    dropped; ``UTC``/``GMT`` become ``UTC0``/``GMT0``; a POSIX string is kept as written; an IANA
    name loses a leading ``:``. Whether an IANA name exists on this system is :func:`time_zone`'s
    question, not this one's (a cluster may store a name its own hosts know).

    Raises:
        InvalidTimeZoneError: with what to write instead.
    """
    if type(text) is not str:
        raise InvalidTimeZoneError(f"a time zone must be a string, got {type(text).__name__}")
    zone = text.strip(PASTED_BLANKS)
    if not zone:
        raise InvalidTimeZoneError(f"the time zone is empty; {_EXAMPLES}")
    if len(zone) > MAX_TIME_ZONE_LENGTH:
        raise InvalidTimeZoneError(f"the time zone is over {MAX_TIME_ZONE_LENGTH} characters; {_EXAMPLES}")
    if zone in ("UTC", "GMT"):
        return zone + "0"
    if parse_posix_time_zone(zone) is not None:
        return zone
    name = zone[1:] if zone.startswith(":") else zone
    if _IANA.fullmatch(name) and not any(part.startswith((".", "-")) for part in name.split("/")):
        return name
    raise InvalidTimeZoneError(f"invalid time zone {zone!r}: not a POSIX TZ string or an IANA name; {_EXAMPLES}")


def time_zone(text: str) -> TimeZone:
    """The zone that ``text`` names, ready to compute offsets (``text`` as :func:`time_zone_text` reads it).

    Raises:
        InvalidTimeZoneError: a bad text, or an IANA name this system has no zoneinfo for.
    """
    zone = time_zone_text(text)
    posix = parse_posix_time_zone(zone)
    if posix is not None:
        return posix
    import zoneinfo

    try:
        return IanaTimeZone(zone, zoneinfo.ZoneInfo(zone))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidTimeZoneError(
            f"unknown time zone {zone!r}: this system has no zoneinfo for it (routers usually have none); "
            f"write the zone's POSIX TZ string instead, such as CST-8 for Asia/Shanghai or "
            f"CET-1CEST,M3.5.0,M10.5.0/3 for Europe/Berlin"
        ) from None
