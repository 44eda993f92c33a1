"""The panel's apps and their tokens in the Local database (migration 0016, docs/qinglong.md).

An app keeps its ``client_id`` and only the digest of its ``client_secret``; a token is kept only
as its digest, with the app and the time it expires. Neither a secret nor a token is ever written
to the database, a log or an event: a copy of the database opens nothing.

How tokens are issued. Programs that drive QingLong ask for a token often (the MCP servers ask
for one per tool call) and never say when they are done with one, while a token must never be
taken back before it expires. QingLong keeps its tokens in clear and hands the fifth one out
again once an app holds five; keeping only digests, this store cannot hand a stored token out
again. So a token is *derived*, not drawn: ``HMAC-SHA256(client_secret, client_id, window)`` for
the window of time the request falls in (:func:`~edge_runtime.contract.panel_apps.token_window_ms`:
the lifetime / 30, one day for the 30-day default). Every request in one window gets the same
token, without a raw token kept anywhere, in memory or on disk, and across restarts of the
service; an app therefore holds at most 32 live tokens (one row each), however often it
asks, and issuing one never ends another. Deriving needs the secret, which only the requester
has (the store keeps its digest): a copy of the database derives nothing, and one token tells
nothing of another. A token lives from its window's end for the app's lifetime: at least the
lifetime, at most one window more.

The secret is 24 random characters of 64 (144 bits) and a token 256 bits, so one SHA-256 per
check is enough (as for the panel's session cookie); guessing is slowed by the panel's secret
throttle, which every token request passes (``edge_runtime/panel/secret_throttle.py``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import NamedTuple

import msgspec

from edge_runtime.contract.panel_apps import (
    CLIENT_ALPHABET,
    CLIENT_ID_LENGTH,
    CLIENT_SECRET_LENGTH,
    MAX_APPS,
    AppRecord,
    AppScope,
    IssuedToken,
    NewApp,
    PanelAppError,
    PanelAppExistsError,
    PanelAppLimitError,
    PanelAppNotFoundError,
    check_app_name,
    check_token_ttl_ms,
    token_window_ms,
)
from edge_runtime.local.clock import read_now_ms
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.errors import StorageErrors

_SECRET_DOMAIN = b"qinglong.panel-app-secret.v1\0"
_TOKEN_DOMAIN = b"qinglong.panel-app-token.v1\0"
_DERIVATION_DOMAIN = b"qinglong.panel-app-token-derivation.v1\0"
#: A presented secret or token longer than this is not one (nothing longer is hashed).
_MAX_PRESENTED = 256

#: Device events of the apps (docs/qinglong.md).
EVENT_APP_ADDED = "panel.app_added"
EVENT_APP_REMOVED = "panel.app_removed"
EVENT_APP_TOKEN = "panel.app_token"
EVENT_APP_TOKEN_FAILED = "panel.app_token_failed"

_errors = StorageErrors(PanelAppError)
_decode_scopes = msgspec.json.Decoder(list[AppScope]).decode


def _digest(domain: bytes, text: str) -> str:
    return hashlib.sha256(domain + text.encode("utf-8", "replace")).hexdigest()


def _random_text(length: int) -> str:
    """Random characters of :data:`CLIENT_ALPHABET` with a digit, a lower- and an upper-case letter
    and a ``-`` or ``_`` among them, as QingLong's: a client that checks the shape accepts it."""
    while True:
        text = "".join(secrets.choice(CLIENT_ALPHABET) for _ in range(length))
        if (any(c.isdigit() for c in text) and any(c.islower() for c in text) and any(c.isupper() for c in text)
                and any(c in "-_" for c in text)):
            return text


