"""QingLong's own client libraries from PyPI against a real ``serve --panel-listen``.

qinglongsdk (requests), qinglongtool (httpx, async) and qinglong-mcp-server (an MCP server for AI
agents, spoken to over its stdin as an agent does) are installed into a venv of their own under
the test's temporary directory (never into the project's): the device must answer what they
really send and what they read back must be what they expect. They trade an app's id and
secret for a token, then add, edit, run, stop and delete crons, read the logs and the version,
and meet every refusal on the way. Stopping a cron ends its task and the task's background
child (the Run's whole process group). Skipped, saying so, when PyPI cannot be reached.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.openapi_calls import REFUSED_CALLS
from tests.support.panel_client import start_panel
from tests.support.service_harness import wait_for

#: The versions the reference read (docs/qinglong.md), pinned so the test replays what was read.
CLIENTS = ["qinglongsdk==0.1.6", "qinglongtool==0.1.3", "qinglong-mcp-server==0.1.5"]


@pytest.fixture(scope="module")
def client_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("qinglong-clients") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    python = venv / "bin" / "python"
    try:
        installed = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check",
                                    "--no-input", "--timeout", "20", *CLIENTS],
                                   capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip(f"PyPI did not answer within 600 s: cannot install {', '.join(CLIENTS)}")
    if installed.returncode != 0:
        pytest.skip(f"cannot install {', '.join(CLIENTS)} from PyPI (unreachable?): "
                    f"{(installed.stderr.strip().splitlines() or ['no output'])[-1]}")
    return python


@pytest.fixture
def device(harness) -> Iterator[tuple[Any, int, dict[str, str]]]:
    service, port = start_panel(harness)
    app = json.loads(harness.cli("panel", "app", "add", "sdk", "--scopes", "crons,logs,system").stdout)
    yield harness, port, app
    assert service.process.poll() is None, service.log()


def _client(python: Path, script: str, port: int, app: dict[str, str], tmp: Path, **extra: Any) -> dict[str, Any]:
    arguments = json.dumps({"port": port, "client_id": app["client_id"], "client_secret": app["client_secret"],
                            "tmp": str(tmp), **extra})
    done = subprocess.run([str(python), "-c", textwrap.dedent(script), arguments], capture_output=True, text=True,
                          timeout=120, cwd=tmp)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


QINGLONGSDK = """
import json, sys, time
from qinglongsdk import qltask, qllog, qlsystem, qlconfig, qlscript, qldependence

a = json.loads(sys.argv[1])
args = ("127.0.0.1", a["port"], a["client_id"], a["client_secret"])
out = {}
task = qltask(*args)
added = task.add(a["command"], "0 3 * * *", "background")
out["added"] = added
cron_id = added["data"]
out["edited"] = task.edit(a["command"], "*/30 * * * *", "background-2", cron_id)
out["run"] = task.task_run([cron_id])
# The SDK has no read of one cron or stop: its session does it as the MCP server and the panel do.
def cron():
    return task.s.get(f"{task.url}/open/crons/{cron_id}").json()["data"]
deadline = time.time() + 30
while time.time() < deadline and cron()["status"] != 0:
    time.sleep(0.2)
out["running"] = cron()
print(json.dumps(out), flush=True)
sys.stdin.readline()  # the test reads the task's processes, then lets the script stop it
out["stop"] = task.s.put(f"{task.url}/open/crons/stop", data=json.dumps([cron_id])).json()
deadline = time.time() + 30
while time.time() < deadline and cron()["status"] != 1:
    time.sleep(0.2)
out["stopped"] = cron()
out["log"] = task.s.get(f"{task.url}/open/crons/{cron_id}/log").json()
out["logs"] = qllog(*args).list()
out["version"] = qlsystem(*args).version()
out["refused"] = {"configs": qlconfig(*args).list(), "scripts": qlscript(*args).get_all(),
                  "dependence": qldependence(*args).get(), "update": qlsystem(*args).update()}
