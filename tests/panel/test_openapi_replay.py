"""QingLong's clients' requests replayed, byte for byte as each sends them (the PyPI clients' call
tables: qinglongsdk, qinglongtool, qinglong-mcp-server, qinglong-app-sdk, the uploaders and
QingLong's own shell), against the panel's server in this process on a loopback socket, with no
service running (a Run started here stays queued). What each client reads back is checked: the
token's ``data.token``/``token_type``, integer ids, ``{data, total}``, the cron fields; and the
gate: no token, a bad or scope-less token, a session cookie, another host, a refused route."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from edge_runtime.contract.panel_apps import DEFAULT_TOKEN_TTL_MS, AppScope
from edge_runtime.local.clock import SystemClock
from edge_runtime.local.database import open_database
from edge_runtime.local.panel_apps import LocalPanelApps
from edge_runtime.local.panel_auth import LocalPanelAuth
from edge_runtime.local.environment import LocalEnvironmentRepository
from edge_runtime.local.schedules import LocalScheduleRepository
from edge_runtime.local.store import LocalStore
from edge_runtime.panel.server import PanelServer
from edge_runtime.qinglong.openapi import OpenApi
from edge_runtime.service.journal import Journal
from tests.support.panel_client import PASSWORD, exchange, header, login, status
from tests.support.openapi_calls import REFUSED_CALLS

#: The headers each client's HTTP library sends (requests, httpx), before its own.
REQUESTS = ["User-Agent: python-requests/2.32.3", "Accept-Encoding: gzip, deflate", "Accept: */*",
            "Connection: keep-alive"]
HTTPX = ["Accept: */*", "Accept-Encoding: gzip, deflate", "Connection: keep-alive", "User-Agent: python-httpx/0.28.1"]


class Panel:
    def __init__(self, tmp_path: Path) -> None:
        self.db_path = str(tmp_path / "edge.db")
        db = open_database(self.db_path)
        LocalPanelAuth(db).set_password(PASSWORD)
        apps = LocalPanelApps(db)
        self.full = apps.add("full", [AppScope.CRONS, AppScope.LOGS, AppScope.SYSTEM, AppScope.SUBSCRIPTIONS],
                             DEFAULT_TOKEN_TTL_MS)
        self.uploader = apps.add("uploader", [AppScope.ENVS], DEFAULT_TOKEN_TTL_MS)
        self.envs_only = apps.add("envs-only", [AppScope.ENVS], DEFAULT_TOKEN_TTL_MS)
        db.close()
        self.journal_text = io.StringIO()
        (tmp_path / "logs").mkdir()
        self.server = PanelServer(host="127.0.0.1", port=0, db_path=self.db_path, log_dir=tmp_path / "logs",
                                  config=None, journal=Journal(self.journal_text),
                                  open_store=lambda: LocalStore(open_database(self.db_path), self.db_path, SystemClock()),
                                  open_api=OpenApi)
        self.server.start()
        self.port = self.server.port

    def send(self, method: str, target: str, headers: list[str], body: bytes | None = None,
             host: str | None = None) -> tuple[int, Any, bytes]:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host or f'127.0.0.1:{self.port}'}", *headers]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        raw = exchange(self.port, ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))
        payload = raw.partition(b"\r\n\r\n")[2]
        return status(raw), json.loads(payload) if payload else None, raw

    def token(self, app: Any = None, headers: list[str] = REQUESTS) -> str:
        app = app or self.full
        code, body, _ = self.send("GET", f"/open/auth/token?client_id={app.client_id}&client_secret={app.client_secret}",
                                  headers)
        assert code == 200 and body["code"] == 200, body
        assert body["data"]["token_type"] == "Bearer" and body["data"]["expiration"] > time.time() + 29 * 86400
        return body["data"]["token"]

    def entries(self) -> list[Any]:
        with open_database(self.db_path) as db:
            return LocalEnvironmentRepository(db).list()

    def schedules(self) -> list[Any]:
        with open_database(self.db_path) as db:
            return LocalScheduleRepository(db, device_zone="UTC0").list()


@pytest.fixture
def panel(tmp_path: Path) -> Iterator[Panel]:
    made = Panel(tmp_path)
    yield made
    made.server.stop()


def _sdk(token: str) -> list[str]:
    """qinglongsdk's session headers after its login."""
    return [*REQUESTS, f"authorization: Bearer {token}", "Content-Type: application/json;charset=UTF-8"]


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()  # as the clients' json.dumps: ", " and ": " separators, ASCII escapes


