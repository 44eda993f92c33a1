"""The panel's one route table and the one gate every request passes before any handler runs.

Default deny: a request is served only when its method and path equal one row of :data:`ROUTES`
exactly, byte for byte and case-sensitively, as received: no percent-decoding, no dot-segment
resolution, no folding of double or trailing slashes, no ``;params``. A ``{id}`` segment matches
only letters, digits, ``-`` and ``_``. Anything else is 404 before a handler is even looked up
(``PUT /Open/user/init`` and ``/aPi/system/command-run`` are simply not in the table).

Then :func:`gate`, in this one place: the ``Host`` must name this device (an IP literal,
``localhost`` or the device's host name: a DNS-rebinding page has none of these); a request that
changes state must carry the page's ``X-Edge-Panel`` header (a cross-site form or ``fetch``
cannot send one without a CORS preflight, which is never answered) and, when the browser sends an
``Origin``, one equal to the panel's own; and every route but the page, its files and
``POST /api/login`` needs a live session.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from typing import NamedTuple


class Route(NamedTuple):
    method: bytes
    #: Path segments after the leading "/"; ``{id}`` stands for one identifier segment.
    segments: tuple[bytes, ...]
    handler: str
    #: Served without a session (the page, its files, the login).
    public: bool = False
    #: Query parameters it takes (anything else is refused).
    query: frozenset[str] = frozenset()
    #: Its handler checks a secret (a password): the server's secret throttle applies to it.
    checks_secret: bool = False

    @property
    def changes_state(self) -> bool:
        return self.method != b"GET"


def _route(method: str, path: str, handler: str, *, public: bool = False, query: tuple[str, ...] = (),
           checks_secret: bool = False) -> Route:
    segments = tuple(s.encode() for s in path.split("/")[1:]) if path != "/" else ()
    return Route(method.encode(), segments, handler, public, frozenset(query), checks_secret)


#: Every request the panel answers. Nothing else exists.
ROUTES: tuple[Route, ...] = (
    _route("GET", "/", "page", public=True),
    _route("GET", "/panel.css", "static", public=True),
    _route("GET", "/panel.js", "static", public=True),
    _route("GET", "/text.js", "static", public=True),
    _route("GET", "/favicon.svg", "static", public=True),
    _route("POST", "/api/login", "login", public=True, checks_secret=True),
    _route("POST", "/api/logout", "logout"),
    _route("GET", "/api/runs", "list_runs", query=("status", "limit", "before", "schedule")),
    _route("POST", "/api/runs", "submit"),
    _route("GET", "/api/runs/{id}", "run_detail"),
    _route("GET", "/api/runs/{id}/log", "run_log", query=("attempt", "offset")),
    _route("POST", "/api/runs/{id}/cancel", "cancel"),
    _route("GET", "/api/schedules", "list_schedules"),
    _route("POST", "/api/schedules", "add_schedule"),
    _route("POST", "/api/schedules/{id}/pause", "pause_schedule"),
    _route("POST", "/api/schedules/{id}/resume", "resume_schedule"),
    _route("POST", "/api/schedules/{id}/run", "run_schedule"),
    _route("DELETE", "/api/schedules/{id}", "remove_schedule"),
    _route("POST", "/api/schedules/{id}/edit", "edit_schedule"),
    _route("GET", "/api/crons", "list_crons"),
    _route("GET", "/api/envs", "list_envs"),
    _route("POST", "/api/envs", "add_env"),
    _route("POST", "/api/envs/{id}/edit", "edit_env"),
    _route("POST", "/api/envs/{id}/enable", "enable_env"),
    _route("POST", "/api/envs/{id}/disable", "disable_env"),
    _route("POST", "/api/envs/{id}/move", "move_env"),
    _route("POST", "/api/envs/{id}/pin", "pin_env"),
    _route("POST", "/api/envs/{id}/unpin", "unpin_env"),
    _route("DELETE", "/api/envs/{id}", "remove_env"),
    _route("GET", "/api/subscriptions", "list_subscriptions"),
    _route("POST", "/api/subscriptions", "add_subscription"),
    _route("POST", "/api/subscriptions/{id}/run", "run_subscription"),
    _route("POST", "/api/subscriptions/{id}/pause", "pause_subscription"),
    _route("POST", "/api/subscriptions/{id}/resume", "resume_subscription"),
    _route("DELETE", "/api/subscriptions/{id}", "remove_subscription"),
    _route("GET", "/api/apps", "list_apps"),
    _route("POST", "/api/apps", "add_app"),
    _route("POST", "/api/apps/remove", "remove_app"),
    _route("GET", "/api/notify", "notify_overview", query=("limit",)),
    _route("POST", "/api/notify/test", "notify_test"),
    _route("GET", "/api/health", "health"),
    _route("GET", "/api/check", "check"),
)

_ID = re.compile(rb"[0-9A-Za-z_-]{1,64}")
_QUERY_VALUE = re.compile(rb"[0-9A-Za-z_-]{0,64}")
_ID_SEGMENT = b"{id}"

#: The header the page sends with every request that changes state.
CSRF_HEADER = b"x-edge-panel"
SESSION_COOKIE = "edge_panel"


class Match(NamedTuple):
    route: Route
    #: The ``{id}`` segment's value, as received (it can only be letters, digits, - and _).
    id: str | None
    query: dict[str, str]


class Refusal(NamedTuple):
    status: int
    code: str
    message: str


def match(method: bytes, target: bytes) -> Match | Refusal:
    """The route of ``method target``, or a 404 (no such route) / 400 (a bad query)."""
    path, _, query_text = target.partition(b"?")
    found = None
    if path.startswith(b"/"):
        segments = tuple(path[1:].split(b"/")) if path != b"/" else ()
        for route in ROUTES:
            if route.method != method or len(route.segments) != len(segments):
                continue
            identifier = None
            for pattern, segment in zip(route.segments, segments):
                if pattern == _ID_SEGMENT and _ID.fullmatch(segment):
                    identifier = segment.decode("ascii")
                elif pattern != segment:
                    break
            else:
                found = (route, identifier)
                break
    if found is None:
        return Refusal(404, "NOT_FOUND", "no such page or API")
    route, identifier = found
    query: dict[str, str] = {}
    if query_text or b"?" in target:
        for pair in query_text.split(b"&"):
            key, sep, value = pair.partition(b"=")
            name = key.decode("ascii", "replace")
            if not sep or name not in route.query or name in query or not _QUERY_VALUE.fullmatch(value):
                return Refusal(400, "BAD_QUERY", f"query parameters of this API: {', '.join(sorted(route.query)) or 'none'}"
                                                 f" (letters, digits, - and _ only)")
            query[name] = value.decode("ascii")
    return Match(route, identifier, query)


def host_is_this_device(host: bytes, device_names: frozenset[str]) -> bool:
    """Whether a ``Host`` header names this device: an IP literal, ``localhost`` or one of
    ``device_names``, with an optional port. A DNS-rebinding page's host name is none of these."""
    try:
        text = host.decode("ascii").lower()
    except UnicodeDecodeError:
        return False
    if text.startswith("["):
        name, sep, rest = text[1:].partition("]")
        if not sep or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return False
        return _is_address(socket.AF_INET6, name)
    name, sep, port = text.partition(":")
    if sep and not (port.isdigit() and 0 < int(port) < 65536):
        return False
    return name == "localhost" or name in device_names or _is_address(socket.AF_INET, name)


