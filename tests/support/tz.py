"""Time-zone helpers for the schedule tests: set a POSIX ``TZ`` for the C library, and an
independent reading of the same rule through :mod:`zoneinfo`.

The device has no tz database, only a POSIX ``TZ`` string that the C library interprets. The
oracle here reads the same string with Python's own ``zoneinfo`` (a TZif file with no
transitions and the string as its footer: RFC 8536 says the footer then rules every instant),
so the tests compare the runtime against a second, unrelated implementation of the rule.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import struct
import time
import zoneinfo
from collections.abc import Iterator
from contextlib import contextmanager

#: Rules the tests run under: no DST, both hemispheres' DST, a 30-minute DST shift, a half-hour zone.
POSIX_ZONES = (
    "UTC0",
    "CST-8",
    "CET-1CEST,M3.5.0,M10.5.0/3",
    "EST5EDT,M3.2.0,M11.1.0",
    "NZST-12NZDT,M9.5.0,M4.1.0/3",
    "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0",
    "<+0530>-5:30",
)
DST_ZONES = tuple(zone for zone in POSIX_ZONES if "," in zone)


@contextmanager
def posix_tz(rule: str) -> Iterator[None]:
    """Run the block with ``TZ=rule`` in force for ``time.localtime`` (restored afterwards)."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = rule
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


def zone_of(rule: str) -> zoneinfo.ZoneInfo:
    """``zoneinfo``'s reading of a POSIX TZ rule (version-2 TZif: no transitions, the rule as footer)."""
    header = b"TZif2" + bytes(15) + struct.pack(">6l", 0, 0, 0, 0, 1, 4)
    block = header + struct.pack(">lbB", 0, 0, 0) + b"UTC\0"
    return zoneinfo.ZoneInfo.from_file(io.BytesIO(block + block + b"\n" + rule.encode() + b"\n"), key=rule)


def wall_of(instant: int, zone: zoneinfo.ZoneInfo) -> dt.datetime:
    """The naive local wall time the clock shows at ``instant`` (seconds since the epoch)."""
    return dt.datetime.fromtimestamp(instant, zone).replace(tzinfo=None)


def instants_showing(wall: dt.datetime, zone: zoneinfo.ZoneInfo) -> list[int]:
    """Every instant at which the clock shows ``wall``: none in a gap, two in an overlap."""
    candidates = {int(wall.replace(tzinfo=zone, fold=fold).timestamp()) for fold in (0, 1)}
    return sorted(c for c in candidates if wall_of(c, zone) == wall)


def first_instant_showing(wall: dt.datetime, zone: zoneinfo.ZoneInfo) -> int:
    """The fire instant of a wall-clock slot: the first instant the clock shows it, or, for a wall
    time the clock skips, the first instant at which the clock shows a later time."""
    candidates = [wall.replace(tzinfo=zone, fold=fold) for fold in (0, 1)]
    real = [int(c.timestamp()) for c in candidates if wall_of(int(c.timestamp()), zone) == wall]
    if real:
        return min(real)
    early, late = sorted(int(c.timestamp()) for c in candidates)
    while late - early > 1:  # wall_of(early) < wall < wall_of(late) across the skip
        middle = (early + late) // 2
        if wall_of(middle, zone) > wall:
            late = middle
        else:
            early = middle
    return late


def transitions(zone: zoneinfo.ZoneInfo, first_year: int, last_year: int) -> list[int]:
    """The instants (s) at which ``zone``'s offset changes between the two years (hourly scan + bisection)."""
    found = []
    start = int(dt.datetime(first_year, 1, 1, tzinfo=dt.UTC).timestamp())
    end = int(dt.datetime(last_year + 1, 1, 1, tzinfo=dt.UTC).timestamp())

    def offset(instant: int) -> dt.timedelta | None:
        return dt.datetime.fromtimestamp(instant, zone).utcoffset()

    for hour_start in range(start, end, 3600):
        if offset(hour_start) != offset(hour_start + 3600):
            early, late = hour_start, hour_start + 3600
            while late - early > 1:
                middle = (early + late) // 2
                early, late = (middle, late) if offset(middle) == offset(early) else (early, middle)
            found.append(late)
    return found
