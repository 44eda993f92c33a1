"""The OpenAPI against a real ``serve --panel-listen``, through raw HTTP: a cron's Run as QingLong
shows it (status 0 then 1, its pid while it runs and never after, log_path, the two times), its
log and the same log by directory and file, every secret's value masked, and the tail of a log
longer than one answer carries."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from edge_runtime.qinglong.openapi import MAX_LOG_BYTES
from tests.support.panel_client import exchange, start_panel, status
from tests.support.service_harness import wait_for

SECRET = "s3cr3t-token-value"


@pytest.fixture
def device(harness):
    service, port = start_panel(harness)
    app = json.loads(harness.cli("panel", "app", "add", "e2e", "--scopes", "crons,logs").stdout)
    raw = exchange(port, (f"GET /open/auth/token?client_id={app['client_id']}&client_secret={app['client_secret']} "
                          f"HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").encode())
    token = json.loads(raw.partition(b"\r\n\r\n")[2])["data"]["token"]
    yield harness, port, token
    assert service.process.poll() is None, service.log()


def _call(port: int, token: str, method: str, target: str, body: Any = None) -> tuple[int, Any]:
    data = b"" if body is None else json.dumps(body).encode()
    head = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Authorization: Bearer {token}",
            "Connection: close"]
    if body is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    raw = exchange(port, ("\r\n".join(head) + "\r\n\r\n").encode() + data, timeout=20)
    return status(raw), json.loads(raw.partition(b"\r\n\r\n")[2])


@pytest.mark.e2e
def test_a_crons_run_as_qinglong_shows_it_and_its_log_masked(device) -> None:
    harness, port, token = device
    harness.cli("env", "set", "TOKEN", SECRET, "--secret")
    command = r"""printf '\033[31mred\033[0m %s\n' "$TOKEN"; sleep 2; echo done"""
    code, added = _call(port, token, "POST", "/open/crons", {"command": command, "schedule": "0 3 * * *", "name": "m"})
    assert code == 200
    cron_id = added["data"]["id"]
    assert _call(port, token, "PUT", "/open/crons/run", [cron_id]) == (200, {"code": 200})
    running = wait_for(lambda: (c := _call(port, token, "GET", f"/open/crons/{cron_id}")[1]["data"])["status"] == 0 and c,
                       "the cron to run")
    assert isinstance(running["pid"], int) and running["log_path"].startswith(f"cron_{cron_id}/")
    assert abs(running["last_execution_time"] - time.time()) < 30 and running["last_running_time"] == 0
    done = wait_for(lambda: (c := _call(port, token, "GET", f"/open/crons/{cron_id}")[1]["data"])["status"] == 1 and c,
                    "the cron to end")
    assert done["pid"] is None and done["last_running_time"] >= 2 and done["log_path"] == running["log_path"]
    code, log = _call(port, token, "GET", f"/open/crons/{cron_id}/log")
    assert (code, log["logStatus"]) == (200, "completed")
    assert log["data"] == "\x1b[31mred\x1b[0m ***\ndone\n" and SECRET not in log["data"]  # raw, as QingLong's
    directory, name = done["log_path"].split("/")
    code, listed = _call(port, token, "GET", f"/open/crons/{cron_id}/logs")
    assert listed["data"] == [{"filename": name, "directory": directory, "time": listed["data"][0]["time"]}]
    code, detail = _call(port, token, "GET", f"/open/logs/detail?path={directory}&file={name}")
    assert (code, detail) == (200, {"code": 200, "data": "red ***\ndone\n"})  # ANSI removed, as QingLong's
    code, tree = _call(port, token, "GET", "/open/logs")
    assert [(d["title"], [f["title"] for f in d["children"]]) for d in tree["data"]] == [(directory, [name])]
    for bad in (f"path=../{directory}&file={name}", f"path={directory}&file=../../etc/passwd",
                f"path=x_{cron_id}&file={name}", f"path={directory}&file=2026-01-01-00-00-00-000_00000000.log"):
        code, refused = _call(port, token, "GET", f"/open/logs/detail?{bad}")
        assert code in (400, 404) and refused["code"] == code and "data" not in refused, bad


@pytest.mark.e2e
def test_a_log_longer_than_an_answer_gives_its_end_and_says_so(device) -> None:
    harness, port, token = device
    harness.cli("env", "set", "TOKEN", SECRET, "--secret")
    # The secret straddles the point where the tail begins: neither half may show.
    size = MAX_LOG_BYTES + 5000
    command = (f"head -c {size - MAX_LOG_BYTES - 8} /dev/zero | tr '\\0' a; printf '%s' \"$TOKEN\"; "
               f"head -c {MAX_LOG_BYTES - len(SECRET) + 8 - 4} /dev/zero | tr '\\0' b; echo end")
    code, added = _call(port, token, "POST", "/open/crons", {"command": command, "schedule": "0 3 * * *"})
    cron_id = added["data"]["id"]
    _call(port, token, "PUT", "/open/crons/run", [cron_id])
    wait_for(lambda: _call(port, token, "GET", f"/open/crons/{cron_id}")[1]["data"]["last_running_time"], "the run")
    code, log = _call(port, token, "GET", f"/open/crons/{cron_id}/log")
    text = log["data"]
    assert code == 200 and text.startswith(f"[the first {size - MAX_LOG_BYTES} bytes of this log are left out]\n")
    assert text.endswith("bend\n") and SECRET[8:] not in text and SECRET[:8] not in text and "***" in text


@pytest.mark.e2e
def test_a_secret_in_a_crons_own_command_is_masked_and_sending_the_masked_text_back_keeps_it(device) -> None:
    from edge_runtime.local.database import open_database
    from edge_runtime.local.schedules import LocalScheduleRepository

    harness, port, token = device
    harness.cli("env", "set", "TOKEN", SECRET, "--secret")
    command = f"curl -H 'x: {SECRET}' http://127.0.0.1:9/"
    code, added = _call(port, token, "POST", "/open/crons", {"command": command, "schedule": "0 3 * * *",
                                                             "name": f"uses {SECRET}"})
    cron = added["data"]
    assert code == 200 and cron["command"] == "curl -H 'x: ***' http://127.0.0.1:9/" and cron["name"] == "uses ***"
    code, listed = _call(port, token, "GET", f"/open/crons?searchValue={cron['id']}")
    assert SECRET not in json.dumps(listed)
    code, edited = _call(port, token, "PUT", "/open/crons", {"id": cron["id"], "command": cron["command"],
                                                             "name": cron["name"], "schedule": "0 4 * * *"})
    assert code == 200 and edited["data"]["schedule"] == "0 4 * * *"
    with open_database(str(harness.db_path)) as db:
        [stored] = LocalScheduleRepository(db).list()
    assert stored.command == ["sh", "-c", command] and stored.name == f"uses {SECRET}"  # kept, not "***"


@pytest.mark.e2e
def test_a_task_cron_whose_script_is_missing_is_refused_when_added_as_schedule_add_refuses_it(device) -> None:
    harness, port, token = device
    code, refused = _call(port, token, "POST", "/open/crons", {"command": "task no_such_script.js",
                                                               "schedule": "0 3 * * *"})
    assert code == 404 and refused["code"] == 404 and "no_such_script.js" in refused["message"]
    assert json.loads(harness.cli("schedule", "list", "--json").stdout) == []


@pytest.mark.e2e
def test_a_task_cron_added_as_qinglong_stores_it_runs_its_script_with_the_accounts(device) -> None:
    harness, port, token = device
    folder = harness.db_path.parent / "scripts" / "jd"
    folder.mkdir(mode=0o755, parents=True)
    script = folder / "show.sh"
    script.write_text('echo "in $(pwd): $JD_COOKIE"\n')
    script.chmod(0o644)
    harness.cli("env", "add", "JD_COOKIE", "pt_pin=a")
    harness.cli("env", "add", "JD_COOKIE", "pt_pin=b")
    code, added = _call(port, token, "POST", "/open/crons", {"command": "task jd/show.sh desi JD_COOKIE 2",
                                                             "schedule": "0 3 * * *", "name": "show"})
    assert code == 200 and added["data"]["command"] == "task jd/show.sh desi JD_COOKIE 2"
    assert added["data"]["log_name"] == "jd_show_1"
    cron_id = added["data"]["id"]
    _call(port, token, "PUT", "/open/crons/run", [cron_id])
    wait_for(lambda: _call(port, token, "GET", f"/open/crons/{cron_id}")[1]["data"]["last_running_time"], "the run")
    code, log = _call(port, token, "GET", f"/open/crons/{cron_id}/log")
    assert log["data"] == f"in {folder}: pt_pin=b\n"
