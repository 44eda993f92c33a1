"""``env set`` keeps a value out of the process list (docs/environment.md): from stdin
(``--stdin``), asked on the terminal without echo, or as an argument with a warning for a secret;
never an empty value read from a closed stdin."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from edge_runtime.cli.env import ARGV_SECRET_WARNING
from edge_runtime.cli.main import main
from edge_runtime.local.database import open_database
from edge_runtime.local.environment import LocalEnvironmentRepository

ACCOUNTS = ("pt_key=AAQWE123RTY;pt_pin=ALICE99;", "pt_key=ZXCV456BNMQ;pt_pin=BOBBY77;")


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as usage:  # argparse's way out of a usage error
        code = usage.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes, *, tty: bool = False) -> None:
    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    monkeypatch.setattr(stream, "isatty", lambda: tty)
    monkeypatch.setattr(sys, "stdin", stream)


def _stored(db: Path) -> dict[str, str]:
    with open_database(str(db), create=False) as opened:
        return LocalEnvironmentRepository(opened).task_values()


def test_env_set_reads_a_multi_line_value_from_stdin_dropping_one_line_end(capsys, monkeypatch, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    _stdin(monkeypatch, f"{ACCOUNTS[0]}\n{ACCOUNTS[1]}\n".encode())
    code, out, err = _cli(capsys, "--db", db, "env", "set", "COOKIE", "--secret", "--stdin")
    assert (code, out, err) == (0, "COOKIE set (secret)\n", "")
    assert _stored(tmp_path / "e.db") == {"COOKIE": f"{ACCOUNTS[0]}\n{ACCOUNTS[1]}"}
    _stdin(monkeypatch, b"plain value\r\n")
    assert _cli(capsys, "--db", db, "env", "set", "PLAIN", "--stdin")[0] == 0
    assert _stored(tmp_path / "e.db")["PLAIN"] == "plain value"


def test_env_set_without_a_value_from_a_pipe_is_a_usage_error_and_stores_nothing(capsys, monkeypatch, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    _stdin(monkeypatch, b"would-be-value\n")
    code, out, err = _cli(capsys, "--db", db, "env", "set", "TOKEN", "--secret")
    assert (code, out) == (2, "") and "VALUE missing: give --stdin" in err and "(try: edge-runtime env set --help)" in err
    code, _, err = _cli(capsys, "--db", db, "env", "set", "TOKEN", "value-here", "--stdin", "--json")
    assert code == 2 and json.loads(err)["error"]["code"] == "USAGE"
    assert not (tmp_path / "e.db").exists()  # refused before anything was opened


def test_a_secret_given_as_an_argument_is_stored_with_a_warning(capsys, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    code, out, err = _cli(capsys, "--db", db, "env", "set", "TOKEN", "long-enough-value", "--secret")
    assert (code, out, err) == (0, "TOKEN set (secret)\n", ARGV_SECRET_WARNING)
    assert "process list" in ARGV_SECRET_WARNING
    assert _cli(capsys, "--db", db, "env", "set", "PLAIN", "visible")[2] == ""  # not a secret: no warning


def test_from_a_terminal_the_value_is_asked_without_echo(tmp_path) -> None:
    import pty
    import select
    import time

    path = str(tmp_path / "e.db")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI on a terminal; never back into pytest
        try:
            os.execv(sys.executable, [sys.executable, "-m", "edge_runtime", "--db", path, "env", "set", "TOKEN",
                                      "--secret"])
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

    read_until(b"Value of TOKEN (secret): ")
    os.write(fd, b"typed-on-a-tty\n")
    read_until(b"TOKEN set (secret)")
    _, code = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(code) == 0, seen
    assert b"typed-on-a-tty" not in seen and b"Warning" not in seen  # never echoed, never in argv
    assert _stored(tmp_path / "e.db") == {"TOKEN": "typed-on-a-tty"}
