"""The panel's password and sessions in the Local database: a slow salted hash, digests only,
idle expiry, and a new password ending every session."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from edge_runtime.local.database import open_database
from edge_runtime.local import panel_auth
from edge_runtime.local.panel_auth import (
    PBKDF2_ITERATIONS, SESSION_IDLE_MS, LocalPanelAuth, PanelPasswordInvalidError, PanelPasswordUnsetError,
    pbkdf2_sha256, token_digest,
)


@pytest.fixture
def db(tmp_path):
    database = open_database(str(tmp_path / "edge.db"))
    yield database
    database.close()


@pytest.mark.parametrize(("password", "salt", "iterations"), [(b"pw", b"s" * 16, 1), (b"x" * 100, b"salt" * 8, 1000),
                                                              (b"", b"0123456789abcdef", 3)])
def test_the_builtin_pbkdf2_is_the_standard_one(monkeypatch, password, salt, iterations) -> None:
    expected = hashlib.pbkdf2_hmac("sha256", password, salt, iterations)
    monkeypatch.setitem(sys.modules, "_hashlib", None)  # as in the router builds: no OpenSSL
    assert pbkdf2_sha256(password, salt, iterations) == expected


def test_only_a_salted_hash_is_stored(db) -> None:
    auth = LocalPanelAuth(db)
    with pytest.raises(PanelPasswordUnsetError, match="panel password"):
        auth.require_password()
    auth.set_password("correct horse")
    auth.require_password()
    algorithm, iterations, salt, stored = db.connection.execute(
        "SELECT algorithm, iterations, salt, hash FROM panel_password").fetchone()
    assert (algorithm, iterations, len(salt)) == ("pbkdf2-sha256", PBKDF2_ITERATIONS, 16)
    assert stored == hashlib.pbkdf2_hmac("sha256", b"correct horse", salt, iterations)
    assert auth.check_password("correct horse") and not auth.check_password("correct horsE")
    auth.set_password("correct horse")
    assert db.connection.execute("SELECT salt FROM panel_password").fetchone()[0] != salt


@pytest.mark.parametrize("bad", ["short", "x" * 2000])
def test_a_bad_password_is_refused(db, bad) -> None:
    with pytest.raises(PanelPasswordInvalidError):
        LocalPanelAuth(db).set_password(bad)
    assert not LocalPanelAuth(db).has_password()


def test_sessions_keep_only_a_digest_expire_and_end_with_a_new_password(db) -> None:
    auth = LocalPanelAuth(db)
    auth.set_password("first password")
    token = auth.open_session("127.0.0.1")
    assert len(token) >= 43  # 256 random bits, url-safe base64
    rows = db.connection.execute("SELECT token_digest, last_seen_at_ms FROM panel_sessions").fetchall()
    assert [r[0] for r in rows] == [token_digest(token)]
    assert token not in repr(db.connection.execute("SELECT * FROM panel_sessions").fetchall())
    seen = rows[0][1]
    assert auth.session_valid(token, seen + 1) and not auth.session_valid(token + "x", seen + 1)
    assert not auth.session_valid(token, seen + SESSION_IDLE_MS + 1)  # idle too long: gone
    assert not auth.session_valid(token, seen + 1)
    kept = auth.open_session("127.0.0.1")
    auth.set_password("second password")
    assert not auth.session_valid(kept, seen + 1)
    assert db.connection.execute("SELECT count(*) FROM panel_sessions").fetchone()[0] == 0


def test_logout_ends_the_session(db) -> None:
    auth = LocalPanelAuth(db)
    auth.set_password("first password")
    token = auth.open_session("127.0.0.1")
    auth.close_session(token)
    assert db.connection.execute("SELECT count(*) FROM panel_sessions").fetchone()[0] == 0


def _cli(db_path, *args, stdin: str):
    return subprocess.run([sys.executable, "-m", "edge_runtime", "--db", db_path, "panel", "password", *args],
                          input=stdin, capture_output=True, text=True, timeout=60)


def test_the_cli_reads_one_line_from_stdin(tmp_path) -> None:
    path = str(tmp_path / "edge.db")
    done = _cli(path, stdin="a long enough one\n")
    assert done.returncode == 0, done.stderr
    with open_database(path) as db:
        assert LocalPanelAuth(db).check_password("a long enough one")
    refused = _cli(path, "--stdin", stdin="tiny\n")
    assert refused.returncode == 1 and "PANEL_PASSWORD_INVALID" in refused.stderr
    with open_database(path) as db:
        assert LocalPanelAuth(db).check_password("a long enough one")


def test_from_a_terminal_the_password_is_asked_twice_without_echo(tmp_path) -> None:
    import pty
    import select
    import time

    path = str(tmp_path / "edge.db")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI on a terminal; never back into pytest
        try:
            os.execv(sys.executable, [sys.executable, "-m", "edge_runtime", "--db", path, "panel", "password"])
        finally:
            os._exit(127)
    seen = b""

    def read_until(needle: bytes) -> None:
        nonlocal seen
        deadline = time.monotonic() + 30
        while needle not in seen and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    seen += os.read(fd, 1024)
                except OSError:
                    return

    read_until(b"New panel password: ")
    os.write(fd, b"typed on a tty\n")
    read_until(b"Again: ")
    os.write(fd, b"typed on a tty\n")
    read_until(b"session ended")
    _, code = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(code) == 0, seen
    assert b"typed on a tty" not in seen  # never echoed
    with open_database(path) as db:
        assert LocalPanelAuth(db).check_password("typed on a tty")