def test_qinglongsdk_adds_edits_runs_and_deletes_a_cron_and_reads_the_logs(panel: Panel) -> None:
    token = panel.token()
    headers = _sdk(token)
    code, added, _ = panel.send("POST", "/open/crons", headers,
                                _json({"command": "task jd_bean.js", "schedule": "15 8 * * *", "name": "京豆变动"}))
    assert code == 200 and added["code"] == 200 and added["data"]["id"] == 1  # qltask.add returns data.id
    assert added["data"]["command"] == "task jd_bean.js" and added["data"]["name"] == "京豆变动"
    [stored] = panel.schedules()
    assert stored.command == ["task", "jd_bean.js"] and stored.expression == "15 8 * * *" and stored.number == 1
    code, edited, _ = panel.send("PUT", "/open/crons", headers,
                                 _json({"command": "task jd_bean.js now", "schedule": "0 0 9 * * *", "name": "new",
                                        "id": 1}))
    assert code == 200 and {k: edited["data"][k] for k in ("id", "name", "command", "schedule")} == {
        "id": 1, "name": "new", "command": "task jd_bean.js now", "schedule": "0 9 * * *"}
    code, run, _ = panel.send("PUT", "/open/crons/run", headers, _json([1]))
    assert (code, run) == (200, {"code": 200})  # qltask.task_run reads the HTTP status only
    code, one, _ = panel.send("GET", "/open/crons/1", headers)
    assert one["data"]["status"] == 3  # queued: no service runs here to start it
    code, tree, _ = panel.send("GET", "/open/logs", headers)
    [directory] = tree["data"]  # a directory per cron; a queued Run has no log file yet
    assert code == 200 and (directory["title"], directory["type"], directory["children"]) == ("jd_bean_1", "directory", [])
    code, version, _ = panel.send("GET", "/open/system", headers)
    assert version["data"]["version"] == "2.21.0"
    code, deleted, _ = panel.send("DELETE", "/open/crons", headers, _json([1]))
    assert (code, deleted) == (200, {"code": 200}) and panel.schedules() == []


def test_qinglongtool_with_httpx_json_bodies(panel: Panel) -> None:
    token = panel.token(headers=HTTPX)
    headers = [*HTTPX, f"authorization: Bearer {token}", "Content-Type: application/json"]
    body = json.dumps({"command": "echo hi", "schedule": "*/5 * * * *", "name": "hi"}, separators=(",", ":")).encode()
    code, added, _ = panel.send("POST", "/open/crons", headers, body)
    assert code == 200 and added["data"]["id"] == 1
    code, _, _ = panel.send("PUT", "/open/crons/run", headers, b"[1]")
    assert code == 200
    code, tree, _ = panel.send("GET", "/open/logs", headers)
    assert code == 200 and tree["code"] == 200
    # get_cron_log asks /api/... with the app token: app tokens open no /api/ route.
    code, refused, _ = panel.send("GET", "/api/crons/1/log", headers)
    assert code == 404
    code, refused, _ = panel.send("GET", "/api/runs", headers)
    assert code == 401


