"""The web panel's password and sessions in the Local database (migration 0012, docs/panel.md).

The password is kept only as a salted PBKDF2-HMAC-SHA256 hash with its iteration count
(:data:`PBKDF2_ITERATIONS`, declared here once). A session is kept only as the SHA-256 digest of
its random cookie token, as a lease token is: a copy of the database opens no panel. Setting a
new password deletes every session in the same transaction.

PBKDF2 runs through OpenSSL where the interpreter has it (``_hashlib``, on a host); the router
builds leave OpenSSL out (build/excludes.toml: 4.7 MB), so there it is computed with the built-in
SHA-256 (:func:`pbkdf2_sha256`), the same function, the same bytes (tests/panel/test_panel_auth.py).
"""

from __future__ import annotations

import hashlib
import hmac
import os

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.errors import StorageErrors

#: PBKDF2 iterations of a new hash. The stored count is what a check uses, so raising it here
#: re-hashes at the next ``panel password`` without breaking the old one. Chosen for the slowest
#: acceptable login on the router CPU class with no OpenSSL (the pure SHA-256 form): ~45 ms on a
#: 2020s x86_64 host, 0.75 us per iteration there; a Cortex-A53 router runs CPython about 6-10x
#: slower, a MIPS 24Kc/1004Kc one 20-40x slower, so at least ~0.3 s and ~1-2 s there; ~0.3 s under
#: qemu-mipsel on that host (docs/panel.md).
PBKDF2_ITERATIONS = 60_000
ALGORITHM = "pbkdf2-sha256"
SALT_BYTES = 16
#: A password longer than this is refused (PBKDF2 hashes a long one first; nobody types more).
MAX_PASSWORD_BYTES = 1024
MIN_PASSWORD_CHARS = 8

#: A session ends after this long without a request.
SESSION_IDLE_MS = 30 * 60 * 1000
#: A session's last-seen time is written at most this often (fewer flash writes); the idle expiry
#: is therefore exact to within this much.
SESSION_TOUCH_MS = 60 * 1000
#: At most this many sessions; a new login beyond it ends the least recently seen one.
MAX_SESSIONS = 16
#: Random bytes of a session token (256 bits).
TOKEN_BYTES = 32

#: Device events the panel records (docs/panel.md).
EVENT_LOGIN_FAILED = "panel.login_failed"
EVENT_LOGIN = "panel.login"
EVENT_PASSWORD_SET = "panel.password_set"


class PanelAuthError(EdgeRuntimeError, code="PANEL_STORAGE_FAILED"):
    """The panel's password or session store failed."""


class PanelPasswordInvalidError(PanelAuthError, code="PANEL_PASSWORD_INVALID"):
    """A new panel password is too short, too long or not text."""


class PanelPasswordUnsetError(PanelAuthError, code="PANEL_PASSWORD_UNSET"):
    """No panel password is set: the panel refuses to start (there is no default password)."""


_errors = StorageErrors(PanelAuthError)


def pbkdf2_sha256(password: bytes, salt: bytes, iterations: int) -> bytes:
    """PBKDF2-HMAC-SHA256 (RFC 8018), one 32-byte block: OpenSSL's when present, else the same
    computed with the built-in SHA-256 (HMAC's inner and outer states prepared once)."""
    try:
        import _hashlib  # OpenSSL: releases the GIL while it runs
    except ImportError:
        pass
    else:
        return _hashlib.pbkdf2_hmac("sha256", password, salt, iterations)
    key = hashlib.sha256(password).digest() if len(password) > 64 else password
    key = key.ljust(64, b"\0")
    inner, outer = hashlib.sha256(key.translate(_IPAD)), hashlib.sha256(key.translate(_OPAD))

    def prf(message: bytes) -> bytes:
        i, o = inner.copy(), outer.copy()
        i.update(message)
        o.update(i.digest())
        return o.digest()

    block = prf(salt + b"\x00\x00\x00\x01")
    result = int.from_bytes(block, "big")
    for _ in range(iterations - 1):
        block = prf(block)
        result ^= int.from_bytes(block, "big")
    return result.to_bytes(32, "big")


_IPAD = bytes(b ^ 0x36 for b in range(256))
_OPAD = bytes(b ^ 0x5C for b in range(256))


def password_problem(password: str) -> str | None:
    """Why ``password`` cannot be the panel's, or None."""
    try:
        encoded = password.encode("utf-8")
    except UnicodeEncodeError:
        return "the password is not valid UTF-8 text"
    if len(password) < MIN_PASSWORD_CHARS:
        return f"the password must have at least {MIN_PASSWORD_CHARS} characters"
    if len(encoded) > MAX_PASSWORD_BYTES:
        return f"the password must be at most {MAX_PASSWORD_BYTES} bytes"
    return None


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("ascii", "replace")).hexdigest()


