"""Value rules shared by every contract module, and its JSON wire helpers.

Each field limit is declared once, as msgspec ``Meta`` on the field's type (``identifier_type``,
``bounded_int_type``). msgspec enforces it while decoding; a Struct built in Python is held to the
same rules by :func:`fields_problem`, which derives its checks from those same annotations (and
words the rejection). Hand checks in ``__post_init__`` are left for cross-field rules only. The
helpers return a message; each contract module raises it as its own error type.
"""

from __future__ import annotations

import enum
import hashlib
import operator
import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

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

# Limits and identifier types every contract shares (declared here once).
MAX_VERSION = 2_147_483_647
RUN_ID_MAX_LENGTH = 36
ATTEMPT_ID_MAX_LENGTH = 36
EVENT_ID_MAX_LENGTH = 36
LEASE_TOKEN_MAX_LENGTH = 128

RunId = identifier_type(RUN_ID_MAX_LENGTH)
AttemptId = identifier_type(ATTEMPT_ID_MAX_LENGTH)
EventId = identifier_type(EVENT_ID_MAX_LENGTH)
LeaseToken = identifier_type(LEASE_TOKEN_MAX_LENGTH)
Version = bounded_int_type(0, MAX_VERSION)
#: A version or generation of a row written at least once (both start at 1): what a
#: compare-and-set expects and what a fence names.
PositiveCounter = bounded_int_type(1, MAX_VERSION)


def _plain_ascii(text: str) -> bool:
    """Whether ``text`` is printable ASCII (no control character), without the regex: what nearly
    every identifier is, so the checks on a hot path (every lease written) stay cheap."""
    return text.isascii() and text.isprintable()


def identifier_problem(name: str, value: object, max_length: int) -> str | None:
    """Return why ``value`` is not a valid identifier, or None when it is."""
    if type(value) is not str:
        return f"{name} must be a string, got {type(value).__name__}"
    if not value:
        return f"{name} must not be empty"
    if len(value) > max_length:
        return f"{name} must be at most {max_length} characters, got {len(value)}"
    if not _plain_ascii(value) and _CONTROL_CHARACTERS.search(value):
        return f"{name} must not contain control characters"
    return None


def lease_token_problem(token: object) -> str | None:
    """Why ``token`` is not a valid bearer lease token, or None. Never echoes the token."""
    return identifier_problem("lease_token", token, LEASE_TOKEN_MAX_LENGTH)


_match_digest = re.compile(r"[0-9a-f]{64}").fullmatch


def is_digest(value: object) -> bool:
    """Whether ``value`` has the shape of a SHA-256 digest (64 lowercase hex characters)."""
    return type(value) is str and _match_digest(value) is not None


def token_digester(domain: bytes, error: type[Exception]) -> Callable[[str], str]:
    """``digest(token)``: SHA-256 of ``domain`` and the UTF-8 token, as 64 lowercase hex. The
    domain separates the lease kinds: one kind's digest never equals another's. A token that is
    not a valid lease token raises ``error`` (whose message never echoes the token)."""

    def digest(token: str) -> str:
        problem = lease_token_problem(token)
        if problem is not None:
            raise error(problem)
        return hashlib.sha256(domain + token.encode("utf-8")).hexdigest()

    return digest


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


# --------------------------------------------------------------------------- checks derived from Meta

#: A derived field check: ``check(struct, value)`` -> a problem or None.
_Check = Callable[[Any, Any], "str | None"]
_CHECKS: dict[tuple[type, bool], tuple[Callable[[Any], Any], tuple[tuple[str, int, int, int, _Check], ...]]] = {}


def _check_of(name: str, hint: Any) -> _Check | None:
    """How to check one field, from its annotation; None when only its type is declared."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *extras = typing.get_args(hint)
        meta = next((m for m in extras if isinstance(m, msgspec.Meta)), None)
        if meta is not None and base is str and meta.pattern == IDENTIFIER_PATTERN:
            limit = meta.max_length
            return lambda obj, v: identifier_problem(name, v, limit)
        if meta is not None and base is int and meta.ge is not None and meta.le is not None:
            low, high = meta.ge, meta.le
            return lambda obj, v: int_problem(name, v, low, high)
        return None
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        inner = [a for a in args if a not in (msgspec.UnsetType, type(None))]
        check = _check_of(name, inner[0]) if len(inner) == 1 else None
        if check is None:
            return None
        unset_ok, none_ok = msgspec.UnsetType in args, type(None) in args
        return lambda obj, v: None if (v is msgspec.UNSET and unset_ok) or (v is None and none_ok) else check(obj, v)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        kind = hint

        def check_enum(obj: Any, value: Any) -> str | None:
            if isinstance(value, kind):
                return None
            try:  # Python callers may pass the plain value; the frozen struct keeps the member
                msgspec.structs.force_setattr(obj, name, kind(value))
            except ValueError:
                return f"{name} must be one of {[m.value for m in kind]}"
            return None

        return check_enum
    return None


def fields_problem(obj: msgspec.Struct, *, enums: bool = True) -> str | None:
    """Why a field of ``obj`` breaks its declared limit (identifier, integer range, enum), or None.

    Checks fields in declaration order; an enum field given as its plain value is converted
    (commands built in Python). ``enums=False`` leaves enum fields to the caller (a record,
    which must hold the members themselves).
    """
    found = field_problem(obj, enums=enums)
    return None if found is None else found[1]


_IDENTIFIER, _INT = 1, 2


def _valid_shape(hint: Any) -> tuple[int, int, int]:
    """``(kind, a, b)``: a field whose valid values :func:`field_problem` can recognise inline (an
    identifier of at most ``a`` characters, an integer in ``[a, b]``), or kind 0. A value that is
    not recognised is left to the field's check, which also takes UNSET or None where allowed."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a not in (msgspec.UnsetType, type(None))]
        return _valid_shape(inner[0]) if len(inner) == 1 else (0, 0, 0)
    if origin is Annotated:
        base, *extras = typing.get_args(hint)
        meta = next((m for m in extras if isinstance(m, msgspec.Meta)), None)
        if meta is not None and base is str and meta.pattern == IDENTIFIER_PATTERN:
            return _IDENTIFIER, meta.max_length, 0
        if meta is not None and base is int and meta.ge is not None and meta.le is not None:
            return _INT, meta.ge, meta.le
    return 0, 0, 0


