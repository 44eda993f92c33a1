"""The OpenAPI's one route table (``/open/...``): exactly the forms QingLong's clients send.

Default deny, as the panel's own table (``edge_runtime/panel/routes.py``): a request is served only
when its method and path equal a row of :data:`OPEN_ROUTES`, case-sensitively. The forms QingLong
itself accepts and its clients use are listed: one trailing slash (``/open/envs/``), an integer
id segment (``/open/crons/12``), query values percent-encoded (``searchValue=%E4%B8%AD%E6%96%87``,
``+`` for a space) and a ``t=`` cache-buster on any route. Anything else is 404 (an unknown path,
``/OPEN/...``, a doubled slash, a dot segment, an id that is not a whole number), or 400 for a
query this route does not take.

What QingLong serves and this device refuses on purpose is in :data:`REFUSED`: each is a write
that becomes code run as root, a shell, or a credential (QingLong's 2026 bypass turned exactly
these into remote code execution). A client with a valid token gets 403 and the reason.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from edge_runtime.contract.panel_apps import AppScope

#: The most an id may be (QingLong's clients handle JSON numbers: 2**53 - 1).
MAX_ID = 9_007_199_254_740_991
#: The longest query value taken, once decoded (a search text, an id, a secret).
MAX_QUERY_VALUE_BYTES = 1024
#: The query key every route takes and ignores: QingLong's panel and shell add ``t=<now>``.
CACHE_BUSTER = "t"

_ID = re.compile(rb"[1-9][0-9]{0,15}")
_ID_SEGMENT = b"{id}"
_SEGMENT = re.compile(rb"[0-9A-Za-z_-]{1,64}")


class OpenRoute(NamedTuple):
    method: bytes
    #: Path segments after ``/open/``; ``{id}`` stands for a whole number from 1.
    segments: tuple[bytes, ...]
    handler: str
    #: The scope an app's token must hold; None for the token request itself (it takes none).
    scope: AppScope | None
    #: Query keys it takes besides ``t``.
    query: frozenset[str] = frozenset()


def _route(method: str, path: str, handler: str, scope: AppScope | None, query: tuple[str, ...] = ()) -> OpenRoute:
    return OpenRoute(method.encode(), tuple(s.encode() for s in path.split("/")), handler, scope, frozenset(query))


_C, _E, _L, _S = AppScope.CRONS, AppScope.ENVS, AppScope.LOGS, AppScope.SYSTEM
_SUB = AppScope.SUBSCRIPTIONS

#: Every OpenAPI request the device answers.
OPEN_ROUTES: tuple[OpenRoute, ...] = (
    _route("GET", "auth/token", "token", None, ("client_id", "client_secret")),
    _route("GET", "crons", "list_crons", _C, ("searchValue", "page", "size")),
    _route("POST", "crons", "add_cron", _C),
    _route("PUT", "crons", "edit_cron", _C),
    _route("DELETE", "crons", "remove_crons", _C),
    _route("PUT", "crons/run", "run_crons", _C),
    _route("PUT", "crons/stop", "stop_crons", _C),
    _route("PUT", "crons/enable", "enable_crons", _C),
    _route("PUT", "crons/disable", "disable_crons", _C),
    _route("GET", "crons/{id}", "get_cron", _C),
    _route("GET", "crons/{id}/log", "cron_log", _C),
    _route("GET", "crons/{id}/logs", "cron_logs", _C),
    _route("GET", "envs", "list_envs", _E, ("searchValue",)),
    _route("POST", "envs", "add_envs", _E),
    _route("PUT", "envs", "edit_env", _E),
    _route("DELETE", "envs", "remove_envs", _E),
    _route("PUT", "envs/enable", "enable_envs", _E),
    _route("PUT", "envs/disable", "disable_envs", _E),
    _route("PUT", "envs/name", "rename_envs", _E),
    _route("GET", "envs/{id}", "get_env", _E),
    _route("GET", "subscriptions", "list_subscriptions", _SUB, ("searchValue",)),
    _route("PUT", "subscriptions/run", "run_subscriptions", _SUB),
    _route("PUT", "subscriptions/stop", "stop_subscriptions", _SUB),
    _route("PUT", "subscriptions/enable", "enable_subscriptions", _SUB),
    _route("PUT", "subscriptions/disable", "disable_subscriptions", _SUB),
    _route("GET", "subscriptions/{id}", "get_subscription", _SUB),
    _route("GET", "subscriptions/{id}/log", "subscription_log", _SUB),
    _route("GET", "logs", "list_logs", _L),
    _route("GET", "logs/detail", "log_detail", _L, ("path", "file")),
    _route("GET", "system", "system", _S),
)

_WRITES_CODE = "it writes code or configuration that tasks run as root"
_SUBSCRIPTION_WRITES = ("subscriptions are added, changed and removed on the device (edge-runtime subscription "
                        "add|remove): a subscription chooses the code from strangers that the device fetches and "
                        "schedules")
#: What is refused on purpose, by path (a segment list that ends in ``*`` covers everything below
#: it, any method; ``None`` as the method: every method), with the reason the 403 names.
REFUSED: tuple[tuple[bytes | None, tuple[bytes, ...], str], ...] = tuple(
    (None if method is None else method.encode(), tuple(s.encode() for s in path.split("/")), reason)
    for method, path, reason in (
        (None, "scripts/*", f"script files are not served: {_WRITES_CODE}; copy scripts to the device yourself"),
        (None, "configs/*", f"configuration files are not served: {_WRITES_CODE} (config.sh, task_before.sh) "
                            f"and they hold notification secrets"),
        (None, "dependencies/*", "installing dependencies is refused: it runs a package manager as root on a "
                                 "name a client sends; install them on the device yourself"),
        (None, "dependence/*", "installing dependencies is refused: it runs a package manager as root on a "
                               "name a client sends; install them on the device yourself"),
        (None, "system/*", "system commands are refused (command-run, update, reload, data export and import, "
                           "settings): each is a shell or a write as root; only GET /open/system is served"),
        (None, "user/*", "user, password and two-factor endpoints are refused: the panel's password is set on the "
                         "device (edge-runtime panel password), never over the network"),
        (None, "apps/*", "apps are managed on the device (edge-runtime panel app add|list|remove), never over the "
                         "network: an app could give itself every scope"),
        (None, "update/*", "updating the device over the OpenAPI is refused: it replaces the code that runs as root"),
        ("PUT", "crons/status", "cron status is the device's own record of its Runs: clients cannot write it"),
        ("GET", "crons/import", "importing the system crontab is refused: it turns any crontab line into a task "
                                "run as root"),
        ("POST", "envs/upload", "env upload is refused: QingLong writes the uploaded file into the scripts "
                                "directory first (a script write); POST /open/envs takes the same list as JSON"),
        *((method, "subscriptions", _SUBSCRIPTION_WRITES) for method in ("POST", "PUT", "DELETE")),
        ("PUT", "subscriptions/status", "subscription status is the device's own record of its pulls: clients "
                                        "cannot write it"),
        ("DELETE", "logs", "logs are removed by the device's retention (docs/storage.md), not by clients"),
        ("POST", "logs/download", "log downloads are not served; read a log with GET /open/logs/detail"),
    )
)


class OpenMatch(NamedTuple):
    route: OpenRoute
    #: The ``{id}`` segment as a number.
    id: int | None
    #: The query values, percent-decoded (``t`` left out).
    query: dict[str, str]


class OpenRefusal(NamedTuple):
    status: int
    message: str
    #: Refused on purpose (403 once the token is valid), not an unknown route.
    on_purpose: bool = False


def match(method: bytes, target: bytes) -> OpenMatch | OpenRefusal:
    """The route of ``method target`` (a target beginning with ``/open/``), or why none."""
    path, sep, query_text = target.partition(b"?")
    if not path.startswith(b"/open/"):
        return OpenRefusal(404, "Not Found")
    rest = path[len(b"/open/"):]
    if rest.endswith(b"/"):
        rest = rest[:-1]  # one trailing slash, as QingLong's Express router takes it
    segments = tuple(rest.split(b"/"))
    refused = _refused(method, segments)
    if refused is not None:
        return OpenRefusal(403, refused, on_purpose=True)
    if not all(_SEGMENT.fullmatch(s) for s in segments):
        return OpenRefusal(404, "Not Found")
    for route in OPEN_ROUTES:
        if route.method != method or len(route.segments) != len(segments):
            continue
        identifier = None
        for pattern, segment in zip(route.segments, segments):
            if pattern == _ID_SEGMENT and _ID.fullmatch(segment) and int(segment) <= MAX_ID:
                identifier = int(segment)
            elif pattern != segment:
                break
        else:
            query = _query(route, query_text) if sep else {}
            if isinstance(query, OpenRefusal):
                return query
            return OpenMatch(route, identifier, query)
    return OpenRefusal(404, "Not Found")


def _refused(method: bytes, segments: tuple[bytes, ...]) -> str | None:
    for refused_method, pattern, reason in REFUSED:
        if refused_method is not None and refused_method != method:
            continue
        if pattern[-1] == b"*":
            head = pattern[:-1]
            if segments[:len(head)] == head:
                if head == (b"system",) and method == b"GET" and segments == head:
                    continue  # the version: served
                return reason
        elif segments == pattern:
            return reason
    return None


def _query(route: OpenRoute, text: bytes) -> dict[str, str] | OpenRefusal:
    taken = sorted(route.query)
    refusal = OpenRefusal(400, f"query parameters of this API: {', '.join([*taken, CACHE_BUSTER])}, each once")
    query: dict[str, str] = {}
    seen: set[str] = set()
    for pair in text.split(b"&") if text else ():
        key, _, value = pair.partition(b"=")
        name = key.decode("ascii", "replace")
        if name in seen or (name not in route.query and name != CACHE_BUSTER):
            return refusal
        seen.add(name)
        decoded = percent_decode(value)
        if decoded is None:
            return OpenRefusal(400, f"query parameter {name}: not percent-encoded UTF-8 text of at most "
                                    f"{MAX_QUERY_VALUE_BYTES} bytes without control characters")
        if name != CACHE_BUSTER:
            query[name] = decoded
    return query


_HEX = b"0123456789abcdefABCDEF"


def percent_decode(value: bytes) -> str | None:
    """A query value as ``application/x-www-form-urlencoded`` writes it (``%XX`` escapes, ``+`` for
    a space) as text; None when it is malformed, not UTF-8, too long or holds a control character."""
    out = bytearray()
    i = 0
    while i < len(value):
        byte = value[i]
        if byte == 0x25:  # %
            pair = value[i + 1:i + 3]
            if len(pair) != 2 or pair[0] not in _HEX or pair[1] not in _HEX:
                return None
            out.append(int(pair, 16))
            i += 3
            continue
        out.append(0x20 if byte == 0x2B else byte)
        i += 1
    if len(out) > MAX_QUERY_VALUE_BYTES:
        return None
    try:
        text = out.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text):
        return None
    return text
