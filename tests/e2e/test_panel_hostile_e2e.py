"""Hostile HTTP against a running ``serve --panel-listen``: raw bytes on a socket, as an attacker
on the LAN would send them. Every request without a session gets a 4xx, none reaches a handler,
and nothing is ever executed: after the whole campaign the database holds no Run and no schedule,
and the canary file a command would create does not exist.

The variants are the ones that broke QingLong's panel (a router matching routes case-insensitively
while the auth check compared the path case-sensitively) and their relatives: case, percent-encoding,
double and trailing slashes, dot segments, ``;params``, absolute-form targets, odd ``Host`` headers,
other methods, oversized headers and bodies, slow clients, chunked bodies and pipelining.
"""

from __future__ import annotations

import socket
import time

import msgspec
import pytest
from tests.support.panel_client import body_json, exchange, header, login, request, start_panel, status, statuses

from edge_runtime.local.database import open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.schedules import LocalScheduleRepository


def _nothing_ran(harness, canary) -> None:
    with open_database(harness.db_path, create=False) as db:
        assert LocalRunRepository(db).list_runs(limit=100) == []
        assert LocalScheduleRepository(db).list() == []
    assert not canary.exists()


@pytest.fixture
def panel(harness, tmp_path):
    service, port = start_panel(harness)
    canary = tmp_path / "canary"
    run_body = msgspec.json.encode({"command": ["sh", "-c", f"touch {canary}"]})
    schedule_body = msgspec.json.encode({"cron": "* * * * *", "command": ["sh", "-c", f"touch {canary}"]})
    yield harness, service, port, canary, run_body, schedule_body
    assert service.process.poll() is None, service.log()  # the service outlived the campaign


PATH_VARIANTS = [
    "/API/runs", "/Api/runs", "/api/Runs", "/api/RUNS", "/aPi/runs",
    "/%61pi/runs", "/api/%72uns", "/api%2Fruns", "/api%2fruns", "/%2Fapi/runs", "/api/runs%00", "/api/runs%20",
    "/api/runs/", "//api/runs", "/api//runs", "/api/runs//", "///api/runs",
    "/api/./runs", "/./api/runs", "/api/x/../runs", "/x/../api/runs", "/api/runs/.", "/api/runs/..",
    "/api/runs;", "/api/runs;jsessionid=1", "/api;x/runs", "/api/runs;/",
    "/api/runs\\", "\\api\\runs", "/api/runs#x", "*", "api/runs",
    "/api/login/../runs", "/api/login%2F..%2Fruns", "/api/login/..;/runs",
]


@pytest.mark.e2e
def test_path_variants_without_a_session_never_run_anything(panel) -> None:
    harness, _service, port, canary, run_body, schedule_body = panel
    for path in PATH_VARIANTS:
        for body, suffix in ((run_body, ""), (schedule_body, "")):
            response = request(port, "POST", path + suffix, body=body)
            assert 400 <= status(response) < 500, (path, response[:300])
    # And the exact paths themselves, without a session: 401 before any handler.
    assert status(request(port, "POST", "/api/runs", body=run_body)) == 401
    assert status(request(port, "POST", "/api/schedules", body=schedule_body)) == 401
    assert status(request(port, "GET", "/api/runs")) == 401
    _nothing_ran(harness, canary)


@pytest.mark.e2e
def test_path_variants_with_a_session_are_404_not_a_handler(panel) -> None:
    """Even logged in, a path that is not exactly in the table reaches no handler."""
    harness, _service, port, canary, run_body, _schedule_body = panel
    token = login(port)
    for path in PATH_VARIANTS:
        response = request(port, "POST", path, body=run_body, cookie=token)
        assert status(response) in (400, 404), (path, response[:300])
    _nothing_ran(harness, canary)


@pytest.mark.e2e
def test_absolute_form_targets_and_odd_hosts(panel) -> None:
    harness, _service, port, canary, run_body, _schedule_body = panel
    token = login(port)
    for target in (f"http://127.0.0.1:{port}/api/runs", f"http://evil.example/api/runs", "//evil.example/api/runs"):
        assert 400 <= status(request(port, "POST", target, body=run_body)) < 500, target
        assert 400 <= status(request(port, "POST", target, body=run_body, cookie=token)) < 500, target
    for host in ("evil.example", "evil.example:80", "127.0.0.1.evil.example", "localhost.evil", "[::1", "127.0.0.1:99999",
                 "127.0.0.1:x", ""):
        response = request(port, "POST", "/api/runs", body=run_body, cookie=token, host=host)
        assert 400 <= status(response) < 500, (host, response[:300])
    two_hosts = (f"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nHost: evil.example\r\nX-Edge-Panel: 1\r\n"
                 f"Cookie: edge_panel={token}\r\nContent-Length: {len(run_body)}\r\n\r\n").encode() + run_body
    assert 400 <= status(exchange(port, two_hosts)) < 500
    no_host = (f"POST /api/runs HTTP/1.0\r\nX-Edge-Panel: 1\r\nCookie: edge_panel={token}\r\n"
               f"Content-Length: {len(run_body)}\r\n\r\n").encode() + run_body
    assert 400 <= status(exchange(port, no_host)) < 500
    _nothing_ran(harness, canary)


