"""Sending a notification's request: through ``curl``, or a small HTTP/1.1 client of our own.

The router builds carry no OpenSSL (``_ssl`` would add megabytes to the artifact), and most
providers are HTTPS, so the device's own tools carry TLS:

- ``curl`` (OpenWrt: ``opkg install curl``, with mbedTLS or wolfSSL and ``ca-bundle``): HTTP,
  HTTPS, SMTP and SMTPS. Everything it is told comes on its standard input as a config file
  (``curl -q -K -``): the URL (a Telegram token is in its path), the headers, the body, the SMTP
  login. Its argv, which every local user can read in ``/proc``, is only ``curl -q -K -``. A mail
  is handed over in a 0600 file inside a fresh 0700 directory, removed after the send.
- The built-in client: plain ``http://`` over a socket (a self-hosted ntfy or Gotify on the LAN,
  the tests' receivers), and ``https://`` only where the interpreter has ``ssl`` (a host build
  run from a clone; the frozen artifacts do not). ``ssl`` is looked up at run time, never imported
  by name, so the artifact's build never pulls it in.
- ``uclient-fetch`` (OpenWrt's own) is detected and reported by ``check``, but not used: it takes
  the URL only as an argument (where a token would be visible to every user) and cannot set the
  headers the providers need.

Certificates are always checked: a channel's ``ca_file`` adds a CA (a self-signed server); nothing
turns the check off.
"""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import subprocess
import tempfile
from urllib.parse import urlsplit

import msgspec

from edge_runtime.contract.notifications import (
    SEND_TIMEOUT_S,
    NotifySendError,
    NotifyTransportUnavailableError,
)
from edge_runtime.contract.notify_channels import USER_AGENT, HttpRequest, MailRequest, Request

#: The most of a provider's answer read (its status and a verdict need a few hundred bytes).
MAX_ANSWER_BYTES = 64 * 1024
#: curl's exit codes after which another try cannot help: a certificate that does not verify, a
#: CA file it cannot read, a login the server refused.
_CURL_FINAL = {58: "client certificate problem", 60: "the server's certificate did not verify",
               77: "the CA file could not be read", 67: "the login was refused", 3: "the URL is malformed",
               1: "the protocol is not supported by this curl"}
_STATUS_MARK = b"\n@@edge-runtime-status:"


class Transports(msgspec.Struct, frozen=True, kw_only=True):
    """What this device can send through (``check`` prints it)."""

    curl: str | None
    curl_protocols: list[str]
    curl_tls: str | None
    uclient_fetch: str | None
    python_ssl: bool

    def describe(self) -> str:
        parts = []
        if self.curl:
            parts.append(f"curl ({self.curl}; TLS: {self.curl_tls or 'none'}; "
                         f"{', '.join(p for p in self.curl_protocols if p in ('http', 'https', 'smtp', 'smtps'))})")
        parts.append("built-in HTTP" + (" and HTTPS (Python ssl)" if self.python_ssl else " (no TLS)"))
        if self.uclient_fetch:
            parts.append(f"uclient-fetch ({self.uclient_fetch}: found, not used: it takes URLs only as arguments)")
        return "; ".join(parts)

    def https(self) -> bool:
        return "https" in self.curl_protocols or self.python_ssl


def _python_ssl():
    try:
        return importlib.import_module("ssl")
    except ImportError:
        return None


def detect(path: str | None = None) -> Transports:
    """Look for curl (and what it speaks), uclient-fetch and Python's ssl on ``path`` (the
    service's PATH by default)."""
    curl = shutil.which("curl", path=path)
    protocols: list[str] = []
    tls = None
    if curl:
        try:
            done = subprocess.run([curl, "-q", "--version"], capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            curl = None
        else:
            for line in done.stdout.decode("utf-8", "replace").splitlines():
                if line.startswith("Protocols:"):
                    protocols = line.split(":", 1)[1].split()
                elif line.startswith("curl "):
                    words = line.split()
                    tls = next((w for w in words if w.split("/")[0].lower() in (
                        "openssl", "mbedtls", "wolfssl", "gnutls", "libressl", "boringssl", "rustls", "bearssl")),
                        None)
    return Transports(curl=curl, curl_protocols=protocols, curl_tls=tls,
                      uclient_fetch=shutil.which("uclient-fetch", path=path), python_ssl=_python_ssl() is not None)


def _quoted(value: str) -> str:
    """A curl config value in double quotes (its escapes: backslash, quote, tab, newline, CR)."""
    if "\0" in value:
        raise NotifySendError("a value with a NUL byte cannot be sent")
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t").replace("\n", "\\n")
               .replace("\r", "\\r").replace("\v", "\\v"))
    return f'"{escaped}"'


