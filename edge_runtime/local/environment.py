"""Local env entries (``env add|set|edit|list|...``): the ``env_entries`` table of the 0600 database.

Every rule is the contract's (``edge_runtime/contract/env_entries.py``): a write reads the
entries in list order inside its ``BEGIN IMMEDIATE`` transaction, has a plan decide, and writes
what the plan returns. A secret's value leaves this module for two callers only: the service,
composing an Attempt's environment (``task_values``), and the printing commands, masking it
(``secret_values``); every listed entry leaves it out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import apsw
import msgspec

from edge_runtime.contract import env_entries as rules
from edge_runtime.contract.env_entries import (
    ENTRY_ORDER_SQL,
    EnvChanges,
    EnvEntry,
    StoredEnvEntry,
    shown,
)
from edge_runtime.contract.environment import EnvEntryNotFoundError, EnvironmentRepositoryError
from edge_runtime.contract.validation import MAX_SAFE_INTEGER
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.errors import StorageErrors

environment_errors = StorageErrors(EnvironmentRepositoryError)

_COLUMNS = ("id, name, value, secret, remarks, enabled, position, pinned, labels, created_at_ms, updated_at_ms")
_decode_labels = msgspec.json.Decoder(tuple[str, ...]).decode


def _stored(row: tuple[Any, ...]) -> StoredEnvEntry:
    entry_id, name, value, secret, remarks, enabled, position, pinned, labels, created, updated = row
    try:
        decoded = _decode_labels(labels)
    except msgspec.DecodeError as exc:
        raise EnvironmentRepositoryError(f"env entry {entry_id} has unreadable labels ({exc}): refused") from None
    return StoredEnvEntry(id=entry_id, name=name, value=value, secret=bool(secret), remarks=remarks,
                          enabled=bool(enabled), position=position, pinned=bool(pinned), labels=decoded,
                          created_at_ms=created, updated_at_ms=updated)


def _read(connection: apsw.Connection, where: str = "", params: tuple[Any, ...] = ()) -> list[StoredEnvEntry]:
    return [_stored(row) for row in connection.execute(
        f"SELECT {_COLUMNS} FROM env_entries {where} ORDER BY {ENTRY_ORDER_SQL}", params)]


def _labels(entry: StoredEnvEntry) -> str:
    return msgspec.json.encode(list(entry.labels)).decode()


class LocalEnvironmentRepository(rules.PlannedEntryChanges):
    __slots__ = ("_db",)

    def __init__(self, db: LocalDatabase) -> None:
        self._db = db

    # ----------------------------------------------------------------- reads

    def _all(self) -> list[StoredEnvEntry]:
        with environment_errors():
            return _read(self._db.connection)

    def list(self, *, name: str | None = None, search: str | Sequence[str] | None = None,
             value: str | None = None) -> list[EnvEntry]:
        return [shown(e) for e in rules.matching(self._all(), name=name, search=search, value=value)]

    def get(self, entry_id: int) -> EnvEntry:
        with environment_errors():
            found = (_read(self._db.connection, "WHERE id = ?", (entry_id,))
                     if type(entry_id) is int and 1 <= entry_id <= MAX_SAFE_INTEGER else [])
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
        """One transaction: the entries as they are, the plan's decision, its writes; the
        decision and the ids the inserted entries got."""
        with environment_errors(), self._db.write() as now:
            connection = self._db.connection
            changes = plan(_read(connection), now)
            for entry_id in changes.removals:
                connection.execute("DELETE FROM env_entries WHERE id = ?", (entry_id,))
            for row in changes.updates:
                connection.execute(
                    "UPDATE env_entries SET name = ?, value = ?, secret = ?, remarks = ?, enabled = ?, position = ?, "
                    "pinned = ?, labels = ?, updated_at_ms = ? WHERE id = ?",
                    (row.name, row.value, int(row.secret), row.remarks, int(row.enabled), row.position,
                     int(row.pinned), _labels(row), row.updated_at_ms, row.id))
            inserted = [connection.execute(
                "INSERT INTO env_entries (name, value, secret, remarks, enabled, position, pinned, labels, "
                "created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (row.name, row.value, int(row.secret), row.remarks, int(row.enabled), row.position, int(row.pinned),
                 _labels(row), row.created_at_ms, row.updated_at_ms)).fetchall()[0][0] for row in changes.inserts]
        return changes, inserted
