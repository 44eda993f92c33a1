"""Facts of the device (or the host) a store is used on: its time zone and the id of its current boot.

Both the CLI (``schedule add`` stores the zone with a new schedule) and ``serve`` (a schedule stored
before zones were kept fires in the device's zone; ``@reboot`` fires once per boot id) read them
here, the same way, so the two never disagree about what "local time" is.

The zone is read the way OpenWrt sets it: ``$TZ``, else the first line of ``/etc/TZ`` (a POSIX
string such as ``CST-8`` or ``CET-1CEST,M3.5.0,M10.5.0/3``, written by the system config), else
``/etc/localtime`` (a symlink into zoneinfo names its IANA zone; otherwise the TZif file's footer
is its POSIX rule), else UTC. Each text goes through the contract's one zone function.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from edge_runtime.contract.time_zones import InvalidTimeZoneError, time_zone, time_zone_text

ETC = Path("/etc")
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
#: The most read of any of these files: a zone line or a TZif footer is short; a bigger file is not one.
_READ_LIMIT = 64 * 1024


def _read(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(_READ_LIMIT)
    except OSError:  # absent or unreadable: the next source decides
        return None


def _tzif_footer(data: bytes) -> str | None:
    """The POSIX rule at the end of a version 2+ TZif file (RFC 8536), or None."""
    if not data.startswith(b"TZif") or data[4:5] not in (b"2", b"3", b"4") or not data.endswith(b"\n"):
        return None
    footer = data[:-1].rpartition(b"\n")[2]
    try:
        return time_zone_text(footer.decode("ascii")) if footer else None
    except (UnicodeDecodeError, InvalidTimeZoneError):
        return None


def _localtime_zone(path: Path) -> str | None:
    try:
        target = os.readlink(path)
    except OSError:
        target = ""
    name = target.partition("zoneinfo/")[2]
    if name:
        try:
            return time_zone(name).text
        except InvalidTimeZoneError:
            pass  # a name this system cannot load: the file's own rule still says when
    data = _read(path)
    return None if data is None else _tzif_footer(data)


def device_time_zone(environ: Mapping[str, str] | None = None, etc: Path = ETC) -> str:
    """The device's zone text (normalised), read as OpenWrt sets it.

    Raises:
        InvalidTimeZoneError: ``$TZ`` or ``/etc/TZ`` holds something that is no zone (saying which).
    """
    environ = os.environ if environ is None else environ
    tz = environ.get("TZ", "")
    if tz.strip():
        if tz.startswith((":/", "/")):  # glibc's TZ=:/path/to/tzif
            found = _localtime_zone(Path(tz.lstrip(":")))
            if found is not None:
                return found
        try:
            return time_zone_text(tz)
        except InvalidTimeZoneError as error:
            raise InvalidTimeZoneError(f"$TZ: {error.message}") from None
    line = _read(etc / "TZ")
    if line is not None and line.strip():
        try:
            return time_zone_text(line.decode("utf-8", "replace").splitlines()[0])
        except InvalidTimeZoneError as error:
            raise InvalidTimeZoneError(f"{etc / 'TZ'}: {error.message}") from None
    return _localtime_zone(etc / "localtime") or "UTC0"


def read_boot_id(path: Path = BOOT_ID_PATH) -> str | None:
    """The kernel's id of the current boot (a new one at every boot), or None where there is none."""
    data = _read(path)
    if data is None:
        return None
    boot_id = data.decode("ascii", "replace").strip()
    return boot_id if 0 < len(boot_id) <= 64 and boot_id.isprintable() else None
