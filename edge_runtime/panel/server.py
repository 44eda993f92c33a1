"""The panel's HTTP/1.1 server: one thread of the service process, one ``selectors`` loop, ``h11``.

It runs beside the service loop, never in it: the service loop never waits for a browser, and the
panel's own database connection writes in the same short transactions as the CLI (another
process would). A request is parsed by ``h11`` (sans-IO: it never touches a socket); this loop
feeds it bytes and enforces the limits: the header block (:data:`MAX_HEADER_BYTES`), the body
(``api.MAX_BODY_BYTES``), the time a request may take to arrive (:data:`REQUEST_TIMEOUT_S`: a
slow client is cut off with 408), an idle keep-alive (:data:`IDLE_TIMEOUT_S`) and the connections
(``connections.make_room``: a share per peer; those that have not sent a whole request give way
to new ones).

Order of a request, all before its body is read: parse the request line and headers (h11) ->
match the route table (``routes.match``: 404 for anything not in it) -> the gate (``routes.gate``:
host, CSRF, session) -> for a route that checks a secret, a peer the throttle would refuse is
refused here -> read the body (64 KiB at most) -> the handler, where a secret check is taken from
the throttle before the secret is compared (``secret_throttle``: one per peer per window, whatever
raced to it). A refusal closes the connection. An error a handler did not expect is a 500 with a
journal line; it never ends the panel, and nothing the panel does can stop the service.

The OpenAPI (``/open/...``, docs/qinglong.md) has its own exact table and gate on the same
listener, limits and loop, when ``serve`` hands the server its face (``open_api``: QingLong's
shapes stay in ``edge_runtime/qinglong``, which the panel never imports; without one, ``/open/``
is the panel's 404): the face's ``match`` (404 for anything not in its table) -> the
``Host`` check -> the token request's throttle, or an app's bearer token holding the route's
scope (401 otherwise; a route refused on purpose is 403 for any valid token) -> the body -> the
handler (``qinglong.openapi``). It answers in QingLong's shape, ``{"code": ..., "message": ...}``.
A session cookie opens no ``/open/`` route, an app token no ``/api/`` one; the page's CSRF gate
does not apply (clients send no ``X-Edge-Panel``, and a browser cannot send the bearer token
cross-site without a CORS preflight, which is never answered).
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.panel import api as panel_api
from edge_runtime.panel.connections import MAX_CONNECTIONS, make_room
from edge_runtime.panel.h11_loader import load_h11
from edge_runtime.panel.routes import SESSION_COOKIE, Match, Refusal, gate, host_is_this_device, match
from edge_runtime.panel.secret_throttle import SecretCheckThrottle, SecretCheckThrottledError

MAX_HEADER_BYTES = 8 * 1024
REQUEST_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 30.0
#: Connections the kernel completes before the loop accepts them. Above MAX_CONNECTIONS: every one
#: is accepted, and judged, at once; a burst beyond the queue loses handshakes (retried after 1 s).
LISTEN_BACKLOG = 128
#: After a refusal, how long the rest of what the client sends is read and dropped before the
#: connection closes (closing at once could reset it before the client read the refusal).
LINGER_S = 2.0
_TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n"
                     b"cache-control: no-store\r\n\r\n")
_RECV = 16 * 1024

_CSP = (b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        b"base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_COMMON = [(b"content-security-policy", _CSP), (b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
           (b"referrer-policy", b"no-referrer"), (b"server", b"edge-runtime")]

h11 = load_h11()

_STATIC_DIR = Path(__file__).resolve().parent / "static"
#: The page's files: path -> (file, content type).
STATIC_FILES = {
    b"/": ("index.html", b"text/html; charset=utf-8"),
    b"/panel.css": ("panel.css", b"text/css; charset=utf-8"),
    b"/panel.js": ("panel.js", b"text/javascript; charset=utf-8"),
    b"/text.js": ("text.js", b"text/javascript; charset=utf-8"),
    b"/favicon.svg": ("favicon.svg", b"image/svg+xml"),
}


class _Connection:
    """One client connection (``connections.Held``: what decides whether it gives way to a new one)."""

    __slots__ = ("sock", "peer", "http", "out", "deadline", "request", "matched", "body", "close_after", "head",
                 "draining", "finished", "received", "waiting_since", "app")

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock, self.peer = sock, peer
        self.http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        self.out = bytearray()
        self.waiting_since = time.monotonic()
        self.deadline = self.waiting_since + REQUEST_TIMEOUT_S
        self.request: h11.Request | None = None
        #: The panel's route, or the OpenAPI face's.
        self.matched: Any = None
        #: The app whose token opened the OpenAPI request being read.
        self.app: Any = None
        self.body = bytearray()
        self.close_after = False
        self.head = False
        #: A refusal was sent and the write side shut: what arrives is dropped until LINGER_S.
        self.draining = False
        #: Close now (the peer is gone).
        self.finished = False
        #: Bytes of a request that is not complete yet have arrived.
        self.received = False

    @property
    def waiting(self) -> bool:
        # A whole request is answered as soon as it is read: only an answer still being sent is work.
        return not self.out

    @property
    def lingering(self) -> bool:
        return self.draining


class PanelServer:
    """The panel: bound by :meth:`start` (in the service's thread), served in a thread of its own."""

    def __init__(self, *, host: str, port: int, db_path: str, log_dir: Path, config: Any, journal: Any,
                 open_store: Callable[[], Any], open_api: Callable[..., Any] | None = None,
                 subscription_add: Callable[[Any, bytes], Any] | None = None) -> None:
        """``open_api(store, log_dir=...)``: the OpenAPI's face over the panel's store, with its
        route table (``match``, its ``Match`` and ``Refusal``), its handlers (``answer``) and its
        refusals (``error_status``, ``error_message``); None serves no ``/open/`` route.
        ``subscription_add(store, body)``: adds the subscription a JSON body describes (QingLong's
        folder naming and this program's path are the composition root's); None: not offered."""
        self.host, self.port, self.db_path, self.log_dir = host, port, db_path, log_dir
        self.config, self.journal, self._open_store = config, journal, open_store
        self._open_api = open_api
        self._subscription_add = subscription_add
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop_reader, self._stop_writer = socket.socketpair()
        #: Every secret this server checks (the login's password, an app's client secret) is
        #: throttled by this one.
        self._secrets = SecretCheckThrottle()
        self._static: dict[bytes, tuple[bytes, bytes]] = {}
        hostname = socket.gethostname().lower()
        self._device_names = frozenset(n for n in (hostname, f"{hostname}.lan", self.host) if n)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Check the password, load the page, bind and start serving.

        Raises:
            EdgeRuntimeError: no password is set (``PANEL_PASSWORD_UNSET``), the address cannot be
                bound (``PANEL_LISTEN_FAILED``), the page's files are missing.
        """
        from edge_runtime.local.panel_auth import LocalPanelAuth

        store = self._open_store()
        try:
            LocalPanelAuth(store.db).require_password()
        finally:
            store.close()
        for path, (name, kind) in STATIC_FILES.items():
            try:
                self._static[path] = ((_STATIC_DIR / name).read_bytes(), kind)
            except OSError as exc:
                raise PanelStartError(f"the panel's file {name} is missing from this build: {exc}") from None
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(LISTEN_BACKLOG)
            listener.setblocking(False)
        except OSError as exc:
            listener.close()
            raise PanelStartError(f"cannot listen on {self.host}:{self.port} (panel_listen): {exc.strerror or exc}") from None
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._thread = threading.Thread(target=self._run, name="panel", daemon=True)
        self._thread.start()
        self.journal.info("panel.started", listen=f"{self.host}:{self.port}")

    def stop(self) -> None:
        if self._thread is not None:
            self._stop_writer.send(b"x")
            self._thread.join(5.0)
            self._thread = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._stop_reader.close()
        self._stop_writer.close()

    def _run(self) -> None:
        try:
            store = self._open_store()
        except EdgeRuntimeError as exc:
            self.journal.error("panel.failed", error=exc.code, detail=str(exc))
            return
        try:
            self._serve(store)
        except Exception as exc:  # noqa: BLE001  (the panel's boundary: it ends, logged; the service goes on)
            self.journal.error("panel.failed", error=type(exc).__name__, detail=str(exc))
        finally:
            store.close()

    # ------------------------------------------------------------------ the loop

    def _serve(self, store: Any) -> None:
        from edge_runtime.local.panel_apps import LocalPanelApps
        from edge_runtime.local.panel_auth import LocalPanelAuth

        self._api = panel_api.Api(store, db_path=self.db_path, log_dir=self.log_dir, config=self.config,
                                  subscription_add=self._subscription_add)
        self._open = None if self._open_api is None else self._open_api(store, log_dir=self.log_dir)
        self._auth = LocalPanelAuth(store.db)
        self._apps = LocalPanelApps(store.db)
        self._store = store
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ, None)
        selector.register(self._stop_reader, selectors.EVENT_READ, None)
        connections: dict[socket.socket, _Connection] = {}
        try:
            while True:
                now = time.monotonic()
                timeout = min((c.deadline for c in connections.values()), default=now + 60.0) - now
                for key, mask in selector.select(max(0.0, timeout)):
                    if key.fileobj is self._stop_reader:
                        return
                    if key.fileobj is self._listener:
                        for connection in self._accept(selector, connections):
                            # Its request is often in already: read now, before a newer one may need room.
                            if connections.get(connection.sock) is connection:  # not given way to a later one
                                self._step(selector, connections, connection, readable=True)
                        continue
                    connection = connections.get(key.fileobj)
                    if connection is not None:
                        self._step(selector, connections, connection, readable=bool(mask & selectors.EVENT_READ))
                now = time.monotonic()
                for connection in [c for c in connections.values() if c.deadline <= now]:
                    if not connection.draining and not connection.close_after:
                        # A slow client: what it sent so far is not a whole request.
                        if connection.http.our_state is h11.SEND_RESPONSE:
                            self._refuse(connection, Refusal(408, "REQUEST_TIMEOUT", "the request took too long to arrive"))
                        elif connection.received:
                            connection.out += _TIMEOUT_RESPONSE
                        self._flush(connection)
                    self._close(selector, connections, connection)
        finally:
            for connection in list(connections.values()):
                self._close(selector, connections, connection)
            selector.close()

    def _step(self, selector: selectors.BaseSelector, connections: dict, connection: _Connection, *,
              readable: bool) -> None:
        """Read what ``connection`` sent (when ``readable``), answer it, send what is queued."""
        if readable:
            self._readable(connection)
        if not self._flush(connection) or connection.finished:
            self._close(selector, connections, connection)
            return
        if connection.close_after and not connection.out and not connection.draining:
            connection.draining = True
            connection.deadline = time.monotonic() + LINGER_S
            try:
                connection.sock.shutdown(socket.SHUT_WR)
            except OSError:
                self._close(selector, connections, connection)
                return
        selector.modify(connection.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if connection.out else 0))

    def _accept(self, selector: selectors.BaseSelector, connections: dict) -> list[_Connection]:
        """Accept pending connections, each that gets room (``connections.make_room``); the new ones.

        At most MAX_CONNECTIONS at a time (more would only make room for one another): a flood
        faster than the loop cannot keep it from serving those already in."""
        accepted: list[_Connection] = []
        for _ in range(MAX_CONNECTIONS):
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # out of descriptors: logged, the next accept may work
                self.journal.warning("panel.accept_failed", detail=str(exc))
                break
            peer = str(address[0])
            room = make_room(peer, connections.values())
            if not room.admit:
                _reset(sock)  # every connection is answering: refused at once, nothing read
                continue
            if room.evict is not None:
                self._close(selector, connections, room.evict, reset=True)
            sock.setblocking(False)
            connection = _Connection(sock, peer)
            connections[sock] = connection
            selector.register(sock, selectors.EVENT_READ, None)
            accepted.append(connection)
        return accepted

    def _close(self, selector: selectors.BaseSelector, connections: dict, connection: _Connection, *,
               reset: bool = False) -> None:
        connections.pop(connection.sock, None)
        try:
            selector.unregister(connection.sock)
        except (KeyError, ValueError):
            pass  # never registered or already gone
        if reset:
            _reset(connection.sock)
        else:
            connection.sock.close()

    def _flush(self, connection: _Connection) -> bool:
        """Send what is queued; False when the peer is gone."""
        while connection.out:
            try:
                sent = connection.sock.send(connection.out)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            del connection.out[:sent]
        return True

    def _readable(self, connection: _Connection) -> None:
        try:
            data = connection.sock.recv(_RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if connection.close_after:
            connection.finished = not data  # a refusal is on its way out; what comes is dropped
            return
        if not data and connection.http.their_state is h11.IDLE and not connection.received:
            connection.finished = True
            return
        if not connection.received:  # the first bytes of a request: it must be whole within the timeout
            connection.received = True
            connection.deadline = min(connection.deadline, time.monotonic() + REQUEST_TIMEOUT_S)
        connection.http.receive_data(data)
        self._process(connection)

    def _process(self, connection: _Connection) -> None:
        http = connection.http
        while not connection.close_after:
            try:
                event = http.next_event()
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint if 400 <= exc.error_status_hint < 500 else 400
                self._refuse(connection, Refusal(status, "BAD_REQUEST", "malformed HTTP request"))
                return
            if event is h11.NEED_DATA:
                return
            if event is h11.PAUSED:
                if http.our_state is h11.DONE and http.their_state is h11.DONE:
                    http.start_next_cycle()
                    connection.deadline = time.monotonic() + IDLE_TIMEOUT_S
                    connection.received = bool(http.trailing_data[0])
                    continue
                return
            if isinstance(event, h11.Request):
                self._request(connection, event)
            elif isinstance(event, h11.Data):
                connection.body += event.data
                if len(connection.body) > panel_api.MAX_BODY_BYTES:
                    self._refuse(connection, Refusal(413, "BODY_TOO_LARGE",
                                                     f"a request body is at most {panel_api.MAX_BODY_BYTES} bytes"))
                    return
            elif isinstance(event, h11.EndOfMessage):
                self._dispatch(connection)
            elif isinstance(event, h11.ConnectionClosed):
                connection.close_after = True
                return

    def _request(self, connection: _Connection, request: h11.Request) -> None:
        connection.request, connection.body = request, bytearray()
        connection.deadline = min(connection.deadline, time.monotonic() + REQUEST_TIMEOUT_S)
        connection.head = request.method == b"HEAD"
        connection.app = None
        if request.target.startswith(b"/open/") and self._open is not None:
            self._open_request(connection, request)
            return
        found = match(request.method, request.target)
        if isinstance(found, Refusal):
            self._refuse(connection, found)
            return
        headers = [(k, v) for k, v in request.headers]
        refusal = gate(found, headers, device_names=self._device_names, session_valid=self._session_valid)
        retry_after = None
        if refusal is None and found.route.checks_secret:
            # Spares reading a body that could not be checked; the check itself decides (in the handler).
            throttled = self._secrets.would_refuse(connection.peer)
            if throttled is not None:
                refusal, retry_after = _throttled(throttled), throttled.retry_after_s
        if refusal is None:
            lengths = [v for k, v in headers if k == b"content-length"]
            if lengths and lengths[0].isdigit() and int(lengths[0]) > panel_api.MAX_BODY_BYTES:
                refusal = Refusal(413, "BODY_TOO_LARGE", f"a request body is at most {panel_api.MAX_BODY_BYTES} bytes")
        if refusal is not None:
            self._refuse(connection, refusal, retry_after=retry_after)
            return
        connection.matched = found

    def _open_request(self, connection: _Connection, request: h11.Request) -> None:
        """The OpenAPI's gate (see the module's docstring): the request is read only when it passes."""
        face = self._open
        found = face.match(request.method, request.target)
        headers = list(request.headers)
        hosts = [v for k, v in headers if k == b"host"]
        if len(hosts) != 1 or not host_is_this_device(hosts[0], self._device_names):
            self._refuse_open(connection, 421, "this device answers only to its own address")
            return
        if isinstance(found, face.Refusal) and not found.on_purpose:
            self._refuse_open(connection, found.status, found.message)
            return
        if isinstance(found, face.Match) and found.route.scope is None:  # the token request
            throttled = self._secrets.would_refuse(connection.peer)
            if throttled is not None:
                self._refuse_open(connection, 429, str(throttled), retry_after=throttled.retry_after_s)
                return
        else:
            app, problem = self._bearer_app(headers)
            if app is None:
                self._refuse_open(connection, 401, problem)
                return
            if isinstance(found, face.Refusal):  # refused on purpose: the reason, to a valid token
                self._refuse_open(connection, 403, found.message)
                return
            if found.route.scope not in app.scopes:
                self._refuse_open(connection, 401, f"app {app.name}'s token does not open {found.route.scope.value} "
                                                   f"(its scopes: {', '.join(app.scopes) or 'none'})")
                return
            connection.app = app
        lengths = [v for k, v in headers if k == b"content-length"]
        if lengths and lengths[0].isdigit() and int(lengths[0]) > panel_api.MAX_BODY_BYTES:
            self._refuse_open(connection, 413, f"a request body is at most {panel_api.MAX_BODY_BYTES} bytes")
            return
        connection.matched = found

    def _bearer_app(self, headers: list[tuple[bytes, bytes]]) -> tuple[Any, str]:
        """The app of the request's ``Authorization: Bearer TOKEN``, or None and why."""
        values = [v for k, v in headers if k == b"authorization"]
        if not values:
            return None, "an app's token is needed: Authorization: Bearer TOKEN (from GET /open/auth/token)"
        scheme, _, token = values[0].partition(b" ")
        if len(values) != 1 or scheme.lower() != b"bearer" or not token.strip():
            return None, "the Authorization header must be one 'Bearer TOKEN'"
        try:
            text = token.strip().decode("ascii")
        except UnicodeDecodeError:
            return None, "the token is not valid; get one from GET /open/auth/token"
        checked = self._apps.check_token(text)
        if checked.app is None:
            return None, ("the token has expired; get a new one from GET /open/auth/token" if checked.expired
                          else "the token is not valid; get one from GET /open/auth/token")
        return checked.app, ""

    def _session_valid(self, token: str) -> bool:
        return len(token) <= 128 and self._auth.session_valid(token, self._store.now_ms())

    # ------------------------------------------------------------------ responses

    def _refuse(self, connection: _Connection, refusal: Refusal, *, retry_after: int | None = None) -> None:
        extra = [] if retry_after is None else [(b"retry-after", str(retry_after).encode())]
        self._respond(connection, refusal.status, _error_body(refusal.code, refusal.message), api=True,
                      extra=extra, close=True)

    def _refuse_open(self, connection: _Connection, status: int, message: str, *, retry_after: int | None = None) -> None:
        extra = [] if retry_after is None else [(b"retry-after", str(retry_after).encode())]
        self._respond(connection, status, _open_body(status, message), api=True, extra=extra, close=True)

    def _respond(self, connection: _Connection, status: int, body: bytes, *, api: bool,
                 kind: bytes = b"application/json", extra: list | None = None, close: bool = False) -> None:
        http = connection.http
        if http.our_state not in (h11.IDLE, h11.SEND_RESPONSE):  # IDLE: a request h11 refused before its end
            connection.close_after = True
            return
        headers = [*_COMMON, (b"content-type", kind), (b"content-length", str(len(body)).encode()),
                   (b"cache-control", b"no-store" if api else b"no-cache"), *(extra or [])]
        if close or http.their_state is not h11.DONE:
            headers.append((b"connection", b"close"))
            connection.close_after = True
        try:
            connection.out += http.send(h11.Response(status_code=status, headers=headers, reason=_reason(status)))
            if body and not connection.head:
                connection.out += http.send(h11.Data(data=body))
            connection.out += http.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            connection.close_after = True
        connection.received = False
        connection.waiting_since = time.monotonic()
        connection.deadline = connection.waiting_since + (REQUEST_TIMEOUT_S if connection.close_after else IDLE_TIMEOUT_S)

    def _dispatch(self, connection: _Connection) -> None:
        matched = connection.matched
        if matched is None:
            return
        connection.matched = None
        route = matched.route
        body = bytes(connection.body)
        if self._open is not None and isinstance(matched, self._open.Match):
            self._dispatch_open(connection, matched, body)
            return
        if route.handler in ("page", "static"):
            content, kind = self._static[connection.request.target]
            self._respond(connection, 200, content, api=False, kind=kind)
            return
        extra: list = []
        try:
            if route.handler == "login":
                status, value, extra = self._login(connection, body)
            elif route.handler == "logout":
                status, value, extra = self._logout(connection)
            else:
                status, value = self._api.answer(route.handler, matched.id, matched.query, body)
            payload = msgspec.json.encode(value)
        except SecretCheckThrottledError as exc:
            self._refuse(connection, _throttled(exc), retry_after=exc.retry_after_s)
            return
        except EdgeRuntimeError as exc:
            status, payload = panel_api.error_status(exc), _error_body(exc.code, self._api.error_message(exc))
        except Exception as exc:  # noqa: BLE001  (one request's bug: a 500 and a journal line, the panel goes on)
            self.journal.error("panel.request_failed", handler=route.handler, error=type(exc).__name__, detail=str(exc))
            status, payload = 500, _error_body("INTERNAL", "the panel failed to answer this request; see the service's log")
        self._respond(connection, status, payload, api=True, extra=extra)

    def _dispatch_open(self, connection: _Connection, matched: Any, body: bytes) -> None:
        handler = matched.route.handler
        try:
            if handler == "token":
                status, value = self._token(connection, matched)
            else:
                status, value = self._open.answer(handler, matched, connection.app, body)
            payload = msgspec.json.encode(value)
        except SecretCheckThrottledError as exc:
            self._refuse_open(connection, 429, str(exc), retry_after=exc.retry_after_s)
            return
        except EdgeRuntimeError as exc:
            status = self._open.error_status(exc)
            payload = _open_body(status, self._open.error_message(exc))
        except Exception as exc:  # noqa: BLE001  (one request's bug: a 500 and a journal line, the panel goes on)
            self.journal.error("panel.request_failed", handler=f"open.{handler}", error=type(exc).__name__,
                               detail=str(exc))
            status, payload = 500, _open_body(500, "the device failed to answer this request; see the service's log")
        self._respond(connection, status, payload, api=True)

    def _token(self, connection: _Connection, matched: Any) -> tuple[int, Any]:
        """``GET /open/auth/token``: a bearer token for an app's id and secret, each try a check of
        a secret taken from the throttle before the secret is compared (as a login's)."""
        client_id, client_secret = matched.query.get("client_id"), matched.query.get("client_secret")
        if not client_id or not client_secret:
            return 400, {"code": 400, "message": "client_id and client_secret are both needed"}
        with self._secrets.begin(connection.peer) as check:
            issued = self._apps.issue_token(client_id, client_secret)
            if issued is not None:
                check.passed()
                failures = 0
            else:
                failures = check.failed()
        if failures:
            self._apps.record_failed_token(connection.peer, failures)
            self.journal.warning("panel.app_token_failed", client=connection.peer, failures=failures)
            return 400, {"code": 400, "message": "invalid client_id or client_secret"}
        return 200, {"code": 200, "data": {"token": issued.token, "token_type": "Bearer",
                                           "expiration": issued.expires_at_ms // 1000}}

    def _login(self, connection: _Connection, body: bytes) -> tuple[int, Any, list]:
        request = panel_api.decode(body, panel_api.LoginBody)
        with self._secrets.begin(connection.peer) as check:  # taken before the slow hash, settled after it
            if self._auth.check_password(request.password):
                check.passed()
                failures = 0
            else:
                failures = check.failed()
        if failures:
            self._auth.record_failed_login(connection.peer, failures)
            self.journal.warning("panel.login_failed", client=connection.peer, failures=failures)
            raise PanelLoginError("wrong password")
        token = self._auth.open_session(connection.peer)
        cookie = f"{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict".encode()
        return 200, {"loggedIn": True}, [(b"set-cookie", cookie)]

    def _logout(self, connection: _Connection) -> tuple[int, Any, list]:
        from edge_runtime.panel.routes import cookie_value

        token = cookie_value(list(connection.request.headers), SESSION_COOKIE)
        if token is not None:
            self._auth.close_session(token)
        expired = f"{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0".encode()
        return 200, {"loggedOut": True}, [(b"set-cookie", expired)]


class PanelStartError(EdgeRuntimeError, code="PANEL_LISTEN_FAILED"):
    """The panel could not start (its address, its files)."""


class PanelLoginError(EdgeRuntimeError, code="LOGIN_FAILED"):
    """``POST /api/login`` with a wrong password."""


#: The reason phrases of the statuses the panel sends (not ``http.HTTPStatus``: a module more in
#: the artifact for a few words).
_REASONS = {200: b"OK", 201: b"Created", 400: b"Bad Request", 401: b"Unauthorized", 403: b"Forbidden",
            404: b"Not Found", 408: b"Request Timeout", 409: b"Conflict", 413: b"Content Too Large",
            421: b"Misdirected Request", 429: b"Too Many Requests", 431: b"Request Header Fields Too Large",
            500: b"Internal Server Error", 503: b"Service Unavailable"}


def _reason(status: int) -> bytes:
    return _REASONS.get(status, b"")


def _reset(sock: socket.socket) -> None:
    """Close with a reset: a connection that gives way (or gets no room) leaves no TIME_WAIT behind
    on the device, however many a flood opens."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass  # the peer is gone already: a plain close leaves nothing either
    sock.close()


def _throttled(exc: SecretCheckThrottledError) -> Refusal:
    return Refusal(429, exc.code, str(exc))


def _error_body(code: str, message: str) -> bytes:
    return msgspec.json.encode({"error": {"code": code, "message": message}})


def _open_body(status: int, message: str) -> bytes:
    """A refusal of the OpenAPI in QingLong's shape (its clients read ``code`` and ``message``)."""
    return msgspec.json.encode({"code": status, "message": message})


