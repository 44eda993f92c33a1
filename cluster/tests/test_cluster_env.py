"""Env entries and a task's options on the cluster (docs/environment.md, docs/cluster.md):
``edge-runtime-cluster env add/set/list/remove/...`` keep them in ``ql3.env_entries`` (migration
0011, which turned the shared variables of 0007 into entries); a real ``edge-runtime-cluster
serve`` worker passes each name to every Run, its enabled entries joined with ``&``, under the
Run's own ``--env``; a secret's value is never printed (``env list``, ``show``, ``events``,
``--json``) and is masked in ``logs``; and the everyday options of the edge ``submit`` (``--env``,
``--cwd``, ``--retries``), ``logs --follow``, ``list`` filters and JSON errors work through the
cluster CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cluster_postgres.connection import DSN_ENV_VAR
from edge_runtime.cli.common import NO_SERVICE_NOTE
from edge_runtime.contract.env_entries import NewEnvEntry
from tests.support.cluster_serve_harness import CLI, Worker, kill_attempt_groups, private_root, wait_for

SECRET = "s3cr3t-cluster-value"
FAST = {"EDGE_RUNTIME_POLL_INTERVAL_MS": "500"}


@pytest.fixture
def dsn(pg_database: Any, owner: Any) -> str:
    pg_database.reset(owner, None)  # real database time: a worker runs
    return pg_database.runtime_dsn


def cluster(dsn: str, *args: str, check: bool = True, env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real ``edge-runtime-cluster`` CLI, as a user runs it (DSN from the environment)."""
    done = subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, DSN_ENV_VAR: dsn, **(env or {})})
    if check:
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def status(owner: Any, run_id: str) -> str:
    return owner.execute("SELECT status FROM ql3.runs WHERE id = %s", (run_id,)).fetchone()[0]


def test_env_set_list_remove_on_postgresql_never_show_a_secret(dsn: str, owner: Any) -> None:
    assert cluster(dsn, "env", "set", "PLAIN", "visible").stdout == "PLAIN set\n"
    assert cluster(dsn, "env", "set", "TOKEN", SECRET, "--secret").stdout == "TOKEN set (secret)\n"
    listed = cluster(dsn, "env", "list").stdout
    assert listed == ("1  PLAIN  enabled  -  labels=-  remarks=''  value='visible'\n"
                      "2  TOKEN  enabled  -  labels=-  remarks=''  value=*** (secret)\n")
    as_json = json.loads(cluster(dsn, "env", "list", "--json").stdout)
    assert [(v["id"], v["name"], v["secret"], v.get("value")) for v in as_json] == [
        (1, "PLAIN", False, "visible"), (2, "TOKEN", True, None)]
    assert SECRET not in json.dumps(as_json)
    # Replacing keeps the name's one entry; a second account is an entry of its own.
    cluster(dsn, "env", "set", "PLAIN", "again")
    assert "value='again'" in cluster(dsn, "env", "list").stdout
    assert cluster(dsn, "env", "add", "TOKEN", "second-account", "--secret", "--remarks", "two").stdout == "3\n"
    # remove marks the rows removed (the runtime role has no DELETE): the secrets' values are gone.
    assert cluster(dsn, "env", "remove", "TOKEN").stdout == "TOKEN removed\n"
    assert owner.execute("SELECT id, value, secret, remarks, removed_at_ms IS NOT NULL FROM ql3.env_entries "
                         "WHERE name = 'TOKEN' ORDER BY id").fetchall() == [(2, None, False, "", True),
                                                                              (3, None, False, "", True)]
    assert cluster(dsn, "env", "list", "--json").stdout.count('"id"') == 1
    again = cluster(dsn, "env", "remove", "TOKEN", check=False)
    assert (again.returncode, again.stderr) == (1, "Error: no variable named 'TOKEN' [VARIABLE_NOT_FOUND]\n")
    as_json_error = cluster(dsn, "env", "remove", "TOKEN", "--json", check=False)
    assert as_json_error.returncode == 1 and as_json_error.stdout == ""
    assert json.loads(as_json_error.stderr) == {"error": {"code": "VARIABLE_NOT_FOUND",
                                                          "message": "no variable named 'TOKEN'"}}
    # A removed entry's id is never given again.
    assert cluster(dsn, "env", "add", "TOKEN", "back-again", "--secret").stdout == "4\n"
    missing = cluster(dsn, "env", "enable", "4", "3", check=False)
    assert (missing.returncode, missing.stderr) == (
        1, "Error: no env entry with id 3; nothing was changed [ENV_ENTRY_NOT_FOUND]\n")
    bad = cluster(dsn, "env", "set", "1BAD", "x", check=False)
    assert bad.returncode == 1 and "[INVALID_VARIABLE]" in bad.stderr


