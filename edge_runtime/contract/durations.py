"""The one duration syntax of the runtime: ``90s``, ``5m``, ``2h``, ``1d``, or combined ``1h30m``.

Every duration a user types (a Run's ``--timeout``, a schedule's ``--timeout``, ``@every D`` in a
schedule expression) goes through :func:`parse_duration_ms`, so the shape and the limits are
written once, here. The shape is exact: whole numbers, each followed by one of the lowercase units
``d h m s``, units in that order and each at most once, no spaces, no sign, no zero part; anything
else is refused with the reason. :func:`format_duration` writes the canonical form (largest units
first, ``90s`` becomes ``1m30s``), which parses back to the same value.
"""

from __future__ import annotations

import re

from edge_runtime.contract.errors import EdgeRuntimeError

#: Shortest and longest duration accepted anywhere: one second, and 365 days (longer is a typo,
#: and keeps every deadline far inside the JSON-safe millisecond range).
MIN_DURATION_MS = 1_000
MAX_DURATION_MS = 365 * 86_400_000
#: Longer texts are refused before any parsing work (``365d23h59m59s`` is 13 characters).
MAX_DURATION_TEXT_LENGTH = 32

_UNIT_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000}
_SHAPE = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_EXAMPLES = "write it like 90s, 5m, 2h, 1d or 1h30m"


class InvalidDurationError(EdgeRuntimeError, code="INVALID_DURATION"):
    """A duration text is malformed or out of range: fix the input."""


def parse_duration_ms(text: str) -> int:
    """The duration ``text`` in milliseconds, or :class:`InvalidDurationError` naming why not."""
    if type(text) is not str:
        raise InvalidDurationError(f"a duration must be a string, got {type(text).__name__}")
    if len(text) > MAX_DURATION_TEXT_LENGTH:
        raise InvalidDurationError(f"duration is longer than {MAX_DURATION_TEXT_LENGTH} characters")
    match = _SHAPE.fullmatch(text) if text.isascii() else None
    if not text or match is None:
        raise InvalidDurationError(
            f"duration {text!r} is not valid: {_EXAMPLES} (whole numbers, units d h m s in that order)"
        )
    total = sum(int(part) * _UNIT_MS[unit] for unit, part in zip("dhms", match.groups()) if part is not None)
    for unit, part in zip("dhms", match.groups()):
        if part is None or part[0] != "0" or not total:
            continue  # a duration of zero in all is refused below, as out of range
        if part.strip("0"):
            raise InvalidDurationError(f"duration {text!r} is not valid: {part}{unit} (write it without a leading zero)")
        raise InvalidDurationError(f"duration {text!r} is not valid: {part}{unit} (leave a zero part out)")
    if not MIN_DURATION_MS <= total <= MAX_DURATION_MS:
        raise InvalidDurationError(
            f"duration {text!r} is out of range: it must be between {format_duration(MIN_DURATION_MS)} "
            f"and {format_duration(MAX_DURATION_MS)}"
        )
    return total


def format_duration(ms: int) -> str:
    """The canonical text of a whole-second duration of at least one second (``5400000`` -> ``1h30m``)."""
    if type(ms) is not int or ms < MIN_DURATION_MS or ms % 1000:
        raise ValueError(f"not a whole-second duration of at least 1s: {ms!r}")
    parts = []
    for unit, size in _UNIT_MS.items():
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
