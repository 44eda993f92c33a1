"""The panel's one route table and its one gate, without a socket: exact, case-sensitive
method + path matching as received, 404 for everything else, and the host / CSRF / session
checks every request passes before a handler."""

from __future__ import annotations

import pytest

from edge_runtime.panel.routes import ROUTES, Match, Refusal, cookie_value, gate, host_is_this_device, match

DEVICE = frozenset({"router", "router.lan"})


def test_the_table_is_exactly_the_documented_api() -> None:
    table = {(r.method.decode(), "/" + "/".join(s.decode() for s in r.segments)) for r in ROUTES}
    assert table == {
        ("GET", "/"), ("GET", "/panel.css"), ("GET", "/panel.js"), ("GET", "/text.js"), ("GET", "/favicon.svg"), ("POST", "/api/login"), ("POST", "/api/logout"),
        ("GET", "/api/runs"), ("POST", "/api/runs"), ("GET", "/api/runs/{id}"), ("GET", "/api/runs/{id}/log"),
        ("POST", "/api/runs/{id}/cancel"), ("GET", "/api/schedules"), ("POST", "/api/schedules"),
        ("POST", "/api/schedules/{id}/pause"), ("POST", "/api/schedules/{id}/resume"),
        ("POST", "/api/schedules/{id}/run"), ("DELETE", "/api/schedules/{id}"), ("GET", "/api/health"),
        ("POST", "/api/schedules/{id}/edit"), ("GET", "/api/crons"), ("GET", "/api/envs"), ("POST", "/api/envs"),
        ("POST", "/api/envs/{id}/edit"), ("POST", "/api/envs/{id}/enable"), ("POST", "/api/envs/{id}/disable"),
        ("POST", "/api/envs/{id}/move"), ("POST", "/api/envs/{id}/pin"), ("POST", "/api/envs/{id}/unpin"), ("DELETE", "/api/envs/{id}"), ("GET", "/api/subscriptions"), ("POST", "/api/subscriptions"),
        ("POST", "/api/subscriptions/{id}/run"), ("POST", "/api/subscriptions/{id}/pause"),
        ("POST", "/api/subscriptions/{id}/resume"), ("DELETE", "/api/subscriptions/{id}"), ("GET", "/api/apps"),
        ("POST", "/api/apps"), ("POST", "/api/apps/remove"), ("GET", "/api/check"), ("GET", "/api/notify"), ("POST", "/api/notify/test"),
    }
    assert {(r.method, r.handler) for r in ROUTES if r.public} == {
        (b"GET", "page"), (b"GET", "static"), (b"POST", "login")}
    assert [r.handler for r in ROUTES if r.checks_secret] == ["login"]  # the secret throttle's routes


@pytest.mark.parametrize(("method", "target", "handler", "identifier"), [
    (b"GET", b"/", "page", None),
    (b"GET", b"/api/runs", "list_runs", None),
    (b"GET", b"/api/runs?limit=5&status=running", "list_runs", None),
    (b"GET", b"/api/runs/01a2383d-742d-744c-b1fd-ffc97f53c2cb", "run_detail", "01a2383d-742d-744c-b1fd-ffc97f53c2cb"),
    (b"GET", b"/api/runs/abc/log?offset=10", "run_log", "abc"),
    (b"POST", b"/api/runs/abc/cancel", "cancel", "abc"),
    (b"DELETE", b"/api/schedules/s_1", "remove_schedule", "s_1"),
])
def test_exact_routes_match(method, target, handler, identifier) -> None:
    found = match(method, target)
    assert isinstance(found, Match) and found.route.handler == handler and found.id == identifier


@pytest.mark.parametrize("target", [
    b"/API/runs", b"/Api/runs", b"/api/Runs", b"/%61pi/runs", b"/api%2Fruns", b"/api/runs/", b"//api/runs",
    b"/api//runs", b"/api/./runs", b"/api/x/../runs", b"/api/runs;x", b"/api;/runs", b"http://h/api/runs", b"*",
    b"api/runs", b"/api/runs/%2e%2e", b"/api/runs/..", b"/api/runs/.", b"/api/runs/a%20b", b"/api/runs/a.b",
    b"/api/runs/" + b"a" * 65, b"/api/runs/a/b", b"/api/runs/abc/log/", b"/api/runs/abc/Cancel", b"/index.html",
    b"/panel.js/", b"/PANEL.JS", b"/api/login/", b"/api/schedules/x/PAUSE", b"/api/schedules/x/delete",
])
def test_anything_else_is_404(target) -> None:
    for method in (b"GET", b"POST", b"DELETE"):
        found = match(method, target)
        assert isinstance(found, Refusal) and found.status == 404, (method, target)


@pytest.mark.parametrize("method", [b"HEAD", b"OPTIONS", b"TRACE", b"PUT", b"PATCH", b"get", b"Post", b"CONNECT"])
def test_other_methods_are_404(method) -> None:
    for route in ROUTES:
        target = b"/" + b"/".join(b"x" if s == b"{id}" else s for s in route.segments)
        found = match(method, target)
        assert isinstance(found, Refusal) and found.status == 404


