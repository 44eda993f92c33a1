"""Env entries end to end (docs/environment.md): a real ``serve``, the real CLI, real tasks. A task
sees each name once, its enabled entries' values joined with ``&`` in list order, byte for byte
(quotes, spaces, backslashes, ``$``, Chinese); a Run's own ``--env`` wins; a joined variable of
exactly MAX_ARG_STRLEN bytes reaches the task and one byte more is refused as it is stored; and a
cookie kept as one secret entry per account is masked in every output, each account alone too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from edge_runtime.contract.env_entries import MAX_ENV_STRING_BYTES
from tests.support.multi_account import ACCOUNTS, CHUNK_TASK, COOKIE, leaked
from tests.support.service_harness import Harness, decode_json

pytestmark = pytest.mark.e2e

V1 = "it's \"one\"  值 1 \\ $HOME"
V2 = "two"
V3 = "三 'x' \"y\" `id` &amp"


def _add(harness: Harness, name: str, value: str, *flags: str) -> str:
    """``env add NAME --stdin`` (the value piped in, never in the process list); the new id."""
    done = subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(harness.db_path), "env", "add", name,
                           "--stdin", *flags], input=value.encode() + b"\n", capture_output=True, env=harness.env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def test_a_task_sees_v1_and_v3_exactly_with_entry_2_disabled(harness: Harness, tmp_path: Path) -> None:
    assert [_add(harness, "JD_COOKIE", value) for value in (V1, V2, V3)] == ["1", "2", "3"]
    assert harness.cli("env", "disable", "2").stdout == "entry 2 disabled\n"
    seen = tmp_path / "seen"
    own = tmp_path / "own"
    run_id = harness.cli("submit", "--", "sh", "-c", f'printf %s "$JD_COOKIE" > {seen}').stdout.strip()
    overridden = harness.cli("submit", "--env", "JD_COOKIE=own", "--", "sh", "-c",
                             f'printf %s "$JD_COOKIE" > {own}').stdout.strip()
    harness.serve()
    harness.wait_status(run_id, "succeeded")
    harness.wait_status(overridden, "succeeded")
    assert seen.read_bytes() == f"{V1}&{V3}".encode()
    assert own.read_bytes() == b"own"  # a Run's own --env wins
    # The list order is the join's order: move entry 3 first, enable 2, and the next Run sees it so.
    harness.cli("env", "move", "3", "--before", "1")
    harness.cli("env", "enable", "2")
    again = harness.cli("submit", "--", "sh", "-c", f'printf %s "$JD_COOKIE" > {seen}').stdout.strip()
    harness.wait_status(again, "succeeded")
    assert seen.read_bytes() == f"{V3}&{V1}&{V2}".encode()


def test_a_join_of_exactly_max_arg_strlen_reaches_the_task_and_one_byte_more_is_refused(
        harness: Harness, tmp_path: Path) -> None:
    room = MAX_ENV_STRING_BYTES - len("BIG=") - 1 - 1  # two values and their separator
    first = "值" * 1000  # 3 bytes each: the limit counts bytes
    second = "x" * (room - len(first.encode()))
    _add(harness, "BIG", first)
    _add(harness, "BIG", second)
    listed = harness.cli("env", "list", "--json").stdout
    before = decode_json(listed)
    refused = subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(harness.db_path), "env", "add", "BIG",
                              "--stdin"], input="\n", capture_output=True, text=True, env=harness.env, timeout=60)
    assert refused.returncode == 1 and refused.stderr == (
        f"Error: BIG would be {MAX_ENV_STRING_BYTES + 1} bytes in a task's environment (BIG=, the values of its "
        f"enabled entries joined with & and the terminating NUL); Linux allows one environment string at most "
        f"{MAX_ENV_STRING_BYTES} bytes (MAX_ARG_STRLEN): shorten, disable or remove an entry of BIG first; nothing "
        f"was changed [VARIABLE_TOO_LONG]\n")
    assert decode_json(harness.cli("env", "list", "--json").stdout) == before
    seen = tmp_path / "seen"
    run_id = harness.cli("submit", "--", "sh", "-c", f'printf %s "$BIG" > {seen}').stdout.strip()
    harness.serve()
    harness.wait_status(run_id, "succeeded")
    assert seen.read_bytes() == f"{first}&{second}".encode()
    assert len(b"BIG=" + seen.read_bytes()) + 1 == MAX_ENV_STRING_BYTES


def test_one_secret_entry_per_account_is_masked_whole_and_per_account_through_a_task(harness: Harness) -> None:
    for account in ACCOUNTS:
        _add(harness, "COOKIE", account, "--secret", "--remarks", "an account")
    simple = harness.cli("submit", "--", "sh", "-c",
                         'echo "all=$COOKIE"; IFS="&"; set -- $COOKIE; echo "one=$1"; echo "two=$2"').stdout.strip()
    chunked = harness.cli("submit", "--", "sh", "-c", CHUNK_TASK).stdout.strip()
    service = harness.serve()
    harness.wait_status(simple, "succeeded")
    harness.wait_status(chunked, "succeeded")
    assert harness.cli("logs", simple).stdout == "all=***\none=***\ntwo=***\n"
    assert harness.cli("logs", chunked).stdout == "." * 65530 + "***\n"
    raw = Path(harness.detail(simple).attempts[-1].log_path).read_text()
    assert f"all={COOKIE}" in raw  # the task got the join; only what is shown is masked
    for args in (("env", "list"), ("env", "list", "--json"), ("env", "list", "--search", "ALICE99"),
                 ("show", simple, "--json"), ("events", simple)):
        printed = harness.cli(*args).stdout
        assert not leaked(printed), (args, printed)
    assert not leaked(service.log())
