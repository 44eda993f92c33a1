"""The submit hand-off's pure parts: the request's wire form, which command lines the client hands
over (and which it keeps), and what the service declines (the end to end is in
tests/e2e/test_submit_handoff_e2e.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edge_runtime.cli.submit import handed_off_command
from edge_runtime.cli.submit_handoff import _db_path_of
from edge_runtime.local.handoff import MAX_REQUEST_BYTES, REQUEST_MAGIC, HandoffRequest


def test_a_request_travels_unchanged() -> None:
    request = HandoffRequest("/var/lib/x.db", "/root", ["submit", "--name", "名字", "--", "sh", "-c", "echo ''"])
    decoded = HandoffRequest.decode(request.encode())
    assert (decoded.db_path, decoded.cwd, decoded.argv) == (request.db_path, request.cwd, request.argv)


@pytest.mark.parametrize("argv", [["submit", "--", "a\0b"], ["submit", "--", "\udcff"], ["submit", "--", "x" * MAX_REQUEST_BYTES]],
                         ids=["nul", "not-utf8", "too-large"])
def test_a_request_that_cannot_travel_is_kept_by_the_client(argv: list[str]) -> None:
    assert HandoffRequest("/db", "/", argv).encode() is None


@pytest.mark.parametrize("message", [b"", b"other/1\0/db\0/", REQUEST_MAGIC + b"\0/db", REQUEST_MAGIC + b"\0/db\0\xff\0x"],
                         ids=["empty", "wrong-magic", "too-short", "not-utf8"])
def test_the_service_refuses_what_is_not_a_request(message: bytes) -> None:
    assert HandoffRequest.decode(message) is None


def test_the_client_finds_the_database_the_command_line_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_RUNTIME_DB", "/env/x.db")
    assert _db_path_of(["submit", "--", "true"]) == "/env/x.db"
    assert _db_path_of(["--db", "/a.db", "submit", "--", "true"]) == "/a.db"
    assert _db_path_of(["submit", "--db=/b.db", "--", "--db", "/not-this.db"]) == "/b.db"  # after -- is the command


@pytest.mark.parametrize("argv", [["submit", "--help"], ["submit", "-h"], ["submit", "--batch", "-"], ["submit", "--bat", "f"],
                                  ["--d", "/x.db", "submit", "--", "true"], ["--db"], ["--db=", "submit", "--", "true"]])
def test_the_client_keeps_what_it_cannot_be_sure_of(argv: list[str]) -> None:
    assert _db_path_of(argv) is None


def _request(tmp_path: Path, *argv: str, cwd: Path | None = None) -> HandoffRequest:
    return HandoffRequest(str(tmp_path / "x.db"), str(cwd or tmp_path), ["--db", str(tmp_path / "x.db"), *argv])


def test_the_service_takes_a_plain_submit_with_its_options(tmp_path: Path) -> None:
    prepared = handed_off_command(str(tmp_path / "x.db"), _request(tmp_path, "submit", "--name", "n", "--json",
                                                                    "--cwd", ".", "--", "echo", "hi"))
    assert prepared is not None
    command, as_json = prepared
    assert as_json is True and command.argv == ["echo", "hi"] and command.name == "n"
    assert command.cwd == os.fspath(tmp_path)  # "." is the client's directory, not the service's


@pytest.mark.parametrize("argv", [("submit", "--bogus", "--", "true"), ("submit", "--help"), ("submit", "--batch", "-"),
                                  ("submit", "--shell", "--", "x"), ("list",), ("submit", "--cwd", "~/x", "--", "true")],
                         ids=["usage-error", "help", "batch", "shell", "not-submit", "home-relative-cwd"])
def test_the_service_declines_what_only_the_client_can_run_or_report(tmp_path: Path, argv: tuple[str, ...]) -> None:
    assert handed_off_command(str(tmp_path / "x.db"), _request(tmp_path, *argv)) is None


def test_the_service_declines_a_request_for_another_database(tmp_path: Path) -> None:
    request = _request(tmp_path, "submit", "--", "true")
    assert handed_off_command(str(tmp_path / "other.db"), request) is None
