"""Identifiers the runtime generates for Runs, Attempts and events: time-ordered UUIDs.

A UUID of version 7 (RFC 9562): 48 bits of Unix milliseconds, then 74 random bits, in the usual
36-character text form. Ordered by creation, new keys land at the right end of every index that
starts with them (the Run's events, Attempts and leases are all indexed by ``run_id``), so a commit
touches fewer index pages, a checkpoint rewrites the same few pages instead of one per row, and
index pages fill up instead of splitting at random (the rule of fewer, smaller flash writes). The time
part is only a locality hint: a wall clock at 1970 or one that steps back merely puts ids out of
order. Uniqueness comes from the random bits, which also keep ids unguessable enough; they were
never secrets (lease tokens are).
"""

from __future__ import annotations

import os
import re
import time
import uuid

_MS_MASK = (1 << 48) - 1
_RANDOM_MASK = (1 << 80) - 1
_VERSION_7 = 0x7 << 76
_VERSION_BITS = 0xF << 76
_VARIANT_RFC = 0x2 << 62
_VARIANT_BITS = 0x3 << 62


def new_id() -> str:
    """A new version-7 UUID as 36 characters of lowercase hex and dashes."""
    value = (time.time_ns() // 1_000_000 & _MS_MASK) << 80 | int.from_bytes(os.urandom(10), "big") & _RANDOM_MASK
    value = value & ~_VERSION_BITS | _VERSION_7
    value = value & ~_VARIANT_BITS | _VARIANT_RFC
    return str(uuid.UUID(int=value))


#: The names the service gives Attempt logs: ``<attempt id>.log`` (an id is a UUID in its lowercase
#: text form), or ``<32 hex>.log`` for an id that is not a plain file name (hashed). Retention
#: removes nothing else from the log directory, which may be shared with other programs (``/var/log``).
_ATTEMPT_LOG_NAME = re.compile(r"(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})\.log")


def is_attempt_log_name(name: str) -> bool:
    """Whether ``name`` is named as the service names an Attempt's log file."""
    return _ATTEMPT_LOG_NAME.fullmatch(name) is not None
