"""Bootstrap (roles, database, grants) and the fail-closed readiness check (cluster-profile.md §2).

Roles are global to a PostgreSQL cluster, so they are created here, explicitly, never by a
migration. ``check`` reads the catalog and passes only when migration checksums, the whole
privilege matrix and the runtime role's three settings all match.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from cluster_postgres.connection import RUNTIME_SETTINGS
from cluster_postgres.errors import ClusterNotReadyError
from cluster_postgres.migrations import OWNER_ROLE, known_migrations, migration_problems, read_applied

RUNTIME_ROLE = "ql3_runtime"
ADMIN_ROLE = "ql3_cluster_admin"
ROLES = (OWNER_ROLE, RUNTIME_ROLE, ADMIN_ROLE)
#: Owns ql3.prune_history (migration 0006): may read the history and delete only finished history;
#: NOLOGIN, reached only through that SECURITY DEFINER function.
RETENTION_ROLE = "ql3_retention"

TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")
_RUNTIME_WRITE = ("SELECT", "INSERT", "UPDATE")
_LEASE_TABLES = ("worker_sessions", "run_dispatch_leases", "run_cancellation_dispatches")
#: table -> role -> the privileges it must hold; every other table privilege must be absent.
PRIVILEGE_MATRIX: dict[str, dict[str, tuple[str, ...]]] = {
    "runs": {RUNTIME_ROLE: _RUNTIME_WRITE, ADMIN_ROLE: ("SELECT",)},
    "run_attempts": {RUNTIME_ROLE: _RUNTIME_WRITE, ADMIN_ROLE: ()},
    "run_events": {RUNTIME_ROLE: ("SELECT", "INSERT"), ADMIN_ROLE: ("SELECT",)},
    # The retention policy (0006): read by every worker, set by `retention set`.
    "retention_settings": {RUNTIME_ROLE: ("SELECT", "UPDATE"), ADMIN_ROLE: ()},
    # Copies of Attempt logs (0003): append-only; logs may hold secrets, so the admin role reads none.
    "attempt_logs": {RUNTIME_ROLE: ("SELECT", "INSERT"), ADMIN_ROLE: ()},
    "schema_migrations": {RUNTIME_ROLE: ("SELECT",), ADMIN_ROLE: ()},
    # Env entries (0011): no DELETE (``env remove`` marks the row removed and clears it); secrets,
    # so no admin read.
    "env_entries": {RUNTIME_ROLE: _RUNTIME_WRITE, ADMIN_ROLE: ()},
    # Schedules (0004): changed in place (remove marks the row); the fire records are append-only.
    "schedules": {RUNTIME_ROLE: _RUNTIME_WRITE, ADMIN_ROLE: ()},
    "schedule_fires": {RUNTIME_ROLE: ("SELECT", "INSERT"), ADMIN_ROLE: ()},
    # Notifications (0013): no DELETE (a removed channel is marked and its secrets cleared; rules
    # and outbox rows are changed in place); secrets and messages, so no admin read.
    "notify_channels": {RUNTIME_ROLE: _RUNTIME_WRITE, ADMIN_ROLE: ()},
    "notify_rules": {RUNTIME_ROLE: _RUNTIME_WRITE, ADMIN_ROLE: ()},
    "notify_outbox": {RUNTIME_ROLE: _RUNTIME_WRITE, ADMIN_ROLE: ()},
    # The wake channel's name (0008): a secret of the workers, whom any role could flood otherwise.
    "wake_channel": {RUNTIME_ROLE: ("SELECT",), ADMIN_ROLE: ()},
    # The locks only the runtime role may take (0009): locking a row needs UPDATE.
    "runtime_locks": {RUNTIME_ROLE: ("SELECT", "UPDATE"), ADMIN_ROLE: ()},
    **{table: {RUNTIME_ROLE: _RUNTIME_WRITE, ADMIN_ROLE: ()} for table in _LEASE_TABLES},
}
#: The server's large-object functions (``pg_catalog``). PostgreSQL lets PUBLIC execute most of
#: them, so by default every role that can connect may store data with ``lo_from_bytea`` or
#: ``lo_create`` + ``lowrite``, outside ``ql3``, where no privilege, quota or retention of this
#: profile applies. The matrix grants none of them: bootstrap revokes them from PUBLIC and the
#: three roles, and ``check`` reports any role still allowed one. (A migration cannot: only the
#: functions' owner, a superuser, may revoke them.)
LARGE_OBJECT_FUNCTIONS_SQL = (
    "SELECT p.oid, p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace"
    " AND (p.proname LIKE 'lo\\_%' OR p.proname IN ('loread', 'lowrite')) ORDER BY 2"
)
#: Who must hold none of the large-object functions: PUBLIC (``has_function_privilege`` spells it
#: ``public``) and the three roles.
_NO_LARGE_OBJECTS = ("public", *ROLES)
_DATABASE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class Check(NamedTuple):
    name: str
    ok: bool
    detail: str


def bootstrap(admin_dsn: str, database: str) -> list[str]:
    """Create the three roles, the database owned by the migration owner, and its grants.

    Idempotent: an existing role or database is kept; settings and grants are set again.
    Returns what it did, one line per step. The admin DSN needs CREATEROLE and CREATEDB.
    """
    if not _DATABASE_NAME.fullmatch(database):
        raise ValueError(f"database name {database!r} must match [a-z_][a-z0-9_]{{0,62}}")
    done: list[str] = []
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for role in ROLES:
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS")
                             .format(sql.Identifier(role)))
                done.append(f"created role {role}")
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (RETENTION_ROLE,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS")
                         .format(sql.Identifier(RETENTION_ROLE)))
            done.append(f"created role {RETENTION_ROLE} (NOLOGIN)")
        # The migration owner gives it ql3.prune_history, which needs membership.
        conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(RETENTION_ROLE), sql.Identifier(OWNER_ROLE)))
        for name, value in RUNTIME_SETTINGS.items():
            conn.execute(sql.SQL("ALTER ROLE {} SET {} = {}").format(
                sql.Identifier(RUNTIME_ROLE), sql.Identifier(name), sql.Literal(value)))
        done.append(f"set {', '.join(f'{k}={v}' for k, v in RUNTIME_SETTINGS.items())} on {RUNTIME_ROLE}")
        db = sql.Identifier(database)
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(db, sql.Identifier(OWNER_ROLE)))
            done.append(f"created database {database} owned by {OWNER_ROLE}")
        # No TEMP and no CREATE for anyone but the owner; CONNECT only for the profile's roles.
        conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(db))
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}, {}").format(
            db, sql.Identifier(RUNTIME_ROLE), sql.Identifier(ADMIN_ROLE)))
        done.append(f"granted CONNECT on {database} to {RUNTIME_ROLE}, {ADMIN_ROLE}; revoked PUBLIC")
    with psycopg.connect(admin_dsn, autocommit=True, dbname=database) as conn:
        conn.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
        done.append(_revoke_large_objects(conn))
    return done


def _revoke_large_objects(conn: psycopg.Connection[Any]) -> str:
    """Revoke EXECUTE on every large-object function from PUBLIC and the three roles (in this
    database: ``pg_proc`` is per database); what was done, or why it could not be."""
    functions = conn.execute(LARGE_OBJECT_FUNCTIONS_SQL).fetchall()
    grantees = sql.SQL(", ").join([sql.SQL("PUBLIC"), *(sql.Identifier(role) for role in ROLES)])
    for _, name in functions:  # a signature the catalog printed, e.g. lo_put(oid,bigint,bytea)
        conn.execute(sql.SQL("REVOKE EXECUTE ON FUNCTION pg_catalog.{} FROM {}").format(sql.SQL(name), grantees))
    left = _large_object_grants(conn)
    if left:  # REVOKE by a role that does not own the functions only warns
        return ("large-object functions NOT revoked (only a superuser may): " + "; ".join(left)
                + " -- check fails until bootstrap runs as a superuser")
    return f"revoked EXECUTE on the {len(functions)} large-object functions from PUBLIC, {', '.join(ROLES)}"


def _large_object_grants(conn: psycopg.Connection[Any]) -> list[str]:
    """Which of PUBLIC and the three roles may still execute a large-object function, and whether
    large objects are usable some other way (existing ones of theirs, ``lo_compat_privileges``)."""
    found = []
    functions = conn.execute(LARGE_OBJECT_FUNCTIONS_SQL).fetchall()
    by_public: set[str] = set()
    for role in _NO_LARGE_OBJECTS:  # PUBLIC first: a role is named for what it holds beyond PUBLIC
        allowed = [name for oid, name in functions if name not in by_public and conn.execute(
            "SELECT has_function_privilege(%s, %s::oid, 'EXECUTE')", (role, oid)).fetchone()[0]]
        if role == "public":
            by_public.update(allowed)
        if allowed:
            shown = ", ".join(allowed[:3]) + (f" and {len(allowed) - 3} more" if len(allowed) > 3 else "")
            who = "PUBLIC (so every role)" if role == "public" else role
            found.append(f"{who} may execute the large-object functions {shown}")
    if conn.execute("SELECT current_setting('lo_compat_privileges')::boolean").fetchone()[0]:
        found.append("lo_compat_privileges is on (large objects are not access-checked)")
    owned = conn.execute(
        "SELECT count(*) FROM pg_largeobject_metadata m WHERE m.lomowner IN (SELECT oid FROM pg_roles"
        " WHERE rolname = ANY(%s)) OR EXISTS (SELECT 1 FROM aclexplode(m.lomacl) a WHERE a.grantee = 0"
        " OR a.grantee IN (SELECT oid FROM pg_roles WHERE rolname = ANY(%s)))",
        (list(ROLES), list(ROLES)),
    ).fetchone()[0]
    if owned:
        found.append(f"{owned} large object(s) are owned by or granted to PUBLIC or {', '.join(ROLES)}")
    return found


def readiness(dsn: str) -> list[Check]:
    """Every readiness check against the database of ``dsn`` (any role that can read the catalog)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [_migrations(conn), *_privileges(conn), _settings(conn), _retention(conn)]


