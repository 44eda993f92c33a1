"""Time zones: the contract's POSIX TZ evaluator against the C library, the zone text, IANA names,
and the device's zone read as OpenWrt sets it (``$TZ``, ``/etc/TZ``, ``/etc/localtime``).

The C library is the reference for POSIX rules: a child process with ``TZ`` set prints
``localtime``'s offset for every instant asked (the same rule the device's libc would apply),
over 2024..2031, every 5 hours plus a second either side of each change the evaluator finds.
"""

from __future__ import annotations

import calendar
import os
import struct
import subprocess
import sys
import zoneinfo
from pathlib import Path

import pytest

from edge_runtime.contract.time_zones import (
    InvalidTimeZoneError,
    PosixTimeZone,
    parse_posix_time_zone,
    time_zone,
    time_zone_text,
)
from edge_runtime.contract.device import device_time_zone, read_boot_id

RULES = [
    "UTC0",
    "CST-8",
    "<+0530>-5:30",
    "CET-1CEST,M3.5.0,M10.5.0/3",
    "EST5EDT,M3.2.0,M11.1.0",
    "EST5EDT",  # no rule: the US rule
    "NZST-12NZDT,M9.5.0,M4.1.0/3",
    "AEST-10AEDT,M10.1.0,M4.1.0/3",
    "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0",
    "IST-1GMT0,M10.5.0,M3.5.0/1",  # Ireland: "DST" is winter
    "<-02>2<-01>,M3.5.0/-1,M10.5.0/0",  # Greenland: negative change times
    "<+00>0<+02>-2,M3.5.0/1,M10.5.0/3",  # Troll: a two-hour shift
    "EST5EDT,J60/2,J300/2",
    "EST5EDT,59/2,299/2",
    "<-03>3<-02>,M10.1.0/0,M2.3.0/0",  # southern, changes at midnight
    "HST10HDT,M3.2.0/26,M11.1.0/1",  # a change time past 24 h
]

_PROBE = (
    "import sys, time\n"
    "for line in sys.stdin:\n"
    "    print(time.localtime(int(line)).tm_gmtoff)\n"
)


def libc_offsets(rule: str, instants: list[int]) -> list[int]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TZ": rule}
    out = subprocess.run([sys.executable, "-c", _PROBE], input="\n".join(map(str, instants)) + "\n",
                         env=env, capture_output=True, text=True, check=True).stdout
    return [int(v) for v in out.split()]


def probe_instants(zone: PosixTimeZone) -> list[int]:
    start, end = calendar.timegm((2024, 1, 1, 0, 0, 0)), calendar.timegm((2032, 1, 1, 0, 0, 0))
    instants = list(range(start, end, 5 * 3600 + 17))
    if zone.dst_offset is not None:
        for year in range(2024, 2032):
            for change in zone.transitions(year):
                instants += [change - 1, change, change + 1]
    return instants


@pytest.mark.parametrize("rule", RULES)
def test_posix_rules_match_the_c_library_over_eight_years(rule: str) -> None:
    zone = parse_posix_time_zone(rule)
    assert zone is not None
    instants = probe_instants(zone)
    expected = libc_offsets(rule, instants)
    mismatches = [(t, zone.utc_offset(t), want) for t, want in zip(instants, expected) if zone.utc_offset(t) != want]
    assert not mismatches[:5], mismatches[:5]
    if zone.dst_offset is not None:  # the probe did see both offsets
        assert {zone.std_offset, zone.dst_offset} <= set(expected)


def offset_changes(zone: PosixTimeZone, start: int, end: int) -> list[int]:
    """Every instant in ``(start, end]`` whose offset differs from the second before: the offsets
    read a minute apart, each difference narrowed to its second (no rule here changes twice a minute)."""
    changes, early, offset = [], start, zone.utc_offset(start)
    while early < end:
        late = min(early + 60, end)
        if zone.utc_offset(late) != offset:
            low, high = early, late
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if zone.utc_offset(middle) == offset else (low, middle)
            changes.append(high)
            offset = zone.utc_offset(high)
        early = late
    return changes


@pytest.mark.parametrize("rule", [
    *RULES,
    "AAA-12BBB12,J1,J100/0",  # a change of 24 hours
    "AAA-1BBB,J100/0,J100/12",  # DST for twelve hours: two changes within a day
    "AAA3BBB,J365/150,J2/0",  # a change time past the year's end, into the next one
])
def test_first_change_finds_every_change_the_offsets_show(rule: str) -> None:
    zone = parse_posix_time_zone(rule)
    assert zone is not None
    if zone.dst_offset is None:
        assert zone.first_change(0, 2**40) is None
        return
    for year in (2026, 2027, 2028):
        for change in zone.transitions(year):
            start, end = change - 2 * 86_400, change + 2 * 86_400
            found, after = [], start
            while (change_at := zone.first_change(after, end)) is not None:
                found.append(change_at)
                after = change_at
            assert found == offset_changes(zone, start, end)


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("CST-8", "CST-8"),
        ("  CET-1CEST,M3.5.0,M10.5.0/3\n", "CET-1CEST,M3.5.0,M10.5.0/3"),
        ("\u3000CST-8\u00a0", "CST-8"),
        ("UTC", "UTC0"),
        ("GMT", "GMT0"),
        ("Europe/Berlin", "Europe/Berlin"),
        (":Asia/Shanghai", "Asia/Shanghai"),
        ("America/Argentina/Buenos_Aires", "America/Argentina/Buenos_Aires"),
        ("Etc/GMT+8", "Etc/GMT+8"),
    ],
)
def test_the_zone_text_is_normalised(text: str, normalised: str) -> None:
    assert time_zone_text(text) == normalised


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("CST-25", "out of range"),
        ("CET-1CEST,M13.5.0,M10.5.0/3", "month 1-12"),
        ("CET-1CEST,M3.6.0,M10.5.0/3", "week 1-5"),
        ("EST5EDT,J0,J300", "from 1 to 365"),
        ("EST5EDT,366,300", "from 0 to 365"),
        ("EST5EDT,M3.2.0/168,M11.1.0", "out of range"),
        ("../../etc/passwd", "not a POSIX TZ string"),
        ("/etc/localtime", "not a POSIX TZ string"),
        ("Europe/../Berlin", "not a POSIX TZ string"),
        ("CST -8", "not a POSIX TZ string"),
        ("A" * 65, "over 64"),
    ],
)
def test_a_bad_zone_is_refused_with_what_to_write(text: str, reason: str) -> None:
    with pytest.raises(InvalidTimeZoneError) as caught:
        time_zone_text(text)
    assert reason in caught.value.message
    assert "CST-8" in caught.value.message  # says what to write instead
    assert caught.value.code == "INVALID_TIME_ZONE" and not caught.value.retryable