out["deleted"] = task.delete(cron_id)
out["deleted_again"] = task.delete(cron_id)
print(json.dumps(out), flush=True)
"""


@pytest.mark.e2e
def test_qinglongsdk_adds_runs_stops_and_deletes_a_cron(client_python: Path, device, tmp_path: Path) -> None:
    harness, port, app = device
    pids = tmp_path / "pids"
    pids.mkdir()
    command = f"echo $$ > {pids}/shell; sleep 300 & echo $! > {pids}/child; echo started; wait"
    arguments = json.dumps({"port": port, "client_id": app["client_id"], "client_secret": app["client_secret"],
                            "command": command})
    process = subprocess.Popen([str(client_python), "-c", textwrap.dedent(QINGLONGSDK), arguments], cwd=tmp_path,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    task_pids: list[int] = []
    try:
        first = json.loads(process.stdout.readline() or "{}")
        assert first, process.stderr.read()
        assert first["added"]["code"] == 200 and isinstance(first["added"]["data"], int)
        assert first["edited"] == {"code": 200, "data": {"id": first["added"]["data"], "name": "background-2",
                                                         "command": command, "schedule": "0,30 * * * *"}}  # canonical
        assert first["run"] == 200
        running = first["running"]
        assert running["status"] == 0 and isinstance(running["pid"], int) and running["log_path"]
        wait_for(lambda: (pids / "child").exists() and (pids / "child").read_text().strip(), "the background child")
        task_pids = [int((pids / name).read_text()) for name in ("shell", "child")]
        assert running["pid"] == task_pids[0] or _alive(running["pid"])
        assert all(_alive(pid) for pid in task_pids)
        process.stdin.write("\n")
        process.stdin.flush()
        out, err = process.communicate(timeout=90)
        assert process.returncode == 0, err
        second = json.loads(out.strip().splitlines()[-1])
    finally:
        if process.poll() is None:
            process.kill()
        for pid in task_pids:  # a failed test leaves nothing running
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    # The Run's whole process group ended: the shell and its background child (nothing else).
    wait_for(lambda: not any(_alive(pid) for pid in task_pids), "the task and its background child to end")
    assert second["stop"] == {"code": 200}
    stopped = second["stopped"]
    assert (stopped["status"], stopped["pid"]) == (1, None) and stopped["last_running_time"] >= 1
    assert second["log"]["code"] == 200 and "started" in second["log"]["data"]
    assert second["logs"]["code"] == 200 and second["logs"]["data"][0]["type"] == "directory"
    assert second["version"]["data"]["version"] == "2.21.0"
    for name, refused in second["refused"].items():
        assert refused["code"] in (403,), (name, refused)
    assert second["deleted"] == {"code": 200}
    assert second["deleted_again"]["code"] == 404  # qltask.delete returns the status and the message
    [run] = json.loads(harness.cli("list", "--json").stdout)
    assert run["status"] == "cancelled"
    assert json.loads(harness.cli("schedule", "list", "--json").stdout) == []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


QINGLONGTOOL = """
import asyncio, json, sys
from qlapi.ql_task import qltask  # the package does not re-export it
from qlapi import qllog

a = json.loads(sys.argv[1])
args = ("127.0.0.1", a["port"], a["client_id"], a["client_secret"])

async def main():
    out = {}
    async with qltask(*args) as task:
        added = await task.add("echo from qinglongtool", "0 4 * * *", "tool")
        out["added"] = added
        out["run"] = await task.task_run(added["data"])
        for _ in range(100):
            cron = (await task.s.get(f"{task.url}/open/crons/{added['data']}")).json()["data"]
            if cron["last_running_time"]:
                break
            await asyncio.sleep(0.2)
        out["cron"] = cron
        out["log"] = (await task.s.get(f"{task.url}/open/crons/{added['data']}/log")).json()
    async with qllog(*args) as logs:
        out["logs"] = await logs.list()
        out["cron_log_through_api"] = await logs.get_cron_log(added["data"])
    print(json.dumps(out))

asyncio.run(main())
"""


@pytest.mark.e2e
def test_qinglongtool_adds_and_runs_a_cron_and_reads_its_log(client_python: Path, device, tmp_path: Path) -> None:
    harness, port, app = device
    out = _client(client_python, QINGLONGTOOL, port, app, tmp_path)
    assert out["added"]["code"] == 200 and isinstance(out["added"]["data"], int)
    assert out["run"] == 200
    assert out["cron"]["status"] == 1 and out["cron"]["last_running_time"] >= 1
    assert out["log"] == {"code": 200, "data": "from qinglongtool\n", "logStatus": "completed"}
    [directory] = out["logs"]["data"]
    assert directory["title"] == out["cron"]["log_name"] and len(directory["children"]) == 1
    # get_cron_log asks /api/crons/{id}/log with the app token: app tokens open no /api/ route.
    assert "error" in out["cron_log_through_api"]


REFUSALS = """
import json, sys, requests
a = json.loads(sys.argv[1])
base = f"http://127.0.0.1:{a['port']}"
token = requests.get(f"{base}/open/auth/token?client_id={a['client_id']}&client_secret={a['client_secret']}").json()
headers = {"authorization": "Bearer " + token["data"]["token"], "Content-Type": "application/json;charset=UTF-8"}
out = []
for method, target, body in a["calls"]:
    response = requests.request(method, base + target, headers=headers, data=None if body is None else body.encode())
    out.append([method, target, response.status_code, response.json()])