def require_ready(dsn: str) -> list[Check]:
    """:func:`readiness`, raising :class:`ClusterNotReadyError` naming every failed check."""
    checks = readiness(dsn)
    failed = [c for c in checks if not c.ok]
    if failed:
        raise ClusterNotReadyError("; ".join(f"{c.name}: {c.detail}" for c in failed))
    return checks


def _migrations(conn: psycopg.Connection[Any]) -> Check:
    known = known_migrations()
    applied = read_applied(conn)
    problems = migration_problems(applied, known)
    problems += [f"migration {m.id} is not applied" for m in known if m.id not in applied]
    return Check("migrations", not problems, "; ".join(problems) or f"{len(applied)} applied, checksums match")


def _privileges(conn: psycopg.Connection[Any]) -> list[Check]:
    wrong = []
    for table, expected in PRIVILEGE_MATRIX.items():
        if conn.execute("SELECT to_regclass(%s)", (f"ql3.{table}",)).fetchone()[0] is None:
            wrong.append(f"table ql3.{table} is missing")
            continue
        for role, granted in expected.items():
            for privilege in TABLE_PRIVILEGES:
                has = conn.execute("SELECT has_table_privilege(%s, %s, %s)", (role, f"ql3.{table}", privilege)).fetchone()[0]
                if has != (privilege in granted):
                    wrong.append(f"{role} {'has' if has else 'lacks'} {privilege} on ql3.{table}")
    for role in (RUNTIME_ROLE, ADMIN_ROLE):
        row = conn.execute(
            "SELECT has_schema_privilege(%s, 'ql3', 'CREATE'), has_database_privilege(%s, current_database(), 'CREATE'),"
            " has_database_privilege(%s, current_database(), 'TEMP'),"
            " (SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls FROM pg_roles WHERE rolname = %s)",
            (role, role, role, role),
        ).fetchone()
        for flag, what in zip(row, ("CREATE on schema ql3", "CREATE on the database", "TEMP on the database",
                                    "superuser, CREATEROLE, CREATEDB or BYPASSRLS")):
            if flag:
                wrong.append(f"{role} has {what}")
    # pg_read_all_stats (also through pg_monitor) shows every session's statement text, and so the
    # workers' LISTEN on the secret wake channel.
    if conn.execute("SELECT pg_has_role(%s, 'pg_read_all_stats', 'MEMBER')", (ADMIN_ROLE,)).fetchone()[0]:
        wrong.append(f"{ADMIN_ROLE} may read every session's statements (pg_read_all_stats), the workers' wake "
                     "channel among them")
    public = conn.execute(
        "SELECT has_database_privilege('public', current_database(), 'CREATE'),"
        " has_database_privilege('public', current_database(), 'TEMP'),"
        " has_database_privilege('public', current_database(), 'CONNECT'),"
        " has_schema_privilege('public', 'public', 'CREATE')").fetchone()
    for flag, what in zip(public, ("CREATE on the database", "TEMP on the database", "CONNECT on the database",
                                   "CREATE on schema public")):
        if flag:
            wrong.append(f"PUBLIC has {what}")
    wrong += _large_object_grants(conn)
    owner = conn.execute("SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'ql3'").fetchone()[0]
    if owner != OWNER_ROLE:
        wrong.append(f"schema ql3 is owned by {owner!r}, not {OWNER_ROLE}")
    return [Check("privileges", not wrong, "; ".join(wrong) or "the privilege matrix matches the catalog")]


