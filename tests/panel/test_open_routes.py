"""The OpenAPI's route table without a socket: exactly the forms QingLong's clients send (one
trailing slash, integer ids, percent-encoded query values, ``t=``), 404 for every other form, 400
for a query a route does not take, and 403 with the reason for each route refused on purpose."""

from __future__ import annotations

import pytest

from edge_runtime.contract.panel_apps import AppScope
from edge_runtime.qinglong.open_routes import OPEN_ROUTES, OpenMatch, OpenRefusal, match, percent_decode


def test_the_table_is_exactly_the_documented_openapi() -> None:
    table = {(r.method.decode(), "/open/" + "/".join(s.decode() for s in r.segments), r.scope) for r in OPEN_ROUTES}
    c, e, l, s = AppScope.CRONS, AppScope.ENVS, AppScope.LOGS, AppScope.SYSTEM
    b = AppScope.SUBSCRIPTIONS
    assert table == {
        ("GET", "/open/envs", e), ("POST", "/open/envs", e), ("PUT", "/open/envs", e), ("DELETE", "/open/envs", e),
        ("PUT", "/open/envs/enable", e), ("PUT", "/open/envs/disable", e), ("PUT", "/open/envs/name", e),
        ("GET", "/open/envs/{id}", e),
        ("GET", "/open/auth/token", None),
        ("GET", "/open/crons", c), ("POST", "/open/crons", c), ("PUT", "/open/crons", c), ("DELETE", "/open/crons", c),
        ("PUT", "/open/crons/run", c), ("PUT", "/open/crons/stop", c), ("PUT", "/open/crons/enable", c),
        ("PUT", "/open/crons/disable", c), ("GET", "/open/crons/{id}", c), ("GET", "/open/crons/{id}/log", c),
        ("GET", "/open/crons/{id}/logs", c), ("GET", "/open/logs", l), ("GET", "/open/logs/detail", l),
        ("GET", "/open/system", s),
        ("GET", "/open/subscriptions", b), ("PUT", "/open/subscriptions/run", b),
        ("PUT", "/open/subscriptions/stop", b), ("PUT", "/open/subscriptions/enable", b),
        ("PUT", "/open/subscriptions/disable", b), ("GET", "/open/subscriptions/{id}", b),
        ("GET", "/open/subscriptions/{id}/log", b),
    }


@pytest.mark.parametrize(("method", "target", "handler", "identifier", "query"), [
    (b"GET", b"/open/crons", "list_crons", None, {}),
    (b"GET", b"/open/crons/", "list_crons", None, {}),  # QingLong takes one trailing slash
    (b"GET", b"/open/crons?t=1786000000", "list_crons", None, {}),  # the shell's cache-buster
    (b"GET", b"/open/crons?searchValue=%E4%B8%AD%E6%96%87&page=1&size=200", "list_crons", None,
     {"searchValue": "中文", "page": "1", "size": "200"}),
    (b"GET", b"/open/crons?searchValue=jd+bean%20x", "list_crons", None, {"searchValue": "jd bean x"}),
    (b"GET", b"/open/crons?searchValue=", "list_crons", None, {"searchValue": ""}),
    (b"GET", b"/open/crons/12", "get_cron", 12, {}),
    (b"GET", b"/open/crons/12/", "get_cron", 12, {}),
    (b"GET", b"/open/crons/9007199254740991/log", "cron_log", 9007199254740991, {}),
    (b"GET", b"/open/crons/3/logs?t=5", "cron_logs", 3, {}),
    (b"PUT", b"/open/crons/run", "run_crons", None, {}),
    (b"PUT", b"/open/crons/stop/", "stop_crons", None, {}),
    (b"DELETE", b"/open/crons?t=1", "remove_crons", None, {}),
    (b"GET", b"/open/logs/detail?path=jd_bean_1&file=2026-07-18-08-15-00-123_1a2b3c4d.log", "log_detail", None,
     {"path": "jd_bean_1", "file": "2026-07-18-08-15-00-123_1a2b3c4d.log"}),
    (b"GET", b"/open/envs", "list_envs", None, {}),
    (b"GET", b"/open/envs/", "list_envs", None, {}),  # qinglongsdk's qlenv.list
    (b"GET", b"/open/envs?searchValue=JD_COOKIE", "list_envs", None, {"searchValue": "JD_COOKIE"}),
    (b"GET", b"/open/envs/7", "get_env", 7, {}),
    (b"PUT", b"/open/envs/name", "rename_envs", None, {}),
    (b"DELETE", b"/open/envs/", "remove_envs", None, {}),
    (b"GET", b"/open/system", "system", None, {}),
    (b"GET", b"/open/system/", "system", None, {}),
    (b"GET", b"/open/auth/token?client_id=abc&client_secret=a_b-C", "token", None,
     {"client_id": "abc", "client_secret": "a_b-C"}),
])
def test_the_forms_clients_send_match(method, target, handler, identifier, query) -> None:
    found = match(method, target)
    assert isinstance(found, OpenMatch), found
    assert (found.route.handler, found.id, found.query) == (handler, identifier, query)


