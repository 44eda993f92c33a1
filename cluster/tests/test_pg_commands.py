"""``edge-runtime-cluster submit|cancel|show|list|events|logs|dispatch``: the edge CLI's commands on
PostgreSQL. The same state, built through the Store port on a Local store and on a PostgresStore,
prints the same text and JSON through both CLIs (ids and times aside); errors carry the same codes
and exit codes; a DSN is never printed; submit, cancel and rearm NOTIFY the workers on commit; and
``logs`` reads the file on this host, else the copy the worker stored (migration 0003).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cluster_postgres import cli as cluster_cli
from cluster_postgres.attempt_logs import PostgresAttemptLogs
from cluster_postgres.connection import DSN_ENV_VAR
from cluster_postgres.store import PostgresStore
from edge_runtime.cli import main as edge_main
from edge_runtime.cli.common import NO_SERVICE_NOTE
from edge_runtime.contract.cancellation_dispatch import ClaimCommand
from edge_runtime.contract.runs import (
    STORED_LOG_MAX_BYTES,
    AttemptStatus,
    CancelRunCommand,
    InvalidRunCommandError,
    ProcessIdentity,
    SubmitRunCommand,
    short_id,
)
from edge_runtime.local.store import local_store_opener
from edge_runtime.service.process_identity import read_boot_id
from edge_runtime.service.worker import WorkerSession
from tests.support.pg_unfenced_attempts import take_queued_run

PASSWORD = "Sekrit-Pa55"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def dsn(pg_database: Any, owner: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """The runtime DSN, also as $EDGE_RUNTIME_CLUSTER_DSN, on empty tables at real database time."""
    pg_database.reset(owner, None)
    monkeypatch.setenv(DSN_ENV_VAR, pg_database.runtime_dsn)
    return pg_database.runtime_dsn


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    (tmp_path / "state").mkdir(mode=0o700)
    return str(tmp_path / "state" / "edge-runtime.db")


def run_edge(capsys: pytest.CaptureFixture[str], db: str, *args: str) -> tuple[int, str, str]:
    code = edge_main(["--db", db, *args])
    out, err = capsys.readouterr()
    # No service runs for the test's database: the edge CLI says so (the cluster's NOTIFY cannot
    # tell); the rest of stderr must match.
    return code, out, err.replace(NO_SERVICE_NOTE, "")


def run_cluster(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cluster_cli.main(list(args))
    out, err = capsys.readouterr()
    # No worker runs here either: the cluster CLI says so too (test_cluster_env.py checks it).
    return code, out, err.replace(NO_SERVICE_NOTE, "")


def exit_of(call: Any) -> int:
    """The exit code of a call that may end in SystemExit (argparse's usage errors)."""
    try:
        return call()
    except SystemExit as exc:
        return exc.code


# --------------------------------------------------------------------------- one state, both stores

def build_state(store: Any, log_dir: Path) -> dict[str, str]:
    """The same operations through the Store port on either adapter; the ids made, by role."""
    runs = store.runs
    worker = WorkerSession(store.leases, worker_id="host-a", slots=4, session_lease_ms=120_000, run_lease_ms=60_000)
    worker.register()
    done = runs.submit(SubmitRunCommand(argv=["sh", "-c", "echo hi; echo err >&2"], name="nightly", timeout_ms=300_000)).id
    grant = worker.start(done)
    log = log_dir / f"{grant.lease.attempt_id}.log"  # the Attempt's own name: logs reads nothing else
    log.write_bytes(b"hi\nerr\n")
    runs.record_running(grant.lease.attempt_id, ProcessIdentity(4242, 4242, 777, read_boot_id()), log_path=str(log),
                        actor_id=worker.owner)
    runs.finish_attempt(grant.lease.attempt_id, AttemptStatus.SUCCEEDED, actor_id=worker.owner, exit_code=0)
    worker.complete(grant.lease.attempt_id)

    never = runs.submit(SubmitRunCommand(argv=["sleep", "1"])).id
    runs.request_cancel(CancelRunCommand(run_id=never, reason="not needed"))

    busy = runs.submit(SubmitRunCommand(argv=["sleep", "600"], name="long one")).id
    grant = worker.start(busy)
    runs.record_running(grant.lease.attempt_id, ProcessIdentity(4343, 4343, 888, read_boot_id()),
                        log_path=str(log_dir / f"{grant.lease.attempt_id}.log"), actor_id=worker.owner)
    requested = runs.request_cancel(CancelRunCommand(run_id=busy, reason="stop it"))
    store.dispatches.claim(ClaimCommand(run_id=busy, attempt_id=grant.lease.attempt_id,
                                        requested_at_ms=requested.cancel_requested_at_ms, owner=worker.owner,
                                        lease_token="t" * 32, lease_duration_ms=30_000))

    queued = runs.submit(SubmitRunCommand(argv=["echo", "tab\there"])).id
    return {"done": done, "never": never, "busy": busy, "queued": queued}


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ISO = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d\d:\d\d")
#: A duration in `list` (each store ran the state's commands for its own few milliseconds).
_TOOK = re.compile(r"  +(?:\d+ms|\d[\dhms]*s)(?=  )")
_MS = re.compile(r'("\w*(?:AtMs|_at_ms)":)\d+')


def normalized(text: str, ids: dict[str, str], attempts: dict[str, str], log_dir: Path) -> str:
    for role, run_id in ids.items():
        text = text.replace(run_id, f"<run:{role}>").replace(short_id(run_id), f"<run:{role}>")
    for role, attempt_id in attempts.items():
        text = text.replace(attempt_id, f"<attempt:{role}>")
    text = text.replace(str(log_dir), "<logs>")
    return _TOOK.sub("  <took>", _MS.sub(r"\g<1>0", _ISO.sub("<time>", _UUID.sub("<uuid>", text))))


COMMANDS = [
    ["list"], ["list", "--json"], ["list", "--status", "queued"], ["list", "--limit", "2", "--json"],
    *[[cmd, "{%s}" % role] for cmd in ("show", "events") for role in ("done", "never", "busy", "queued")],
    *[[cmd, "{%s}" % role, "--json"] for cmd in ("show", "events") for role in ("done", "never", "busy", "queued")],
    ["dispatch", "show", "{busy}"], ["dispatch", "show", "{busy}", "--json"], ["dispatch", "show", "{done}"],
    ["dispatch", "show", "{done}", "--json"], ["logs", "{done}"], ["logs", "{done}", "--attempt", "1"],
]


def test_every_read_command_prints_what_the_edge_cli_prints_for_the_same_state(
    dsn: str, db_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = {}
    for profile in ("edge", "cluster"):
        log_dir = tmp_path / f"logs-{profile}"
        log_dir.mkdir()
        monkeypatch.setenv("EDGE_RUNTIME_LOG_DIR", str(log_dir))  # where `logs` finds the Attempt's log
        store = local_store_opener(db_path)() if profile == "edge" else PostgresStore(dsn)
        try:
            ids = build_state(store, log_dir)
            attempts = {role: a.id for role in ids for a in store.runs.attempts(ids[role])}
        finally:
            store.close()
        printed = []
        for command in COMMANDS:
            args = [part.format(**ids) for part in command]
            code, out, err = run_edge(capsys, db_path, *args) if profile == "edge" else run_cluster(capsys, *args)
            out = normalized(out, ids, attempts, log_dir)
            # JSON objects are compared as values: jsonb keeps a payload's keys in its own order.
            printed.append((args[0], code, json.loads(out) if "--json" in args else out, err))
        outputs[profile] = printed
    for (command, *edge), (_, *cluster) in zip(outputs["edge"], outputs["cluster"]):
        assert cluster == edge, command
    # Not vacuous: the state shows up, with both Attempts, the dispatch and the log.
    text = "".join(out if isinstance(out, str) else json.dumps(out) for _, _, out, _ in outputs["cluster"])
    assert "<run:busy>  running" in text and "nightly" in text and "cancelled" in text
    assert "dispatch   leased" in text and "hi\nerr\n" in text and '"leaseOwner": "host-a#1"' in text
    # The running Attempt's authority: its Run Lease and its worker's session, by the store's time.
    assert "  run lease  leased (live)  worker=host-a  expires <time>\n  worker     host-a  session online  " in text


def test_submit_and_cancel_print_what_the_edge_cli_prints(dsn: str, db_path: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    def session(run: Any) -> list[tuple[int, str, str]]:
        code, run_id, err = run("submit", "--name", "n1", "--timeout", "90s", "--", "sh", "-c", "exit 3")
        assert code == 0 and err == ""
        run_id = run_id.strip()
        steps = [run("cancel", run_id, "--reason", "changed my mind"), run("cancel", run_id, "--json"),
                 run("submit", "--json", "--", "true"), run("show", run_id)]
        return [(code, normalized(out, {"a": run_id}, {}, Path("/nonexistent")),
                 normalized(err, {"a": run_id}, {}, Path("/nonexistent"))) for code, out, err in steps]

    edge = session(lambda *a: run_edge(capsys, db_path, *a))
    cluster = session(lambda *a: run_cluster(capsys, *a))
    assert cluster == edge
    assert "run <run:a> cancelled (it had not started)" in cluster[0][1]
    assert "changed my mind" in cluster[3][1]


def test_the_schedule_commands_print_what_the_edge_cli_prints(dsn: str, db_path: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    def session(run: Any) -> list[tuple[int, str, str]]:
        code, schedule_id, err = run("schedule", "add", "--name", "nightly", "--tz", "CST-8", "--timeout", "5m",
                                     "--overlap", "queue", "--env", "A=1", "--cwd", str(tmp_path), "0 3 * * *",
                                     "--", "echo", "hi")
        assert code == 0 and err == "", err
        sid = schedule_id.strip()
        steps = [run("schedule", "list"), run("schedule", "show", sid), run("schedule", "show", sid, "--json"),
                 run("schedule", "edit", sid, "--cron", "*/30 * * * *", "--name", "half-hourly"),
                 run("schedule", "pause", sid), run("schedule", "show", sid),
                 run("schedule", "run", sid, "--json"), run("schedule", "run", sid),
                 run("schedule", "resume", sid, "--json"), run("schedule", "list", "--json"),
                 run("schedule", "remove", sid), run("schedule", "show", sid), run("schedule", "remove", sid, "--json"),
                 run("schedule", "add", "not a cron", "--", "true"), run("schedule", "list", "--json")]
        return [(code, normalized(out, {"s": sid}, {}, tmp_path), normalized(err, {"s": sid}, {}, tmp_path))
                for code, out, err in steps]

    edge = session(lambda *a: run_edge(capsys, db_path, *a))
    cluster = session(lambda *a: run_cluster(capsys, *a))
    for step, (edge_step, cluster_step) in enumerate(zip(edge, cluster)):
        assert cluster_step == edge_step, step
    assert "time zone  CST-8" in cluster[1][1] and "overlap    queue" in cluster[1][1]
    assert cluster[6][0] == 0 and '"outcome":"started"' in cluster[6][1]
    assert "waiting: the Run starts once" in cluster[7][1]  # overlap queue: the first Run is still queued
    assert "SCHEDULE_NOT_FOUND" in cluster[11][2] and "INVALID_CRON_EXPRESSION" in cluster[13][2]
    assert cluster[14][1] == "[]\n"


def test_a_schedule_is_named_by_a_short_form_of_its_id_through_both_clis(dsn: str, db_path: str,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    for run in (lambda *a: run_edge(capsys, db_path, *a), lambda *a: run_cluster(capsys, *a)):
        # 17 random ids over 16 hex digits: at least two begin with the same one.
        ids = [run("schedule", "add", "--tz", "UTC", "@daily", "--", "true")[1].strip() for _ in range(17)]
        first = ids[0]
        assert [line.split()[0] for line in run("schedule", "list")[1].splitlines()] == [i[-8:] for i in ids]
        assert json.loads(run("schedule", "show", first[-8:], "--json")[1])["id"] == first
        assert run("schedule", "pause", first[:8]) == (0, f"schedule {first} paused\n", "")
        run_id = run("schedule", "run", first[-12:])[1].strip()
        assert [r["id"] for r in json.loads(run("list", "--schedule", first[-6:], "--json")[1])] == [run_id]
        shared = next(i[0] for i in ids if sum(other[0] == i[0] for other in ids) > 1)
        code, _, err = run("schedule", "remove", shared)
        assert code == 1 and err.endswith("[SCHEDULE_ID_AMBIGUOUS]\n")
        assert run("list", "--schedule", "zzzz")[2].endswith("[SCHEDULE_NOT_FOUND]\n")
        for schedule_id in ids:
            assert run("schedule", "remove", schedule_id[:10])[0] == 0


def test_submit_batch_stores_every_line_in_one_go_and_refuses_a_bad_line_as_the_edge_cli_does(
        dsn: str, db_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text('["true"]\n\n["echo", "a b"]\n["sh", "-c", "exit 3"]\n')
    bad.write_text('["true"]\n{"argv": 1}\n')
    assert run_edge(capsys, db_path, "migrate")[0] == 0
    for run in (lambda *a: run_edge(capsys, db_path, *a), lambda *a: run_cluster(capsys, *a)):
        code, out, err = run("submit", "--batch", str(bad), "--json")
        assert code == 1 and out == "" and json.loads(err)["error"]["message"].startswith(f"--batch {bad}, line 2: ")
        assert json.loads(run("list", "--json")[1]) == []
        code, out, _ = run("submit", "--batch", str(good), "--name", "b", "--timeout", "90s")
        assert code == 0 and len(out.splitlines()) == 3
        listed = json.loads(run("list", "--json")[1])
        assert sorted(r["id"] for r in listed) == sorted(out.splitlines())
        assert sorted(tuple(r["command"]) for r in listed) == [("echo", "a b"), ("sh", "-c", "exit 3"), ("true",)]
        assert {(r["name"], r["timeoutMs"], r["status"]) for r in listed} == {("b", 90_000, "queued")}


def test_the_dsn_option_overrides_the_environment(dsn: str, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DSN_ENV_VAR, "host=127.0.0.1 port=1 dbname=nothing")
    code, out, err = run_cluster(capsys, "submit", "--dsn", dsn, "--", "true")
    assert (code, err) == (0, "")
    assert run_cluster(capsys, "list", "--dsn", dsn, "--json")[1].count('"id"') == 1
    code, out, _ = run_cluster(capsys, "dispatch", "show", "--dsn", dsn, out.strip())
    assert code == 0 and out.endswith("has no cancellation dispatch\n")


# --------------------------------------------------------------------------- errors

ERROR_CASES = [
    (["show", "no-such-run"], 1, "RUN_NOT_FOUND"),
    (["events", "no-such-run"], 1, "RUN_NOT_FOUND"),
    (["logs", "no-such-run"], 1, "RUN_NOT_FOUND"),
    (["cancel", "no-such-run"], 1, "RUN_NOT_FOUND"),
    (["dispatch", "show", "no-such-run"], 1, "RUN_NOT_FOUND"),
    (["dispatch", "rearm", "no-such-run", "--expected-version", "1"], 1, None),
    (["submit", "--", ""], 1, "INVALID_RUN_COMMAND"),
    (["submit"], 1, "INVALID_RUN_COMMAND"),
    (["submit", "--timeout", "soon", "--", "true"], 1, None),
    (["submit", "--name", "x" * 200, "--", "true"], 1, "INVALID_NAME"),
    (["cancel", "r" * 300], 1, None),
    (["list", "--limit", "0"], 2, None),
    (["list", "--status", "nonsense"], 2, None),
    (["logs", "x", "--attempt", "one"], 2, None),
    (["show"], 2, None),
]


@pytest.mark.parametrize(("args", "exit_code", "code"), ERROR_CASES, ids=[" ".join(c[0])[:40] for c in ERROR_CASES])
def test_errors_have_the_edge_cli_codes_and_exit_codes(dsn: str, db_path: str, capsys: pytest.CaptureFixture[str],
                                                       args: list[str], exit_code: int, code: str | None) -> None:
    run_edge(capsys, db_path, "submit", "--", "true")  # the Local database exists (reads never create one)
    edge = exit_of(lambda: edge_main(["--db", db_path, *args]))
    edge_err = capsys.readouterr().err
    cluster = exit_of(lambda: cluster_cli.main(args))
    cluster_err = capsys.readouterr().err
    assert edge == cluster == exit_code
    assert cluster_err.startswith("Error: ") and cluster_err.count("\n") == 1, cluster_err
    edge_code, cluster_code = (re.search(r"\[([A-Z_]+)\]\n$", e) for e in (edge_err, cluster_err))
    if exit_code == 1:
        assert edge_code is not None and cluster_code is not None
        assert cluster_code.group(1) == edge_code.group(1), (edge_err, cluster_err)
        if code is not None:
            assert cluster_code.group(1) == code
        if code == "RUN_NOT_FOUND":
            assert cluster_err == edge_err
    else:  # usage: one line naming what to fix, as the edge CLI prints it
        assert cluster_err.replace("edge-runtime-cluster", "edge-runtime") == edge_err


def test_the_state_conflicts_carry_the_edge_cli_codes(dsn: str, db_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    for run in (lambda *a: run_edge(capsys, db_path, *a), lambda *a: run_cluster(capsys, *a)):
        run_id = run("submit", "--", "true")[1].strip()
        assert run("cancel", run_id)[0] == 0
        code, _, err = run("cancel", run_id)
        assert code == 1 and err.endswith("[RUN_STATE_CONFLICT]\n"), err
        code, _, err = run("logs", run_id)
        assert code == 1 and err == (f"Error: run {run_id} ended cancelled before its command started; no log "
                                     f"[COMMAND_NOT_STARTED]\n")


@pytest.mark.parametrize("dsn_text", [
    f"host=127.0.0.1 port=1 user=ql3_runtime password={PASSWORD} dbname=qinglong connect_timeout=3",
    f"postgresql://ql3_runtime:{PASSWORD}@127.0.0.1:1/qinglong?connect_timeout=3",
])
@pytest.mark.parametrize("args", [["list"], ["submit", "--", "true"], ["cancel", "r1"], ["logs", "r1"],
                                  ["dispatch", "rearm", "r1", "--expected-version", "1"]])
def test_an_unreachable_database_is_a_storage_error_that_never_shows_the_dsn(
    capsys: pytest.CaptureFixture[str], dsn_text: str, args: list[str]
) -> None:
    code, out, err = run_cluster(capsys, *args, "--dsn", dsn_text) if args[0] != "submit" else \
        run_cluster(capsys, "submit", "--dsn", dsn_text, "--", "true")
    assert (code, out) == (1, "")
    assert err.startswith("Error: database operation failed") and err.endswith("[CLUSTER_STORAGE_FAILED]\n")
    assert err.count("\n") == 1 and PASSWORD not in err


@pytest.mark.parametrize("dsn_text", [f"host=db password=se{PASSWORD[:4]} {PASSWORD[4:]}", f"password='{PASSWORD}",
                                      "nonsense"])
def test_a_malformed_dsn_is_refused_without_repeating_it(capsys: pytest.CaptureFixture[str], dsn_text: str) -> None:
    code, out, err = run_cluster(capsys, "show", "r1", "--dsn", dsn_text)
    assert (code, out) == (1, "")
    assert err.endswith("[CLUSTER_DSN_INVALID]\n") and PASSWORD[4:] not in err and PASSWORD[:4] not in err


def test_no_dsn_at_all_says_how_to_give_one(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DSN_ENV_VAR, raising=False)
    code, _, err = run_cluster(capsys, "list")
    assert code == 1 and err == f"Error: no database: give --dsn or set ${DSN_ENV_VAR} [CONFIG_INVALID]\n"
    # As serve says it.
    assert exit_of(lambda: cluster_cli.main(["serve"])) == 1 and capsys.readouterr().err == err


def test_the_cli_process_exit_codes(dsn: str) -> None:
    """The installed entry point, as a user runs it: stdout, stderr and exit code."""
    exe = [sys.executable, "-m", "cluster_postgres.cli"]
    env = {**os.environ, DSN_ENV_VAR: dsn}
    made = subprocess.run([*exe, "submit", "--", "true"], env=env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0 and made.stderr == NO_SERVICE_NOTE  # no worker is online
    shown = subprocess.run([*exe, "show", made.stdout.strip()], env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "status     queued" in shown.stdout
    missing = subprocess.run([*exe, "show", "nope"], env=env, capture_output=True, text=True, timeout=60)
    assert (missing.returncode, missing.stdout) == (1, "") and missing.stderr.endswith("[RUN_NOT_FOUND]\n")


# --------------------------------------------------------------------------- NOTIFY

def _notified(listener: Any) -> int:
    return sum(1 for _ in listener.notifies(timeout=0.5, stop_after=10))


def test_submit_cancel_and_rearm_notify_the_workers_on_commit_and_only_then(
    dsn: str, capsys: pytest.CaptureFixture[str], owner: Any
) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        channel = owner.execute("SELECT name FROM ql3.wake_channel").fetchone()[0]
        listener.execute(f"LISTEN {channel}")
        run_id = run_cluster(capsys, "submit", "--", "true")[1].strip()
        assert _notified(listener) == 1
        assert run_cluster(capsys, "cancel", run_id)[0] == 0
        assert _notified(listener) == 1
        assert run_cluster(capsys, "cancel", run_id)[0] == 1  # already ended: rolled back, nobody woken
        assert run_cluster(capsys, "show", run_id)[0] == 0  # reads never notify
        assert _notified(listener) == 0
        # rearm: a blocked dispatch, made by the owner (the runtime cannot write it so directly).
        store = PostgresStore(dsn)
        try:
            busy = store.runs.submit(SubmitRunCommand(argv=["sleep", "9"])).id
            attempt = take_queued_run(store.runs, busy, actor_id="t")
        finally:
            store.close()
        owner.execute("INSERT INTO ql3.run_cancellation_dispatches (run_id, attempt_id, status, version, dispatch_count, "
                      "last_result, created_at_ms, updated_at_ms) VALUES (%s, %s, 'blocked', 3, 2, 'identity_mismatch', 0, 0)",
                      (busy, attempt.id))
        _notified(listener)
        assert run_cluster(capsys, "dispatch", "rearm", busy, "--expected-version", "2")[0] == 1
        assert _notified(listener) == 0
        code, out, _ = run_cluster(capsys, "dispatch", "rearm", busy, "--expected-version", "3")
        assert code == 0 and "re-armed: retry_wait at version 4" in out
        assert _notified(listener) == 1


# --------------------------------------------------------------------------- logs across hosts

def _ended_attempt_elsewhere(dsn: str, *, end: bool, log_path: str = "/var/lib/elsewhere/a.log") -> tuple[str, str, Any]:
    """A Run whose Attempt ran on worker ``host-b`` in another boot (another host)."""
    store = PostgresStore(dsn)
    worker = WorkerSession(store.leases, worker_id="host-b", slots=2, session_lease_ms=120_000, run_lease_ms=60_000)
    worker.register()
    run_id = store.runs.submit(SubmitRunCommand(argv=["make", "it"])).id
    attempt_id = worker.start(run_id).lease.attempt_id
    store.runs.record_running(attempt_id, ProcessIdentity(99, 99, 5, str(uuid.uuid4())), log_path=log_path,
                              actor_id=worker.owner)
    if end:
        store.runs.finish_attempt(attempt_id, AttemptStatus.FAILED, actor_id=worker.owner, exit_code=2)
    return run_id, attempt_id, store


def test_logs_of_another_host_print_the_stored_copy_and_say_when_it_is_cut(
    dsn: str, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    run_id, attempt_id, store = _ended_attempt_elsewhere(dsn, end=True)
    try:
        log = bytes(range(256)) * 1024 + b"\nthe end\n"  # 256 KiB + 9: binary-safe, cut to the tail
        content = log[-STORED_LOG_MAX_BYTES:]
        assert store.attempt_logs.keep(attempt_id, content, size_bytes=len(log), worker_id="host-b")
        assert not store.attempt_logs.keep(attempt_id, b"second", size_bytes=6, worker_id="host-b")  # first stands
    finally:
        store.close()
    code = cluster_cli.main(["logs", run_id])
    captured = capsysbinary.readouterr()
    assert (code, captured.out) == (0, content)
    assert captured.err.decode() == (f"Note: attempt 1 ran on worker host-b; its log had {len(log)} bytes, the stored copy is "
                            f"the last {STORED_LOG_MAX_BYTES} (the whole log is /var/lib/elsewhere/a.log there)\n")


def test_a_stored_copy_that_begins_inside_a_secret_masks_its_rest(
    dsn: str, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """The copy keeps the log's end only: its first bytes may be the end of an account of a
    multi-account secret whose beginning was not kept. Masked, as the marker's sides are."""
    run_id, attempt_id, store = _ended_attempt_elsewhere(dsn, end=True)
    accounts = ("pt_key=AAQWE123RTY;pt_pin=ALICE99;", "pt_key=ZXCV456BNMQ;pt_pin=BOBBY77;")
    try:
        store.environment.set("COOKIE", "&".join(accounts), secret=True)
        log = b"." * 100 + accounts[1].encode() + b"\n" + b"." * (STORED_LOG_MAX_BYTES - 7)
        assert store.attempt_logs.keep(attempt_id, log[-STORED_LOG_MAX_BYTES:], size_bytes=len(log), worker_id="host-b")
    finally:
        store.close()
    assert log[-STORED_LOG_MAX_BYTES:].startswith(b"BBY77;\n")  # the copy begins inside the account
    assert cluster_cli.main(["logs", run_id]) == 0
    assert capsysbinary.readouterr().out == b"***\n" + b"." * (STORED_LOG_MAX_BYTES - 7)


def test_logs_copy_bytes_are_written_unchanged(dsn: str) -> None:
    run_id, attempt_id, store = _ended_attempt_elsewhere(dsn, end=True)
    try:
        assert store.attempt_logs.keep(attempt_id, b"\x00\xff\xfeok\r\n", size_bytes=7, worker_id="host-b")
    finally:
        store.close()
    done = subprocess.run([sys.executable, "-m", "cluster_postgres.cli", "logs", run_id, "--dsn", dsn],
                          capture_output=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"\x00\xff\xfeok\r\n", b"")


def test_logs_of_a_running_attempt_on_another_host_say_where_it_runs(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    run_id, _, store = _ended_attempt_elsewhere(dsn, end=False)
    store.close()
    code, out, err = run_cluster(capsys, "logs", run_id)
    assert (code, out) == (1, "")
    assert err == (f"Error: attempt 1 of run {run_id} is running on worker host-b, another host: its log is the file "
                   f"/var/lib/elsewhere/a.log there (`edge-runtime-cluster logs` on that host reads it); a copy is "
                   f"stored here when it ends [LOG_ON_OTHER_HOST]\n")


def test_logs_follow_of_an_attempt_running_on_another_host_prints_its_copy_once_it_ended(dsn: str) -> None:
    run_id, attempt_id, store = _ended_attempt_elsewhere(dsn, end=False)
    try:
        follow = subprocess.Popen([sys.executable, "-m", "cluster_postgres.cli", "logs", run_id, "--follow"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        store.runs.finish_attempt(attempt_id, AttemptStatus.SUCCEEDED, actor_id="host-b#1", exit_code=0)
        assert store.attempt_logs.keep(attempt_id, b"made it\n", size_bytes=8, worker_id="host-b")
        out, err = follow.communicate(timeout=60)
    finally:
        store.close()
    assert (follow.returncode, out) == (0, b"made it\n"), err  # never LOG_ON_OTHER_HOST while it ran
    assert b"Error" not in err


def test_logs_of_an_attempt_ended_elsewhere_without_a_copy_say_so(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    run_id, _, store = _ended_attempt_elsewhere(dsn, end=True)
    store.close()
    code, _, err = run_cluster(capsys, "logs", run_id)
    assert code == 1 and "ended failed on worker host-b, another host, and no copy" in err
    assert err.endswith("[LOG_ON_OTHER_HOST]\n")


def test_logs_on_the_same_host_read_the_file_and_fall_back_to_the_copy_when_it_is_gone(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGE_RUNTIME_LOG_DIR", str(tmp_path))  # this host's log directory
    store = PostgresStore(dsn)
    try:
        worker = WorkerSession(store.leases, worker_id="host-a", slots=1, session_lease_ms=120_000, run_lease_ms=60_000)
        worker.register()
        run_id = store.runs.submit(SubmitRunCommand(argv=["x"])).id
        attempt_id = worker.start(run_id).lease.attempt_id
        log = tmp_path / f"{attempt_id}.log"
        log.write_bytes(b"fresh text from the file\n")
        store.runs.record_running(attempt_id, ProcessIdentity(7, 7, 1, read_boot_id()), log_path=str(log),
                                  actor_id=worker.owner)
        store.runs.finish_attempt(attempt_id, AttemptStatus.SUCCEEDED, actor_id=worker.owner, exit_code=0)
        assert store.attempt_logs.keep(attempt_id, b"the stored copy\n", size_bytes=16, worker_id="host-a")
    finally:
        store.close()
    assert run_cluster(capsys, "logs", run_id)[:2] == (0, "fresh text from the file\n")
    log.unlink()  # e.g. removed by the worker host's log cap, or a container's own file system
    assert run_cluster(capsys, "logs", run_id) == (0, "the stored copy\n", "")


# --------------------------------------------------------------------------- the copy's store

def test_only_the_lease_holder_stores_a_copy_and_only_once_its_attempt_ended(dsn: str) -> None:
    run_id, attempt_id, store = _ended_attempt_elsewhere(dsn, end=False)
    try:
        copies = store.attempt_logs
        assert not copies.keep(attempt_id, b"x", size_bytes=1, worker_id="host-b")  # still running
        store.runs.finish_attempt(attempt_id, AttemptStatus.SUCCEEDED, actor_id="host-b#1", exit_code=0)
        assert not copies.keep(attempt_id, b"x", size_bytes=1, worker_id="host-c")  # not its lease
        assert copies.find(attempt_id) is None
        assert copies.keep(attempt_id, b"x", size_bytes=1, worker_id="host-b")
        stored = copies.find(attempt_id)
        assert (stored.content, stored.size_bytes, stored.worker_id, stored.truncated) == (b"x", 1, "host-b", False)
        with pytest.raises(InvalidRunCommandError):
            copies.keep(attempt_id, b"y" * (STORED_LOG_MAX_BYTES + 1), size_bytes=STORED_LOG_MAX_BYTES + 1,
                        worker_id="host-b")
        with pytest.raises(InvalidRunCommandError):
            copies.keep(attempt_id, b"yy", size_bytes=1, worker_id="host-b")
    finally:
        store.close()


def test_the_schema_limit_is_the_contract_limit(owner: Any) -> None:
    sql = (REPO / "cluster" / "cluster_postgres" / "migrations" / "0003_attempt_logs.sql").read_text()
    assert f"octet_length(content) <= {STORED_LOG_MAX_BYTES})" in sql
    owner.execute("INSERT INTO ql3.runs (id, status, created_at_ms) VALUES ('r', 'succeeded', 0)")
    owner.execute("INSERT INTO ql3.run_attempts (id, run_id, attempt, status, created_at_ms) VALUES ('a', 'r', 1, 'succeeded', 0)")
    with pytest.raises(psycopg.errors.CheckViolation):
        owner.execute("INSERT INTO ql3.attempt_logs VALUES ('a', %s, %s, 'w', 0)",
                      (b"z" * (STORED_LOG_MAX_BYTES + 1), STORED_LOG_MAX_BYTES + 1))


def test_a_worker_stores_the_copy_when_its_attempt_ends(pg_database: Any, dsn: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``edge-runtime-cluster serve`` (the service composed on the PostgresStore) stores each ended
    Attempt's log through the port, the tail of a long one; ``logs`` from 'another host' (the file
    gone) prints it."""
    env = {**os.environ, DSN_ENV_VAR: dsn, "XDG_STATE_HOME": str(tmp_path / "state")}
    serve = subprocess.Popen([sys.executable, "-m", "cluster_postgres.cli", "serve", "--worker-id", "copier",
                              "--log-dir", str(tmp_path / "worker-logs"), "--slots", "2"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        short = run_cluster(capsys, "submit", "--", "sh", "-c", "echo to stdout; echo to stderr >&2")[1].strip()
        long = run_cluster(capsys, "submit", "--", "sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a; echo END")[1].strip()
        copies = {}
        store = PostgresStore(dsn)
        try:
            for run_id in (short, long):
                copies[run_id] = wait_for_copy(store, run_id)
        finally:
            store.close()
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    attempt, copy = copies[short]
    assert (copy.content, copy.size_bytes, copy.worker_id) == (b"to stdout\nto stderr\n", 20, "copier")
    Path(attempt.log_path).unlink()
    assert run_cluster(capsys, "logs", short) == (0, "to stdout\nto stderr\n", "")
    attempt, copy = copies[long]
    assert copy.size_bytes == 100_004 and copy.truncated
    assert copy.content == b"a" * (STORED_LOG_MAX_BYTES - 4) + b"END\n"
    assert Path(attempt.log_path).read_bytes()[-STORED_LOG_MAX_BYTES:] == copy.content


def wait_for_copy(store: Any, run_id: str) -> tuple[Any, Any]:
    """The Run's Attempt and its stored copy, once the worker ended it (a liveness guard, not a timing)."""
    deadline = time.monotonic() + 60
    while store.runs.get(run_id).status.value != "succeeded":
        assert time.monotonic() < deadline, "the worker did not run the Run"
        time.sleep(0.1)
    [attempt] = store.runs.attempts(run_id)
    while (copy := store.attempt_logs.find(attempt.id)) is None:
        assert time.monotonic() < deadline, "no copy was stored"
        time.sleep(0.1)
    return attempt, copy