print(json.dumps(out))
"""


@pytest.mark.e2e
def test_every_refusal_through_the_clients_http_library(client_python: Path, device, tmp_path: Path) -> None:
    harness, port, app = device
    calls = [[m, t, None if b is None else b.decode()] for m, t, b in REFUSED_CALLS]
    out = _client(client_python, REFUSALS, port, app, tmp_path, calls=calls)
    assert len(out) == len(REFUSED_CALLS)
    for method, target, code, body in out:
        assert code == 403 and body["code"] == 403 and body["message"], (method, target, body)
    assert json.loads(harness.cli("schedule", "list", "--json").stdout) == []


QINGLONGSDK_ENVS = """
import json, sys
from qinglongsdk import qlenv

a = json.loads(sys.argv[1])
env = qlenv("127.0.0.1", a["port"], a["client_id"], a["client_secret"])
out = {}
out["added"] = [env.add("JD_COOKIE", value, remarks) for value, remarks in a["accounts"]]
ids = [added["data"][0]["id"] for added in out["added"]]
out["search"] = env.search("pt_pin=u2")
out["update"] = env.update("pt_key=v3 \\"q\\";pt_pin=u3;", "JD_COOKIE", ids[2], "账号三")
out["disable"] = env.disable([ids[1]])
out["list"] = env.list()
out["get"] = env.get_by_id(ids[0])
out["rename"] = env.rename([ids[0]], "JD_COOKIE")
out["refused"] = env.add("NODE_OPTIONS", "--import data:text/javascript,1")
print(json.dumps(out))
"""

QINGLONGTOOL_ENVS = """
import asyncio, json, sys
from qlapi import qlenv

a = json.loads(sys.argv[1])

async def main():
    async with qlenv("127.0.0.1", a["port"], a["client_id"], a["client_secret"]) as env:
        added = await env.add("TOOL_VAR", "from tool", "remark")
        found = await env.search(name="TOOL_VAR")
        listed = await env.list()
        enabled = await env.enable([added["data"][0]["id"]])
    print(json.dumps({"added": added, "found": found, "listed": listed, "enabled": enabled}))

asyncio.run(main())
"""


@pytest.mark.e2e
def test_the_clients_manage_envs_and_a_cron_sees_the_enabled_accounts_joined(client_python: Path, harness,
                                                                             tmp_path: Path) -> None:
    service, port = start_panel(harness)
    app = json.loads(harness.cli("panel", "app", "add", "envs", "--scopes", "envs,crons").stdout)
    accounts = [["pt_key=v1 'a b';pt_pin=u1;", "账号一"], ["pt_key=v2;pt_pin=u2;", ""], ["old", "three"]]
    out = _client(client_python, QINGLONGSDK_ENVS, port, app, tmp_path, accounts=accounts)
    assert [added["code"] for added in out["added"]] == [200, 200, 200]
    assert [e["remarks"] for e in out["search"]] == [""]
    assert out["update"]["code"] == 200 and out["update"]["data"]["remarks"] == "账号三"
    assert out["disable"] == {"code": 200} and out["rename"] == {"code": 200}
    assert [(e["status"], e["value"]) for e in out["list"]["data"]] == [
        (0, accounts[0][0]), (1, accounts[1][0]), (0, "pt_key=v3 \"q\";pt_pin=u3;")]
    assert out["get"]["data"]["remarks"] == "账号一"
    assert out["refused"]["code"] == 403 and "NODE_OPTIONS" in out["refused"]["message"]
    tool = _client(client_python, QINGLONGTOOL_ENVS, port, app, tmp_path)
    assert tool["added"]["code"] == 200 and [e["value"] for e in tool["found"]["TOOL_VAR"]] == ["from tool"]
    assert tool["enabled"] == {"code": 200} and len(tool["listed"]["data"]) == 4
    # A cron run through the OpenAPI sees JD_COOKIE as its enabled entries joined with &, in list order.
    out_file = tmp_path / "seen"
    arguments = {"command": f"printf '%s' \"$JD_COOKIE\" > {out_file}", "schedule": "0 3 * * *"}
    script = """
