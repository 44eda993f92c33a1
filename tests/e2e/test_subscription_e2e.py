"""Subscriptions as real processes: ``subscription add``, a real ``serve`` running each pull as a
Run (its log, its cancel, its timeout), against local sources only (``file://``, ``git daemon``
and an HTTP server on 127.0.0.1): the schedules a pull makes and changes, what it says it
enabled, and the pulls that fail or are cancelled, which change nothing."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.git_sources import Repo, git_daemon, have_git_daemon, http_files, silent_server
from tests.support.service_harness import Harness, decode_json, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("git") is None, reason="needs git")]

JD_A = "/*\n15 8 * * * jd_a.js\n*/\nconst $ = new Env('京豆');\n"
JD_B = "# cron: 30 9 * * *\nprint('b')\n"


def _add(harness: Harness, url: str, *options: str) -> str:
    return harness.cli("subscription", "add", url, *options).stdout.strip()


def _pull_now(harness: Harness, subscription_id: str) -> str:
    return harness.cli("subscription", "run", subscription_id).stdout.strip()


def _script_schedules(harness: Harness) -> dict[str, tuple[str, bool]]:
    return {s["command"][1]: (s["expression"], s["paused"])
            for s in decode_json(harness.cli("schedule", "list", "--json").stdout) if s["command"][0] == "task"}


def _folder(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()}


def test_pulls_are_runs_and_the_schedules_follow_the_repository(harness: Harness) -> None:
    repo = Repo(harness.tmp / "src")
    repo.commit({"jd_a.js": JD_A, "jd_b.py": JD_B, "util.js": "module.exports = {}\n"})
    subscription_id = _add(harness, repo.url, "--folder", "faker", "--auto-remove")
    harness.serve()
    run_id = _pull_now(harness, subscription_id)
    assert harness.wait_status(run_id, "succeeded").name == "pull faker"
    log = harness.cli("logs", run_id).stdout
    assert "new     jd_a.js  京豆  15 8 * * *  paused" in log and "noted   util.js" in log
    assert _script_schedules(harness) == {"faker/jd_a.js": ("15 8 * * *", True), "faker/jd_b.py": ("30 9 * * *", True)}
    assert _folder(harness.tmp / "scripts" / "faker") == {"jd_a.js", "jd_b.py", "util.js"}

    head = repo.commit({"jd_a.js": JD_A.replace("15 8", "20 8"), "jd_b.py": None, "jd_c.js": "// cron: 5 5 * * *\n"})
    second = _pull_now(harness, subscription_id)
    harness.wait_status(second, "succeeded")
    log = harness.cli("logs", second).stdout
    assert "changed jd_a.js  15 8 * * * -> 20 8 * * *" in log and "removed jd_b.py" in log
    assert _script_schedules(harness) == {"faker/jd_a.js": ("20 8 * * *", True), "faker/jd_c.js": ("5 5 * * *", True)}
    listed = json.loads(harness.cli("subscription", "list", "--json").stdout)
    assert [(v["scripts"], v["schedules"], v["subscription"]["revision"]) for v in listed] == [(3, 2, head)]


def test_auto_add_says_what_it_enabled_from_a_served_repository_and_a_raw_file(harness: Harness) -> None:
    if not have_git_daemon():
        pytest.skip("no git daemon")
    served = harness.tmp / "served"
    repo = Repo(served / "scripts.git")
    repo.commit({"jd_a.js": JD_A})
    files = {"/o/r/main/jd_x.js": b"// 0 7 * * * jd_x.js\nconst $ = new Env('X');\n"}
    with git_daemon(served) as base, http_files(files) as web:
        from_git = _add(harness, f"{base}/scripts.git", "--auto-add")
        from_web = _add(harness, f"{web}/o/r/main/jd_x.js")
        harness.serve()
        runs = [_pull_now(harness, from_git), _pull_now(harness, from_web)]
        for run_id in runs:
            harness.wait_status(run_id, "succeeded")
    assert "enabled jd_a.js  京豆  15 8 * * *" in harness.cli("logs", runs[0]).stdout
    assert _script_schedules(harness) == {"127.0.0.1_scripts/jd_a.js": ("15 8 * * *", False),
                                          "main_jd_x/jd_x.js": ("0 7 * * *", True)}
    added = harness.cli("subscription", "add", f"{base}/x.git", "--folder", "plain", check=False)
    assert "git:// is not encrypted" in added.stderr


def test_a_failing_pull_fails_its_run_with_the_reason_and_changes_nothing(harness: Harness) -> None:
    repo = Repo(harness.tmp / "src")
    repo.commit({"jd_a.js": JD_A})
    good = _add(harness, repo.url, "--folder", "good")
    gone = _add(harness, f"file://{harness.tmp}/no-such-repo", "--folder", "gone")
    no_branch = _add(harness, repo.url, "--folder", "nobranch", "--branch", "no-such-branch")
    service = harness.serve()
    harness.wait_status(_pull_now(harness, good), "succeeded")
    before = (_script_schedules(harness), _folder(harness.tmp / "scripts" / "good"))
    for subscription_id, reason in ((gone, "SUBSCRIPTION_PULL_FAILED"), (no_branch, "no-such-branch")):
        run_id = _pull_now(harness, subscription_id)
        harness.wait_status(run_id, "failed")
        assert reason in harness.cli("logs", run_id).stdout
    repo.commit({"jd_a.js": JD_A.replace("15 8", "20 8")})
    service.stop()
    empty = harness.tmp / "no-git-here"
    empty.mkdir()
    harness.serve(env={"PATH": str(empty)})  # the device has no git
    run_id = _pull_now(harness, good)
    harness.wait_status(run_id, "failed")
    log = harness.cli("logs", run_id).stdout
    assert "git is not installed on this device" in log and "opkg install git git-http" in log
    assert (_script_schedules(harness), _folder(harness.tmp / "scripts" / "good")) == before
    assert not (harness.tmp / "scripts" / "gone").exists() and not (harness.tmp / "scripts" / "nobranch").exists()


def _processes_naming(text: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline:
            found.append(int(pid))
    return found


def test_a_slow_pull_is_cancelled_or_timed_out_and_changes_nothing(harness: Harness) -> None:
    with silent_server() as port:
        url = f"git://127.0.0.1:{port}/slow.git"
        slow = _add(harness, url, "--folder", "slow")
        timed = _add(harness, f"http://127.0.0.1:{port}/timed.git", "--folder", "timed", "--timeout", "2s")
        harness.serve()
        run_id = _pull_now(harness, slow)
        harness.wait_running(run_id)
        wait_for(lambda: _processes_naming(f"127.0.0.1:{port}/slow.git"), "git asking the silent server")
        harness.cli("cancel", run_id)
        harness.wait_status(run_id, "cancelled")
        wait_for(lambda: not _processes_naming(f"127.0.0.1:{port}/slow.git"), "no git left of the cancelled pull")
        timed_run = _pull_now(harness, timed)
        detail = harness.wait_status(timed_run, "cancelled", timeout=30)
        assert detail.cancel_reason == "timeout"
    scripts = harness.tmp / "scripts"
    assert not (scripts / "slow").exists() and not (scripts / "timed").exists()
    assert sorted(os.listdir(scripts / ".subscriptions")) == ["slow.lock", "timed.lock"]  # no work left behind


def test_a_pulled_script_runs_by_its_schedule_as_a_task(harness: Harness) -> None:
    repo = Repo(harness.tmp / "src")
    repo.commit({"hello.sh": "#!/bin/sh\n# cron: * * * * * *\necho \"hello from $(basename \"$PWD\")\"\n"})
    subscription_id = _add(harness, repo.url, "--folder", "mine", "--auto-add")
    harness.serve()
    harness.wait_status(_pull_now(harness, subscription_id), "succeeded")
    [schedule] = [s for s in decode_json(harness.cli("schedule", "list", "--json").stdout)
                  if s["command"] == ["task", "mine/hello.sh"]]
    assert not schedule["paused"]

    def fired() -> list[dict]:
        return [r for r in decode_json(harness.cli("list", "--schedule", schedule["id"], "--json").stdout)
                if r["status"] == "succeeded"]

    run = wait_for(fired, "a fire of the pulled script's schedule")[0]
    assert harness.cli("logs", run["id"]).stdout == "hello from mine\n"