def test_an_iana_name_without_zoneinfo_is_refused_naming_the_posix_form() -> None:
    with pytest.raises(InvalidTimeZoneError) as caught:
        time_zone("Mars/Olympus_Mons")
    assert "no zoneinfo" in caught.value.message and "CST-8" in caught.value.message


def _has_zoneinfo(name: str) -> bool:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


@pytest.mark.skipif(not _has_zoneinfo("Europe/Berlin"), reason="this system has no zoneinfo for Europe/Berlin")
def test_an_iana_name_agrees_with_its_posix_rule_where_zoneinfo_exists() -> None:
    iana, posix = time_zone("Europe/Berlin"), time_zone("CET-1CEST,M3.5.0,M10.5.0/3")
    for instant in range(calendar.timegm((2025, 1, 1, 0, 0, 0)), calendar.timegm((2028, 1, 1, 0, 0, 0)), 3 * 3607):
        assert iana.utc_offset(instant) == posix.utc_offset(instant)
    assert iana.text == "Europe/Berlin"


# --------------------------------------------------------------------------- the device's zone


def _tzif(footer: str) -> bytes:
    """A version-2 TZif file with no transitions and ``footer`` as its rule (RFC 8536)."""
    header = b"TZif2" + bytes(15) + struct.pack(">6l", 0, 0, 0, 0, 1, 4)
    block = header + struct.pack(">lbB", 0, 0, 0) + b"UTC\0"
    return block + block + b"\n" + footer.encode() + b"\n"


def test_tz_comes_first(tmp_path: Path) -> None:
    (tmp_path / "TZ").write_text("UTC0\n")
    assert device_time_zone({"TZ": "CST-8"}, tmp_path) == "CST-8"


def test_then_etc_tz_as_openwrt_writes_it(tmp_path: Path) -> None:
    (tmp_path / "TZ").write_text("CET-1CEST,M3.5.0,M10.5.0/3\n")
    (tmp_path / "localtime").write_bytes(_tzif("CST-8"))
    assert device_time_zone({}, tmp_path) == "CET-1CEST,M3.5.0,M10.5.0/3"
    assert device_time_zone({"TZ": ""}, tmp_path) == "CET-1CEST,M3.5.0,M10.5.0/3"


def test_then_etc_localtime_by_its_rule(tmp_path: Path) -> None:
    (tmp_path / "localtime").write_bytes(_tzif("<+0545>-5:45"))
    assert device_time_zone({}, tmp_path) == "<+0545>-5:45"


@pytest.mark.skipif(not _has_zoneinfo("Asia/Shanghai"), reason="this system has no zoneinfo for Asia/Shanghai")
def test_a_localtime_symlink_into_zoneinfo_names_its_zone(tmp_path: Path) -> None:
    (tmp_path / "localtime").symlink_to("/usr/share/zoneinfo/Asia/Shanghai")
    assert device_time_zone({}, tmp_path) == "Asia/Shanghai"


def test_with_none_of_them_the_zone_is_utc(tmp_path: Path) -> None:
    assert device_time_zone({}, tmp_path) == "UTC0"
    (tmp_path / "localtime").write_bytes(b"not a tzif file")
    assert device_time_zone({}, tmp_path) == "UTC0"


def test_a_bad_tz_or_etc_tz_is_an_error_naming_its_source(tmp_path: Path) -> None:
    with pytest.raises(InvalidTimeZoneError, match=r"^\$TZ: "):
        device_time_zone({"TZ": "not a zone"}, tmp_path)
    (tmp_path / "TZ").write_text("CST-99\n")
    with pytest.raises(InvalidTimeZoneError, match="/TZ: "):
        device_time_zone({}, tmp_path)


def test_the_boot_id_is_read_from_the_kernel_file(tmp_path: Path) -> None:
    (tmp_path / "boot_id").write_text("6f1c8a6e-0c1b-4b8e-9a53-2a3d0b1f7c11\n")
    assert read_boot_id(tmp_path / "boot_id") == "6f1c8a6e-0c1b-4b8e-9a53-2a3d0b1f7c11"
    assert read_boot_id(tmp_path / "absent") is None
    (tmp_path / "empty").write_text("")
    assert read_boot_id(tmp_path / "empty") is None