import json, sys
from qinglongsdk import qltask
a = json.loads(sys.argv[1])
task = qltask("127.0.0.1", a["port"], a["client_id"], a["client_secret"])
added = task.add(a["command"], a["schedule"], "show cookie")
print(json.dumps({"added": added, "run": task.task_run([added["data"]])}))
"""
    ran = _client(client_python, script, port, app, tmp_path, **arguments)
    assert ran["run"] == 200
    wait_for(lambda: out_file.exists() and out_file.read_text(), "the cron's Run to write what it saw")
    assert out_file.read_text() == f"{accounts[0][0]}&pt_key=v3 \"q\";pt_pin=u3;"
    assert service.process.poll() is None, service.log()


class McpServer:
    """qinglong-mcp-server as an agent runs it: JSON-RPC lines on its stdin, one answer a line."""

    def __init__(self, python: Path, port: int, app: dict[str, str], home: Path) -> None:
        home.mkdir()
        # Its settings come from the environment (python-dotenv never overrides it); HOME and the
        # working directory are the test's, where it writes its sample ~/.qinglong-mcp/.env.
        env = {**os.environ, "HOME": str(home), "QINGLONG_URL": f"http://127.0.0.1:{port}",
               "CLIENT_ID": app["client_id"], "CLIENT_SECRET": app["client_secret"]}
        self.process = subprocess.Popen([str(python.parent / "qinglong-mcp-server")], cwd=home, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        self.next_id = 0

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        self.process.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                             "params": params or {}}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, self.process.stderr.read()
        answer = json.loads(line)
        assert answer["id"] == self.next_id and "error" not in answer, answer
        return answer["result"]

    def tool(self, name: str, **arguments: Any) -> str:
        result = self.call("tools/call", {"name": name, "arguments": arguments})
        return result["content"][0]["text"]

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self.process.stdout.close()
            self.process.stderr.close()


@pytest.mark.e2e
def test_the_mcp_server_lists_runs_and_reads_crons_and_runs_a_subscription(client_python: Path, harness,
                                                                           tmp_path: Path) -> None:
    from tests.support.git_sources import Repo

    repo = Repo(tmp_path / "src")
    repo.commit({"jd_a.js": "// cron: 15 8 * * *\nconst $ = new Env('京豆');\n"})
    subscription_id = harness.cli("subscription", "add", repo.url, "--folder", "faker").stdout.strip()
    cron_id = harness.cli("schedule", "add", "--name", "问候", "0 4 * * *", "--", "sh", "-c",
                          "echo 你好 from the device; sleep 9; echo done").stdout.strip()
    number = json.loads(harness.cli("schedule", "show", cron_id, "--json").stdout)["number"]
    service, port = start_panel(harness)
    app = json.loads(harness.cli("panel", "app", "add", "mcp", "--scopes", "crons,logs,subscriptions").stdout)
    mcp = McpServer(client_python, port, app, tmp_path / "home")
    try:
        assert mcp.call("initialize", {"protocolVersion": "2024-11-05"})["serverInfo"]["name"] == "qinglong-mcp"
        tools = {tool["name"] for tool in mcp.call("tools/list")["tools"]}
        assert {"list_qinglong_tasks", "run_task", "get_task_logs", "list_subscriptions",
                "run_subscription"} <= tools
        listed = mcp.tool("list_qinglong_tasks")
        # The subscription's pull schedule is a cron too (QingLong lists its subscriptions' crons).
        assert "共 2 个任务" in listed and f"ID: {number}\n名称: 问候" in listed and "名称: pull faker" in listed
        assert "状态: 启用" in listed
        # run_task starts it, watches its status go 0 (running) then 1 (idle), and returns its log.
        assert "你好 from the device" in mcp.tool("run_task", task_id=number)
        assert "done" in mcp.tool("get_task_logs", task_id=number)
        status = mcp.tool("get_task_status", task_id=number)
        assert "状态: 空闲" in status and ("上次运行时长: 9秒" in status or "上次运行时长: 10秒" in status), status
        subscriptions = mcp.tool("list_subscriptions")
        assert "共 1 个订阅" in subscriptions and f"URL: {repo.url}" in subscriptions
        assert "类型: public-repo" in subscriptions and "状态: 启用" in subscriptions
        assert "已成功运行" in mcp.tool("run_subscription", subscription_id=1)
    finally:
        mcp.close()
    # The pull ran as a Run of the subscription's schedule and brought the script.
    wait_for(lambda: json.loads(harness.cli("subscription", "list", "--json").stdout)[0]["subscription"]
             .get("revision"), "the pull the MCP server started")
    assert (harness.tmp / "scripts" / "faker" / "jd_a.js").exists()
    [view] = json.loads(harness.cli("subscription", "list", "--json").stdout)
    assert view["subscription"]["id"] == subscription_id and view["scripts"] == 1
    assert service.process.poll() is None, service.log()
