"""Schema, privileges, readiness, migrations and the CLI of the Cluster Profile (§2, §3, §5)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from cluster_postgres.cli import main
from cluster_postgres.errors import ClusterMigrationRefusedError
from cluster_postgres.migrations import known_migrations, migrate
from cluster_postgres.readiness import PRIVILEGE_MATRIX, readiness, require_ready

RUNTIME_FORBIDDEN = [
    *[f"DELETE FROM ql3.{t}" for t in PRIVILEGE_MATRIX],
    *[f"TRUNCATE ql3.{t}" for t in PRIVILEGE_MATRIX],
    "UPDATE ql3.run_events SET type = 'x'",
    "UPDATE ql3.attempt_logs SET content = ''",
    "INSERT INTO ql3.schema_migrations VALUES ('9999_x', repeat('0', 64), 0)",
    "UPDATE ql3.schema_migrations SET applied_at_ms = 0",
    "CREATE TABLE ql3.intruder (id int)",
    "CREATE TABLE public.intruder (id int)",
    "CREATE TEMP TABLE intruder (id int)",
    "CREATE TRIGGER t BEFORE INSERT ON ql3.runs FOR EACH ROW EXECUTE FUNCTION ql3.now_ms()",
    "ALTER TABLE ql3.runs ADD COLUMN x int",
    "DROP TABLE ql3.run_events",
]
ADMIN_FORBIDDEN = [
    # Nothing of the three lease tables: no read, no write.
    *[f"SELECT 1 FROM ql3.{t}" for t in ("worker_sessions", "run_dispatch_leases", "run_cancellation_dispatches")],
    "INSERT INTO ql3.worker_sessions (worker_id) VALUES ('w')",
    "INSERT INTO ql3.run_dispatch_leases (attempt_id) VALUES ('a')",
    "INSERT INTO ql3.run_cancellation_dispatches (run_id) VALUES ('r')",
    *[f"UPDATE ql3.{t} SET version = 0" for t in ("worker_sessions", "run_dispatch_leases", "run_cancellation_dispatches")],
    *[f"DELETE FROM ql3.{t}" for t in ("worker_sessions", "run_dispatch_leases", "run_cancellation_dispatches")],
    "SELECT 1 FROM ql3.run_attempts",
    "SELECT 1 FROM ql3.attempt_logs",
    "INSERT INTO ql3.runs (id, status, created_at_ms) VALUES ('x', 'queued', 0)",
    "UPDATE ql3.runs SET status = 'failed'",
    "INSERT INTO ql3.run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, payload, created_at_ms)"
    " VALUES ('e', 'r', 1, 't', 'k', 'a', 'a', '{}', 0)",
]


@pytest.mark.parametrize("statement", RUNTIME_FORBIDDEN)
def test_every_forbidden_operation_of_the_runtime_role_fails_with_42501(pg_database: Any, owner: Any,
                                                                         statement: str) -> None:
    with psycopg.connect(pg_database.runtime_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(statement)
    assert caught.value.sqlstate == "42501", caught.value


def test_the_runtime_role_may_not_reference_a_table_even_where_it_may_create_one(pg_database: Any, owner: Any) -> None:
    # REFERENCES needs a table of one's own to fail on, and the runtime role may create none
    # (CREATE fails first, above): give it a scratch schema for this test only.
    with psycopg.connect(pg_database.superuser_dsn, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA scratch_references")
        admin.execute("GRANT USAGE, CREATE ON SCHEMA scratch_references TO ql3_runtime")
        try:
            with psycopg.connect(pg_database.runtime_dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE scratch_references.own (id int)")  # what the scratch schema allows
                for table, column in (*[(t, "id") for t in ("runs", "run_attempts", "run_events")],
                                      ("worker_sessions", "worker_id"), ("run_dispatch_leases", "attempt_id"),
                                      ("run_cancellation_dispatches", "run_id")):
                    with pytest.raises(psycopg.Error) as caught:
                        conn.execute(f"CREATE TABLE scratch_references.fk (x text REFERENCES ql3.{table} ({column}))")
                    assert caught.value.sqlstate == "42501", (table, caught.value)
        finally:
            admin.execute("DROP SCHEMA scratch_references CASCADE")


@pytest.mark.parametrize("statement", ADMIN_FORBIDDEN)
def test_the_cluster_admin_reads_nothing_of_the_lease_tables_and_writes_nothing(pg_database: Any, owner: Any,
                                                                                statement: str) -> None:
    with psycopg.connect(pg_database.cluster_admin_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(statement)
        assert caught.value.sqlstate == "42501", caught.value
        assert conn.execute("SELECT count(*) FROM ql3.runs").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM ql3.run_events").fetchone() == (0,)


def test_the_runtime_role_sessions_carry_the_three_timeouts(pg_database: Any) -> None:
    from cluster_postgres.connection import connect

    for conn in (connect(pg_database.runtime_dsn), psycopg.connect(pg_database.runtime_dsn)):
        with conn:
            got = [conn.execute(f"SHOW {name}").fetchone()[0]
                   for name in ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")]
        assert got == ["5s", "1s", "10s"]


# --------------------------------------------------------------------------- CHECK / FK catalogue

BROKEN = [
    # (table, columns and values, expected SQLSTATE)
    ("run_cancellation_dispatches", "status, version, dispatch_count, created_at_ms, updated_at_ms", "'dispatched', 1, 1, 0, 0", "23514"),  # NULL last_result
    ("run_cancellation_dispatches", "status, version, dispatch_count, created_at_ms, updated_at_ms, lease_owner", "'leased', 1, 1, 0, 0, 'w'", "23514"),  # NULL digest/expiry
    ("run_cancellation_dispatches", "status, version, dispatch_count, created_at_ms, updated_at_ms", "'pending', 0, 0, 0, 0", "23514"),  # NULL due time
    ("run_cancellation_dispatches", "status, version, dispatch_count, created_at_ms, updated_at_ms, next_attempt_at_ms", "'retry_wait', 1, 1, 0, 0, 5", "23514"),  # NULL last_result
    ("run_cancellation_dispatches", "status, version, dispatch_count, created_at_ms, updated_at_ms, last_result", "'blocked', 1, 1, 0, 0, 'already_exited'", "23514"),
    ("run_cancellation_dispatches", "status, version, dispatch_count, created_at_ms, updated_at_ms, next_attempt_at_ms", "'pending', 1, 0, 0, 0, 5", "23514"),
    ("run_cancellation_dispatches", "status, version, dispatch_count, created_at_ms, updated_at_ms, lease_owner, lease_token_digest, lease_expires_at_ms", "'leased', 1, 1, 0, 0, 'w', 'raw-token', 9", "23514"),
    ("run_cancellation_dispatches", "status, version, dispatch_count, created_at_ms, updated_at_ms, last_result", "'dispatched', 2, 3, 0, 0, 'already_exited'", "23514"),
    ("run_cancellation_dispatches", "status, version, dispatch_count, created_at_ms, updated_at_ms, last_result", "'exploded', 1, 1, 0, 0, 'already_exited'", "23514"),
]


@pytest.mark.parametrize(("table", "columns", "values", "sqlstate"), BROKEN)
def test_null_safe_checks_refuse_every_broken_dispatch_shape(owner: Any, table: str, columns: str, values: str,
                                                             sqlstate: str) -> None:
    owner.execute("INSERT INTO runs (id, status, created_at_ms) VALUES ('r', 'running', 0)")
    owner.execute("INSERT INTO run_attempts (id, run_id, attempt, status, created_at_ms) VALUES ('a', 'r', 1, 'running', 0)")
    with pytest.raises(psycopg.Error) as caught:
        owner.execute(f"INSERT INTO {table} (run_id, attempt_id, {columns}) VALUES ('r', 'a', {values})")
    assert caught.value.sqlstate == sqlstate


def test_composite_fks_bind_an_attempt_to_its_own_run(owner: Any) -> None:
    owner.execute("INSERT INTO runs (id, status, created_at_ms) VALUES ('r1', 'running', 0), ('r2', 'running', 0)")
    owner.execute("INSERT INTO run_attempts (id, run_id, attempt, status, created_at_ms) VALUES ('a2', 'r2', 1, 'running', 0)")
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        owner.execute("INSERT INTO run_cancellation_dispatches (run_id, attempt_id, status, version, dispatch_count, "
                      "next_attempt_at_ms, created_at_ms, updated_at_ms) VALUES ('r1', 'a2', 'pending', 0, 0, 0, 0, 0)")
    with pytest.raises(psycopg.errors.CheckViolation):
        owner.execute("UPDATE run_attempts SET lease_offer_id = 'o' WHERE id = 'a2'")  # projection: all or nothing
    composite = {r[0] for r in owner.execute(
        "SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f' AND connamespace = 'ql3'::regnamespace "
        "AND pg_get_constraintdef(oid) = 'FOREIGN KEY (attempt_id, run_id) REFERENCES run_attempts(id, run_id)'"
    ).fetchall()}
    assert composite == {"run_cancellation_dispatches", "run_dispatch_leases"}


def test_only_the_partial_dispatch_lease_run_schedule_retention_and_outbox_scan_indexes_exist(owner: Any) -> None:
    rows = dict(owner.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'ql3' AND indexname NOT LIKE '%pkey' "
        "AND indexname NOT LIKE '%key'").fetchall())
    assert set(rows) == {"run_cancellation_dispatches_due", "run_cancellation_dispatches_lease_expiry",
                         "run_dispatch_leases_active", "runs_schedule_slot", "runs_queued", "run_attempts_active",
                         "runs_retry_due", "schedules_due", "schedules_waiting", "runs_finished",
                         "notify_outbox_due", "notify_outbox_run", "notify_outbox_coalesce"}
    assert "(next_at_ms) WHERE (status = ANY (ARRAY['pending'::text, 'sending'::text]))" in rows["notify_outbox_due"]
    assert "(retry_at_ms) WHERE (status = 'retry_wait'::text)" in rows["runs_retry_due"]
    assert "(schedule_id, scheduled_for_ms) WHERE (schedule_id IS NOT NULL)" in rows["runs_schedule_slot"]
    assert "(created_at_ms) WHERE (status = 'queued'::text)" in rows["runs_queued"]
    assert "'claimed'::text, 'starting'::text, 'running'::text" in rows["run_attempts_active"]
    assert "WHERE (status = ANY (ARRAY['pending'::text, 'retry_wait'::text]))" in rows["run_cancellation_dispatches_due"]
    assert "(lease_expires_at_ms) WHERE (status = 'leased'::text)" in rows["run_cancellation_dispatches_lease_expiry"]


# --------------------------------------------------------------------------- migrations and readiness


def test_readiness_passes_and_fails_closed_on_privilege_settings_and_checksum_drift(pg_database: Any, owner: Any) -> None:
    dsn = pg_database.owner_dsn
    assert all(c.ok for c in require_ready(dsn))
    owner.execute("GRANT DELETE ON ql3.runs TO ql3_runtime")
    try:
        failed = {c.name: c.detail for c in readiness(dsn) if not c.ok}
        assert failed == {"privileges": "ql3_runtime has DELETE on ql3.runs"}
    finally:
        owner.execute("REVOKE DELETE ON ql3.runs FROM ql3_runtime")
    owner.execute("UPDATE ql3.schema_migrations SET checksum = repeat('0', 64) WHERE id = '0001_ql3_core'")
    try:
        failed = {c.name: c.detail for c in readiness(dsn) if not c.ok}
        assert failed == {"migrations": "migration 0001_ql3_core was edited after it was applied (checksum differs)"}
        with pytest.raises(ClusterMigrationRefusedError, match="edited after it was applied"):
            migrate(dsn)
        assert main(["check", "--dsn", dsn]) == 1
    finally:
        owner.execute("UPDATE ql3.schema_migrations SET checksum = %s WHERE id = '0001_ql3_core'",
                      (known_migrations()[0].checksum,))
    with psycopg.connect(pg_database.superuser_dsn, autocommit=True) as admin:
        admin.execute("ALTER ROLE ql3_runtime SET lock_timeout = '2s'")
        try:
            failed = {c.name: c.detail for c in readiness(dsn) if not c.ok}
            assert failed == {"settings": "lock_timeout is 2s, expected 1s"}
        finally:
            admin.execute("ALTER ROLE ql3_runtime SET lock_timeout = '1s'")
    assert all(c.ok for c in readiness(dsn))


def test_an_unknown_applied_migration_is_refused(pg_database: Any, owner: Any) -> None:
    owner.execute("INSERT INTO ql3.schema_migrations VALUES ('9999_from_the_future', repeat('a', 64), 0)")
    try:
        with pytest.raises(ClusterMigrationRefusedError, match="9999_from_the_future is applied but unknown"):
            migrate(pg_database.owner_dsn)
    finally:
        owner.execute("DELETE FROM ql3.schema_migrations WHERE id = '9999_from_the_future'")
    assert migrate(pg_database.owner_dsn) == []


def test_cli_bootstrap_is_idempotent_and_check_prints_json(pg_database: Any, owner: Any,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bootstrap", "--admin-dsn", pg_database.admin_dsn, "--database", pg_database.name]) == 0
    out = capsys.readouterr().out
    assert "created" not in out and "granted CONNECT" in out
    assert main(["migrate", "--dsn", pg_database.owner_dsn]) == 0
    assert capsys.readouterr().out.strip() == "applied 0 migration(s)"
    assert main(["check", "--json", "--dsn", pg_database.runtime_dsn]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ready"] is True and [c["name"] for c in report["checks"]] == ["migrations", "privileges", "settings", "retention"]
    assert main(["migrate", "--dsn", pg_database.runtime_dsn]) == 1
    assert "[CLUSTER_MIGRATION_REFUSED]" in capsys.readouterr().err
    assert main(["bootstrap", "--admin-dsn", pg_database.admin_dsn, "--database", "Bad-Name"]) == 2


# --------------------------------------------------------------------------- import closure


def test_cluster_postgres_imports_neither_the_local_adapter_nor_apsw_and_starts_nothing(pg_database: Any) -> None:
    probe = (
        "import sys, threading\n"
        "import cluster_postgres\n"
        "public = [k for k in vars(cluster_postgres) if not k.startswith('__')]\n"
        "import cluster_postgres.cli, cluster_postgres.readiness\n"
        "from cluster_postgres.connection import connect\n"
        "from cluster_postgres.cancellation_dispatch import PostgresCancellationDispatchRepository as D\n"
        "from cluster_postgres.worker_lease import PostgresWorkerLeaseRepository as W\n"
        "threads = threading.active_count()\n"
        f"conn = connect({pg_database.runtime_dsn!r}); D(conn); W(conn)\n"
        "bad = sorted(m for m in sys.modules if m == 'apsw' or m.startswith('edge_runtime.local')"
        " or m.startswith('edge_runtime.service') or m == 'sqlite3')\n"
        "print(bad, threads, threading.active_count(), public, cluster_postgres.__version__ != '')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[] 1 1 [] True"
