"""Value rules shared by every contract module.

msgspec ``Meta`` constraints only run while decoding, so each command and record re-checks its
fields in ``__post_init__`` with these helpers: a Struct built in Python is held to the same rules
as one decoded from JSON. The helpers raise ``ValueError`` subclasses of nothing; each contract
module converts the message into its own error type.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec

#: Largest integer that survives a round trip through a JSON number in every client (2**53 - 1).
MAX_SAFE_INTEGER = 9_007_199_254_740_991

#: Identifier texts: 1..N characters, none of them a C0 control character or DEL.
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
IDENTIFIER_PATTERN = r"^[^\x00-\x1f\x7f]+$"


def identifier_type(max_length: int) -> Any:
    """The msgspec annotation of an identifier of at most ``max_length`` characters."""
    return Annotated[str, msgspec.Meta(min_length=1, max_length=max_length, pattern=IDENTIFIER_PATTERN)]


def bounded_int_type(minimum: int, maximum: int) -> Any:
    """The msgspec annotation of an integer in ``[minimum, maximum]``."""
    return Annotated[int, msgspec.Meta(ge=minimum, le=maximum)]


SafeInt = bounded_int_type(0, MAX_SAFE_INTEGER)


def identifier_matcher(max_length: int) -> Any:
    """A compiled ``fullmatch`` that accepts exactly the ``str`` values :func:`identifier_problem` accepts.

    For hot paths: ``type(value) is str and match(value) is not None`` is one C-level call instead
    of a Python function; callers still use :func:`identifier_problem` to word a rejection.
    """
    return re.compile(rf"[^\x00-\x1f\x7f]{{1,{max_length}}}").fullmatch


def identifier_problem(name: str, value: object, max_length: int) -> str | None:
    """Return why ``value`` is not a valid identifier, or None when it is."""
    if type(value) is not str:
        return f"{name} must be a string, got {type(value).__name__}"
    if not value:
        return f"{name} must not be empty"
    if len(value) > max_length:
        return f"{name} must be at most {max_length} characters, got {len(value)}"
    if _CONTROL_CHARACTERS.search(value):
        return f"{name} must not contain control characters"
    return None


def int_problem(name: str, value: object, minimum: int, maximum: int) -> str | None:
    """Return why ``value`` is not an integer in ``[minimum, maximum]``, or None.

    ``bool`` is rejected although it subclasses ``int``: ``True`` is never a duration.
    """
    if type(value) is not int:
        return f"{name} must be an integer, got {type(value).__name__}"
    if value < minimum or value > maximum:
        return f"{name} must be between {minimum} and {maximum}, got {value}"
    return None


def first_problem(*problems: str | None) -> str | None:
    """The first non-None problem, so a post-init check reads as one expression."""
    for problem in problems:
        if problem is not None:
            return problem
    return None