def _settings(conn: psycopg.Connection[Any]) -> Check:
    rows = conn.execute(
        "SELECT unnest(setconfig) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole "
        "WHERE r.rolname = %s AND s.setdatabase = 0", (RUNTIME_ROLE,)
    ).fetchall()
    found = dict(item.split("=", 1) for (item,) in rows)
    wrong = [f"{name} is {found.get(name, 'unset')}, expected {value}"
             for name, value in RUNTIME_SETTINGS.items() if found.get(name) != value]
    return Check("settings", not wrong, "; ".join(wrong) or f"{RUNTIME_ROLE} runs with " +
                 ", ".join(f"{k}={v}" for k, v in RUNTIME_SETTINGS.items()))


def _retention(conn: psycopg.Connection[Any]) -> Check:
    """The retention policy kept in the database and what the history holds (fails when it cannot
    be read: no policy row, or a role that may not read it)."""
    from cluster_postgres.retention import PostgresRetentionRepository
    from edge_runtime.contract.errors import EdgeRuntimeError

    if conn.execute("SELECT to_regclass('ql3.retention_settings')").fetchone()[0] is None:
        return Check("retention", False, "ql3.retention_settings is missing (migration 0006)")
    try:
        s = PostgresRetentionRepository(conn).settings()
    except EdgeRuntimeError as exc:
        return Check("retention", False, str(exc))
    return Check("retention", True,
                 f"keeps at most {s.retain_runs} finished Runs, none older than {s.retain_days} days (by database "
                 f"time); holds {s.finished_runs} finished ({s.runs_beyond_policy} beyond the policy) and "
                 f"{s.active_runs} active; bytes " + ", ".join(f"{t}={n}" for t, n in s.table_bytes.items()))