def test_the_mcp_server_lists_runs_and_reads_a_cron_with_a_token_per_call(panel: Panel) -> None:
    panel_schedules = []
    for name in ("a", "b"):
        token = panel.token()  # a new token per tool call: the same one back within the window
        headers = [*REQUESTS, f"Authorization: Bearer {token}", "Content-Type: application/json"]
        code, added, _ = panel.send("POST", "/open/crons", headers,
                                    _json({"command": f"task {name}.py", "schedule": "0 3 * * *", "name": name}))
        panel_schedules.append(added["data"]["id"])
    assert panel.token() == panel.token()
    headers = [*REQUESTS, f"Authorization: Bearer {panel.token()}"]
    code, listed, _ = panel.send("GET", "/open/crons", headers)
    assert code == 200 and listed["code"] == 200 and listed["data"]["total"] == 2
    for cron in listed["data"]["data"]:  # what list_qinglong_tasks reads
        assert {"id", "name", "command", "schedule", "isDisabled", "last_running_time"} <= set(cron)
        assert isinstance(cron["id"], int) and cron["isDisabled"] == 0 and cron["last_running_time"] == 0
    code, _, _ = panel.send("PUT", "/open/crons/run", [*headers, "Content-Type: application/json"], _json([2]))
    code, detail, _ = panel.send("GET", "/open/crons/2", headers)
    assert detail["data"]["status"] in (0, 1, 3) and detail["data"]["isPinned"] == 0
    assert detail["data"]["log_path"] == "" and detail["data"]["last_execution_time"] == 0
    code, log, _ = panel.send("GET", "/open/crons/2/log", headers)
    assert code == 200 and isinstance(log["data"], str) and log["logStatus"] in ("running", "notFound")
    code, missing, _ = panel.send("GET", "/open/crons/99", headers)
    assert code == 404 and missing["code"] == 404 and "99" in missing["message"]


def _subscribe(panel: Panel, tmp_path: Path, folder: str) -> Any:
    from edge_runtime.contract.subscriptions import AddSubscriptionCommand, SubscriptionKind

    with open_database(panel.db_path) as db:
        return LocalStore(db, panel.db_path, SystemClock()).subscriptions.add(AddSubscriptionCommand(
            kind=SubscriptionKind.GIT, url=f"https://example.org/{folder}.git", name=folder, folder=folder,
            scripts_dir=str(tmp_path / "scripts"), pull_command=["edge-runtime", "subscription", "pull"],
            expression="30 4 * * *", extensions=["js", "py"], whitelist="jd_", auto_add=True))


def test_the_mcp_server_lists_and_runs_subscriptions(panel: Panel, tmp_path: Path) -> None:
    first, second = _subscribe(panel, tmp_path, "alpha"), _subscribe(panel, tmp_path, "beta")
    headers = [*REQUESTS, f"Authorization: Bearer {panel.token()}"]
    code, listed, _ = panel.send("GET", "/open/subscriptions", headers)
    assert code == 200 and listed["code"] == 200
    # What list_subscriptions reads: data is a list; id, name, url, type, schedule, is_disabled.
    assert [(s["id"], s["name"], s["url"], s["type"], s["schedule"], s["is_disabled"], s["status"])
            for s in listed["data"]] == [
        (first.number, "alpha", "https://example.org/alpha.git", "public-repo", "30 4 * * *", 0, 1),
        (second.number, "beta", "https://example.org/beta.git", "public-repo", "30 4 * * *", 0, 1)]
    assert listed["data"][0]["whitelist"] == "jd_" and listed["data"][0]["autoAddCron"] == 1
    assert listed["data"][0]["pull_option"] is None and listed["data"][0]["alias"] == "alpha"
    code, found, _ = panel.send("GET", "/open/subscriptions?searchValue=bet", headers)
    assert [s["id"] for s in found["data"]] == [second.number]
    # run_subscription: PUT /open/subscriptions/run [id], then the pull is a queued Run of its schedule.
    code, ran, _ = panel.send("PUT", "/open/subscriptions/run", [*headers, "Content-Type: application/json"],
                              _json([second.number]))
    assert (code, ran) == (200, {"code": 200})
    code, one, _ = panel.send("GET", f"/open/subscriptions/{second.number}", headers)
    assert one["data"]["status"] == 3  # queued: no service runs here to start it
    with open_database(panel.db_path) as db:
        [run] = LocalStore(db, panel.db_path, SystemClock()).runs.list_runs(schedule_id=second.schedule_id, limit=10)
        assert run.command[-1] == second.id
    code, _, _ = panel.send("PUT", "/open/subscriptions/disable", [*headers, "Content-Type: application/json"],
                            _json([first.number]))
    code, one, _ = panel.send("GET", f"/open/subscriptions/{first.number}", headers)
    assert code == 200 and (one["data"]["is_disabled"], one["data"]["status"]) == (1, 2)
    code, missing, _ = panel.send("PUT", "/open/subscriptions/run", [*headers, "Content-Type: application/json"],
                                  _json([first.number, 99]))
    assert code == 404 and "99" in missing["message"]
    code, _, _ = panel.send("GET", "/open/subscriptions", [*REQUESTS, f"Authorization: Bearer {panel.token(panel.uploader)}"])
    assert code == 401  # an app without the subscriptions scope


