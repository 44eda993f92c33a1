"""The CLI's everyday points end to end, as a user tries them: the real CLI and a real ``serve``
(docs/runs.md, README's command table): ``make run``'s demo on a database of its own, ``logs`` of
a command that could not start, the no-service note, local times with their offset, ``list``'s
columns, id forms and filters, ``--db`` after the command, a log over its cap keeping its
beginning and its end, and no retry after a cancel."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.service_harness import Harness, decode_json

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
NO_SERVICE = "Note: no service is running for this database; the Run will wait until one starts\n"


def test_make_run_demo_uses_a_database_of_its_own_under_the_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    users = tmp_path / "user"
    users.mkdir(mode=0o700)
    env = {**os.environ, "EDGE_RUNTIME": str(Path(sys.executable).parent / "edge-runtime"), "DEMO_GRACE_MS": "1000",
           "EDGE_RUNTIME_DB": str(users / "mine.db"), "XDG_STATE_HOME": str(users / "state")}
    env.pop("EDGE_RUNTIME_CONFIG", None)
    done = subprocess.run(["sh", str(REPO / "build" / "demo.sh")], cwd=checkout, capture_output=True, text=True,
                          env=env, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (checkout / ".demo" / "edge-runtime.db").is_file()
    assert list(users.iterdir()) == []  # neither $EDGE_RUNTIME_DB nor the default database was touched
    assert "demo: got SIGTERM, exiting" in done.stdout and "cancelled" in done.stdout
    assert "ready" in done.stdout.splitlines()[-1]
    # It waited until the service served the database: the submit found it.
    assert "no service is running" not in done.stdout + done.stderr, done.stderr
    assert "service.started" in done.stdout  # the service's own log, shown at the end
    # Its fresh database holds no legacy token: check suggests no scrub.
    assert "legacy_tokens: no dispatch stores a raw lease token: nothing to scrub" in done.stdout
    assert "scrub-legacy-tokens" not in done.stdout


def test_logs_of_a_run_whose_command_could_not_start_gives_the_reason(harness: Harness) -> None:
    run_id = harness.submit("/nonexistent/program", "arg")
    harness.serve()
    harness.wait_status(run_id, "failed")
    logs = harness.cli("logs", run_id, check=False)
    assert logs.returncode == 1 and logs.stdout == ""
    assert "has not started" not in logs.stderr
    assert re.fullmatch(rf"Error: attempt 1 of run {run_id} ended failed before its command started: "
                        r"cannot start '/nonexistent/program': No such file or directory; no log \[COMMAND_NOT_STARTED\]\n",
                        logs.stderr), logs.stderr
    # show gives the same reason.
    assert "reason=cannot start '/nonexistent/program': No such file or directory" in harness.cli("show", run_id).stdout


def test_submit_notes_when_no_service_runs_and_says_nothing_when_one_does(harness: Harness) -> None:
    waiting = harness.cli("submit", "--", "true")
    assert waiting.returncode == 0 and waiting.stderr == NO_SERVICE
    scheduled = harness.cli("schedule", "add", "@daily", "--", "true")
    assert scheduled.returncode == 0 and scheduled.stderr == NO_SERVICE
    harness.serve()
    served = harness.cli("submit", "--", "true")
    assert served.returncode == 0 and served.stderr == ""
    harness.wait_status(served.stdout.strip(), "succeeded")
    harness.wait_status(waiting.stdout.strip(), "succeeded")  # the Run that waited started with the service


def test_times_are_the_devices_local_time_with_its_offset_and_json_keeps_milliseconds(harness: Harness) -> None:
    harness.env["TZ"] = "Asia/Shanghai"
    run_id = harness.submit("true")
    listed = harness.cli("list").stdout.splitlines()[1]
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+08:00$", listed), listed
    assert re.search(r"^created    \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+08:00$", harness.cli("show", run_id).stdout, re.M)
    as_json = decode_json(harness.cli("show", run_id, "--json").stdout)
    assert isinstance(as_json["createdAtMs"], int) and as_json["createdAtMs"] > 1_700_000_000_000


def test_list_reads_and_its_first_column_is_an_id_form_every_command_takes(harness: Harness, tmp_path: Path) -> None:
    failed = harness.cli("submit", "--name", "nightly", "--", "sh", "-c", "exit 3").stdout.strip()
    other = harness.cli("submit", "--", "echo", "a-rather-long-argument-for-the-command-column").stdout.strip()
    schedule_id = harness.cli("schedule", "add", "--name", "sched", "@daily", "--", "true").stdout.strip()
    fired = harness.cli("schedule", "run", schedule_id).stdout.strip()
    harness.serve()
    for run_id in (failed, other, fired):
        harness.wait_status(run_id, "failed", "succeeded")
    lines = harness.cli("list").stdout.splitlines()
    assert lines[0].split() == ["RUN", "STATUS", "NAME", "COMMAND", "EXIT", "TOOK", "CREATED"]
    row = next(line for line in lines if "nightly" in line)
    short = row.split()[0]
    assert len(short) <= 12 and failed.endswith(short)
    assert re.search(r"failed\s+nightly\s+sh -c 'exit 3'\s+3\s+\d+ms", row), row
    assert "…" in next(line for line in lines if other.endswith(line.split()[0]))  # a long command is shortened
    for command in ("show", "events", "logs", "dispatch show", "cancel"):
        done = harness.cli(*command.split(), short, "--json" if command != "logs" else "--attempt=1", check=False)
        # Ended: cancel refuses it by its state, which means it found the Run by the short form.
        assert done.returncode == 0 or "RUN_STATE_CONFLICT" in done.stderr, (command, done.stderr)
        assert "RUN_NOT_FOUND" not in done.stderr
    assert decode_json(harness.cli("show", short, "--json").stdout)["id"] == failed
    by_name = decode_json(harness.cli("list", "--name", "nightly", "--json").stdout)
    assert [r["id"] for r in by_name] == [failed]
    by_schedule = decode_json(harness.cli("list", "--schedule", schedule_id, "--json").stdout)
    assert [r["id"] for r in by_schedule] == [fired]
    # UUIDv7 ids made close together share their beginning: a prefix that names several is an error naming them.
    shared = os.path.commonprefix([failed, other])
    if 1 <= len(shared) <= 12:
        ambiguous = harness.cli("show", shared[:4], check=False)
        assert ambiguous.returncode == 1 and "[RUN_ID_AMBIGUOUS]" in ambiguous.stderr
        assert failed in ambiguous.stderr and other in ambiguous.stderr


def test_db_is_accepted_before_and_after_the_command(harness: Harness) -> None:
    run_id = harness.submit("true")
    after = subprocess.run([sys.executable, "-m", "edge_runtime", "show", run_id, "--json", "--db", str(harness.db_path)],
                           capture_output=True, text=True, env=harness.env, timeout=60)
    assert after.returncode == 0 and decode_json(after.stdout)["id"] == run_id
    nested = subprocess.run([sys.executable, "-m", "edge_runtime", "schedule", "list", "--db", str(harness.db_path)],
                            capture_output=True, text=True, env=harness.env, timeout=60)
    assert nested.returncode == 0


def test_a_log_over_its_cap_keeps_its_beginning_and_its_end(harness: Harness) -> None:
    run_id = harness.submit("sh", "-c", "echo first-line; seq 1 100000; echo 'RESULT: 42 items done'")
    harness.serve(env={"EDGE_RUNTIME_LOG_MAX_BYTES": "8192"})
    harness.wait_status(run_id, "succeeded")
    log = harness.cli("logs", run_id).stdout
    assert log.startswith("first-line\n1\n2\n")
    assert log.endswith("100000\nRESULT: 42 items done\n")  # the script's final result line is kept
    marker = re.search(r"\[edge-runtime: output truncated: (\d+) bytes left out between the first (\d+) bytes "
                       r"and the last (\d+) bytes\]", log)
    assert marker is not None, log[:300]
    left_out, head, tail = map(int, marker.groups())
    whole = len("first-line\n") + sum(len(f"{n}\n") for n in range(1, 100001)) + len("RESULT: 42 items done\n")
    assert head + tail == 8192 and left_out == whole - 8192


def test_no_retry_after_a_cancel(harness: Harness) -> None:
    run_id = harness.cli("submit", "--retries", "3", "--retry-delay", "1s", "--", "sleep", "30").stdout.strip()
    harness.serve()
    harness.wait_running(run_id)
    harness.cli("cancel", run_id)
    done = harness.wait_status(run_id, "cancelled")
    assert [a.status.value for a in done.attempts] == ["cancelled"]


def test_the_readmes_way_to_put_edge_runtime_on_path_in_a_clone_works(tmp_path: Path) -> None:
    if not (REPO / ".venv" / "bin" / "activate").is_file():
        pytest.skip("this checkout has no .venv (make venv makes it): nothing to activate")
    (tmp_path / "state").mkdir(mode=0o700)
    # As the README says, in a shell whose PATH has no edge-runtime: `. .venv/bin/activate`.
    done = subprocess.run(["sh", "-c", ". .venv/bin/activate && edge-runtime --version && edge-runtime submit -- true"],
                          cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "EDGE_RUNTIME_DB": str(tmp_path / "state" / "e.db")})
    assert done.returncode == 0, done.stderr
    version, run_id = done.stdout.splitlines()
    assert version.startswith("edge-runtime ") and len(run_id) == 36
