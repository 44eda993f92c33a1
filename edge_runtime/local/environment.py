"""Local shared variables (``env set/list/remove``): the ``shared_env`` table of the 0600 database.

A secret's value is read by two callers only: the service, composing an Attempt's environment
(``task_values``), and the printing commands, masking it (``secret_values``). ``list`` never
returns it.
"""

from __future__ import annotations

from edge_runtime.contract.environment import (
    EnvironmentRepositoryError,
    InvalidVariableError,
    MAX_VARIABLES,
    SharedVariable,
    VariableNotFoundError,
    check_variable,
)
from edge_runtime.contract.redaction import MIN_SECRET_LENGTH
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.errors import StorageErrors

environment_errors = StorageErrors(EnvironmentRepositoryError)


class LocalEnvironmentRepository:
    __slots__ = ("_db",)

    def __init__(self, db: LocalDatabase) -> None:
        self._db = db

    def set(self, name: str, value: str, *, secret: bool) -> SharedVariable:
        check_variable(name, value, secret=secret)
        with environment_errors(), self._db.write() as now:
            connection = self._db.connection
            exists = connection.execute("SELECT 1 FROM shared_env WHERE name = ?", (name,)).fetchone()
            if exists is None and connection.execute("SELECT count(*) FROM shared_env").fetchone()[0] >= MAX_VARIABLES:
                raise InvalidVariableError(f"there are {MAX_VARIABLES} shared variables already; remove one first")
            connection.execute(
                "INSERT INTO shared_env (name, value, secret, updated_at_ms) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value, secret = excluded.secret, "
                "updated_at_ms = excluded.updated_at_ms",
                (name, value, int(secret), now),
            )
        return SharedVariable(name=name, secret=secret, updated_at_ms=now,
                              **({} if secret else {"value": value}))

    def remove(self, name: str) -> None:
        with environment_errors(), self._db.write():
            self._db.connection.execute("DELETE FROM shared_env WHERE name = ?", (name,))
            if self._db.connection.changes() != 1:
                raise VariableNotFoundError(f"no shared variable named {name!r}")

    def list(self) -> list[SharedVariable]:
        with environment_errors():
            rows = self._db.connection.execute(
                "SELECT name, secret, CASE WHEN secret = 0 THEN value END, updated_at_ms, "
                "secret <> 0 AND length(value) < ? FROM shared_env ORDER BY name", (MIN_SECRET_LENGTH,)
            ).fetchall()
        return [SharedVariable(name=name, secret=bool(secret), updated_at_ms=at,
                               **({} if value is None else {"value": value}), **({"too_short": True} if short else {}))
                for name, secret, value, at, short in rows]

    def task_values(self) -> dict[str, str]:
        with environment_errors():
            return dict(self._db.connection.execute("SELECT name, value FROM shared_env ORDER BY name").fetchall())

    def secret_values(self) -> list[str]:
        with environment_errors():
            return [row[0] for row in self._db.connection.execute("SELECT value FROM shared_env WHERE secret = 1")]