def test_qinglong_app_sdk_sends_every_field_with_nulls_and_pages(panel: Panel) -> None:
    token = panel.token()
    headers = [*REQUESTS, f"Authorization: Bearer {token}", "content-type: application/json"]
    fields = {"command": "task app.js", "schedule": "0 1 * * *", "name": "app", "labels": None, "sub_id": None,
              "extra_schedules": None, "task_before": None, "task_after": None}
    code, added, _ = panel.send("POST", "/open/crons", headers, _json(fields))
    assert code == 200 and added["data"]["id"] == 1 and added["data"]["labels"] == []
    code, updated, _ = panel.send("PUT", "/open/crons", headers, _json({**fields, "name": "renamed", "labels": ["jd"],
                                                                       "id": 1}))
    assert code == 200 and updated["data"]["name"] == "renamed" and updated["data"]["labels"] == ["jd"]
    code, found, _ = panel.send("GET", "/open/crons?searchValue=renamed&page=1&size=200", headers)
    assert found["data"]["total"] == 1 and found["data"]["data"][0]["id"] == 1
    code, found, _ = panel.send("GET", "/open/crons?searchValue=label:jd", headers)
    assert found["data"]["total"] == 1
    code, none, _ = panel.send("GET", "/open/crons?searchValue=label:zz", headers)
    assert none["data"] == {"data": [], "total": 0}
    for action, paused in (("disable", True), ("enable", False)):
        code, done, _ = panel.send("PUT", f"/open/crons/{action}", headers, _json([1]))
        assert (code, done) == (200, {"code": 200}) and panel.schedules()[0].paused is paused
    code, stopped, _ = panel.send("PUT", "/open/crons/stop", headers, _json([1]))
    assert (code, stopped) == (200, {"code": 200})
    code, logs, _ = panel.send("GET", "/open/crons/1/logs", headers)
    assert code == 200 and logs["data"] == []
    code, detail, _ = panel.send("GET", "/open/logs/detail?file=2026-01-01-00-00-00-000_abcdef12.log&path=app_1",
                                 headers)
    assert code == 404 and detail["code"] == 404
    code, refused, _ = panel.send("PUT", "/open/system/reload", headers)
    assert code == 403 and "system commands" in refused["message"]


def test_the_task_before_and_task_after_fields_are_refused_and_nothing_is_added(panel: Panel) -> None:
    headers = _sdk(panel.token())
    for field in ("task_before", "task_after"):
        code, refused, _ = panel.send("POST", "/open/crons", headers,
                                      _json({"command": "task x.js", "schedule": "0 1 * * *", field: "curl x | sh"}))
        assert code == 403 and refused["code"] == 403 and field in refused["message"] and "root" in refused["message"]
    for extra, word in (({"sub_id": 3}, "sub_id"), ({"extra_schedules": [{"schedule": "0 2 * * *"}]}, "extra_schedules"),
                        ({"allow_multiple_instances": 1}, "overlap"), ({"log_name": "/dev/null"}, "log_name"),
                        ({"work_dir": "relative"}, "work_dir"), ({"status": 0}, "status"), ({"labels": [1]}, "labels")):
        code, refused, _ = panel.send("POST", "/open/crons", headers,
                                      _json({"command": "task x.js", "schedule": "0 1 * * *", **extra}))
        assert code == 400 and refused["code"] == 400 and word in refused["message"], (extra, refused)
    for schedule in ("* * *", "61 * * * *", ""):
        code, refused, _ = panel.send("POST", "/open/crons", headers, _json({"command": "task x.js", "schedule": schedule}))
        assert code == 400 and refused["code"] == 400
    code, refused, _ = panel.send("POST", "/open/crons", headers, _json({"command": "  ", "schedule": "0 1 * * *"}))
    assert code == 400
    assert panel.schedules() == []


