"""``submit`` handed to the running service (docs/runs.md, "Submit through the service"): the
client loads none of the command stack, the Run is stored and runs as any other, every error is
still the ordinary path's, and a service that takes the request without answering never leads to a
second Run."""

from __future__ import annotations

import ast
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from edge_runtime.local.handoff import HandoffRequest
from tests.support.service_harness import Harness, decode_json, wait_for

pytestmark = pytest.mark.e2e

#: What a handed-off submit must not import: the command stack the service has loaded already.
NEVER_FOR_HANDED_OFF_SUBMIT = ("argparse", "msgspec", "apsw", "typing", "re", "enum", "pathlib",
                               "edge_runtime.contract.runs", "edge_runtime.local.store", "edge_runtime.operations")

_PROBE = """
import sys
from edge_runtime.cli.main import main
code = main(sys.argv[1:])
sys.stdout.flush()
print(_MARK + repr((code, sorted(sys.modules))))
""".replace("_MARK", repr("\n@@modules@@"))


def _probe(harness: Harness, *args: str, cwd: Path | None = None) -> tuple[int, str, list[str]]:
    result = subprocess.run([sys.executable, "-c", _PROBE, "--db", str(harness.db_path), *args],
                            capture_output=True, text=True, env=harness.env, timeout=60, cwd=cwd)
    printed, mark, last = result.stdout.partition("\n@@modules@@")
    assert mark, f"the probe failed: {result.stderr}"
    code, modules = ast.literal_eval(last.strip())
    return code, printed, modules


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == name or m.startswith(name + ".") for name in names)]


def _submit_sockets(harness: Harness) -> list[str]:
    directory = Path(str(harness.db_path) + ".wake")
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".submit")) if directory.exists() else []


def _serve(harness: Harness):
    service = harness.serve()
    service.wait_log("submit_handoff.listening")  # it did start (the harness waits for either outcome)
    return service


def test_a_submit_is_stored_by_the_running_service_and_the_client_loads_no_command_stack(harness: Harness) -> None:
    _serve(harness)
    code, printed, modules = _probe(harness, "submit", "--name", "hello", "--", "echo", "handed off")
    assert code == 0
    run_id = printed.strip()
    assert _loaded(modules, NEVER_FOR_HANDED_OFF_SUBMIT) == []
    assert "edge_runtime.local.handoff" in modules  # the probe saw the hand-off's own imports
    detail = harness.wait_status(run_id, "succeeded")
    assert detail.name == "hello" and list(detail.command) == ["echo", "handed off"]
    assert harness.cli("logs", run_id).stdout == "handed off\n"


def test_json_output_is_the_same_record_as_the_ordinary_path(harness: Harness) -> None:
    direct = decode_json(harness.cli("submit", "--json", "--", "true").stdout)  # no service yet: this process
    _serve(harness)
    code, printed, modules = _probe(harness, "submit", "--json", "--timeout", "5m", "--", "true")
    assert code == 0 and "msgspec" not in modules
    handed = decode_json(printed)
    assert set(handed) == set(direct) | {"timeoutMs"} and handed["status"] == "queued"
    assert handed["timeoutMs"] == 300_000 and handed["id"] != direct["id"]


def test_errors_are_reported_by_the_clients_own_run_and_nothing_is_stored(harness: Harness) -> None:
    harness.serve()
    before = harness.cli("list", "--json").stdout
    bad_option = harness.cli("submit", "--bogus", "--", "true", check=False)
    assert bad_option.returncode == 2 and "unrecognized arguments: --bogus" in bad_option.stderr
    no_command = harness.cli("submit", "--name", "x", check=False)
    assert no_command.returncode != 0 and no_command.stdout == ""
    bad_retries = harness.cli("submit", "--retries", "many", "--", "true", check=False)
    assert bad_retries.returncode == 2 and "expected a whole number" in bad_retries.stderr
    assert harness.cli("list", "--json").stdout == before


def test_a_relative_cwd_is_the_clients_directory(harness: Harness, tmp_path: Path) -> None:
    _serve(harness)
    here = tmp_path / "client-here"
    here.mkdir()
    code, printed, modules = _probe(harness, "submit", "--cwd", ".", "--", "pwd", cwd=here)
    assert code == 0 and "msgspec" not in modules
    run_id = printed.strip()
    harness.wait_status(run_id, "succeeded")
    assert harness.cli("logs", run_id).stdout == f"{here}\n"


def test_a_batch_and_help_are_run_by_the_client_itself(harness: Harness) -> None:
    harness.serve()
    batch = subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(harness.db_path), "submit", "--batch", "-"],
                           input='["true"]\n["echo", "b"]\n', capture_output=True, text=True, env=harness.env, timeout=60)
    assert batch.returncode == 0 and len(batch.stdout.split()) == 2
    helped = harness.cli("submit", "--help")
    assert "--batch FILE" in helped.stdout


def test_a_killed_services_socket_is_removed_and_the_client_stores_the_run_itself(harness: Harness) -> None:
    service = harness.serve()
    wait_for(lambda: len(_submit_sockets(harness)) == 1, "the submit socket")
    service.stop(signal.SIGKILL)
    code, printed, modules = _probe(harness, "submit", "--", "true")
    assert code == 0 and "msgspec" in modules  # stored by the client's own run
    assert _submit_sockets(harness) == []
    assert harness.detail(printed.strip()).status in ("queued", "succeeded")


def test_a_service_that_takes_the_request_and_never_answers_gets_no_second_run(harness: Harness) -> None:
    """A stand-in for a service killed between reading the request and answering: the client
    must say the Run is unconfirmed, and must not store it again itself."""
    harness.cli("migrate")
    directory = Path(str(harness.db_path) + ".wake")
    directory.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(directory / "999999.submit"))
    listener.listen(1)
    received: list[HandoffRequest | None] = []

    def take_and_vanish() -> None:
        conn, _ = listener.accept()
        with conn:
            received.append(HandoffRequest.decode(conn.recv(1 << 17)))

    thread = threading.Thread(target=take_and_vanish, daemon=True)
    thread.start()
    try:
        result = harness.cli("submit", "--", "true", check=False)
    finally:
        thread.join(10)
        listener.close()
    assert result.returncode == 1 and "[SUBMIT_UNCONFIRMED]" in result.stderr and result.stdout == ""
    assert received and received[0] is not None and received[0].argv[-2:] == ["--", "true"]
    assert decode_json(harness.cli("list", "--json").stdout) == []


def test_the_service_removes_its_socket_when_it_stops(harness: Harness) -> None:
    service = harness.serve()
    wait_for(lambda: _submit_sockets(harness), "the submit socket")
    assert service.stop() == 0
    assert _submit_sockets(harness) == []
    assert os.path.isdir(str(harness.db_path) + ".wake")
