"""Connection floods against a running ``serve`` over real sockets: the owner still gets in.

Every 127.0.0.0/8 address reaches the loopback listener, so one test plays many clients, each a
peer of its own to the panel. Connections that never send a whole request (nothing, or half a
request), from one address or from many, held or opened again and again, never keep the owner's
requests from being answered (the policy's own decisions are unit tests:
tests/panel/test_panel_connections.py).

``--fault-mode=long`` floods for longer.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.panel_client import connect, request, start_panel, statuses

from edge_runtime.panel.server import MAX_CONNECTIONS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def long_mode(request: pytest.FixtureRequest) -> bool:
    return request.config.getoption("--fault-mode") == "long"


@pytest.fixture
def panel(harness):
    service, port = start_panel(harness)
    yield port
    assert service.process.poll() is None, service.log()  # the service outlived the flood


def _hold(port: int, sources: list[str], count: int, *, partial: bool) -> list[socket.socket]:
    """``count`` connections from each source that never send a whole request (nothing at all, or
    the first lines of one)."""
    held = []
    for source in sources:
        for _ in range(count):
            sock = connect(port, source=source)
            if partial:
                sock.sendall(f"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
            held.append(sock)
    return held


def _owner_requests(port: int, source: str, count: int) -> list[int]:
    """The statuses of ``count`` requests for the page from ``source``, one connection each (0: the
    connection was closed unanswered)."""
    return [(statuses(request(port, "GET", "/", source=source)) or [0])[0] for _ in range(count)]


@pytest.mark.e2e
@pytest.mark.parametrize("owner", ["127.0.0.1", "127.0.3.1"], ids=["same-address", "other-address"])
@pytest.mark.parametrize("partial", [False, True], ids=["idle", "half-a-request"])
def test_connections_held_by_one_client_do_not_lock_the_owner_out(panel, owner, partial) -> None:
    """The reported attack: the whole connection limit held from one address. The owner on
    another address (the LAN) or on the same one (an SSH tunnel arrives from 127.0.0.1, as does
    every local user) gets all 20 requests answered."""
    port = panel
    held = _hold(port, ["127.0.0.1"], MAX_CONNECTIONS, partial=partial)
    try:
        time.sleep(0.3)  # all accepted before the owner comes
        assert _owner_requests(port, owner, 20) == [200] * 20
    finally:
        for sock in held:
            sock.close()


@pytest.mark.e2e
def test_connections_held_from_many_addresses_do_not_lock_the_owner_out(panel) -> None:
    port = panel
    held = _hold(port, [f"127.0.4.{i + 1}" for i in range(MAX_CONNECTIONS)], 1, partial=False)
    try:
        time.sleep(0.3)
        assert _owner_requests(port, "127.0.0.1", 20) == [200] * 20
    finally:
        for sock in held:
            sock.close()


#: A flood from another process (a thread of the test would share its interpreter lock with the
#: owner's requests and flood little): connections from each address in turn, each sending half a
#: request, the newest 32 kept open, for argv[2] seconds; prints how many it opened.
_FLOOD = """
import sys, time
from collections import deque
from tests.support.panel_client import connect
port, seconds, sources = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
kept, opened, until = deque(), 0, time.monotonic() + seconds
while time.monotonic() < until:
    for source in sources:
        try:
            sock = connect(port, source=source, timeout=2)
            sock.sendall(b"GET / HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n")
        except OSError:
            continue
        opened += 1
        kept.append(sock)
        if len(kept) > 32:
            kept.popleft().close()
print(opened)
"""


@pytest.mark.e2e
def test_a_connection_flood_does_not_lock_the_owner_out(panel, long_mode) -> None:
    """Connections opened again and again from three addresses (together more than the limit),
    while the owner, on a fourth, asks for the page: every one of the owner's requests is answered."""
    port = panel
    seconds = 20.0 if long_mode else 2.0
    flood = subprocess.Popen([sys.executable, "-c", _FLOOD, str(port), str(seconds), "127.0.5.1", "127.0.5.2",
                              "127.0.5.3"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    answered: list[int] = []
    try:
        time.sleep(0.3)
        while flood.poll() is None:
            answered += _owner_requests(port, "127.0.6.1", 1)
        opened = int(flood.communicate(timeout=10)[0])
    finally:
        flood.kill()
        flood.wait()
    assert opened > MAX_CONNECTIONS, opened  # it was a flood
    assert answered and answered == [200] * len(answered)