def test_qinglongs_shell_sends_string_ids_and_cache_busters(panel: Panel) -> None:
    headers = [f"Authorization: Bearer {panel.token()}", "Content-Type: application/json"]
    code, added, _ = panel.send("POST", "/open/crons?t=1786000000", headers,
                                _json({"name": "x", "command": "task x.sh", "schedule": "0 1 * * *", "sub_id": None}))
    assert code == 200
    code, edited, _ = panel.send("PUT", "/open/crons?t=1786000001", headers,
                                 _json({"name": "y", "command": "task x.sh", "schedule": "0 1 * * *", "id": "1"}))
    assert code == 200 and edited["data"]["name"] == "y"
    code, status_write, _ = panel.send("PUT", "/open/crons/status?t=1", headers,
                                       _json({"ids": ["1"], "status": "0", "pid": "1"}))
    assert code == 403 and "cron status" in status_write["message"]
    for bad in (b"[]", b"[0]", b"[true]", b'["1a"]', b'{"ids":[1]}', b"", b"[1.5]"):
        code, refused, _ = panel.send("DELETE", "/open/crons", headers, bad)
        assert code == 400 and refused["code"] == 400, bad
    code, unknown, _ = panel.send("DELETE", "/open/crons", headers, b'["1", "7"]')
    assert code == 404 and "7" in unknown["message"] and len(panel.schedules()) == 1  # all or nothing
    code, deleted, _ = panel.send("DELETE", "/open/crons?t=2", headers, b'["1"]')
    assert (code, deleted) == (200, {"code": 200}) and panel.schedules() == []


@pytest.mark.parametrize(("method", "target", "body"), REFUSED_CALLS)
def test_every_refused_call_the_clients_make_is_a_403_with_its_reason(panel: Panel, method: str, target: str,
                                                                      body: bytes | None) -> None:
    code, refused, _ = panel.send(method, target, _sdk(panel.token()), body)
    assert code == 403 and refused["code"] == 403 and len(refused["message"]) > 20
    code, unauthenticated, _ = panel.send(method, target, REQUESTS, body)
    assert code == 401 and unauthenticated["code"] == 401  # a reason is given to a valid token only


def test_the_gate_401s_without_a_token_of_that_scope_and_changes_nothing(panel: Panel) -> None:
    add = _json({"command": "task x.js", "schedule": "0 1 * * *"})
    cases = [
        ([], "an app's token is needed"),
        (["Authorization: Bearer not-a-token"], "not valid"),
        (["Authorization: Basic dXNlcjpwdw=="], "Bearer"),
        ([f"Authorization: Bearer {panel.token(panel.envs_only)}"], "does not open crons"),
        ([f"Cookie: edge_panel={login(panel.port)}", "X-Edge-Panel: 1"], "token is needed"),  # a session opens no /open/
    ]
    for extra, message in cases:
        code, refused, _ = panel.send("POST", "/open/crons", [*REQUESTS, *extra, "Content-Type: application/json"], add)
        assert code == 401 and refused["code"] == 401 and message in refused["message"], (extra, refused)
    assert panel.schedules() == []
    code, refused, _ = panel.send("GET", "/open/crons", [f"Authorization: Bearer {panel.token()}"], host="evil.example")
    assert code == 421 and refused["code"] == 421
    for target in ("/OPEN/crons", "/Open/crons", "/open/Crons", "/open//crons"):
        code, _, _ = panel.send("GET", target, [f"Authorization: Bearer {panel.token()}"])
        assert code == 404, target


