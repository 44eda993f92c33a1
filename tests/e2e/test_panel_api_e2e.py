"""The panel's API against a running ``serve``: the same structs as the CLI's ``--json``, the same
validation and error codes (one code path: ``edge_runtime.operations``), a live log tail by
offset, cancel, the schedule actions, health, and sessions ended by a new password."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from tests.support.multi_account import (
    ACCOUNTS, CAP, CAPPED_TASK, COOKIE, capped_task_shown, leaked, same_but_marker, set_secret,
)
from tests.support.panel_client import PASSWORD, api, login, request, start_panel, status
from tests.support.service_harness import decode_json, wait_for


@pytest.fixture
def panel(harness):
    service, port = start_panel(harness)
    yield harness, port, login(port)
    assert service.process.poll() is None, service.log()


@pytest.mark.e2e
def test_a_run_through_the_panel_is_the_cli_s_run(panel) -> None:
    harness, port, token = panel
    code, created = api(port, token, "POST", "/api/runs", {"command": ["sh", "-c", "echo hello; echo err >&2"],
                                                             "name": "from-panel", "timeout": "5m"})
    assert code == 201 and created["status"] == "queued" and created["name"] == "from-panel"
    harness.wait_status(created["id"], "succeeded")
    code, detail = api(port, token, "GET", f"/api/runs/{created['id']}")
    assert code == 200 and detail == decode_json(harness.cli("show", created["id"], "--json").stdout)
    assert detail["attempts"][0]["exitCode"] == 0
    code, listed = api(port, token, "GET", "/api/runs?limit=50")
    assert listed == decode_json(harness.cli("list", "--json", "--limit", "50").stdout)
    code, only = api(port, token, "GET", "/api/runs?status=failed")
    assert only == []
    before = api(port, token, "GET", f"/api/runs?before={created['createdAtMs']}")[1]
    assert all(r["id"] != created["id"] for r in before)
    code, log = api(port, token, "GET", f"/api/runs/{created['id']}/log?offset=0")
    assert code == 200 and log["text"] == "hello\nerr\n" and log["done"] and log["nextOffset"] == 10
    code, tail = api(port, token, "GET", f"/api/runs/{created['id']}/log?offset=6&attempt=1")
    assert tail["text"] == "err\n" and tail["offset"] == 6


@pytest.mark.e2e
@pytest.mark.parametrize(("body", "cli"), [
    ({"command": ["true"], "timeout": "5x"}, ["submit", "--timeout", "5x", "--", "true"]),
    ({"command": []}, ["submit", "--"]),
    ({"command": ["true"], "cwd": "/no/such/dir"}, ["submit", "--cwd", "/no/such/dir", "--", "true"]),
    ({"command": ["true"], "env": {"1BAD": "x"}}, ["submit", "--env", "1BAD=x", "--", "true"]),
    ({"command": ["true"], "user": "edge-nosuch-user"}, ["submit", "--user", "edge-nosuch-user", "--", "true"]),
    ({"command": ["true"], "user": "-rf"}, ["submit", "--user=-rf", "--", "true"]),
])
def test_refusals_have_the_cli_s_codes(panel, body, cli) -> None:
    harness, port, token = panel
    code, error = api(port, token, "POST", "/api/runs", body)
    cli_error = decode_json(harness.cli(*cli[:1], "--json", *cli[1:], check=False).stderr)
    assert code == 400 and error["error"]["code"] == cli_error["error"]["code"], (error, cli_error)
    assert api(port, token, "GET", "/api/runs")[1] == []


@pytest.mark.e2e
def test_a_task_command_is_checked_as_the_cli_checks_it_and_runs(panel) -> None:
    harness, port, token = panel
    scripts = harness.db_path.parent / "scripts"
    scripts.mkdir(mode=0o755)
    for command, code_expected in ((["task", "nope.sh"], "TASK_SCRIPT_NOT_FOUND"),
                                   (["task", "x.sh", "conc"], "INVALID_RUN_COMMAND")):
        code, error = api(port, token, "POST", "/api/runs", {"command": command})
        cli_error = decode_json(harness.cli("submit", "--json", "--", *command, check=False).stderr)
        assert error["error"] == cli_error["error"] and error["error"]["code"] == code_expected, (error, cli_error)
        assert code == (404 if code_expected.endswith("NOT_FOUND") else 400)
    code, error = api(port, token, "POST", "/api/schedules", {"cron": "@daily", "command": ["task", "nope.sh"]})
    assert error["error"]["code"] == "TASK_SCRIPT_NOT_FOUND"
    assert api(port, token, "GET", "/api/runs")[1] == [] and api(port, token, "GET", "/api/schedules")[1] == []
    (scripts / "x.sh").write_text("echo from $(pwd)\n")
    code, created = api(port, token, "POST", "/api/runs", {"command": ["task", "x.sh"]})
    assert code == 201 and created["command"] == ["task", "x.sh"]
    harness.wait_status(created["id"], "succeeded")
    assert api(port, token, "GET", f"/api/runs/{created['id']}/log?offset=0")[1]["text"] == f"from {scripts}\n"


@pytest.mark.e2e
def test_malformed_bodies_and_unknown_ids(panel) -> None:
    _harness, port, token = panel
    for body in (b"", b"{", b"[]", b'{"command": "sh"}', b'{"command": ["x"], "extra": 1}'):
        response = request(port, "POST", "/api/runs", cookie=token, body=body)
        assert status(response) == 400, body
    code, error = api(port, token, "GET", "/api/runs/01a2383d-742d-744c-b1fd-ffc97f53c2cb")
    assert code == 404 and error["error"]["code"] == "RUN_NOT_FOUND"
    code, error = api(port, token, "POST", "/api/schedules/nope/pause", {})
    assert code == 404 and error["error"]["code"] == "SCHEDULE_NOT_FOUND"


@pytest.mark.e2e
def test_cancel_a_running_run(panel) -> None:
    harness, port, token = panel
    run_id = api(port, token, "POST", "/api/runs", {"command": ["sh", "-c", "echo started; sleep 60"]})[1]["id"]
    harness.wait_running(run_id)
    wait_for(lambda: api(port, token, "GET", f"/api/runs/{run_id}/log")[1]["text"] == "started\n", "the log tail")
    code, record = api(port, token, "POST", f"/api/runs/{run_id}/cancel", {"reason": "from the panel"})
    assert code == 200 and record["cancelReason"] == "from the panel"
    harness.wait_status(run_id, "cancelled")
    code, error = api(port, token, "POST", f"/api/runs/{run_id}/cancel", {})
    assert code == 409 and error["error"]["code"] == "RUN_STATE_CONFLICT"


@pytest.mark.e2e
def test_schedules_add_pause_resume_run_now_remove(panel) -> None:
    harness, port, token = panel
    code, added = api(port, token, "POST", "/api/schedules", {"cron": "0 3 * * *", "command": ["true"], "name": "n"})
    assert code == 201 and added["expression"] == "0 3 * * *"
    assert api(port, token, "GET", "/api/schedules")[1] == decode_json(harness.cli("schedule", "list", "--json").stdout)
    assert api(port, token, "POST", f"/api/schedules/{added['id']}/pause", {})[1]["paused"] is True
    assert api(port, token, "POST", f"/api/schedules/{added['id']}/resume", {})[1]["paused"] is False
    code, ran = api(port, token, "POST", f"/api/schedules/{added['id']}/run", {})
    assert code == 200 and ran["outcome"] == "started"
    harness.wait_status(ran["runId"], "succeeded")
    code, bad = api(port, token, "POST", "/api/schedules", {"cron": "61 * * * *", "command": ["true"]})
    cli = decode_json(harness.cli("schedule", "add", "--json", "61 * * * *", "--", "true", check=False).stderr)
    assert code == 400 and bad["error"]["code"] == cli["error"]["code"]
    code, removed = api(port, token, "DELETE", f"/api/schedules/{added['id']}")
    assert code == 200 and removed == {"removed": added["id"]}
    assert api(port, token, "GET", "/api/schedules")[1] == []


@pytest.mark.e2e
def test_a_schedule_whose_zone_never_shows_its_times_is_refused_and_the_panel_answers_on(panel) -> None:
    harness, port, token = panel
    body = {"cron": "0 * 10 4 *", "tz": "AAA-12BBB12,J1,J100/0", "command": ["true"]}  # 10 April never shows
    code, refused = api(port, token, "POST", "/api/schedules", body)
    assert code == 400 and refused["error"]["code"] == "SCHEDULE_NEVER_FIRES", refused
    assert "never fires in time zone 'AAA-12BBB12,J1,J100/0'" in refused["error"]["message"]
    # The service and the database are free: the panel answers and the CLI writes.
    assert api(port, token, "GET", "/api/schedules") == (200, [])
    harness.cli("schedule", "add", "@daily", "--", "true")


@pytest.mark.e2e
def test_health(panel) -> None:
    _harness, port, token = panel
    code, health = api(port, token, "GET", "/api/health")
    assert code == 200 and health["workerId"] == "e2e-worker" and health["sessionLive"] is True
    assert health["session"]["status"] == "online" and health["slots"] == 2 and health["slotsInUse"] == 0
    assert health["databaseBytes"] > 0 and health["retainRuns"] == 1000 and health["clockJumps"] == 0


@pytest.mark.e2e
def test_secrets_are_masked_in_the_panel_too(panel) -> None:
    harness, port, token = panel
    harness.cli("env", "set", "TOKEN", "s3cr3t-value-xyz", "--secret")
    run_id = api(port, token, "POST", "/api/runs", {"command": ["sh", "-c", "echo s3cr3t-value-xyz"]})[1]["id"]
    harness.wait_status(run_id, "succeeded")
    shown = request(port, "GET", f"/api/runs/{run_id}/log", cookie=token) + request(port, "GET", f"/api/runs/{run_id}", cookie=token)
    shown += request(port, "GET", "/api/runs", cookie=token)
    assert b"s3cr3t-value-xyz" not in shown


@pytest.mark.e2e
def test_every_account_of_a_secret_is_masked_in_every_answer_and_the_log_view(harness) -> None:
    """The schedule answers and the answers of submit and cancel mask like every other; the log
    view, read chunk by chunk from each answer's ``nextOffset``, masks an account the capture's
    cap cut in two as `logs` does."""
    set_secret(harness, "COOKIE", COOKIE)
    service, port = start_panel(harness, "--log-max-bytes", str(CAP))
    token = login(port)
    first, second = ACCOUNTS
    answers = [api(port, token, "POST", "/api/schedules", {"cron": "@daily", "command": ["echo", first],
                                                            "env": {"TWO": second}})]
    schedule_id = answers[0][1]["id"]
    for action in ("pause", "resume"):
        answers.append(api(port, token, "POST", f"/api/schedules/{schedule_id}/{action}"))
    answers.append(api(port, token, "GET", "/api/schedules"))
    answers.append(api(port, token, "POST", "/api/runs", {"command": ["sleep", "30"], "name": first}))
    answers.append(api(port, token, "POST", f"/api/runs/{answers[-1][1]['id']}/cancel", {"reason": f"x {second}"}))
    unknown = api(port, token, "POST", "/api/runs", {"command": [second]})[1]["id"]
    harness.wait_status(unknown, "failed")
    answers.append(api(port, token, "GET", f"/api/runs/{unknown}/log"))  # refused: never started; its reason
    assert answers[-1][0] == 409 and "cannot start '***'" in answers[-1][1]["error"]["message"]
    for code, value in answers:
        assert code < 500 and not leaked(json.dumps(value)) and "***" in json.dumps(value), value
    run_id = api(port, token, "POST", "/api/runs", {"command": ["sh", "-c", CAPPED_TASK]})[1]["id"]
    harness.wait_status(run_id, "succeeded")
    log_path = Path(harness.detail(run_id).attempts[-1].log_path)
    wait_for(lambda: b"bytes left out" in log_path.read_bytes(), "the log's end after the marker")
    shown, offset = b"", 0
    while True:
        chunk = api(port, token, "GET", f"/api/runs/{run_id}/log?offset={offset}")[1]
        shown, offset = shown + chunk["text"].encode(), chunk["nextOffset"]
        if chunk["done"]:
            break
    assert same_but_marker(shown, capped_task_shown()), shown
    assert service.process.poll() is None


@pytest.mark.e2e
def test_a_new_password_ends_every_session(panel) -> None:
    harness, port, token = panel
    assert api(port, token, "GET", "/api/runs")[0] == 200
    subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(harness.db_path), "panel", "password"],
                   input="another password\n", text=True, env=harness.env, check=True, capture_output=True, timeout=60)
    assert api(port, token, "GET", "/api/runs")[0] == 401
    assert status(request(port, "POST", "/api/login", body=msgspec.json.encode({"password": PASSWORD}))) == 401
    new = msgspec.json.encode({"password": "another password"})
    wait_for(lambda: status(request(port, "POST", "/api/login", body=new)) == 200, "a login once the wait is over")
