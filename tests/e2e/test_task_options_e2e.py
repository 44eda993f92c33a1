"""A task's everyday needs end to end (docs/environment.md, docs/runs.md): a real ``serve``, the
real CLI, real processes: the composed environment, secrets masked (a multi-account secret's every
account too, across the capture's cap), working directories, retries, ``schedule run``/``edit`` and
``logs --follow``."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.multi_account import (
    ACCOUNTS, CAP, CAPPED_TASK, CHUNK_TASK, COOKIE, INSIDE, capped_task_shown, leaked, same_but_marker, set_secret,
)
from tests.support.service_harness import Harness, decode_json, wait_for

pytestmark = pytest.mark.e2e

SECRET = "hunter2-very-secret"


def test_a_task_gets_the_base_pass_env_shared_and_own_variables_and_never_the_rest(harness: Harness, tmp_path) -> None:
    harness.cli("env", "set", "SHARED", "from-env-set")
    harness.cli("env", "set", "OVERRIDDEN", "shared")
    harness.cli("env", "set", "TOKEN", SECRET, "--secret")
    run_id = harness.cli("submit", "--env", "OVERRIDDEN=own", "--", "sh", "-c",
                         "echo SHARED=$SHARED OVERRIDDEN=$OVERRIDDEN PASSED=$PASSED LEAK=${LEAK:-none}; "
                         "echo token=$TOKEN; echo id=$EDGE_RUNTIME_RUN_ID; pwd").stdout.strip()
    harness.serve(env={"LEAK": "service-only", "PASSED": "yes", "EDGE_RUNTIME_PASS_ENV": "PASSED"})
    harness.wait_status(run_id, "succeeded")
    log = harness.cli("logs", run_id).stdout
    assert "SHARED=from-env-set OVERRIDDEN=own PASSED=yes LEAK=none" in log
    assert f"id={run_id}" in log
    # The secret reached the task, and is masked as `logs` prints it.
    assert "token=***" in log and SECRET not in log
    # No --cwd: the work_dir setting's default, a `work` directory beside the database.
    assert log.strip().splitlines()[-1] == str(harness.db_path.parent / "work")


def test_a_secret_is_never_shown_by_env_list_show_or_events(harness: Harness) -> None:
    harness.cli("env", "set", "TOKEN", SECRET, "--secret")
    harness.cli("env", "set", "PLAIN", "visible")
    listed = harness.cli("env", "list").stdout
    as_json = decode_json(harness.cli("env", "list", "--json").stdout)
    assert SECRET not in listed and "TOKEN  enabled  -  labels=-  remarks=''  value=*** (secret)" in listed
    assert "PLAIN  enabled  -  labels=-  remarks=''  value='visible'" in listed
    assert {v["name"]: v.get("value") for v in as_json} == {"PLAIN": "visible", "TOKEN": None}
    submitted = harness.cli("submit", "--json", "--env", f"COPY={SECRET}", "--", "echo", SECRET).stdout
    assert SECRET not in submitted
    run_id = decode_json(submitted)["id"]
    cancelled = harness.cli("cancel", run_id, "--reason", f"because {SECRET}", "--json").stdout
    schedule_id = harness.cli("schedule", "add", "--env", f"COPY={SECRET}", "@daily", "--", "echo", SECRET).stdout.strip()
    assert SECRET not in cancelled
    for args in (("show", run_id), ("show", run_id, "--json"), ("events", run_id), ("events", run_id, "--json"),
                 ("list",), ("list", "--json"), ("schedule", "show", schedule_id),
                 ("schedule", "show", schedule_id, "--json"), ("schedule", "list", "--json"),
                 ("schedule", "edit", schedule_id, "--name", "n", "--json")):
        printed = harness.cli(*args).stdout
        assert SECRET not in printed and "***" in printed, args
    harness.cli("env", "remove", "TOKEN")
    assert "TOKEN" not in harness.cli("env", "list").stdout
    assert harness.cli("env", "remove", "TOKEN", check=False).returncode == 1


def test_cwd_runs_the_task_there_and_a_missing_directory_is_refused_at_submit(harness: Harness, tmp_path) -> None:
    work = tmp_path / "task-dir"
    work.mkdir()
    refused = harness.cli("submit", "--cwd", str(tmp_path / "missing"), "--", "true", check=False)
    assert refused.returncode == 1 and refused.stderr.startswith("Error:") and "no such directory" in refused.stderr
    run_id = harness.cli("submit", "--cwd", str(work), "--", "pwd").stdout.strip()
    harness.serve()
    harness.wait_status(run_id, "succeeded")
    assert harness.cli("logs", run_id).stdout.strip() == str(work)


def test_retries_start_new_attempts_until_one_succeeds(harness: Harness, tmp_path) -> None:
    flag = tmp_path / "second-try"
    run_id = harness.cli("submit", "--retries", "3", "--retry-delay", "1s", "--", "sh", "-c",
                         f"test -e {flag} && exit 0; touch {flag}; exit 7").stdout.strip()
    failing = harness.cli("submit", "--retries", "1", "--retry-delay", "1s", "--", "false").stdout.strip()
    timed_out = harness.cli("submit", "--retries", "2", "--retry-delay", "1s", "--timeout", "1s", "--",
                            "sleep", "30").stdout.strip()
    harness.serve()
    done = harness.wait_status(run_id, "succeeded")
    assert [(a.attempt, a.status.value, a.exit_code) for a in done.attempts] == [(1, "failed", 7), (2, "succeeded", 0)]
    assert [a.status.value for a in harness.wait_status(failing, "failed").attempts] == ["failed", "failed"]
    assert len(harness.wait_status(timed_out, "cancelled").attempts) == 1  # never after a timeout
    shown = harness.cli("show", run_id).stdout
    assert "attempt 1" in shown and "attempt 2" in shown


def test_schedule_run_and_edit(harness: Harness) -> None:
    schedule_id = harness.cli("schedule", "add", "--env", "X=1", "@daily", "--", "sh", "-c", "echo x=$X").stdout.strip()
    harness.cli("schedule", "edit", schedule_id, "--env", "X=2", "--name", "nightly")
    run_id = harness.cli("schedule", "run", schedule_id).stdout.strip()
    harness.serve()
    harness.wait_status(run_id, "succeeded")
    assert harness.cli("logs", run_id).stdout.strip() == "x=2"
    shown = decode_json(harness.cli("schedule", "show", schedule_id, "--json").stdout)
    assert (shown["id"], shown["name"], shown["firedCount"]) == (schedule_id, "nightly", 1)


def test_logs_follow_streams_until_the_attempt_ends(harness: Harness) -> None:
    harness.cli("env", "set", "TOKEN", SECRET, "--secret")
    run_id = harness.cli("submit", "--", "sh", "-c",
                         "echo first; sleep 1.5; echo second $TOKEN; sleep 1.5; echo last").stdout.strip()
    harness.serve()
    harness.wait_running(run_id)
    follow = subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(harness.db_path), "logs", run_id,
                             "--follow"], capture_output=True, text=True, env=harness.env, timeout=60)
    assert follow.returncode == 0, follow.stderr
    assert follow.stdout.splitlines() == ["first", "second ***", "last"]
    wait_for(lambda: harness.detail(run_id).status.value == "succeeded", "the run's end")


def test_each_account_of_a_multi_account_secret_is_masked_across_the_cap_and_a_read_chunk(harness: Harness) -> None:
    """A QingLong cookie: accounts joined with `&`; the task splits it and prints each account,
    one cut by the capture's cap (its halves on either side of the marker), one across the 64 KiB
    a reader reads at a time."""
    set_secret(harness, "COOKIE", COOKIE)
    chunked = harness.cli("submit", "--", "sh", "-c", CHUNK_TASK).stdout.strip()
    first = harness.serve()
    harness.wait_status(chunked, "succeeded")
    first.stop()
    assert harness.cli("logs", chunked).stdout == "." * 65530 + "***\n"
    capped = harness.cli("submit", "--", "sh", "-c", CAPPED_TASK).stdout.strip()
    harness.serve("--log-max-bytes", str(CAP))
    harness.wait_status(capped, "succeeded")
    log_path = Path(harness.detail(capped).attempts[-1].log_path)
    wait_for(lambda: b"bytes left out" in log_path.read_bytes(), "the log's end after the marker")
    shown = subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(harness.db_path), "logs", capped],
                           capture_output=True, env=harness.env, timeout=60, check=True).stdout
    assert same_but_marker(shown, capped_task_shown()), shown
    raw = log_path.read_bytes()
    assert ACCOUNTS[0][:INSIDE].encode() + b"\n[edge-runtime: output truncated" in raw  # the cap did cut it
    assert b"]\n" + ACCOUNTS[1][-INSIDE:].encode() in raw


def test_no_account_of_a_secret_is_shown_by_show_events_list_or_the_services_log(harness: Harness) -> None:
    set_secret(harness, "COOKIE", COOKIE)
    first, second = ACCOUNTS
    run_id = harness.cli("submit", "--name", f"for {second}", "--env", f"ONE={first}", "--", "sh", "-c",
                         f"echo {shlex.quote(first)}; sleep 30").stdout.strip()
    unknown = harness.cli("submit", "--", second).stdout.strip()  # a command named after an account: never found
    service = harness.serve()
    harness.wait_running(run_id)
    harness.cli("cancel", run_id, "--reason", f"rotate {second}")
    harness.wait_status(run_id, "cancelled")
    failed = harness.wait_status(unknown, "failed")
    assert second in failed.attempts[-1].end_reason  # stored as it happened; shown masked
    for args in (("show", run_id), ("show", run_id, "--json"), ("events", run_id), ("events", run_id, "--json"),
                 ("list",), ("list", "--json"), ("show", unknown), ("events", unknown), ("logs", run_id)):
        printed = harness.cli(*args).stdout
        assert not leaked(printed) and "***" in printed, (args, printed)
    refused = harness.cli("logs", unknown, check=False)  # its command never started: the reason, masked
    assert refused.returncode == 1 and "cannot start '***'" in refused.stderr and not leaked(refused.stderr)
    service.wait_log("attempt.not_started")
    assert "cannot start '***'" in service.log() and not leaked(service.log())


def test_logs_follow_follows_the_run_through_its_retries_and_exits_as_the_run_ended(harness: Harness, tmp_path) -> None:
    count = tmp_path / "tries"
    tries = (f"n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo $n > {count}; echo try $n; "
             f"[ $n -ge 3 ] || exit 5")
    run_id = harness.cli("submit", "--retries", "2", "--retry-delay", "2s", "--", "sh", "-c", tries).stdout.strip()
    failing = harness.cli("submit", "--retries", "1", "--retry-delay", "2s", "--", "sh", "-c",
                          "echo no; exit 9").stdout.strip()
    cli = [sys.executable, "-m", "edge_runtime", "--db", str(harness.db_path), "logs"]
    # Started while both Runs wait for a service: each follows from its first Attempt on.
    followers = [subprocess.Popen(["sh", "-c", f'"$@" -f {run_id} && echo next', "sh", *cli], env=harness.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
                 subprocess.Popen([*cli, failing, "--follow"], env=harness.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True),
                 subprocess.Popen([*cli, run_id, "--follow", "--json"], env=harness.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)]
    harness.serve()
    (out, err), (failed_out, failed_err), (json_out, json_err) = (f.communicate(timeout=60) for f in followers)
    assert (followers[0].returncode, err) == (0, "")
    assert out == ("--- attempt 1 of 3 ---\ntry 1\n--- attempt 2 of 3 ---\ntry 2\n--- attempt 3 of 3 ---\ntry 3\n"
                   "next\n")
    assert followers[1].returncode == 1 and failed_out == "--- attempt 1 of 2 ---\nno\n--- attempt 2 of 2 ---\nno\n"
    assert failed_err == f"Error: run {failing} ended failed (attempt 2 failed, exit code 9) [RUN_NOT_SUCCEEDED]\n"
    assert (followers[2].returncode, json_err) == (0, "")
    assert [(o["attempt"], o["status"], o["text"]) for o in map(decode_json, json_out.splitlines())] == [
        (1, "failed", "try 1\n"), (2, "failed", "try 2\n"), (3, "succeeded", "try 3\n")]
