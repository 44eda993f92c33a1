"""``ql3.shared_env`` (migration 0007): the ``EnvironmentStore`` port on PostgreSQL.

The shared variables every Run's Attempts get, on every worker (docs/environment.md). As on
Local, a secret's value is read by two callers only: a worker composing an Attempt's environment
(``task_values``) and the printing commands masking it (``secret_values``); ``list`` never
returns it. No role of the profile may DELETE, so ``remove`` clears the row (value NULL, not
secret): the value is gone at once, and a later ``set`` of the name fills the row again.
"""

from __future__ import annotations

from typing import Any

import psycopg

from cluster_postgres.errors import LOCK_SHARED_ENV_SET, Transaction, reading, take_runtime_lock
from cluster_postgres.run_events import database_now
from edge_runtime.contract.environment import (
    MAX_VARIABLES,
    EnvironmentRepositoryError,
    InvalidVariableError,
    SharedVariable,
    VariableNotFoundError,
    check_variable,
)
from edge_runtime.contract.redaction import MIN_SECRET_LENGTH


class ClusterEnvironmentStorageError(EnvironmentRepositoryError, code="CLUSTER_STORAGE_FAILED"):
    """PostgreSQL failed under a shared-variable operation."""


_UPSERT = (
    "INSERT INTO ql3.shared_env (name, value, secret, updated_at_ms) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (name) DO UPDATE SET value = excluded.value, secret = excluded.secret, "
    "updated_at_ms = excluded.updated_at_ms"
)


class PostgresEnvironment:
    """The shared variables, on the caller's connection (one short transaction per change)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def set(self, name: str, value: str, *, secret: bool) -> SharedVariable:
        check_variable(name, value, secret=secret)
        with Transaction(self._conn, ClusterEnvironmentStorageError):
            cur = self._conn.cursor()
            # Sets serialise, so two of new names cannot both pass the count (a lock only the
            # runtime role may take: no other role can stall them); a replaced row is locked too.
            take_runtime_lock(cur, LOCK_SHARED_ENV_SET, ClusterEnvironmentStorageError)
            exists = cur.execute("SELECT 1 FROM ql3.shared_env WHERE name = %s AND value IS NOT NULL "
                                 "FOR NO KEY UPDATE", (name,)).fetchone()
            if exists is None:
                count = cur.execute("SELECT count(*) FROM ql3.shared_env WHERE value IS NOT NULL").fetchone()[0]
                if count >= MAX_VARIABLES:
                    raise InvalidVariableError(f"there are {MAX_VARIABLES} shared variables already; remove one first")
            now = database_now(cur)
            cur.execute(_UPSERT, (name, value, bool(secret), now))
        return SharedVariable(name=name, secret=bool(secret), updated_at_ms=now,
                              **({} if secret else {"value": value}))

    def remove(self, name: str) -> None:
        with Transaction(self._conn, ClusterEnvironmentStorageError):
            cur = self._conn.cursor()
            now = database_now(cur)
            cur.execute("UPDATE ql3.shared_env SET value = NULL, secret = false, updated_at_ms = %s "
                        "WHERE name = %s AND value IS NOT NULL", (now, name))
            if cur.rowcount != 1:
                raise VariableNotFoundError(f"no shared variable named {name!r}")

    def list(self) -> list[SharedVariable]:
        with reading(ClusterEnvironmentStorageError):
            rows = self._conn.execute(
                "SELECT name, secret, CASE WHEN NOT secret THEN value END, updated_at_ms, "
                "secret AND char_length(value) < %s FROM ql3.shared_env "
                "WHERE value IS NOT NULL ORDER BY name COLLATE \"C\"", (MIN_SECRET_LENGTH,)).fetchall()
        return [SharedVariable(name=name, secret=secret, updated_at_ms=at,
                               **({} if value is None else {"value": value}), **({"too_short": True} if short else {}))
                for name, secret, value, at, short in rows]

    def task_values(self) -> dict[str, str]:
        with reading(ClusterEnvironmentStorageError):
            return dict(self._conn.execute("SELECT name, value FROM ql3.shared_env WHERE value IS NOT NULL "
                                           "ORDER BY name COLLATE \"C\"").fetchall())

    def secret_values(self) -> list[str]:
        with reading(ClusterEnvironmentStorageError):
            return [row[0] for row in self._conn.execute("SELECT value FROM ql3.shared_env WHERE secret")]
