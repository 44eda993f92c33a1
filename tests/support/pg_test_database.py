"""A private PostgreSQL database per test session (cluster-profile.md §7).

Given a shared server (``EDGE_PG_ADMIN_DSN``, e.g. CI's local PostgreSQL), a session bootstraps
the roles, creates ``ql3_test_<pid>_<random>``, migrates it as ``ql3_migration_owner``, installs
the test-only clock in it, and drops it at the end. Databases left by a killed session (its pid is
gone) are dropped at the start of the next one.

Without psycopg (the edge venv of ``make test``) or without ``EDGE_PG_ADMIN_DSN`` the PostgreSQL
cases skip with the reason; with ``EDGE_PG_REQUIRED=1`` (``make test-cluster``) they fail instead.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

PREFIX = "ql3_test_"
_NAME = re.compile(rf"{PREFIX}(\d+)_[0-9a-f]+")
#: Test-only clock: a manual time when set, database time when NULL. Installed only here.
TEST_CLOCK_SQL = """
CREATE SCHEMA ql3_test;
CREATE TABLE ql3_test.clock (now_ms bigint);
INSERT INTO ql3_test.clock VALUES (NULL);
CREATE OR REPLACE FUNCTION ql3.now_ms() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT now_ms FROM ql3_test.clock),
                    floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint) $$;
GRANT USAGE ON SCHEMA ql3_test TO ql3_runtime;
GRANT SELECT ON ql3_test.clock TO ql3_runtime;
GRANT USAGE ON SCHEMA ql3_test TO ql3_retention;
GRANT SELECT ON ql3_test.clock TO ql3_retention;
"""


def unavailable(reason: str) -> None:
    if os.environ.get("EDGE_PG_REQUIRED") == "1":
        pytest.fail(f"PostgreSQL is required here (EDGE_PG_REQUIRED=1) but {reason}", pytrace=False)
    pytest.skip(reason)


class TestDatabase:
    __test__ = False

    def __init__(self, admin_dsn: str, name: str) -> None:
        from psycopg.conninfo import make_conninfo

        self.name = name
        self.admin_dsn = admin_dsn
        self.owner_dsn = make_conninfo(admin_dsn, user="ql3_migration_owner", dbname=name)
        self.runtime_dsn = make_conninfo(admin_dsn, user="ql3_runtime", dbname=name)
        self.cluster_admin_dsn = make_conninfo(admin_dsn, user="ql3_cluster_admin", dbname=name)
        self.superuser_dsn = make_conninfo(admin_dsn, dbname=name)

    def owner_connection(self) -> Any:
        import psycopg

        return psycopg.connect(self.owner_dsn, autocommit=True)

    @staticmethod
    def reset(owner: Any, start_ms: int | None) -> None:
        """Empty every table, set the test clock (None: real database time) and the default retention."""
        owner.execute("TRUNCATE ql3.notify_outbox, ql3.notify_rules, ql3.notify_channels, ql3.env_entries, ql3.schedule_fires, ql3.schedules, ql3.attempt_logs, ql3.run_events, ql3.run_cancellation_dispatches, ql3.run_dispatch_leases, "
                      "ql3.run_attempts, ql3.worker_sessions, ql3.runs RESTART IDENTITY")
        owner.execute("UPDATE ql3_test.clock SET now_ms = %s", (start_ms,))
        from edge_runtime.contract.retention import DEFAULT_RETAIN_DAYS, DEFAULT_RETAIN_RUNS

        # The retention policy as migration 0006 writes it: a test that changed it changes no other.
        owner.execute("UPDATE ql3.retention_settings SET retain_runs = %s, retain_days = %s",
                      (DEFAULT_RETAIN_RUNS, DEFAULT_RETAIN_DAYS))


def reap_orphans(admin: Any) -> list[str]:
    """Drop test databases whose creating process no longer exists (a killed earlier run)."""
    from psycopg import sql

    dropped = []
    for (name,) in admin.execute("SELECT datname FROM pg_database WHERE datname LIKE 'ql3\\_test\\_%'").fetchall():
        match = _NAME.fullmatch(name)
        if match is None or _alive(int(match.group(1))):
            continue
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        dropped.append(name)
    return dropped


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def private_database() -> Iterator[TestDatabase]:
    """Generator body of the session fixture."""
    try:
        import psycopg
        from psycopg import sql
    except ImportError:
        unavailable("psycopg is not installed: the PostgreSQL backend runs in the cluster venv (make test-cluster)")
    admin_dsn = os.environ.get("EDGE_PG_ADMIN_DSN")
    if not admin_dsn:
        unavailable("EDGE_PG_ADMIN_DSN is not set (e.g. host=127.0.0.1 user=postgres dbname=postgres)")
    try:
        admin = psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        unavailable(f"no PostgreSQL answers at EDGE_PG_ADMIN_DSN: {str(exc).strip().splitlines()[0]}")
    from cluster_postgres.migrations import migrate
    from cluster_postgres.readiness import bootstrap

    name = f"{PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
    try:
        reap_orphans(admin)
        bootstrap(admin_dsn, name)
        database = TestDatabase(admin_dsn, name)
        migrate(database.owner_dsn)
        with database.owner_connection() as owner:
            owner.execute(TEST_CLOCK_SQL)
        yield database
    finally:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.close()