def derive_token(client_secret: str, client_id: str, window: int) -> str:
    """The token of ``window`` for an app's id and secret (URL-safe base64, 43 characters)."""
    message = _DERIVATION_DOMAIN + client_id.encode("ascii") + b"\0" + window.to_bytes(8, "big")
    mac = hmac.new(client_secret.encode("utf-8"), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


class TokenCheck(NamedTuple):
    """What a presented token opens: its app, or None with whether it was one that expired."""

    app: AppRecord | None
    expired: bool = False


class LocalPanelApps:
    """The apps and their tokens over one opened database."""

    __slots__ = ("_db",)

    def __init__(self, db: LocalDatabase) -> None:
        self._db = db

    # ----------------------------------------------------------------- the CLI's commands

    def add(self, name: str, scopes: list[AppScope], token_ttl_ms: int) -> NewApp:
        """A new app with fresh credentials; the secret is in the result only, never stored.

        Raises:
            InvalidPanelAppError, PanelAppExistsError, PanelAppLimitError.
        """
        check_app_name(name)
        check_token_ttl_ms(token_ttl_ms)
        scopes = [AppScope(s) for s in scopes]
        client_secret = _random_text(CLIENT_SECRET_LENGTH)
        with _errors(), self._db.write() as now:
            connection = self._db.connection
            if connection.execute("SELECT 1 FROM panel_apps WHERE name = ?", (name,)).fetchone() is not None:
                raise PanelAppExistsError(f"an app named {name!r} exists already (remove it to issue new credentials)")
            if connection.execute("SELECT count(*) FROM panel_apps").fetchone()[0] >= MAX_APPS:
                raise PanelAppLimitError(f"the device holds {MAX_APPS} apps already; remove one first")
            while True:
                client_id = _random_text(CLIENT_ID_LENGTH)
                if connection.execute("SELECT 1 FROM panel_apps WHERE client_id = ?", (client_id,)).fetchone() is None:
                    break
            connection.execute(
                "INSERT INTO panel_apps (name, client_id, secret_digest, scopes, token_ttl_ms, created_at_ms) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (name, client_id, _digest(_SECRET_DOMAIN, client_secret),
                 msgspec.json.encode([s.value for s in scopes]).decode(), token_ttl_ms, now))
            self._event(EVENT_APP_ADDED, {"app": name, "scopes": [s.value for s in scopes]}, now)
        return NewApp(name=name, client_id=client_id, client_secret=client_secret, scopes=scopes,
                      token_ttl_ms=token_ttl_ms)

    def list(self) -> list[AppRecord]:
        with _errors():
            now = read_now_ms(self._db.clock)
            rows = self._db.connection.execute(
                "SELECT a.name, a.client_id, a.scopes, a.token_ttl_ms, a.created_at_ms, "
                "(SELECT count(*) FROM panel_app_tokens t WHERE t.app_name = a.name AND t.expires_at_ms > ?) "
                "FROM panel_apps a ORDER BY a.created_at_ms, a.name", (now,)).fetchall()
        return [self._record(row) for row in rows]

    def remove(self, name: str) -> None:
        """Delete the app and every token issued to it (they open nothing from the commit on).

        Raises:
            PanelAppNotFoundError: no app has this name.
        """
        with _errors(), self._db.write() as now:
            connection = self._db.connection
            connection.execute("DELETE FROM panel_app_tokens WHERE app_name = ?", (name,))
            connection.execute("DELETE FROM panel_apps WHERE name = ?", (name,))
            if connection.changes() != 1:
                raise PanelAppNotFoundError(f"no app named {name!r}")
            self._event(EVENT_APP_REMOVED, {"app": name}, now)

    # ----------------------------------------------------------------- the OpenAPI's

    def issue_token(self, client_id: str, client_secret: str) -> IssuedToken | None:
        """The token of the current window for the app of ``client_id``, or None when the id or
        the secret is wrong (the caller counts that as a failed check of a secret). Writes only
        the first time in a window (one row; the app's expired tokens are deleted then)."""
        if (type(client_id) is not str or type(client_secret) is not str or len(client_id) != CLIENT_ID_LENGTH
                or not client_secret or len(client_secret) > _MAX_PRESENTED):
            return None
        with _errors():
            row = self._db.connection.execute(
                "SELECT name, secret_digest, token_ttl_ms FROM panel_apps WHERE client_id = ?", (client_id,)).fetchone()
            now = read_now_ms(self._db.clock)
        presented = _digest(_SECRET_DOMAIN, client_secret)
        if row is None or not hmac.compare_digest(presented, row[1]):
            return None
        name, _, ttl_ms = row
        window_ms = token_window_ms(ttl_ms)
        window = now // window_ms
        token = derive_token(client_secret, client_id, window)
        digest = _digest(_TOKEN_DOMAIN, token)
        expires_at_ms = (window + 1) * window_ms + ttl_ms
        with _errors():
            known = self._db.connection.execute(
                "SELECT 1 FROM panel_app_tokens WHERE token_digest = ?", (digest,)).fetchone()
        if known is None:
            with _errors(), self._db.write() as written_at:
                connection = self._db.connection
                if connection.execute("SELECT 1 FROM panel_apps WHERE name = ?", (name,)).fetchone() is None:
                    return None  # removed meanwhile
                connection.execute("DELETE FROM panel_app_tokens WHERE app_name = ? AND expires_at_ms <= ?",
                                    (name, written_at))
                connection.execute(
                    "INSERT OR IGNORE INTO panel_app_tokens (token_digest, app_name, expires_at_ms, created_at_ms) "
                    "VALUES (?, ?, ?, ?)", (digest, name, expires_at_ms, written_at))
                self._event(EVENT_APP_TOKEN, {"app": name, "expiresAtMs": expires_at_ms}, written_at)
        return IssuedToken(token=token, expires_at_ms=expires_at_ms)

    def check_token(self, token: str) -> TokenCheck:
        """The app ``token`` opens now (with its scopes), or why none."""
        if type(token) is not str or not token or len(token) > _MAX_PRESENTED:
            return TokenCheck(None)
        with _errors():
            now = read_now_ms(self._db.clock)
            row = self._db.connection.execute(
                "SELECT a.name, a.client_id, a.scopes, a.token_ttl_ms, a.created_at_ms, t.expires_at_ms "
                "FROM panel_app_tokens t JOIN panel_apps a ON a.name = t.app_name WHERE t.token_digest = ?",
                (_digest(_TOKEN_DOMAIN, token),)).fetchone()
        if row is None:
            return TokenCheck(None)
        if row[5] <= now:
            return TokenCheck(None, expired=True)
        return TokenCheck(self._record((*row[:5], 0)))

    def record_failed_token(self, client: str, failures: int) -> None:
        with _errors(), self._db.write() as now:
            self._event(EVENT_APP_TOKEN_FAILED, {"client": client, "failuresInARow": failures}, now)

    # -----------------------------------------------------------------

    @staticmethod
    def _record(row: tuple) -> AppRecord:
        name, client_id, scopes, ttl_ms, created_at_ms, live = row
        try:
            decoded = _decode_scopes(scopes)
        except msgspec.DecodeError as exc:  # a hostile or broken row: it opens nothing
            raise PanelAppError(f"stored app {name!r} has unreadable scopes ({exc}); remove it and add it again") from None
        return AppRecord(name=name, client_id=client_id, scopes=decoded, token_ttl_ms=ttl_ms,
                         created_at_ms=created_at_ms, live_tokens=live)

    def _event(self, kind: str, payload: dict, now: int) -> None:
        self._db.connection.execute("INSERT INTO device_events (type, payload, created_at_ms) VALUES (?, ?, ?)",
                                    (kind, msgspec.json.encode(payload, order="sorted").decode(), now))
