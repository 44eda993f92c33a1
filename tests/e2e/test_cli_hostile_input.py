"""Hardening against hostile input, black-box: hostile or careless input to the real ``edge-runtime`` process
ends in one ``Error:`` line (never a traceback, a hang or unbounded memory), and a reader that
goes away (``| head -1``) ends the command quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.service_harness import Harness

_EXE = [sys.executable, "-m", "edge_runtime"]


def _one_error_line(result: subprocess.CompletedProcess) -> str:
    err = result.stderr if isinstance(result.stderr, str) else result.stderr.decode()
    assert err.startswith("Error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "argv",
    [[b"show", b"\xff\xfe"], [b"submit", b"--", b"echo", b"caf\xe9"], [b"cancel", b"r\xc3", b"--reason", b"x"],
     [b"submit", b"--name", b"\x80", b"--", b"true"]],
)
def test_invalid_utf8_arguments_are_one_error_line(harness: Harness, argv: list[bytes]) -> None:
    harness.cli("migrate")
    result = subprocess.run([*map(os.fsencode, _EXE), b"--db", os.fsencode(harness.db_path), *argv],
                            capture_output=True, env=harness.env, timeout=60)
    assert result.returncode == 2
    assert "is not valid UTF-8" in _one_error_line(result)
    assert harness.cli("list", "--json").stdout.strip() == "[]"  # nothing was submitted


def _first_line_then_close(harness: Harness, *args: str) -> tuple[int, str, bytes]:
    process = subprocess.Popen([*_EXE, "--db", str(harness.db_path), *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=harness.env)
    first = process.stdout.readline()
    process.stdout.close()  # like `| head -1`
    err = process.stderr.read().decode()
    process.stderr.close()
    return process.wait(60), err, first


def test_list_and_logs_into_a_closed_pipe_exit_quietly(harness: Harness) -> None:
    service = harness.serve()
    run_id = harness.submit("seq", "1", "300000")  # ~2 MB of output, capped at 1 MiB
    harness.wait_status(run_id, "succeeded")
    assert service.stop() == 0
    code, err, first = _first_line_then_close(harness, "logs", run_id)
    assert first == b"1\n" and err == "" and code == 141
    harness.submit_many([["true"]] * 3000)  # more than a pipe buffer of `list` output
    code, err, first = _first_line_then_close(harness, "list", "--limit", "10000")
    assert first.startswith(b"RUN ") and err == "" and code == 141


def test_show_escapes_control_characters_as_json_does(harness: Harness) -> None:
    run_id = harness.submit("printf", "\x1b]0;owned\x07\x1b[2J\n\x9b")
    out = harness.cli("show", run_id).stdout
    command = next(line for line in out.splitlines() if line.startswith("command"))
    assert command == "command    printf '\\u001b]0;owned\\u0007\\u001b[2J\\n\\u009b'"
    assert not any(ch in out for ch in "\x1b\x07\x9b")


def test_serve_refuses_a_config_that_is_not_a_bounded_regular_file(harness: Harness, tmp_path: Path) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_text("# padding\n" * 10_000)
    empty_log_dir = tmp_path / "empty-log-dir.toml"
    empty_log_dir.write_text('log_dir = ""\n')
    for config, message in (
        ("/dev/zero", "is not a regular file"),
        (str(fifo), "is not a regular file"),  # would hang in open() without O_NONBLOCK
        (str(tmp_path), "is not a regular file"),
        (str(big), "is larger than 65536 bytes"),
        (str(empty_log_dir), "length >= 1 - at `$.log_dir`"),
    ):
        result = harness.cli("serve", "--config", config, check=False)
        assert result.returncode == 1 and message in _one_error_line(result), (config, result.stderr)
    result = harness.cli("serve", "--log-dir", "", check=False)
    assert result.returncode == 1 and "$.log_dir" in _one_error_line(result)
    assert not harness.db_path.exists()  # refused before touching the database