def _is_address(family: int, text: str) -> bool:
    try:
        socket.inet_pton(family, text)
    except (OSError, ValueError):
        return False
    return True


def cookie_value(headers: list[tuple[bytes, bytes]], name: str) -> str | None:
    """The value of cookie ``name`` from the request's ``Cookie`` headers, if exactly one is sent."""
    found = []
    wanted = name.encode()
    for key, value in headers:
        if key != b"cookie":
            continue
        for part in value.split(b";"):
            k, sep, v = part.strip().partition(b"=")
            if sep and k == wanted:
                found.append(v)
    if len(found) != 1:
        return None
    try:
        return found[0].decode("ascii")
    except UnicodeDecodeError:
        return None


def gate(matched: Match, headers: list[tuple[bytes, bytes]], *, device_names: frozenset[str],
         session_valid: Callable[[str], bool]) -> Refusal | None:
    """The one check before dispatch: None to serve ``matched``, else the refusal to send."""
    hosts = [v for k, v in headers if k == b"host"]
    if len(hosts) != 1 or not host_is_this_device(hosts[0], device_names):
        return Refusal(421, "WRONG_HOST", "this panel answers only to the device's address")
    if matched.route.changes_state:
        if not any(k == CSRF_HEADER and v == b"1" for k, v in headers):
            return Refusal(403, "CSRF_REFUSED", "a request that changes state must come from the panel's page")
        origins = [v for k, v in headers if k == b"origin"]
        if origins and (len(origins) != 1 or origins[0] != b"http://" + hosts[0]):
            return Refusal(403, "CSRF_REFUSED", "a request that changes state must come from the panel's own origin")
    if matched.route.public:
        return None
    token = cookie_value(headers, SESSION_COOKIE)
    if token is None or not session_valid(token):
        return Refusal(401, "UNAUTHENTICATED", "log in first")
    return None