@pytest.mark.parametrize(("method", "target"), [
    (b"GET", b"/open/Crons"), (b"GET", b"/open/crons//"), (b"GET", b"/open//crons"), (b"GET", b"/open/crons/../system"),
    (b"GET", b"/open/crons/0"), (b"GET", b"/open/crons/012"), (b"GET", b"/open/crons/-1"), (b"GET", b"/open/crons/1.5"),
    (b"GET", b"/open/crons/99999999999999999"), (b"GET", b"/open/crons/%31"), (b"GET", b"/open/crons/abc"),
    (b"GET", b"/open/crons/run"), (b"POST", b"/open/crons/run"), (b"HEAD", b"/open/crons"), (b"PATCH", b"/open/crons"),
    (b"GET", b"/open/crons/1/instances"), (b"GET", b"/open/crons/views"), (b"GET", b"/open/crons/detail?log_path=x"),
    (b"GET", b"/open/"), (b"GET", b"/open/health"), (b"GET", b"/open/dashboard/overview"), (b"GET", b"/open/crons;x"),
    (b"GET", b"/open/subscriptions/1/logs"), (b"GET", b"/open/logs/x.log?path=a"), (b"POST", b"/open/auth/token"),
    (b"PUT", b"/open/envs/pin"), (b"PUT", b"/open/envs/3/move"), (b"POST", b"/open/envs/labels"),
    (b"GET", b"/open/envs/abc"),
])
def test_every_other_form_is_not_found(method, target) -> None:
    found = match(method, target)
    assert found == OpenRefusal(404, "Not Found")


@pytest.mark.parametrize("target", [
    b"/open/crons?searchValue=a&searchValue=b",  # twice
    b"/open/crons?sorter=%7B%7D",  # QingLong's panel sorts; this face does not take it
    b"/open/crons?searchValue=%ZZ", b"/open/crons?searchValue=%E4%B8", b"/open/crons?searchValue=a%00b",
    b"/open/crons?searchValue=a%1Bb", b"/open/crons?searchValue=" + b"x" * 1025, b"/open/crons/1?page=1",
    b"/open/auth/token?client_id=a&client_secret=b&scope=x",
])
def test_a_query_a_route_does_not_take_is_a_400(target) -> None:
    found = match(b"GET", target)
    assert isinstance(found, OpenRefusal) and found.status == 400 and not found.on_purpose


#: What QingLong serves and its clients call (the reference's client tables), refused on purpose.
REFUSED = [
    (b"PUT", b"/open/system/command-run", "system commands"),
    (b"PUT", b"/open/system/command-stop", "system commands"),
    (b"PUT", b"/open/system/auth/reset", "system commands"),
    (b"PUT", b"/open/system/reload", "system commands"),
    (b"PUT", b"/open/system/update-check", "system commands"),
    (b"PUT", b"/open/system/update", "system commands"),
    (b"GET", b"/open/system/log/remove", "system commands"),
    (b"PUT", b"/open/system/data/export", "system commands"),
    (b"PUT", b"/open/system/notify", "system commands"),
    (b"PUT", b"/open/system", "system commands"),
    (b"GET", b"/open/system/config", "system commands"),
    (b"GET", b"/open/scripts/files", "script files"),
    (b"GET", b"/open/scripts/jd_bean.js", "script files"),
    (b"POST", b"/open/scripts/", "script files"),
    (b"PUT", b"/open/scripts/run", "script files"),
    (b"GET", b"/open/scripts", "script files"),
    (b"GET", b"/open/configs/files", "configuration files"),
    (b"POST", b"/open/configs/save", "configuration files"),
    (b"GET", b"/open/configs/config.sh", "configuration files"),
    (b"GET", b"/open/dependence", "installing dependencies"),
    (b"POST", b"/open/dependencies", "installing dependencies"),
    (b"PUT", b"/open/dependencies/reinstall", "installing dependencies"),
    (b"POST", b"/open/user/login", "password"),
    (b"PUT", b"/open/user", "password"),
    (b"PUT", b"/open/user/init", "password"),
    (b"GET", b"/open/user/notification", "password"),
    (b"POST", b"/open/apps", "apps are managed on the device"),
    (b"PUT", b"/open/update/reload", "updating the device"),
    (b"PUT", b"/open/crons/status", "cron status"),
    (b"GET", b"/open/crons/import", "crontab"),
    (b"POST", b"/open/envs/upload", "env upload"),
    (b"DELETE", b"/open/logs", "retention"),
    (b"POST", b"/open/logs/download", "log downloads"),
]


@pytest.mark.parametrize(("method", "target", "reason"), REFUSED)
def test_what_runs_code_or_reaches_credentials_is_refused_on_purpose_with_the_reason(method, target, reason) -> None:
    found = match(method, target)
    assert isinstance(found, OpenRefusal) and found.on_purpose and found.status == 403, found
    assert reason in found.message


def test_percent_decoding() -> None:
    assert percent_decode(b"%E4%B8%AD%e6%96%87+a") == "中文 a"
    assert percent_decode(b"a%2Bb%26c%3Dd") == "a+b&c=d"
    for bad in (b"%", b"%4", b"%G0", b"%FF", b"%0A", b"%7F", b"%C2%85"):
        assert percent_decode(bad) is None, bad