@pytest.mark.e2e
def test_other_methods_are_404(panel) -> None:
    harness, _service, port, canary, run_body, _schedule_body = panel
    token = login(port)
    for method in ("HEAD", "OPTIONS", "TRACE", "PUT", "PATCH", "DELETE", "get", "post", "CONNECT", "PROPFIND"):
        for path in ("/", "/api/runs", "/api/login", "/api/schedules"):
            for cookie in (None, token):
                response = request(port, method, path, body=None if method in ("HEAD", "TRACE") else run_body,
                                   cookie=cookie)
                assert 400 <= status(response) < 500, (method, path, response[:200])
                assert not header(response, "access-control-allow-origin")
    _nothing_ran(harness, canary)


@pytest.mark.e2e
def test_a_state_change_needs_the_page_header_and_its_own_origin(panel) -> None:
    """CSRF: a session cookie alone never changes anything."""
    harness, _service, port, canary, run_body, schedule_body = panel
    token = login(port)
    assert status(request(port, "POST", "/api/runs", body=run_body, cookie=token, csrf=False)) == 403
    assert status(request(port, "POST", "/api/schedules", body=schedule_body, cookie=token, csrf=False)) == 403
    evil = request(port, "POST", "/api/runs", body=run_body, cookie=token, extra="Origin: http://evil.example\r\n")
    assert status(evil) == 403
    null = request(port, "POST", "/api/runs", body=run_body, cookie=token, extra="Origin: null\r\n")
    assert status(null) == 403
    wrong = request(port, "POST", "/api/runs", body=run_body, cookie=token, csrf=False, extra="X-Edge-Panel: 0\r\n")
    assert status(wrong) == 403
    _nothing_ran(harness, canary)


@pytest.mark.e2e
def test_forged_and_stale_sessions_are_401(panel) -> None:
    harness, _service, port, canary, run_body, _schedule_body = panel
    token = login(port)
    for cookie in ("x", token + "x", token.upper(), "", "a" * 5000, f"{token}; edge_panel={token}"):
        assert status(request(port, "POST", "/api/runs", body=run_body, cookie=cookie)) in (400, 401, 431), cookie[:20]
    assert status(request(port, "POST", "/api/logout", cookie=token)) == 200
    assert status(request(port, "POST", "/api/runs", body=run_body, cookie=token)) == 401  # logged out
    _nothing_ran(harness, canary)


@pytest.mark.e2e
def test_oversized_headers_and_bodies(panel) -> None:
    harness, _service, port, canary, run_body, _schedule_body = panel
    token = login(port)
    big_header = request(port, "GET", "/api/runs", cookie=token, extra="X-Pad: " + "a" * 20_000 + "\r\n")
    assert status(big_header) in (400, 431)
    many_headers = request(port, "GET", "/", extra="".join(f"X-{i}: {i}\r\n" for i in range(2000)))
    assert status(many_headers) in (400, 431)
    huge = msgspec.json.encode({"command": ["sh", "-c", "touch /nonexistent/x", "a" * 70_000]})
    assert status(request(port, "POST", "/api/runs", body=huge, cookie=token)) == 413
    declared = (f"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Edge-Panel: 1\r\nCookie: edge_panel={token}\r\n"
                f"Content-Length: 100000000\r\n\r\n").encode()
    assert status(exchange(port, declared)) == 413
    _nothing_ran(harness, canary)


@pytest.mark.e2e
def test_chunked_bodies(panel) -> None:
    harness, _service, port, canary, run_body, _schedule_body = panel
    chunked = (f"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Edge-Panel: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
               f"{len(run_body):x}\r\n").encode() + run_body + b"\r\n0\r\n\r\n"
    assert status(exchange(port, chunked)) == 401
    token = login(port)
    endless = (f"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Edge-Panel: 1\r\nCookie: edge_panel={token}\r\n"
               f"Transfer-Encoding: chunked\r\n\r\n").encode() + b"8000\r\n" + b"a" * 0x8000 + b"\r\n" + b"8000\r\n" + b"a" * 0x8000 + b"\r\n8000\r\n" + b"a" * 0x8000 + b"\r\n"
    assert status(exchange(port, endless)) == 413
    smuggle = (f"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Edge-Panel: 1\r\nContent-Length: 4\r\n"
               f"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nPOST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
               f"X-Edge-Panel: 1\r\nContent-Length: {len(run_body)}\r\n\r\n").encode() + run_body
    assert all(400 <= code < 500 for code in statuses(exchange(port, smuggle)))
    bad_chunk = (f"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").encode()
    assert 400 <= status(exchange(port, bad_chunk)) < 500
    _nothing_ran(harness, canary)