@pytest.mark.parametrize("target", [b"/api/runs?x=1", b"/api/runs?limit=1&limit=2", b"/api/runs?limit=%31",
                                    b"/api/runs?limit", b"/api/runs?", b"/?a=b", b"/api/health?limit=1",
                                    b"/api/runs?status=a;b"])
def test_unknown_or_encoded_query_parameters_are_400(target) -> None:
    found = match(b"GET", target)
    assert isinstance(found, Refusal) and found.status == 400


def _headers(host=b"127.0.0.1:5700", cookie=None, csrf=False, origin=None):
    headers = [(b"host", host)]
    if cookie is not None:
        headers.append((b"cookie", cookie))
    if csrf:
        headers.append((b"x-edge-panel", b"1"))
    if origin is not None:
        headers.append((b"origin", origin))
    return headers


def _gate(method, target, headers, valid=("good",)):
    seen = []

    def session_valid(token):
        seen.append(token)
        return token in valid

    found = match(method, target)
    assert isinstance(found, Match)
    return gate(found, headers, device_names=DEVICE, session_valid=session_valid), seen


def test_the_gate_lets_the_page_and_login_through_without_a_session() -> None:
    assert _gate(b"GET", b"/", _headers())[0] is None
    assert _gate(b"GET", b"/panel.js", _headers())[0] is None
    assert _gate(b"POST", b"/api/login", _headers(csrf=True))[0] is None


def test_every_other_route_needs_a_live_session() -> None:
    for route in ROUTES:
        if route.public:
            continue
        target = b"/" + b"/".join(b"x" if s == b"{id}" else s for s in route.segments)
        refusal, _ = _gate(route.method, target, _headers(csrf=True))
        assert refusal is not None and refusal.status == 401, target
        refusal, _ = _gate(route.method, target, _headers(cookie=b"edge_panel=bad", csrf=True))
        assert refusal is not None and refusal.status == 401
        assert _gate(route.method, target, _headers(cookie=b"edge_panel=good", csrf=True))[0] is None


def test_a_state_change_needs_the_page_header_and_a_matching_origin() -> None:
    good = b"edge_panel=good"
    assert _gate(b"POST", b"/api/runs", _headers(cookie=good))[0].status == 403
    assert _gate(b"POST", b"/api/login", _headers())[0].status == 403
    assert _gate(b"POST", b"/api/runs", _headers(cookie=good, csrf=True, origin=b"http://evil"))[0].status == 403
    assert _gate(b"POST", b"/api/runs", _headers(cookie=good, csrf=True, origin=b"null"))[0].status == 403
    assert _gate(b"POST", b"/api/runs", _headers(cookie=good, csrf=True, origin=b"http://127.0.0.1:5700"))[0] is None
    assert _gate(b"DELETE", b"/api/schedules/x", _headers(cookie=good))[0].status == 403
    assert _gate(b"GET", b"/api/runs", _headers(cookie=good))[0] is None  # reads need no header


def test_the_csrf_check_comes_before_the_session_is_even_looked_up() -> None:
    refusal, seen = _gate(b"POST", b"/api/runs", _headers(cookie=b"edge_panel=good"))
    assert refusal.status == 403 and seen == []


@pytest.mark.parametrize(("host", "ok"), [
    (b"127.0.0.1:5700", True), (b"192.168.1.1", True), (b"[::1]:5700", True), (b"localhost:5700", True),
    (b"router.lan:5700", True), (b"ROUTER", True), (b"evil.example", False), (b"127.0.0.1.evil.example", False),
    (b"[::1", False), (b"127.0.0.1:99999", False), (b"127.0.0.1:x", False), (b"", False), (b"\xff", False),
    (b"[127.0.0.1]:80", False), (b"localhost.evil", False),
])
def test_only_the_device_s_own_host_names_are_answered(host, ok) -> None:
    assert host_is_this_device(host, DEVICE) is ok
    refusal, _ = _gate(b"GET", b"/", _headers(host=host))
    assert (refusal is None) is ok
    if not ok:
        assert refusal.status == 421


def test_two_host_headers_are_refused() -> None:
    refusal, _ = _gate(b"GET", b"/", [(b"host", b"127.0.0.1"), (b"host", b"evil")])
    assert refusal.status == 421


def test_the_session_cookie_must_be_sent_once() -> None:
    assert cookie_value([(b"cookie", b"a=1; edge_panel=tok; b=2")], "edge_panel") == "tok"
    assert cookie_value([(b"cookie", b"edge_panel=a; edge_panel=b")], "edge_panel") is None
    assert cookie_value([(b"cookie", b"edge_panel=a"), (b"cookie", b"edge_panel=b")], "edge_panel") is None
    assert cookie_value([(b"cookie", b"xedge_panel=a")], "edge_panel") is None
