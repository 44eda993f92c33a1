"""A provider stand-in for the notification tests: an HTTP(S) server on 127.0.0.1 that records
every request and answers what the test scripted (by default what the real provider answers when
it took a message)."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple


class Received(NamedTuple):
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


#: What each provider answers when it took the message (its documented success shape).
ACCEPTED = {
    "webhook": (200, b"ok"),
    "bark": (200, b'{"code":200,"message":"success"}'),
    "telegram": (200, b'{"ok":true,"result":{"message_id":1}}'),
    "wecom": (200, b'{"errcode":0,"errmsg":"ok"}'),
    "dingtalk": (200, b'{"errcode":0,"errmsg":"ok"}'),
    "feishu": (200, b'{"code":0,"msg":"success","data":{}}'),
    "serverchan": (200, b'{"code":0,"message":"","data":{"pushid":"1","readkey":"x"}}'),
    "pushplus": (200, b'{"code":200,"msg":"ok","data":"x"}'),
    "ntfy": (200, b'{"id":"abc","event":"message"}'),
    "gotify": (200, b'{"id":7,"appid":1,"message":"m","title":"t"}'),
}


class Receiver:
    """``with Receiver("telegram") as r: ... r.url ... r.received``; ``r.answers`` is a list of
    (status, body) used first, one per request, before the kind's accepted answer; ``r.hold`` an
    event the handler waits for before answering (a provider that hangs)."""

    def __init__(self, kind: str = "webhook", *, tls: tuple[Path, Path] | None = None) -> None:
        self.kind = kind
        self.received: list[Received] = []
        self.answers: list[tuple[int, bytes]] = []
        self.lock = threading.Lock()
        self.arrived = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                return

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with receiver.lock:
                    receiver.received.append(Received(self.command, self.path, dict(self.headers.items()), body))
                    status, answer = receiver.answers.pop(0) if receiver.answers else ACCEPTED[receiver.kind]
                receiver.arrived.set()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_POST = do_PUT = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (and localhost) and its key, made by the openssl command."""
    if shutil.which("openssl") is None:
        import pytest

        pytest.skip("needs the openssl command to make a test certificate")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return cert, key


class SmtpReceiver:
    """A mail server stand-in: speaks enough SMTP (EHLO, STARTTLS when given a certificate, AUTH
    PLAIN, MAIL, RCPT, DATA) to take one mail at a time; records the envelope, the login and the
    message."""

    def __init__(self, *, tls: tuple[Path, Path] | None = None) -> None:
        import socket

        self.tls = tls
        self.mails: list[dict] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> SmtpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.listener.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            try:
                self._session(conn)
            except (OSError, ssl.SSLError):
                pass  # a client that went away: the test sees what was recorded
            finally:
                conn.close()

    def _session(self, conn) -> None:
        opened = [conn]
        try:
            self._talk(conn, opened)
        finally:
            for sock in opened[1:]:
                sock.close()

    def _talk(self, conn, opened: list) -> None:
        reader = conn.makefile("rb")
        mail: dict = {"rcpt": [], "tls": False}

        def say(line: str) -> None:
            conn.sendall(line.encode() + b"\r\n")

        say("220 test ESMTP")
        while True:
            line = reader.readline().decode().rstrip("\r\n")
            if not line:
                return
            verb = line.split(" ", 1)[0].upper()
            if verb in ("EHLO", "HELO"):
                extras = ["STARTTLS"] if self.tls and not mail["tls"] else []
                for extra in [*extras, "AUTH PLAIN LOGIN"]:
                    say(f"250-{extra}")
                say("250 OK")
            elif verb == "STARTTLS":
                say("220 go ahead")
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.load_cert_chain(str(self.tls[0]), str(self.tls[1]))
                conn = context.wrap_socket(conn, server_side=True)
                opened.append(conn)
                reader.close()
                reader = conn.makefile("rb")
                mail["tls"] = True
            elif verb == "AUTH":
                words = line.split()
                import base64

                if len(words) > 2:
                    response = words[2]
                else:  # no initial response: ask for it
                    say("334 ")
                    response = reader.readline().decode().strip()
                mail["login"] = base64.b64decode(response).split(b"\0")[1:]
                say("235 accepted")
            elif verb == "MAIL":
                mail["from"] = line.split(":", 1)[1].strip()
                say("250 OK")
            elif verb == "RCPT":
                mail["rcpt"].append(line.split(":", 1)[1].strip())
                say("250 OK")
            elif verb == "DATA":
                say("354 go")
                data = bytearray()
                while not data.endswith(b"\r\n.\r\n"):
                    chunk = reader.readline()
                    if not chunk:
                        return
                    data += chunk
                mail["message"] = bytes(data[:-5])
                self.mails.append(mail)
                mail = {"rcpt": [], "tls": mail["tls"]}
                say("250 queued")
            elif verb == "QUIT":
                say("221 bye")
                return
            else:
                say("250 OK")
