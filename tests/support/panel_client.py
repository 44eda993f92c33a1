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


def exchange(port: int, data: bytes, *, timeout: float = 5.0, pause: float = 0.0) -> bytes:
    """Send ``data`` and read until the server closes (or ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        if pause:
            time.sleep(pause)
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
            csrf: bool = True, host: str | None = None, extra: str = "") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {f'127.0.0.1:{port}' if host is None else host}"]
    if cookie:
        lines.append(f"Cookie: edge_panel={cookie}")
    if csrf and method not in ("GET", "HEAD"):
        lines.append("X-Edge-Panel: 1")
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines.append("Connection: close")
    text = "\r\n".join(lines) + "\r\n" + extra + "\r\n"
    return exchange(port, text.encode() + (body or b""))


def login(port: int, password: str = PASSWORD) -> str:
    response = request(port, "POST", "/api/login", body=msgspec.json.encode({"password": password}))
    assert status(response) == 200, response
    cookie = header(response, "set-cookie")[0]
    return cookie.split(";")[0].split("=", 1)[1]