@pytest.mark.e2e
def test_pipelined_requests_are_each_gated(panel) -> None:
    harness, _service, port, canary, run_body, _schedule_body = panel
    host = f"Host: 127.0.0.1:{port}\r\n"
    pipelined = (f"GET / HTTP/1.1\r\n{host}\r\nGET /panel.js HTTP/1.1\r\n{host}\r\n"
                 f"POST /api/runs HTTP/1.1\r\n{host}X-Edge-Panel: 1\r\nContent-Length: {len(run_body)}\r\n\r\n").encode() + run_body
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(pipelined)
        data = b""
        deadline = time.monotonic() + 5
        while len(statuses(data)) < 3 and time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    assert statuses(data) == [200, 200, 401]
    _nothing_ran(harness, canary)


@pytest.mark.e2e
def test_a_slow_client_is_cut_off_and_others_are_served_meanwhile(panel) -> None:
    harness, _service, port, canary, run_body, _schedule_body = panel
    with socket.create_connection(("127.0.0.1", port), timeout=30) as slow:
        slow.sendall(f"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())  # and then nothing
        started = time.monotonic()
        assert status(request(port, "GET", "/")) == 200  # served while the slow one hangs
        data = b""
        while True:
            chunk = slow.recv(4096)
            if not chunk:
                break
            data += chunk
        assert status(data) == 408
        assert time.monotonic() - started < 25
    _nothing_ran(harness, canary)


@pytest.mark.e2e
def test_connections_beyond_a_peer_s_share_close_its_oldest(panel) -> None:
    """One address holds at most its share: each connection beyond it closes that address's
    longest-waiting one (reset, nothing answered), and the newest is served."""
    from edge_runtime.panel.connections import MAX_CONNECTIONS, MAX_CONNECTIONS_PER_PEER

    harness, _service, port, canary, _run_body, _schedule_body = panel
    held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(MAX_CONNECTIONS)]
    try:
        extra = request(port, "GET", "/")
        assert status(extra) == 200
        closed = []
        for sock in held:
            sock.settimeout(0.5)
            try:
                closed.append(sock.recv(4096) == b"")
            except ConnectionResetError:
                closed.append(True)
            except socket.timeout:
                closed.append(False)  # still open, waiting for its request
        assert closed == [True] * (MAX_CONNECTIONS - MAX_CONNECTIONS_PER_PEER + 1) + [False] * (MAX_CONNECTIONS_PER_PEER - 1)
    finally:
        for sock in held:
            sock.close()
    _nothing_ran(harness, canary)


@pytest.mark.e2e
def test_failed_logins_are_slowed_and_recorded(panel) -> None:
    harness, _service, port, canary, _run_body, _schedule_body = panel
    wrong = msgspec.json.encode({"password": "not the password"})
    first = request(port, "POST", "/api/login", body=wrong)
    assert status(first) == 401 and body_json(first)["error"]["code"] == "LOGIN_FAILED"
    throttled = request(port, "POST", "/api/login", body=msgspec.json.encode({"password": "a panel password"}))
    assert status(throttled) == 429 and header(throttled, "retry-after")  # even the right one, while waiting
    assert not header(throttled, "set-cookie")
    with open_database(harness.db_path, create=False) as db:
        events = db.connection.execute("SELECT payload FROM device_events WHERE type = 'panel.login_failed'").fetchall()
    assert len(events) == 1 and '"client":"127.0.0.1"' in events[0][0]
    assert status(request(port, "POST", "/api/login", body=b'{"password": 1}')) in (400, 429)
    _nothing_ran(harness, canary)


@pytest.mark.e2e
def test_every_response_carries_the_security_headers(panel) -> None:
    _harness, _service, port, _canary, _run_body, _schedule_body = panel
    token = login(port)
    for response, api in ((request(port, "GET", "/"), False), (request(port, "GET", "/panel.js"), False),
                          (request(port, "GET", "/api/runs", cookie=token), True),
                          (request(port, "GET", "/api/runs"), True), (request(port, "GET", "/nope"), True)):
        csp = header(response, "content-security-policy")
        assert csp and "script-src 'self'" in csp[0] and "'unsafe-inline'" not in csp[0]
        assert header(response, "x-frame-options") == ["DENY"]
        assert not [h for h in response.partition(b"\r\n\r\n")[0].lower().split(b"\r\n") if h.startswith(b"access-control")]
        if api:
            assert header(response, "cache-control") == ["no-store"]
    cookie = header(request(port, "POST", "/api/login", body=b'{"password": "a panel password"}'), "set-cookie")[0]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie


@pytest.mark.e2e
def test_without_a_password_the_panel_refuses_to_start_and_the_service_runs(harness) -> None:
    service = harness.serve("--panel-listen", "127.0.0.1:0")
    service.wait_log("panel.not_started")
    assert "PANEL_PASSWORD_UNSET" in service.log() and "panel password" in service.log()
    assert "panel.started" not in service.log()
    run_id = harness.submit("true")
    harness.wait_status(run_id, "succeeded")
