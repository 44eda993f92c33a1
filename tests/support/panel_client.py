"""A raw-socket client of the web panel for the e2e tests: bytes out exactly as written (no
library normalises a path or a header), the status line and headers back."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from typing import Any

import msgspec

PASSWORD = "a panel password"


def start_panel(harness: Any, *flags: str) -> tuple[Any, int]:
    """Set the password, start ``serve`` with the panel on a free loopback port; (service, port)."""
    subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(harness.db_path), "panel", "password"],
                   input=PASSWORD + "\n", text=True, env=harness.env, check=True, capture_output=True, timeout=60)
    service = harness.serve("--panel-listen", "127.0.0.1:0", *flags)
    service.wait_log("panel.started")
    port = int(re.search(r"panel\.started listen=127\.0\.0\.1:(\d+)", service.log()).group(1))
    return service, port


def connect(port: int, *, source: str = "127.0.0.1", timeout: float = 5.0) -> socket.socket:
    """A connection to the panel from ``source``: any 127.0.0.0/8 address is a peer of its own
    (Linux routes the whole block to loopback), so one test can be many clients."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # The local port is picked at connect, for the whole address pair: one picked at bind can be
        # a pair the panel still holds in TIME_WAIT from a connection it closed, and then the
        # handshake stalls for a second.
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((source, 0))
        sock.settimeout(timeout)
        sock.connect(("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return sock


def exchange(port: int, data: bytes, *, timeout: float = 5.0, pause: float = 0.0, source: str = "127.0.0.1") -> bytes:
    """Send ``data`` and read until the server closes (or ``timeout``)."""
    with connect(port, source=source, timeout=timeout) as sock:
        sock.sendall(data)
        if pause:
            time.sleep(pause)
        return read_response(sock, timeout=timeout)


def read_response(sock: socket.socket, *, timeout: float = 5.0) -> bytes:
    """What arrives on ``sock`` until one whole response, the server's close or ``timeout``
    (a connection reset ends it too: b"" is a connection closed unanswered)."""
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        if _complete(b"".join(chunks)):
            break
    return b"".join(chunks)


def _complete(data: bytes) -> bool:
    """One whole response with a Content-Length body has arrived."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    found = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    return found is not None and len(body) >= int(found.group(1))


def statuses(data: bytes) -> list[int]:
    return [int(code) for code in re.findall(rb"(?m)^HTTP/1\.[01] (\d{3})", data)]


def status(data: bytes) -> int:
    found = statuses(data)
    assert found, f"no HTTP response: {data[:200]!r}"
    return found[0]


def header(data: bytes, name: str) -> list[str]:
    head = data.partition(b"\r\n\r\n")[0].decode("latin-1")
    return [line.split(":", 1)[1].strip() for line in head.split("\r\n")[1:] if line.lower().startswith(name.lower() + ":")]


def body_json(data: bytes) -> Any:
    return msgspec.json.decode(data.partition(b"\r\n\r\n")[2])


def request(port: int, method: str, target: str, *, body: bytes | None = None, cookie: str | None = None,
            csrf: bool = True, host: str | None = None, extra: str = "", source: str = "127.0.0.1") -> bytes:
    return exchange(port, request_bytes(port, method, target, body=body, cookie=cookie, csrf=csrf, host=host,
                                        extra=extra), source=source)


def api(port: int, cookie: str, method: str, target: str, body: Any = None) -> tuple[int, Any]:
    """One call of the panel's JSON API with a session: its status and decoded body."""
    response = request(port, method, target, cookie=cookie,
                       body=None if body is None else msgspec.json.encode(body))
    return status(response), body_json(response)


def request_bytes(port: int, method: str, target: str, *, body: bytes | None = None, cookie: str | None = None,
                  csrf: bool = True, host: str | None = None, extra: str = "") -> bytes:
    """The bytes of one request as :func:`request` sends it (``Connection: close``)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {f'127.0.0.1:{port}' if host is None else host}"]
    if cookie:
        lines.append(f"Cookie: edge_panel={cookie}")
    if csrf and method not in ("GET", "HEAD"):
        lines.append("X-Edge-Panel: 1")
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines.append("Connection: close")
    text = "\r\n".join(lines) + "\r\n" + extra + "\r\n"
    return text.encode() + (body or b"")


def login(port: int, password: str = PASSWORD) -> str:
    response = request(port, "POST", "/api/login", body=msgspec.json.encode({"password": password}))
    assert status(response) == 200, response
    cookie = header(response, "set-cookie")[0]
    return cookie.split(";")[0].split("=", 1)[1]