def field_problem(obj: msgspec.Struct, *, enums: bool = True) -> tuple[str, str] | None:
    """:func:`fields_problem` with the name of the field that breaks its limit: ``(field, problem)``."""
    key = (type(obj), enums)
    entry = _CHECKS.get(key)
    if entry is None:
        specs = []
        for field in msgspec.structs.fields(type(obj)):
            check = _check_of(field.name, field.type)
            if check is not None and (enums or check.__name__ != "check_enum"):
                specs.append((field.name, *_valid_shape(field.type), check))
        names = tuple(spec[0] for spec in specs)
        # One C call reads every checked field (attrgetter of one name gives the bare value).
        getter = operator.attrgetter(*names) if len(names) > 1 else (
            (lambda o, n=names[0]: (getattr(o, n),)) if names else (lambda o: ()))
        entry = _CHECKS[key] = (getter, tuple(specs))
    getter, specs = entry
    # Every checked field runs here, on every command and every record written: the valid
    # identifiers and integers are recognised inline, and only the rest goes to its check.
    for (name, kind, a, b, check), value in zip(specs, getter(obj)):
        if kind == _IDENTIFIER:
            if type(value) is str and 0 < len(value) <= a and value.isascii() and value.isprintable():
                continue
        elif kind == _INT and type(value) is int and a <= value <= b:
            continue
        problem = check(obj, value)
        if problem is not None:
            return name, problem
    return None


class Command(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False):
    """Base of the exact-shape commands: built in Python or decoded from JSON, a command is held
    to its declared field limits and to its cross-field rules (:meth:`rule_problem`), and raises
    its family's ``error``. Its repr never shows a bearer token (a write capability)."""

    error: ClassVar[type[Exception]] = ValueError
    #: Fields whose broken limit has an error (and a stable code) of its own, e.g. a name: what
    #: the user typed, worth a code that says which input to fix.
    field_errors: ClassVar[dict[str, type[Exception]]] = {}

    def __post_init__(self) -> None:
        found = field_problem(self)
        if found is not None and found[0] in self.field_errors:
            raise self.field_errors[found[0]](found[1])
        problem = None if found is None else found[1]
        problem = problem or self.rule_problem()
        if problem is not None:
            self.reject(problem)

    @classmethod
    def require(cls, cmd: object, operation: str) -> None:
        """Refuse anything but this command (with the family's ``error``): a repository checks
        what it was given before it opens a transaction."""
        if not isinstance(cmd, cls):
            raise cls.error(f"{operation} expects a {cls.__name__}, got {type(cmd).__name__}")

    @classmethod
    def reject(cls, problem: str | None, path: str | None = None) -> None:
        """Raise the family's ``error`` for a non-None ``problem`` (also for the repositories' plain
        arguments); ``path`` is the JSON path of the field a cross-field rule blames."""
        if problem is not None:
            error = cls.error(problem)
            if path is not None:
                error.path = path
            raise error

    def rule_problem(self) -> str | None:
        """The cross-field rule this command breaks, or None (none by default)."""
        return None

    def __repr__(self) -> str:
        shown = (f"{name}=<redacted>" if name == "lease_token" else f"{name}={getattr(self, name)!r}"
                 for name in self.__struct_fields__)
        return f"{type(self).__name__}({', '.join(shown)})"


class _OutcomeTag:
    """The ``status`` of an outcome, read on its class or on an instance: the msgspec tag its class
    line gives (``class X(Outcome, tag="claimed")``), so the status is stated once."""

    def __get__(self, outcome: object, kind: type[msgspec.Struct]) -> str:
        return kind.__struct_config__.tag


class Outcome(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, tag_field="status"):
    """Base of the tagged results of the lease, session and dispatch operations: ``status`` (the
    tag) names which one it is."""

    status: ClassVar[str] = _OutcomeTag()  # on a subclass: its tag, a str


# --------------------------------------------------------------------------- wire

_encoder = msgspec.json.Encoder()


def encode(obj: Any) -> bytes:
    """Encode a contract object as camelCase JSON; absent optional fields are omitted."""
    return _encoder.encode(obj)


def command_decoder(cls: type, error: type[Exception]) -> Callable[[bytes], Any]:
    """The exact-shape JSON decoder of command ``cls``: every failure becomes ``error``, whose
    message names the ``$.path`` where msgspec knows it (also for a cross-field rule)."""
    decoder = msgspec.json.Decoder(cls)

    def decode(data: bytes) -> Any:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise error(f"a command must be JSON bytes, got {type(data).__name__}")
        try:
            return decoder.decode(data)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            raise error(str(exc)) from None
        except error as exc:
            path = getattr(exc, "path", None)
            if path is None:
                raise
            worded = error(f"{exc.message} - at `{path}`")
            worded.path = path
            raise worded from None

    decode.__module__ = cls.__module__
    decode.__annotations__ = {"data": bytes, "return": cls}
    return decode
