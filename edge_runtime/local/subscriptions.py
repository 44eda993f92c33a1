"""Local subscription repository: the ``subscriptions`` and ``subscription_scripts`` tables
(migration 0018) and the schedules a subscription makes, in the same database.

A subscription is added with its pull schedule in one transaction, and a pull's changes (new,
changed and removed schedules, the headers read, the revision) are stored in one transaction:
the schedules through :class:`~edge_runtime.local.schedules.LocalScheduleRepository`'s own
insert and update, their fire times searched before ``BEGIN`` as ``schedule add`` and ``edit``
search them. What changes is decided by the contract (``plan_script_changes``); this only stores
it. Removing a schedule by hand sets its subscription's (or script's) ``schedule_id`` to NULL
(``ON DELETE SET NULL``): the subscription stays, without that schedule.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from edge_runtime.contract.schedules import AddScheduleCommand, Overlap
from edge_runtime.contract.stored_records import stored_record
from edge_runtime.contract.subscriptions import (
    AddSubscriptionCommand,
    ChangeKind,
    InvalidSubscriptionError,
    PullChanges,
    RemovedSubscription,
    ScriptChange,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
    SubscriptionRecord,
    SubscriptionRepositoryError,
    SubscriptionScript,
    check_subscription_id,
    check_subscription_number,
)
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.errors import StorageErrors
from edge_runtime.local.schedules import LocalScheduleRepository, schedule_repository_errors

_UNSET = msgspec.UNSET
_encode_json = msgspec.json.Encoder().encode
_decode_extensions = msgspec.json.Decoder(list[str]).decode

_COLUMNS = (
    "id, number, name, kind, url, folder, scripts_dir, branch, whitelist, blacklist, dependence, extensions, auto_add, "
    "auto_remove, task_user, schedule_id, revision, pulled_at_ms, created_at_ms, updated_at_ms"
)
_CAMEL = {"scripts_dir": "scriptsDir", "auto_add": "autoAdd", "auto_remove": "autoRemove", "task_user": "taskUser",
          "schedule_id": "scheduleId", "pulled_at_ms": "pulledAtMs", "created_at_ms": "createdAtMs",
          "updated_at_ms": "updatedAtMs"}

subscription_errors = StorageErrors(SubscriptionRepositoryError)


def _record(row: tuple[Any, ...]) -> SubscriptionRecord:
    values = dict(zip(_COLUMNS.split(", "), row))

    def build() -> SubscriptionRecord:
        values["extensions"] = _decode_extensions(values["extensions"])
        values["auto_add"], values["auto_remove"] = bool(values["auto_add"]), bool(values["auto_remove"])
        return msgspec.convert({_CAMEL.get(k, k): v for k, v in values.items() if v is not None}, SubscriptionRecord)

    return stored_record(build, "subscription", values["id"], SubscriptionRepositoryError)


def _script(subscription_id: str, row: tuple[Any, ...]) -> SubscriptionScript:
    path, name, expression, schedule_id = row

    def build() -> SubscriptionScript:
        return SubscriptionScript(path=path, name=name, **({} if expression is None else {"expression": expression}),
                                  **({} if schedule_id is None else {"schedule_id": schedule_id}))

    return stored_record(build, "subscription script", f"{subscription_id}:{path}", SubscriptionRepositoryError)


def _schedule_name(prefix: str, name: str) -> str:
    return (prefix + name)[:128].rstrip()


class LocalSubscriptionRepository:
    """Subscriptions in the local SQLite database; ``schedules`` is the same database's schedule
    repository, whose insert and update the subscription's transactions call."""

    __slots__ = ("_db", "_schedules")

    def __init__(self, db: LocalDatabase, schedules: LocalScheduleRepository) -> None:
        self._db = db
        self._schedules = schedules

    def _row(self, subscription_id: str) -> SubscriptionRecord | None:
        row = self._db.connection.execute(f"SELECT {_COLUMNS} FROM subscriptions WHERE id = ?",
                                          (subscription_id,)).fetchone()
        return None if row is None else _record(row)

    def get(self, subscription_id: str) -> SubscriptionRecord:
        check_subscription_id(subscription_id)
        with subscription_errors():
            record = self._row(subscription_id)
        if record is None:
            raise SubscriptionNotFoundError(f"no subscription with id {subscription_id!r}")
        return record

    def get_by_number(self, number: int) -> SubscriptionRecord:
        check_subscription_number(number)
        with subscription_errors():
            row = self._db.connection.execute(f"SELECT {_COLUMNS} FROM subscriptions WHERE number = ?",
                                              (number,)).fetchone()
        if row is None:
            raise SubscriptionNotFoundError(f"no subscription with number {number}")
        return _record(row)

    def find_subscription_ids(self, form: str, limit: int) -> list[str]:
        """No LIKE wildcards: a short form is matched literally."""
        with subscription_errors():
            rows = self._db.connection.execute(
                "SELECT id FROM subscriptions WHERE substr(id, 1, length(?1)) = ?1 OR substr(id, -length(?1)) = ?1 "
                "ORDER BY created_at_ms DESC, rowid DESC LIMIT ?2", (form, limit)).fetchall()
        return [row[0] for row in rows]

    def list(self) -> list[SubscriptionRecord]:
        with subscription_errors():
            rows = self._db.connection.execute(
                f"SELECT {_COLUMNS} FROM subscriptions ORDER BY created_at_ms, rowid").fetchall()
            return [_record(row) for row in rows]

    def scripts(self, subscription_id: str) -> list[SubscriptionScript]:
        check_subscription_id(subscription_id)
        with subscription_errors():
            rows = self._db.connection.execute(
                "SELECT path, name, expression, schedule_id FROM subscription_scripts WHERE subscription_id = ? "
                "ORDER BY path", (subscription_id,)).fetchall()
            return [_script(subscription_id, row) for row in rows]

    def add(self, cmd: AddSubscriptionCommand) -> SubscriptionRecord:
        AddSubscriptionCommand.require(cmd, "add")
        subscription_id = str(uuid.uuid4())
        pull = AddScheduleCommand(
            expression=cmd.expression, argv=[*cmd.pull_command, subscription_id],
            name=_schedule_name("pull ", cmd.name), overlap=Overlap.SKIP, time_zone=cmd.time_zone,
            timeout_ms=cmd.timeout_ms, paused=cmd.paused, task_user=cmd.pull_user)
        with schedule_repository_errors():
            prepared = self._schedules.prepare_add(pull)
        with subscription_errors(), self._db.write() as now:
            connection = self._db.connection
            taken = connection.execute("SELECT id FROM subscriptions WHERE folder = ?", (cmd.folder,)).fetchone()
            if taken is not None:
                raise InvalidSubscriptionError(
                    f"the folder {cmd.folder!r} is subscription {taken[0]}'s already: give another with --folder")
            schedule_id = self._schedules.insert_prepared(prepared, now)
            # The next number of the counter that only grows (migration 0018).
            (number,) = connection.execute("UPDATE subscription_numbers SET last_number = last_number + 1 "
                                           "WHERE id = 1 RETURNING last_number").fetchone()

            def optional(value: object) -> object:
                return None if value is _UNSET else value

            connection.execute(
                "INSERT INTO subscriptions (id, number, name, kind, url, folder, scripts_dir, branch, whitelist, blacklist, "
                "dependence, extensions, auto_add, auto_remove, task_user, schedule_id, created_at_ms, updated_at_ms) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (subscription_id, number, cmd.name, cmd.kind.value, cmd.url, cmd.folder, cmd.scripts_dir,
                 optional(cmd.branch), optional(cmd.whitelist), optional(cmd.blacklist), optional(cmd.dependence),
                 _encode_json(cmd.extensions).decode(), int(cmd.auto_add), int(cmd.auto_remove),
                 optional(cmd.task_user), schedule_id, now, now))
            return self._row(subscription_id)

    def apply_pull(self, pull: PullChanges) -> list[ScriptChange]:
        if not isinstance(pull, PullChanges):
            raise InvalidSubscriptionError(f"apply_pull expects PullChanges, got {type(pull).__name__}")
        check_subscription_id(pull.subscription_id)
        # Before BEGIN: every new schedule checked and its first fire searched, every changed
        # expression's next fire searched (the write lock is never held across a search).
        prepared = {}
        # The user its scripts run as, read before BEGIN as the prepared schedules are (a change
        # of it meanwhile applies from the next pull on).
        owner = self._row(pull.subscription_id)
        task_user = _UNSET if owner is None else owner.task_user
        with schedule_repository_errors():
            for change in pull.changes:
                if change.kind in (ChangeKind.ADD, ChangeKind.ADOPT):
                    # An adoption needs one too: the schedule may be taken or gone by the transaction.
                    prepared[change.path] = self._schedules.prepare_add(AddScheduleCommand(
                        expression=change.expression, argv=change.command, name=change.name,
                        paused=change.paused or change.kind is ChangeKind.ADOPT, task_user=task_user))
                elif change.kind is ChangeKind.CHANGE and change.expression != change.before_expression:
                    record = self._schedules.find(change.schedule_id)
                    if record is not None:
                        self._schedules.search_new_expression(record, change.expression)
        applied: list[ScriptChange] = []
        with subscription_errors(), self._db.write() as now:
            connection = self._db.connection
            row = connection.execute("SELECT revision FROM subscriptions WHERE id = ?",
                                     (pull.subscription_id,)).fetchone()
            if row is None:
                raise SubscriptionConflictError(f"subscription {pull.subscription_id} was removed during the pull: "
                                                f"nothing stored")
            if row[0] != pull.base_revision:
                raise SubscriptionConflictError(
                    f"subscription {pull.subscription_id} was pulled by another pull meanwhile (now at {row[0]}): "
                    f"nothing of this pull stored")
            for change in pull.changes:
                applied.append(self._apply(pull.subscription_id, change, prepared, now))
            connection.execute(
                "UPDATE subscriptions SET revision = ?, pulled_at_ms = ?, updated_at_ms = ? WHERE id = ?",
                (pull.revision, now, now, pull.subscription_id))
        return applied

    def _apply(self, subscription_id: str, change: ScriptChange, prepared: dict[str, Any], now: int) -> ScriptChange:
        connection = self._db.connection
        if change.kind in (ChangeKind.FORGET, ChangeKind.REMOVE):
            connection.execute("DELETE FROM subscription_scripts WHERE subscription_id = ? AND path = ?",
                               (subscription_id, change.path))
            if change.kind is ChangeKind.REMOVE:
                connection.execute("DELETE FROM schedules WHERE id = ?", (change.schedule_id,))
            return change
        if change.kind is ChangeKind.KEEP:
            return change
        schedule_id = change.schedule_id
        if change.kind is ChangeKind.ADD:
            schedule_id = self._schedules.insert_prepared(prepared[change.path], now)
            change = msgspec.structs.replace(change, schedule_id=schedule_id)
        elif change.kind is ChangeKind.ADOPT:
            owner = connection.execute("SELECT 1 FROM subscription_scripts WHERE schedule_id = ?",
                                       (schedule_id,)).fetchone()
            if owner is not None or connection.execute("SELECT 1 FROM schedules WHERE id = ?",
                                                        (schedule_id,)).fetchone() is None:
                # Taken by another script, or removed, since the pull looked: a new one (paused) instead.
                return self._apply(subscription_id, msgspec.structs.replace(
                    change, kind=ChangeKind.ADD, schedule_id=None, paused=True), prepared, now)
        elif change.kind is ChangeKind.CHANGE:
            record = self._schedules.find(schedule_id)
            if record is None:  # removed by hand since the pull read it: only the header is noted
                schedule_id = None
                change = msgspec.structs.replace(change, kind=ChangeKind.NOTE, schedule_id=None)
            else:
                edits: dict[str, object] = {}
                if change.expression != change.before_expression:
                    edits["expression"] = change.expression
                if change.name != change.before_name:
                    edits["name"] = change.name
                if edits:
                    self._schedules.update_in_transaction(record, edits, now)
        if change.kind is ChangeKind.NOTE:
            # The schedule (if any) stays as it is: only the header is recorded.
            connection.execute(
                "INSERT INTO subscription_scripts (subscription_id, path, name, expression) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (subscription_id, path) DO UPDATE SET name = excluded.name, "
                "expression = excluded.expression", (subscription_id, change.path, change.name, change.expression))
            return change
        connection.execute(
            "INSERT INTO subscription_scripts (subscription_id, path, name, expression, schedule_id) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (subscription_id, path) DO UPDATE SET name = excluded.name, "
            "expression = excluded.expression, schedule_id = excluded.schedule_id",
            (subscription_id, change.path, change.name, change.expression, schedule_id))
        return change

    def remove(self, subscription_id: str, *, purge: bool) -> RemovedSubscription:
        check_subscription_id(subscription_id)
        with subscription_errors(), self._db.write():
            connection = self._db.connection
            record = self._row(subscription_id)
            if record is None:
                raise SubscriptionNotFoundError(f"no subscription with id {subscription_id!r}")
            script_schedules = [row[0] for row in connection.execute(
                "SELECT schedule_id FROM subscription_scripts WHERE subscription_id = ? AND schedule_id IS NOT NULL "
                "ORDER BY path", (subscription_id,))]
            removed = [] if record.schedule_id is _UNSET else [record.schedule_id]
            connection.execute("DELETE FROM subscriptions WHERE id = ?", (subscription_id,))  # its scripts cascade
            if purge:
                removed += script_schedules
            for schedule_id in removed:
                connection.execute("DELETE FROM schedules WHERE id = ?", (schedule_id,))
        return RemovedSubscription(id=subscription_id, folder=record.folder, scripts_dir=record.scripts_dir,
                                   removed_schedule_ids=removed,
                                   kept_schedule_ids=[] if purge else script_schedules)
