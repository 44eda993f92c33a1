"""Racing logins against a running ``serve`` over real sockets: the throttle decides at the check.

Every 127.0.0.0/8 address reaches the loopback listener, so one test plays many clients, each a
peer of its own to the panel. Each race sends the heads of many logins first and their bodies
after, so that every request has passed the head's checks before any password is compared (the
throttle's own decisions are unit tests: tests/panel/test_secret_throttle.py). However they race,
one address gets one password check per throttle window, all addresses together no more than the
global limit, and the right password sent last in a race is throttled, not let in.

``--fault-mode=long`` races more rounds.
"""

from __future__ import annotations

import socket
import time

import msgspec
import pytest
from tests.support.panel_client import (
    PASSWORD, body_json, connect, header, read_response, request_bytes, start_panel, status,
)

from edge_runtime.local.database import open_database
from edge_runtime.panel.secret_throttle import SECRET_FAILURES_PER_MINUTE

#: Time for the panel to read every head sent before the bodies follow. Only the ordering depends
#: on it: a slower server reads heads and bodies together, which is no race, and can only pass.
HEADS_SETTLE_S = 0.5


@pytest.fixture
def long_mode(request: pytest.FixtureRequest) -> bool:
    return request.config.getoption("--fault-mode") == "long"


@pytest.fixture
def panel(harness):
    service, port = start_panel(harness)
    yield harness, port
    assert service.process.poll() is None, service.log()  # the service outlived the races


def _login_race(port: int, sources: list[str]) -> list[bytes]:
    """One login per source, all heads first, then every body: a wrong password from each source
    but the last, the right one from the last, a moment after the others (so that it is checked
    last). The answers, in the order of ``sources`` (b"": the connection was closed unanswered)."""
    bodies = [msgspec.json.encode({"password": f"wrong guess {i:04d}"}) for i in range(len(sources) - 1)]
    bodies.append(msgspec.json.encode({"password": PASSWORD}))
    sockets: list[socket.socket] = []
    try:
        for source, body in zip(sources, bodies):
            sock = connect(port, source=source, timeout=10)
            sockets.append(sock)
            whole = request_bytes(port, "POST", "/api/login", body=body)
            sock.sendall(whole[: len(whole) - len(body)])  # the head alone
        time.sleep(HEADS_SETTLE_S)
        for i, (sock, body) in enumerate(zip(sockets, bodies)):
            if i == len(sockets) - 1:
                time.sleep(HEADS_SETTLE_S)
            try:
                sock.sendall(body)
            except OSError:
                pass  # closed to make room for a newer connection: it gets no answer, as checked below
        return [read_response(sock, timeout=10) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _login_events(harness) -> dict[str, int]:
    with open_database(harness.db_path, create=False) as db:
        rows = db.connection.execute(
            "SELECT type, count(*) FROM device_events WHERE type LIKE 'panel.login%' GROUP BY type").fetchall()
    return dict(rows)


def _assert_throttled(answer: bytes) -> None:
    assert status(answer) == 429 and header(answer, "retry-after"), answer[:300]
    assert not header(answer, "set-cookie")


@pytest.mark.e2e
def test_racing_logins_from_one_address_get_one_password_check(panel, long_mode) -> None:
    harness, port = panel
    rounds = 5 if long_mode else 1
    for round_ in range(rounds):
        answers = _login_race(port, [f"127.0.1.{round_ + 1}"] * 16)
        checked = [a for a in answers if a and status(a) == 401]
        assert len(checked) <= 1, [status(a) for a in answers if a]
        assert all(status(a) in (401, 429) for a in answers if a), [a[:200] for a in answers]
        _assert_throttled(answers[-1])  # the right password, sent while the address waits
    assert _login_events(harness) == {"panel.login_failed": rounds}  # one check per round, no login


@pytest.mark.e2e
def test_racing_logins_from_many_addresses_stay_within_the_global_limit(panel) -> None:
    harness, port = panel
    sources = [f"127.0.2.{i + 1}" for i in range(SECRET_FAILURES_PER_MINUTE + 3)]
    answers = _login_race(port, sources)
    assert all(answers), "a connection was closed unanswered"
    assert sum(status(a) == 401 for a in answers) == SECRET_FAILURES_PER_MINUTE, [status(a) for a in answers]
    _assert_throttled(answers[-1])  # a fresh address with the right password: every address waits
    assert "all addresses" in body_json(answers[-1])["error"]["message"]
    assert _login_events(harness) == {"panel.login_failed": SECRET_FAILURES_PER_MINUTE}