def test_the_token_request_ignores_a_stale_authorization_and_failed_ones_are_slowed(panel: Panel) -> None:
    app = panel.full
    code, issued, _ = panel.send(
        "GET", f"/open/auth/token?client_id={app.client_id}&client_secret={app.client_secret}&t=1",
        ["Authorization: Bearer stale-token-from-before"])
    assert code == 200 and issued["data"]["token"]  # QingLong answers 401 here (its pitfall)
    code, missing, _ = panel.send("GET", "/open/auth/token?client_id=x", [])
    assert code == 400 and "client_secret" in missing["message"]  # not a check of a secret: not counted
    code, wrong, _ = panel.send("GET", f"/open/auth/token?client_id={app.client_id}&client_secret=wrong", [])
    assert code == 400 and wrong == {"code": 400, "message": "invalid client_id or client_secret"}
    code, slowed, raw = panel.send("GET", f"/open/auth/token?client_id={app.client_id}&client_secret={app.client_secret}", [])
    assert code == 429 and slowed["code"] == 429 and int(header(raw, "retry-after")[0]) >= 1
    with open_database(panel.db_path) as db:
        events = db.connection.execute("SELECT payload FROM device_events WHERE type = 'panel.app_token_failed'").fetchall()
    assert len(events) == 1 and app.client_secret not in events[0][0]
    assert app.client_secret not in panel.journal_text.getvalue() and "panel.app_token_failed" in panel.journal_text.getvalue()


def test_a_body_beyond_the_limit_is_refused_before_it_is_read(panel: Panel) -> None:
    headers = [f"Authorization: Bearer {panel.token()}", "Content-Type: application/json",
               f"Content-Length: {70 * 1024}"]
    lines = [f"POST /open/crons HTTP/1.1", f"Host: 127.0.0.1:{panel.port}", *headers]
    raw = exchange(panel.port, ("\r\n".join(lines) + "\r\n\r\n").encode())
    assert status(raw) == 413 and msgspec.json.decode(raw.partition(b"\r\n\r\n")[2])["code"] == 413