def test_a_database_at_the_migration_before_entries_keeps_its_variables(pg_database: Any, monkeypatch) -> None:
    """Migration 0011 turns each live shared variable (0007) into one entry, in name order, its
    secret flag kept, and the identity goes on after them."""
    from psycopg import sql

    from cluster_postgres import migrations
    from cluster_postgres.environment import PostgresEnvironment
    from cluster_postgres.connection import connect
    from cluster_postgres.readiness import bootstrap
    from tests.support.pg_test_database import PREFIX, TestDatabase

    name = f"{PREFIX}{os.getpid()}_{os.urandom(4).hex()}"
    bootstrap(pg_database.admin_dsn, name)
    try:
        database = TestDatabase(pg_database.admin_dsn, name)
        every = migrations.known_migrations()
        monkeypatch.setattr(migrations, "known_migrations", lambda: [m for m in every if m.id < "0011"])
        migrations.migrate(database.owner_dsn)
        with database.owner_connection() as old:
            old.execute("INSERT INTO ql3.shared_env (name, value, secret, updated_at_ms) VALUES "
                        "('ZED', 'z', false, 5), ('COOKIE', %s, true, 7), ('GONE', NULL, false, 8), "
                        "('Alpha', '', false, 9)", (SECRET,))
        monkeypatch.setattr(migrations, "known_migrations", lambda: every)
        assert migrations.migrate(database.owner_dsn) == [m.id for m in every if m.id >= "0011"]
        conn = connect(database.runtime_dsn)
        try:
            entries = PostgresEnvironment(conn)
            assert [(e.id, e.name, e.position, e.secret, e.enabled, e.created_at_ms) for e in entries.list()] == [
                (1, "Alpha", 1, False, True, 9), (2, "COOKIE", 2, True, True, 7), (3, "ZED", 3, False, True, 5)]
            assert entries.task_values() == {"Alpha": "", "COOKIE": SECRET, "ZED": "z"}
            assert entries.secret_values() == [SECRET]
            assert [e.id for e in entries.add([NewEnvEntry(name="NEW", value="n")])] == [4]
        finally:
            conn.close()
        with database.owner_connection() as owner:
            assert owner.execute("SELECT to_regclass('ql3.shared_env')").fetchone()[0] is None
    finally:
        with psycopg.connect(pg_database.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_the_admin_role_cannot_read_the_env_entries(pg_database: Any, owner: Any) -> None:
    with psycopg.connect(pg_database.cluster_admin_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute("SELECT value FROM ql3.env_entries")
    assert caught.value.sqlstate == "42501"


def test_a_worker_passes_the_shared_variables_to_every_run_under_its_own_and_masks_secrets(
        dsn: str, owner: Any, tmp_path: Path) -> None:
    cluster(dsn, "env", "set", "SHARED", "from-env-set")
    cluster(dsn, "env", "add", "SHARED", "off", "--disabled")
    cluster(dsn, "env", "add", "SHARED", "值 'two'")
    cluster(dsn, "env", "set", "OVERRIDDEN", "shared")
    cluster(dsn, "env", "set", "TOKEN", SECRET, "--secret")
    work = tmp_path / "task-dir"
    work.mkdir()
    script = ("echo \"SHARED=$SHARED\" OVERRIDDEN=$OVERRIDDEN LEAK=${LEAK:-none}; echo token=$TOKEN; "
              "echo id=$EDGE_RUNTIME_RUN_ID; pwd")
    own = cluster(dsn, "submit", "--env", "OVERRIDDEN=own", "--env", f"COPY={SECRET}", "--cwd", str(work),
                  "--", "sh", "-c", script).stdout.strip()
    plain = cluster(dsn, "submit", "--name", "plain", "--", "sh", "-c", "echo OVERRIDDEN=$OVERRIDDEN").stdout.strip()
    with private_root() as root:
        worker = Worker(root, "env1", dsn, slots=2, env={**FAST, "LEAK": "service-only"})
        try:
            worker.start()
            wait_for(lambda: status(owner, own) == "succeeded" and status(owner, plain) == "succeeded", 60,
                     "both runs succeeded")
            log = cluster(dsn, "logs", own).stdout
            assert log.splitlines() == ["SHARED=from-env-set&值 'two' OVERRIDDEN=own LEAK=none", "token=***",
                                        f"id={own}", str(work)]
            assert cluster(dsn, "logs", plain).stdout == "OVERRIDDEN=shared\n"
            # The worker's log file holds what the task wrote; only the printed output is masked.
            for args in (("show", own), ("show", own, "--json"), ("events", own), ("events", own, "--json"),
                         ("list",), ("list", "--json"), ("env", "list"), ("env", "list", "--json")):
                assert SECRET not in cluster(dsn, *args).stdout, args
            # A later change of a shared variable reaches the next Run, not a stored copy.
            cluster(dsn, "env", "set", "OVERRIDDEN", "changed")
            later = cluster(dsn, "submit", "--", "sh", "-c", "echo OVERRIDDEN=$OVERRIDDEN").stdout.strip()
            wait_for(lambda: status(owner, later) == "succeeded", 60, "the later run succeeded")
            assert cluster(dsn, "logs", later).stdout == "OVERRIDDEN=changed\n"
        finally:
            worker.stop()
            kill_attempt_groups(owner)


def test_submit_options_follow_filters_and_json_errors_through_the_cluster_cli(
        dsn: str, owner: Any, tmp_path: Path) -> None:
    refused = cluster(dsn, "submit", "--cwd", str(tmp_path / "missing"), "--", "true", check=False)
    assert refused.returncode == 1 and refused.stderr.startswith("Error: --cwd") and "no such directory" in refused.stderr
    assert owner.execute("SELECT count(*) FROM ql3.runs").fetchone()[0] == 0
    as_json = cluster(dsn, "show", "zzzz", "--json", check=False)
    assert as_json.returncode == 1 and as_json.stdout == "" and json.loads(as_json.stderr)["error"]["code"] == "RUN_NOT_FOUND"
    flag = tmp_path / "second-try"
    submitted = cluster(dsn, "submit", "--name", "flaky", "--retries", "2", "--retry-delay", "1s", "--", "sh", "-c",
                        f"test -e {flag} && exit 0; touch {flag}; exit 7")
    assert submitted.stderr == NO_SERVICE_NOTE  # no worker is online yet: the Run waits for one
    retried = submitted.stdout.strip()
    followed = cluster(dsn, "submit", "--name", "slow", "--", "sh", "-c",
                       "echo first; sleep 1; echo second; sleep 1; echo last").stdout.strip()
    with private_root() as root:
        worker = Worker(root, "opt1", dsn, slots=2, env=FAST)
        try:
            worker.start()
            wait_for(lambda: status(owner, followed) == "running", 60, "the followed run started")
            served = cluster(dsn, "submit", "--", "true")
            assert served.stderr == ""  # a worker is online: no note
            # On the worker's host (its log directory): the file, streamed until the Attempt ends.
            follow = cluster(dsn, "logs", followed, "--follow", timeout=60,
                             env={"EDGE_RUNTIME_LOG_DIR": str(worker.log_dir)})
            assert follow.stdout.splitlines() == ["first", "second", "last"]
            wait_for(lambda: status(owner, retried) == "succeeded", 60, "the retried run succeeded")
            shown = json.loads(cluster(dsn, "show", retried, "--json").stdout)
            assert [(a["attempt"], a["status"], a.get("exitCode")) for a in shown["attempts"]] == [
                (1, "failed", 7), (2, "succeeded", 0)]
            by_name = json.loads(cluster(dsn, "list", "--name", "flaky", "--json").stdout)
            assert [r["id"] for r in by_name] == [retried]
            unknown = cluster(dsn, "list", "--schedule", "none-such", "--json", check=False)  # never an empty table
            assert unknown.returncode == 1 and json.loads(unknown.stderr)["error"]["code"] == "SCHEDULE_NOT_FOUND"
            # The first column of list is an id form every command takes.
            row = next(line for line in cluster(dsn, "list").stdout.splitlines() if "flaky" in line)
            assert json.loads(cluster(dsn, "show", row.split()[0], "--json").stdout)["id"] == retried
        finally:
            worker.stop()
            kill_attempt_groups(owner)


def test_the_tables_limits_are_the_contracts() -> None:
    from edge_runtime.contract.env_entries import MAX_ENV_STRING_BYTES, MAX_LABELS, MAX_REMARKS_LENGTH
    from edge_runtime.contract.environment import MAX_NAME_LENGTH

    sql = (Path(__file__).resolve().parents[1] / "cluster_postgres" / "migrations" / "0011_env_entries.sql").read_text()
    assert f"length(name) <= {MAX_NAME_LENGTH})" in sql and f"octet_length(value) <= {MAX_ENV_STRING_BYTES})" in sql
    assert f"char_length(remarks) <= {MAX_REMARKS_LENGTH})" in sql and f"cardinality(labels) <= {MAX_LABELS})" in sql


def test_the_table_refuses_what_the_contract_refuses_even_from_a_foreign_writer(owner: Any) -> None:
    for name, value, secret, removed in (("1BAD", "x", False, None), ("A", "v" * 131073, False, None),
                                         ("A", None, False, None), ("A", "x", False, 5), ("A", None, True, 5)):
        with pytest.raises(psycopg.errors.CheckViolation):
            owner.execute("INSERT INTO ql3.env_entries (name, value, secret, remarks, enabled, position, pinned, "
                          "labels, created_at_ms, updated_at_ms, removed_at_ms) "
                          "VALUES (%s, %s, %s, '', true, 1, false, '{}', 0, 0, %s)", (name, value, secret, removed))