def _config(lines: list[tuple[str, str]]) -> bytes:
    return "".join(f"{key} = {_quoted(value)}\n" for key, value in lines).encode("utf-8", "surrogateescape")


def _ca_lines(ca_file: str) -> list[tuple[str, str]]:
    return [("cacert", ca_file)] if ca_file else []


def _run_curl(curl: str, config: bytes, timeout_s: int) -> bytes:
    try:
        done = subprocess.run([curl, "-q", "-K", "-"], input=config, capture_output=True,
                              timeout=timeout_s + 10, check=False, env=_curl_env())
    except subprocess.TimeoutExpired:
        raise NotifySendError(f"curl did not finish within {timeout_s + 10} s", retryable=True) from None
    except OSError as exc:
        raise NotifyTransportUnavailableError(f"curl could not be run: {exc}") from exc
    if done.returncode != 0:
        error = done.stderr.decode("utf-8", "replace").strip().splitlines()
        detail = error[-1].removeprefix("curl: ") if error else f"exit {done.returncode}"
        final = _CURL_FINAL.get(done.returncode)
        raise NotifySendError(f"curl: {final + ': ' if final else ''}{detail}", retryable=final is None)
    return done.stdout


def _curl_env() -> dict[str, str]:
    """curl's environment: the service's (a proxy setting still applies), without a CURL_HOME or
    HOME whose .curlrc could add options (``-q`` already skips it; belt and braces)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CURL_HOME",)}
    env["HOME"] = "/nonexistent"
    return env


def send_http(transports: Transports, request: HttpRequest, *, ca_file: str = "",
              timeout_s: int = SEND_TIMEOUT_S) -> tuple[int, bytes]:
    """Send it; the HTTP status and the start of the answer.

    Raises:
        NotifyTransportUnavailableError: nothing here sends this URL's scheme.
        NotifySendError: it could not be sent (retryable: a network error, a timeout).
    """
    scheme = urlsplit(request.url).scheme.lower()
    if scheme not in ("http", "https"):
        raise NotifySendError("a channel's URL must begin with http:// or https://")
    if transports.curl and scheme in transports.curl_protocols:
        lines = [("url", request.url), ("request", request.method), ("user-agent", USER_AGENT),
                 ("max-time", str(timeout_s)), ("connect-timeout", "15"), ("max-filesize", str(MAX_ANSWER_BYTES)),
                 ("proto", "=http,https"), ("write-out", _STATUS_MARK.decode() + "%{http_code}"),
                 *_ca_lines(ca_file), *(("header", f"{name}: {value}") for name, value in request.headers),
                 ("data-raw", request.body.decode("utf-8", "surrogateescape"))]
        config = _config(lines) + b"silent\nshow-error\n"
        out = _run_curl(transports.curl, config, timeout_s)
        answer, mark, code = out.rpartition(_STATUS_MARK)
        if not mark or not code.strip().isdigit():
            raise NotifySendError("curl gave no HTTP status", retryable=True)
        return int(code), answer[:MAX_ANSWER_BYTES]
    if scheme == "https" and not transports.python_ssl:
        raise NotifyTransportUnavailableError(
            "no HTTPS transport on this device: install curl (OpenWrt: opkg install curl ca-bundle)")
    return _builtin_http(request, ca_file=ca_file, timeout_s=timeout_s)


def _builtin_http(request: HttpRequest, *, ca_file: str, timeout_s: int) -> tuple[int, bytes]:
    parts = urlsplit(request.url)
    host = parts.hostname or ""
    if not host:
        raise NotifySendError(f"no host in the URL of {parts.scheme}://…")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = host if parts.port is None else f"{host}:{parts.port}"
    if ":" in host and not host.startswith("["):
        host_header = f"[{host}]" if parts.port is None else f"[{host}]:{parts.port}"
    head = [f"{request.method} {target} HTTP/1.1", f"Host: {host_header}", f"User-Agent: {USER_AGENT}",
            "Connection: close", f"Content-Length: {len(request.body)}",
            *(f"{name}: {value}" for name, value in request.headers)]
    if any("\r" in line or "\n" in line for line in head):
        raise NotifySendError("a header holds a line break")
    data = ("\r\n".join(head) + "\r\n\r\n").encode("utf-8") + request.body
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        raise NotifySendError(f"connecting to {host}:{port} failed: {exc}", retryable=True) from exc
    try:
        if parts.scheme == "https":
            ssl = _python_ssl()
            context = ssl.create_default_context(cafile=ca_file or None)
            try:
                sock = context.wrap_socket(sock, server_hostname=host)
            except ssl.SSLCertVerificationError as exc:
                raise NotifySendError(f"the server's certificate did not verify: {exc.verify_message}") from exc
        sock.settimeout(timeout_s)
        sock.sendall(data)
        received = bytearray()
        while len(received) < MAX_ANSWER_BYTES + 16 * 1024:
            chunk = sock.recv(16 * 1024)
            if not chunk:
                break
            received += chunk
    except NotifySendError:
        raise
    except OSError as exc:
        raise NotifySendError(f"sending to {host}:{port} failed: {exc}", retryable=True) from exc
    finally:
        sock.close()
    return _parse_answer(bytes(received))


def _parse_answer(raw: bytes) -> tuple[int, bytes]:
    head, sep, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if not sep or len(status_line) < 2 or not status_line[1].isdigit():
        raise NotifySendError("the server's answer is not HTTP", retryable=True)
    if b"transfer-encoding: chunked" in head.lower():
        body = _unchunk(body)
    return int(status_line[1]), body[:MAX_ANSWER_BYTES]


def _unchunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, sep, rest = data.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0], 16)
        except ValueError:
            break
        if not sep or size == 0:
            break
        out += rest[:size]
        data = rest[size + 2:]
    return bytes(out)


def send_mail(transports: Transports, request: MailRequest, *, ca_file: str = "",
              timeout_s: int = SEND_TIMEOUT_S) -> None:
    """Hand the mail to the SMTP server through curl.

    Raises:
        NotifyTransportUnavailableError: no curl that speaks SMTP here.
        NotifySendError: the server refused it or could not be reached.
    """
    scheme = urlsplit(request.url).scheme
    if not transports.curl or scheme not in transports.curl_protocols:
        raise NotifyTransportUnavailableError(
            f"e-mail needs curl with {scheme} (OpenWrt: opkg install curl ca-bundle)")
    private = tempfile.mkdtemp(prefix="edge-runtime-mail-")  # 0700, a fresh name: no other user enters
    try:
        message_path = os.path.join(private, "message")
        fd = os.open(message_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(request.message)
        lines = [("url", request.url), ("mail-from", request.mail_from),
                 *(("mail-rcpt", rcpt) for rcpt in request.recipients), ("upload-file", message_path),
                 ("max-time", str(timeout_s)), ("connect-timeout", "15"), *_ca_lines(ca_file)]
        if request.user:
            lines.append(("user", f"{request.user}:{request.password}"))
        config = _config(lines) + b"silent\nshow-error\n" + (b"ssl-reqd\n" if request.require_tls else b"")
        _run_curl(transports.curl, config, timeout_s)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def send(transports: Transports, request: Request, *, ca_file: str = "") -> tuple[int, bytes]:
    """Send an HTTP request or a mail; a mail handed over reads as status 250."""
    if isinstance(request, MailRequest):
        send_mail(transports, request, ca_file=ca_file)
        return 250, b""
    return send_http(transports, request, ca_file=ca_file)