def test_without_the_openapi_face_no_open_route_is_served(tmp_path: Path) -> None:
    db_path = str(tmp_path / "edge.db")
    with open_database(db_path) as db:
        LocalPanelAuth(db).set_password(PASSWORD)
    server = PanelServer(host="127.0.0.1", port=0, db_path=db_path, log_dir=tmp_path, config=None,
                         journal=Journal(io.StringIO()),
                         open_store=lambda: LocalStore(open_database(db_path), db_path, SystemClock()))
    server.start()
    try:
        raw = exchange(server.port, f"GET /open/system HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode())
        assert status(raw) == 404 and json.loads(raw.partition(b"\r\n\r\n")[2])["error"]["code"] == "NOT_FOUND"
    finally:
        server.stop()


def test_qinglongsdk_and_qinglongtool_manage_envs(panel: Panel) -> None:
    headers = _sdk(panel.token(panel.uploader))
    code, added, _ = panel.send("POST", "/open/envs", headers,
                                _json([{"value": "pt_key=A;pt_pin=u1;", "name": "JD_COOKIE", "remarks": "账号一"},
                                       {"value": "pt_key=B;pt_pin=u2;", "name": "JD_COOKIE", "remarks": ""}]))
    assert code == 200 and [e["id"] for e in added["data"]] == [1, 2]
    first = added["data"][0]
    assert {k: first[k] for k in ("name", "value", "remarks", "status", "isPinned", "labels")} == {
        "name": "JD_COOKIE", "value": "pt_key=A;pt_pin=u1;", "remarks": "账号一", "status": 0, "isPinned": 0, "labels": []}
    assert first["createdAt"].endswith("Z") and "GMT" in first["timestamp"]
    code, found, _ = panel.send("GET", "/open/envs?searchValue=u2", headers)  # qlenv.search
    assert [e["id"] for e in found["data"]] == [2]
    code, found, _ = panel.send("GET", "/open/envs?searchValue=%E8%B4%A6%E5%8F%B7", headers)  # 账号, encoded
    assert [e["id"] for e in found["data"]] == [1]
    code, listed, _ = panel.send("GET", "/open/envs/", headers)  # qlenv.list
    assert [e["id"] for e in listed["data"]] == [1, 2]
    code, one, _ = panel.send("GET", "/open/envs/2", headers)  # qlenv.get_by_id
    assert one["data"]["value"] == "pt_key=B;pt_pin=u2;"
    code, updated, _ = panel.send("PUT", "/open/envs", headers,  # qlenv.update
                                  _json({"value": "pt_key=C;pt_pin=u2;", "name": "JD_COOKIE", "remarks": "二", "id": 2}))
    assert code == 200 and (updated["data"]["value"], updated["data"]["remarks"]) == ("pt_key=C;pt_pin=u2;", "二")
    assert panel.send("PUT", "/open/envs/disable", headers, _json([2]))[:2] == (200, {"code": 200})
    assert [e.enabled for e in panel.entries()] == [True, False]
    assert panel.send("PUT", "/open/envs/enable", headers, b"[2]")[:2] == (200, {"code": 200})
    code, renamed, _ = panel.send("PUT", "/open/envs/name", headers, _json({"ids": 2, "name": "JD_COOKIE_2"}))
    assert (code, renamed) == (200, {"code": 200}) and panel.entries()[1].name == "JD_COOKIE_2"  # a bare id taken
    code, renamed, _ = panel.send("PUT", "/open/envs/name", headers, _json({"ids": ["1", 2], "name": "JD_COOKIE"}))
    assert code == 200 and {e.name for e in panel.entries()} == {"JD_COOKIE"}
    code, deleted, _ = panel.send("DELETE", "/open/envs", headers, _json([1]))  # qlenv.delete
    assert (code, deleted) == (200, {"code": 200}) and [e.id for e in panel.entries()] == [2]
    httpx = [*HTTPX, f"authorization: Bearer {panel.token(panel.uploader)}", "Content-Type: application/json"]
    code, added, _ = panel.send("POST", "/open/envs", httpx, b'[{"value":"v","name":"TOOL","remarks":""}]')
    assert code == 200 and added["data"][0]["id"] == 3  # ids are never given twice


def test_the_uploaders_find_an_account_by_its_remarks_update_and_enable_it(panel: Panel) -> None:
    headers = [*REQUESTS, f"Authorization: Bearer {panel.token(panel.uploader)}", "Content-Type: application/json"]
    code, created, _ = panel.send("POST", "/open/envs", headers,
                                  _json([{"name": "HW_TOKEN", "value": "old", "remarks": "user jane"}]))
    new_id = created["data"][0]["id"]  # vorto-utils: data[0]._id or data[0].id; autman: data[0]
    assert "_id" not in created["data"][0] and isinstance(new_id, int) and new_id >= 1
    code, found, _ = panel.send("GET", "/open/envs?searchValue=jane", headers)
    [entry] = [e for e in found["data"] if e["name"] == "HW_TOKEN" and "jane" in str(e["remarks"] or "")]
    code, _, _ = panel.send("PUT", "/open/envs", headers, _json({"name": "HW_TOKEN", "value": "new",
                                                                 "remarks": entry["remarks"], "id": entry["id"]}))
    assert code == 200
    assert panel.send("PUT", "/open/envs/enable", headers, _json([entry["id"]]))[:2] == (200, {"code": 200})
    [stored] = panel.entries()
    assert (stored.value, stored.remarks, stored.enabled) == ("new", "user jane", True)


def test_a_secret_entry_shows_its_value_masked_and_sending_it_back_keeps_it(panel: Panel) -> None:
    secret = "pt_key=SECRETVALUE;pt_pin=me;"
    with open_database(panel.db_path) as db:
        from edge_runtime.contract.env_entries import NewEnvEntry

        LocalEnvironmentRepository(db).add([NewEnvEntry(name="JD_COOKIE", value=secret, secret=True,
                                                        remarks=f"cookie {secret}")])
    headers = _sdk(panel.token(panel.uploader))
    code, listed, raw = panel.send("GET", "/open/envs", headers)
    [entry] = listed["data"]
    assert (entry["value"], entry["remarks"]) == ("***", "cookie ***") and secret.encode() not in raw
    code, found, raw = panel.send("GET", "/open/envs?searchValue=SECRETVALUE", headers)  # found by it, never shown
    assert [e["id"] for e in found["data"]] == [entry["id"]] and secret.encode() not in raw
    code, updated, raw = panel.send("PUT", "/open/envs", headers, _json({"id": entry["id"], "name": "JD_COOKIE",
                                                                        "value": "***", "remarks": "cookie ***"}))
    assert code == 200 and secret.encode() not in raw
    [stored] = panel.entries()
    assert (stored.remarks, stored.secret) == (f"cookie {secret}", True)
    with open_database(panel.db_path) as db:
        assert LocalEnvironmentRepository(db).task_values() == {"JD_COOKIE": secret}  # the value kept


def test_env_requests_that_are_refused(panel: Panel) -> None:
    headers = _sdk(panel.token(panel.uploader))
    for body, status_code, word in ((b"[]", 400, "at least one"), (_json([{"name": "1BAD", "value": "v"}]), 400, "name"),
                                    (_json([{"name": "OK", "value": ""}]), 400, "empty"),
                                    (_json([{"name": "OK", "value": "v", "status": 1}]), 400, "status"),
                                    (_json({"name": "OK", "value": "v"}), 400, "array"),
                                    (_json([{"name": "OK", "value": "v"}, {"name": "NODE_OPTIONS",
                                                                          "value": "--import data:text/javascript,1"}]),
                                     403, "NODE_OPTIONS"),
                                    (_json([{"name": "LD_PRELOAD", "value": "/tmp/x.so"}]), 403, "LD_PRELOAD"),
                                    (_json([{"name": "PATH", "value": "/tmp"}]), 403, "PATH")):
        code, refused, _ = panel.send("POST", "/open/envs", headers, body)
        assert code == status_code and refused["code"] == status_code and word in refused["message"], (body, refused)
    assert panel.entries() == []
    code, missing, _ = panel.send("GET", "/open/envs/9", headers)
    assert code == 404 and missing["code"] == 404
    code, missing, _ = panel.send("PUT", "/open/envs/enable", headers, _json([9]))
    assert code == 404 and "9" in missing["message"]
    code, refused, _ = panel.send("GET", "/open/envs", _sdk(panel.token()))  # the crons app holds no envs scope
    assert code == 401 and "does not open envs" in refused["message"]
    # One set on the device may not be changed, renamed to, nor enabled by an app; removed, it may.
    with open_database(panel.db_path) as db:
        from edge_runtime.contract.env_entries import NewEnvEntry

        [loader, plain] = LocalEnvironmentRepository(db).add([
            NewEnvEntry(name="LD_LIBRARY_PATH", value="/opt/lib", enabled=False), NewEnvEntry(name="A", value="a")])
    for method, target, body in (("PUT", "/open/envs", {"id": loader.id, "name": "LD_LIBRARY_PATH", "value": "/tmp"}),
                                 ("PUT", "/open/envs", {"id": plain.id, "name": "PYTHONPATH", "value": "/tmp"}),
                                 ("PUT", "/open/envs/enable", [loader.id]),
                                 ("PUT", "/open/envs/name", {"ids": [plain.id], "name": "BASH_ENV"})):
        code, refused, _ = panel.send(method, target, headers, _json(body))
        assert code == 403 and "load or run other code" in refused["message"], (target, body, refused)
    assert [(e.name, e.value, e.enabled) for e in panel.entries()] == [("LD_LIBRARY_PATH", "/opt/lib", False),
                                                                        ("A", "a", True)]
    assert panel.send("PUT", "/open/envs/disable", headers, _json([loader.id]))[0] == 200
    assert panel.send("DELETE", "/open/envs", headers, _json([loader.id]))[0] == 200
    code, refused, _ = panel.send("POST", "/open/envs/upload", headers, b"--x--")
    assert code == 403 and "scripts directory" in refused["message"]
