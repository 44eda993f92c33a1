"""The panel's API behind its everyday pages against a running ``serve``: a cron's view in its own
zone, editing a schedule, a schedule's Runs, env entries (a secret's value never answered),
subscriptions, OpenAPI apps (a secret answered once), what ``check`` says and notifications (a
channel's test message, a cron's rules); each the same operation as the CLI's."""

from __future__ import annotations

import shutil

import pytest

from tests.support.git_sources import Repo
from tests.support.notify_receiver import Receiver
from tests.support.panel_client import api, login, request, start_panel
from tests.support.service_harness import decode_json, wait_for

SECRET = "a-long-secret-cookie-value-42"


@pytest.fixture
def panel(harness):
    service, port = start_panel(harness)
    yield harness, port, login(port)
    assert service.process.poll() is None, service.log()


@pytest.mark.e2e
def test_a_cron_is_shown_in_its_zone_edited_and_its_runs_listed(panel) -> None:
    harness, port, token = panel
    code, added = api(port, token, "POST", "/api/schedules",
                       {"cron": "30 7 * * *", "tz": "Asia/Shanghai", "command": ["true"], "name": "n", "labels": ["a"]})
    assert code == 201
    code, crons = api(port, token, "GET", "/api/crons")
    assert code == 200 and [(c["schedule"]["id"], c["zone"], c["nextOffsetS"]) for c in crons] == \
        [(added["id"], "Asia/Shanghai", 8 * 3600)]
    assert "lastOffsetS" not in crons[0]
    # 07:30 in Shanghai is 23:30 UTC: the page adds the offset and shows 07:30, labelled with the zone.
    assert (crons[0]["schedule"]["nextFireAtMs"] // 1000 + crons[0]["nextOffsetS"]) % 86400 == 7 * 3600 + 1800

    body = {"cron": "*/5 * * * *", "command": ["sh", "-c", "echo edited"], "name": "renamed", "timeout": "1m",
            "overlap": "queue", "env": {"A": "1"}, "retries": 2, "retryDelay": "1s", "labels": ["x", "y"]}
    code, edited = api(port, token, "POST", f"/api/schedules/{added['id']}/edit", body)
    assert code == 200, edited
    shown = decode_json(harness.cli("schedule", "show", added["id"], "--json").stdout)
    assert edited == shown and shown["expression"] == "*/5 * * * *" and shown["name"] == "renamed"
    assert (shown["timeoutMs"], shown["overlap"], shown["env"], shown["retries"], shown["retryDelayMs"],
            shown["labels"]) == (60000, "queue", {"A": "1"}, 2, 1000, ["x", "y"])
    code, moved = api(port, token, "POST", f"/api/schedules/{added['id']}/edit", {"tz": "Europe/Berlin"})
    assert code == 200 and moved["timeZone"] == "Europe/Berlin" and moved["expression"] == "*/5 * * * *"
    cron = api(port, token, "GET", "/api/crons")[1][0]
    assert cron["zone"] == "Europe/Berlin" and cron["nextOffsetS"] in (3600, 7200)
    # A POSIX TZ text (a router without zoneinfo): Intl cannot read it, the offset given can.
    api(port, token, "POST", f"/api/schedules/{added['id']}/edit", {"tz": "CET-1CEST,M3.5.0,M10.5.0/3"})
    cron = api(port, token, "GET", "/api/crons")[1][0]
    assert cron["zone"] == "CET-1CEST,M3.5.0,M10.5.0/3" and cron["nextOffsetS"] in (3600, 7200)
    harness.cli("schedule", "edit", added["id"], "--tz", "Asia/Shanghai")  # the CLI's own way
    assert decode_json(harness.cli("schedule", "show", added["id"], "--json").stdout)["timeZone"] == "Asia/Shanghai"
    code, refused = api(port, token, "POST", f"/api/schedules/{added['id']}/edit", {"tz": "Nowhere/Atall"})
    assert code == 400 and refused["error"]["code"] == "INVALID_TIME_ZONE", refused
    code, as_root = api(port, token, "POST", f"/api/schedules/{added['id']}/edit", {"user": "root"})
    assert code == 200 and as_root["taskUser"] == "root", as_root
    code, refused = api(port, token, "POST", f"/api/schedules/{added['id']}/edit", {"user": "no-such-user-here"})
    assert code == 400 and refused["error"]["code"] == "INVALID_RUN_COMMAND", refused
    code, cleared = api(port, token, "POST", f"/api/schedules/{added['id']}/edit", {"env": {}, "labels": []})
    assert code == 200 and "env" not in cleared and cleared["labels"] == []
    code, refused = api(port, token, "POST", f"/api/schedules/{added['id']}/edit", {"cron": "61 * * * *"})
    assert code == 400 and refused["error"]["code"] == "INVALID_CRON_EXPRESSION", refused
    code, refused = api(port, token, "POST", f"/api/schedules/{added['id']}/edit", {"overlap": "sometimes"})
    assert code == 400 and refused["error"]["code"] == "INVALID_SCHEDULE_COMMAND"

    ran = api(port, token, "POST", f"/api/schedules/{added['id']}/run", {})[1]
    other = api(port, token, "POST", "/api/runs", {"command": ["true"]})[1]
    harness.wait_status(ran["runId"], "succeeded")
    code, runs = api(port, token, "GET", f"/api/runs?schedule={added['id']}")
    assert code == 200 and [r["id"] for r in runs] == [ran["runId"]] and other["id"] != ran["runId"]
    code, crons = api(port, token, "GET", "/api/crons")
    assert crons[0]["schedule"]["lastRunId"] == ran["runId"] and crons[0]["lastOffsetS"] == 8 * 3600


@pytest.mark.e2e
def test_env_entries_and_a_secret_that_is_never_answered(panel) -> None:
    harness, port, token = panel
    code, plain = api(port, token, "POST", "/api/envs", {"name": "PLAIN", "value": "v1", "remarks": "r"})
    assert code == 201 and plain["value"] == "v1" and plain["enabled"] is True
    code, secret = api(port, token, "POST", "/api/envs", {"name": "COOKIE", "value": SECRET, "secret": True})
    assert code == 201 and "value" not in secret and secret["secret"] is True
    code, edited = api(port, token, "POST", f"/api/envs/{secret['id']}/edit", {"value": SECRET + "-new", "remarks": "x"})
    assert code == 200 and "value" not in edited and edited["remarks"] == "x"
    assert api(port, token, "POST", f"/api/envs/{plain['id']}/disable", {})[1]["enabled"] is False
    assert api(port, token, "POST", f"/api/envs/{plain['id']}/enable", {})[1]["enabled"] is True
    assert api(port, token, "POST", f"/api/envs/{plain['id']}/pin", {})[1]["pinned"] is True
    assert [e["id"] for e in api(port, token, "GET", "/api/envs")[1]] == [plain["id"], secret["id"]]
    assert api(port, token, "POST", f"/api/envs/{plain['id']}/unpin", {})[1]["pinned"] is False
    code, moved = api(port, token, "POST", f"/api/envs/{secret['id']}/move", {"before": plain["id"]})
    assert code == 200
    code, listed = api(port, token, "GET", "/api/envs")
    assert [e["id"] for e in listed] == [secret["id"], plain["id"]]
    assert listed == decode_json(harness.cli("env", "list", "--json").stdout)
    everything = b"".join(request(port, "GET", target, cookie=token) for target in ("/api/envs", "/api/crons"))
    assert SECRET.encode() not in everything and b"-new" not in everything
    code, missing = api(port, token, "POST", "/api/envs/999/enable", {})
    assert code == 404 and missing["error"]["code"] == "ENV_ENTRY_NOT_FOUND", missing
    code, bad = api(port, token, "POST", "/api/envs", {"name": "1BAD", "value": "v"})
    assert code == 400 and bad["error"]["code"] == "INVALID_VARIABLE", bad
    assert api(port, token, "DELETE", f"/api/envs/{plain['id']}") == (200, {"removed": [plain["id"]]})
    assert [e["name"] for e in api(port, token, "GET", "/api/envs")[1]] == ["COOKIE"]


@pytest.mark.e2e
def test_apps_show_their_secret_once(panel) -> None:
    harness, port, token = panel
    code, created = api(port, token, "POST", "/api/apps", {"name": "phone", "scopes": ["crons", "envs"]})
    assert code == 201 and len(created["client_secret"]) == 24 and created["scopes"] == ["crons", "envs"]
    code, listed = api(port, token, "GET", "/api/apps")
    assert [a["name"] for a in listed] == ["phone"] and "client_secret" not in listed[0]
    assert created["client_secret"].encode() not in request(port, "GET", "/api/apps", cookie=token)
    code, refused = api(port, token, "POST", "/api/apps", {"name": "phone", "scopes": ["crons"]})
    assert code == 409 and refused["error"]["code"] == "PANEL_APP_EXISTS"
    assert api(port, token, "POST", "/api/apps/remove", {"name": "phone"}) == (200, {"removed": "phone"})
    assert api(port, token, "GET", "/api/apps") == (200, [])


@pytest.mark.e2e
def test_check_says_what_the_cli_says(panel) -> None:
    _harness, port, token = panel
    code, report = api(port, token, "GET", "/api/check")
    assert code == 200 and report["ok"] is True
    assert {"integrity", "migrations", "durability"} <= {c["name"] for c in report["checks"]}


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_subscriptions_listed_run_paused_resumed_removed(panel) -> None:
    harness, port, token = panel
    repo = Repo(harness.tmp / "src")
    repo.commit({"jd_a.js": "// cron: 15 8 * * *\n"})
    code, refused = api(port, token, "POST", "/api/subscriptions", {"url": "ftp://example.com/x"})
    assert code == 400 and refused["error"]["code"] == "INVALID_SUBSCRIPTION", refused
    code, added = api(port, token, "POST", "/api/subscriptions", {"url": repo.url, "folder": "faker",
                                                                    "schedule": "0 4 * * *"})
    assert code == 201 and added["pullSchedule"]["expression"] == "0 4 * * *", added
    subscription_id = added["subscription"]["id"]
    # Its pulls are this program's own subscription pull, on this database: as the CLI's add makes them.
    assert added["pullSchedule"]["command"][-5:] == ["--db", str(harness.db_path), "subscription", "pull",
                                                     subscription_id]
    code, listed = api(port, token, "GET", "/api/subscriptions")
    assert code == 200 and listed == decode_json(harness.cli("subscription", "list", "--json").stdout)
    assert listed[0]["subscription"]["id"] == subscription_id and listed[0]["pullSchedule"]["paused"] is False
    code, pulled = api(port, token, "POST", f"/api/subscriptions/{subscription_id}/run", {})
    assert code == 200 and pulled["subscriptionId"] == subscription_id
    harness.wait_status(pulled["runId"], "succeeded")
    assert api(port, token, "POST", f"/api/subscriptions/{subscription_id}/pause", {})[1]["paused"] is True
    assert api(port, token, "POST", f"/api/subscriptions/{subscription_id}/resume", {})[1]["paused"] is False
    code, removed = api(port, token, "DELETE", f"/api/subscriptions/{subscription_id}")
    assert code == 200 and len(removed["keptScheduleIds"]) == 1, removed
    assert api(port, token, "GET", "/api/subscriptions") == (200, [])
    code, missing = api(port, token, "POST", f"/api/subscriptions/{subscription_id}/run", {})
    assert code == 404 and missing["error"]["code"] == "SUBSCRIPTION_NOT_FOUND"


@pytest.mark.e2e
def test_notifications_channels_a_test_message_and_a_cron_s_rules(panel) -> None:
    harness, port, token = panel
    with Receiver("webhook") as receiver:
        harness.cli("notify", "channel", "add", "webhook", "--name", "hook", "--secret-param",
                    f"url={receiver.url}/hook-{SECRET}")
        harness.cli("notify", "default", "hook:on=failed")
        code, overview = api(port, token, "GET", "/api/notify")
        assert code == 200 and [c["name"] for c in overview["channels"]] == ["hook"]
        assert overview["defaultRules"] == ["hook:on=failed"] and overview["outbox"] == []
        assert SECRET.encode() not in request(port, "GET", "/api/notify", cookie=token)
        code, queued = api(port, token, "POST", "/api/notify/test", {"channel": "hook"})
        assert code == 201 and [q["channel"] for q in queued] == ["hook"]
        wait_for(lambda: len(receiver.received) == 1, "the test message")
        assert receiver.received[0].json()["title"] == "edge-runtime test"
        wait_for(lambda: api(port, token, "GET", "/api/notify")[1]["outbox"][0]["status"] == "sent", "sent")
    code, missing = api(port, token, "POST", "/api/notify/test", {"channel": "nope"})
    assert code == 404 and missing["error"]["code"] == "NOTIFY_CHANNEL_NOT_FOUND"

    code, added = api(port, token, "POST", "/api/schedules", {"cron": "0 3 * * *", "command": ["true"],
                                                                "notify": ["hook:on=failed,timeout"]})
    assert code == 201
    assert api(port, token, "GET", "/api/crons")[1][0]["notify"] == ["hook:on=failed,timeout"]
    # The rules alone change (the schedule stays as it is), as schedule edit --notify does.
    code, edited = api(port, token, "POST", f"/api/schedules/{added['id']}/edit", {"notify": ["hook:on=all"]})
    assert code == 200 and edited["updatedAtMs"] == added["updatedAtMs"]
    shown = harness.cli("schedule", "show", added["id"]).stdout
    assert "hook:on=all" in shown
    code, refused = api(port, token, "POST", f"/api/schedules/{added['id']}/edit", {"notify": ["nope"]})
    assert code == 404 and refused["error"]["code"] == "NOTIFY_CHANNEL_NOT_FOUND"
    code, refused = api(port, token, "POST", f"/api/schedules/{added['id']}/edit", {"notify": ["hook:on=sometimes"]})
    assert code == 400 and refused["error"]["code"] == "NOTIFY_INVALID_RULE"
    assert api(port, token, "POST", f"/api/schedules/{added['id']}/edit", {"notify": []})[0] == 200
    assert api(port, token, "GET", "/api/crons")[1][0]["notify"] == []