class LocalPanelAuth:
    """The panel's password and sessions over one opened database."""

    __slots__ = ("_db",)

    def __init__(self, db: LocalDatabase) -> None:
        self._db = db

    def set_password(self, password: str) -> None:
        """Store ``password``'s new salted hash and end every session (one transaction).

        Raises:
            PanelPasswordInvalidError: see :func:`password_problem`.
        """
        problem = password_problem(password)
        if problem is not None:
            raise PanelPasswordInvalidError(problem)
        salt = os.urandom(SALT_BYTES)
        digest = pbkdf2_sha256(password.encode("utf-8"), salt, PBKDF2_ITERATIONS)  # before the transaction
        with _errors(), self._db.write() as now:
            connection = self._db.connection
            connection.execute(
                "INSERT INTO panel_password (id, algorithm, iterations, salt, hash, set_at_ms) VALUES (1, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET algorithm = excluded.algorithm, iterations = excluded.iterations, "
                "salt = excluded.salt, hash = excluded.hash, set_at_ms = excluded.set_at_ms",
                (ALGORITHM, PBKDF2_ITERATIONS, salt, digest, now),
            )
            connection.execute("DELETE FROM panel_sessions")
            ended = connection.changes()
            self._event(EVENT_PASSWORD_SET, {"sessionsEnded": ended}, now)

    def has_password(self) -> bool:
        with _errors():
            return self._db.connection.execute("SELECT 1 FROM panel_password WHERE id = 1").fetchone() is not None

    def require_password(self) -> None:
        if not self.has_password():
            raise PanelPasswordUnsetError(
                f"no panel password is set in {self._db.path}: the panel does not start without one "
                f"(set it with `edge-runtime --db {self._db.path} panel password`, then restart serve)")

    def check_password(self, password: str) -> bool:
        """Whether ``password`` is the panel's (compared in constant time)."""
        with _errors():
            row = self._db.connection.execute(
                "SELECT iterations, salt, hash FROM panel_password WHERE id = 1").fetchone()
        if row is None or not isinstance(password, str):
            return False
        try:
            encoded = password.encode("utf-8")
        except UnicodeEncodeError:
            return False
        if len(encoded) > MAX_PASSWORD_BYTES:
            return False
        iterations, salt, stored = row
        return hmac.compare_digest(pbkdf2_sha256(encoded, salt, iterations), stored)

    def open_session(self, client: str) -> str:
        """A new session: its raw token (for the cookie; only its digest is stored)."""
        import secrets

        token = secrets.token_urlsafe(TOKEN_BYTES)
        with _errors(), self._db.write() as now:
            connection = self._db.connection
            connection.execute("DELETE FROM panel_sessions WHERE last_seen_at_ms < ?", (now - SESSION_IDLE_MS,))
            connection.execute(
                "DELETE FROM panel_sessions WHERE token_digest IN (SELECT token_digest FROM panel_sessions "
                "ORDER BY last_seen_at_ms DESC LIMIT -1 OFFSET ?)", (MAX_SESSIONS - 1,))
            connection.execute("INSERT INTO panel_sessions (token_digest, created_at_ms, last_seen_at_ms) VALUES (?, ?, ?)",
                               (token_digest(token), now, now))
            self._event(EVENT_LOGIN, {"client": client}, now)
        return token

    def session_valid(self, token: str, now_ms: int) -> bool:
        """Whether ``token`` names a live session; an expired one is deleted, a live one's last-seen
        time written when older than :data:`SESSION_TOUCH_MS`."""
        digest = token_digest(token)
        with _errors():
            row = self._db.connection.execute(
                "SELECT last_seen_at_ms FROM panel_sessions WHERE token_digest = ?", (digest,)).fetchone()
        if row is None:
            return False
        if now_ms - row[0] > SESSION_IDLE_MS:
            self.close_session(token)
            return False
        if now_ms - row[0] >= SESSION_TOUCH_MS:
            with _errors(), self._db.write() as now:
                self._db.connection.execute(
                    "UPDATE panel_sessions SET last_seen_at_ms = max(last_seen_at_ms, ?) WHERE token_digest = ?",
                    (now, digest))
        return True

    def close_session(self, token: str) -> None:
        with _errors(), self._db.write():
            self._db.connection.execute("DELETE FROM panel_sessions WHERE token_digest = ?", (token_digest(token),))

    def record_failed_login(self, client: str, failures: int) -> None:
        with _errors(), self._db.write() as now:
            self._event(EVENT_LOGIN_FAILED, {"client": client, "failuresInARow": failures}, now)

    def _event(self, kind: str, payload: dict, now: int) -> None:
        self._db.connection.execute("INSERT INTO device_events (type, payload, created_at_ms) VALUES (?, ?, ?)",
                                    (kind, msgspec.json.encode(payload, order="sorted").decode(), now))
