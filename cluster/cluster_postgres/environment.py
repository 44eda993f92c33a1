"""``ql3.env_entries`` (migration 0011): the ``EnvironmentStore`` port on PostgreSQL.

The env entries every Run's Attempts get, on every worker (docs/environment.md). Every rule is the
contract's (``edge_runtime/contract/env_entries.py``): a write takes the runtime-only lock
``shared_env_set`` (writes serialise, so two of them never both pass a limit), reads the live
entries in list order, has a plan decide, and writes what the plan returns, in one transaction.
As on Local, a secret's value leaves this module for two callers only: a worker composing an
Attempt's environment (``task_values``) and the printing commands masking it (``secret_values``).
No role of the profile may DELETE, so ``remove`` marks the row removed and clears its value,
remarks and labels at once; its id stays taken.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from cluster_postgres.errors import LOCK_SHARED_ENV_SET, Transaction, reading, take_runtime_lock
from cluster_postgres.run_events import database_now
from edge_runtime.contract import env_entries as rules
from edge_runtime.contract.env_entries import ENTRY_ORDER_SQL, EnvChanges, EnvEntry, StoredEnvEntry, shown
from edge_runtime.contract.environment import EnvEntryNotFoundError, EnvironmentRepositoryError
from edge_runtime.contract.validation import MAX_SAFE_INTEGER


class ClusterEnvironmentStorageError(EnvironmentRepositoryError, code="CLUSTER_STORAGE_FAILED"):
    """PostgreSQL failed under an env entry operation."""


_COLUMNS = "id, name, value, secret, remarks, enabled, position, pinned, labels, created_at_ms, updated_at_ms"
_LIVE = "removed_at_ms IS NULL"


def _read(cur: Any, where: str = "", params: tuple[Any, ...] = ()) -> list[StoredEnvEntry]:
    rows = cur.execute(f"SELECT {_COLUMNS} FROM ql3.env_entries WHERE {_LIVE} {where} ORDER BY {ENTRY_ORDER_SQL}",
                       params).fetchall()
    return [StoredEnvEntry(id=r[0], name=r[1], value=r[2], secret=r[3], remarks=r[4], enabled=r[5], position=r[6],
                           pinned=r[7], labels=tuple(r[8]), created_at_ms=r[9], updated_at_ms=r[10]) for r in rows]


class PostgresEnvironment(rules.PlannedEntryChanges):
    """The env entries, on the caller's connection (one short transaction per change)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    # ----------------------------------------------------------------- reads

    def _all(self) -> list[StoredEnvEntry]:
        with reading(ClusterEnvironmentStorageError):
            return _read(self._conn.cursor())

    def list(self, *, name: str | None = None, search: str | Sequence[str] | None = None,
             value: str | None = None) -> list[EnvEntry]:
        return [shown(e) for e in rules.matching(self._all(), name=name, search=search, value=value)]

    def get(self, entry_id: int) -> EnvEntry:
        found: list[StoredEnvEntry] = []
        if type(entry_id) is int and 1 <= entry_id <= MAX_SAFE_INTEGER:
            with reading(ClusterEnvironmentStorageError):
                found = _read(self._conn.cursor(), "AND id = %s", (entry_id,))
        if not found:
            raise EnvEntryNotFoundError(f"no env entry with id {entry_id}")
        return shown(found[0])

    def task_values(self) -> dict[str, str]:
        return rules.task_values(self._all())

    def secret_values(self) -> list[str]:
        return rules.secret_values(self._all())

    # ----------------------------------------------------------------- writes

    def _write(self, plan: Callable[[list[StoredEnvEntry], int], EnvChanges]) -> list[EnvEntry]:
        changes, inserted = self._apply(plan)
        return changes.result(inserted)

    def _apply(self, plan: Callable[[list[StoredEnvEntry], int], EnvChanges]) -> tuple[EnvChanges, list[int]]:
        """One transaction: the lock, the entries as they are, the plan's decision, its writes;
        the decision and the ids the inserted entries got."""
        with Transaction(self._conn, ClusterEnvironmentStorageError):
            cur = self._conn.cursor()
            take_runtime_lock(cur, LOCK_SHARED_ENV_SET, ClusterEnvironmentStorageError)
            now = database_now(cur)
            changes = plan(_read(cur), now)
            if changes.removals:
                cur.execute("UPDATE ql3.env_entries SET value = NULL, secret = false, remarks = '', labels = '{}', "
                            "enabled = false, pinned = false, removed_at_ms = %s, updated_at_ms = %s "
                            f"WHERE id = ANY(%s) AND {_LIVE}", (now, now, list(changes.removals)))
            if changes.updates:
                cur.executemany(
                    "UPDATE ql3.env_entries SET name = %s, value = %s, secret = %s, remarks = %s, enabled = %s, "
                    f"position = %s, pinned = %s, labels = %s, updated_at_ms = %s WHERE id = %s AND {_LIVE}",
                    [(r.name, r.value, r.secret, r.remarks, r.enabled, r.position, r.pinned, list(r.labels),
                      r.updated_at_ms, r.id) for r in changes.updates])
            inserted = [cur.execute(
                "INSERT INTO ql3.env_entries (name, value, secret, remarks, enabled, position, pinned, labels, "
                "created_at_ms, updated_at_ms) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (r.name, r.value, r.secret, r.remarks, r.enabled, r.position, r.pinned, list(r.labels),
                 r.created_at_ms, r.updated_at_ms)).fetchone()[0] for r in changes.inserts]
        return changes, inserted
