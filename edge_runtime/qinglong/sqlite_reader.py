"""QingLong's SQLite database, read as hostile input: its schema recognised, its crons and envs
read into plain values, every cell type-checked and size-bounded.

The file is a private copy (:mod:`edge_runtime.qinglong.data_folder` made it), opened with apsw
(never the stdlib ``sqlite3``: two SQLite libraries in one process break each other's locks)
read-only and ``immutable`` (no journal, WAL or lock file is looked for or made). The connection
distrusts the file: ``trusted_schema`` off and ``SQLITE_DBCONFIG_DEFENSIVE`` (no SQL stored in it
may call a function with side effects), views and triggers disabled (a "table" that is a view is
refused, not run), a cell longer than :data:`MAX_CELL_BYTES` is an error rather than an
allocation, and the whole read is interrupted past :data:`MAX_VM_STEPS` virtual-machine steps. Tables and columns are looked up by name (QingLong adds columns with ``ALTER TABLE``,
so their order differs between databases) and read by name; a table of more than
:data:`MAX_ROWS` rows is refused.

Which QingLong wrote the file is told from its tables and columns (QingLong keeps no version
marker): :func:`schema_version`. A database without the tables and columns every QingLong since
2.11 has (``Crontabs``: id, name, command, schedule, isDisabled; ``Envs``: id, name, value,
status, position, remarks) is refused with what was found.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import apsw
import msgspec

from edge_runtime.qinglong.errors import QingLongSchemaError, QingLongSourceError

#: Longest cell read (a JD cookie is about 1-2 KiB; a whole account list in one value, 100 KiB).
MAX_CELL_BYTES = 1024 * 1024
#: Most rows read from one table.
MAX_ROWS = 100_000
#: Most tables, and columns of one table, looked at.
MAX_TABLES = 200
MAX_COLUMNS = 200
#: Virtual-machine steps the whole read may take before it is interrupted (reading tables of
#: MAX_ROWS rows takes a few tens of millions).
MAX_VM_STEPS = 200_000_000
_PROGRESS_EVERY = 10_000

#: The columns each table has in QingLong 2.21 (a database may lack the later ones).
KNOWN_COLUMNS = {
    "Crontabs": ("id", "name", "command", "schedule", "timestamp", "saved", "status", "isSystem", "pid", "isDisabled",
                 "isPinned", "log_path", "labels", "last_running_time", "last_execution_time", "sub_id",
                 "extra_schedules", "task_before", "task_after", "log_name", "allow_multiple_instances", "work_dir",
                 "createdAt", "updatedAt"),
    "Envs": ("id", "value", "timestamp", "status", "position", "name", "remarks", "isPinned", "labels", "createdAt",
             "updatedAt"),
    # pull_option (a private repository's key or password) is never read.
    "Subscriptions": ("id", "name", "url", "schedule", "interval_schedule", "type", "whitelist", "blacklist", "status",
                      "dependences", "extensions", "sub_before", "sub_after", "branch", "pull_type", "pull_option",
                      "pid", "is_disabled", "log_path", "schedule_type", "alias", "proxy", "autoAddCron",
                      "autoDelCron", "createdAt", "updatedAt"),
}
#: Columns known but never read: their cells hold secrets.
_NEVER_READ = frozenset({("Subscriptions", "pull_option")})
REQUIRED_COLUMNS = {
    "Crontabs": ("id", "name", "command", "schedule", "isDisabled"),
    "Envs": ("id", "name", "value", "status", "position", "remarks"),
}
#: QingLong's other tables (not imported), with what they hold.
OTHER_TABLES = {
    "Apps": "OpenAPI apps and their secrets",
    "Auths": "panel account, login history, notification channel and settings",
    "Dependences": "dependencies installed with npm, pip or apk",
    "CrontabViews": "saved views of the cron list",
    "CrontabStats": "daily run statistics",
    "RunningInstances": "runs in progress",
}
_SQLITE_INTERNAL = ("sqlite_sequence", "sqlite_stat1", "sqlite_stat4")
_HEADER = b"SQLite format 3\x00"


class QlCron(msgspec.Struct, frozen=True, kw_only=True):
    """One ``Crontabs`` row, its cells checked. ``problems`` lists the cells that could not be
    read as their type (the row cannot be imported); ``notes`` the unreadable optional ones."""

    id: int
    name: str | None = None
    command: str | None = None
    schedule: str | None = None
    disabled: bool = False
    is_system: bool = False
    labels: tuple[str, ...] = ()
    extra_schedules: tuple[str, ...] = ()
    task_before: str | None = None
    task_after: str | None = None
    work_dir: str | None = None
    allow_multiple_instances: int | None = None
    sub_id: int | None = None
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


class QlEnv(msgspec.Struct, frozen=True, kw_only=True):
    """One ``Envs`` row, its cells checked (``problems``: as for :class:`QlCron`)."""

    id: int
    name: str | None = None
    value: str | None = None
    remarks: str = ""
    enabled: bool = True
    position: float | None = None
    pinned: bool = False
    labels: tuple[str, ...] = ()
    created_at: str = ""
    problems: tuple[str, ...] = ()


class QlSubscription(msgspec.Struct, frozen=True, kw_only=True):
    """One ``Subscriptions`` row (2.13+), its cells checked (``problems``: as for :class:`QlCron`);
    a private repository's credentials (``pull_option``) are never read."""

    id: int
    name: str | None = None
    url: str | None = None
    type: str | None = None
    schedule_type: str | None = None
    schedule: str | None = None
    #: ``interval_schedule`` as ``(unit, value)``: ``("hours", 6)``.
    interval: tuple[str, int] | None = None
    whitelist: str | None = None
    blacklist: str | None = None
    dependences: str | None = None
    extensions: str | None = None
    branch: str | None = None
    alias: str | None = None
    disabled: bool = False
    #: QingLong treats an empty ``autoAddCron``/``autoDelCron`` as on.
    auto_add: bool = True
    auto_remove: bool = True
    pull_type: str | None = None
    proxy: str | None = None
    sub_before: str | None = None
    sub_after: str | None = None
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


class QlDatabase(msgspec.Struct, frozen=True, kw_only=True):
    """What a QingLong database holds for an import."""

    version: str
    tables: dict[str, tuple[str, ...]]
    row_counts: dict[str, int]
    crons: tuple[QlCron, ...]
    envs: tuple[QlEnv, ...]
    subscriptions: tuple[QlSubscription, ...] = ()
    #: ``(table, column)`` of Crontabs, Envs and Subscriptions this build does not know (not read).
    unknown_columns: tuple[tuple[str, str], ...]
    #: Tables that are not QingLong's (not read).
    unknown_tables: tuple[str, ...]
    #: The zone QingLong fired its crons in, from its settings (2.18.2+), else None.
    time_zone: str | None


def read_database(path: Path, *, shown: str = "the database") -> QlDatabase:
    """The crons, envs and schema of the QingLong database at ``path`` (a private copy).

    Raises:
        QingLongSourceError: not an SQLite database, or one that cannot be read within the bounds.
        QingLongSchemaError: an SQLite database that is not one of QingLong's schemas.
    """
    with open(path, "rb") as file:
        if file.read(len(_HEADER)) != _HEADER:
            raise QingLongSourceError(f"{shown} is not an SQLite database (its first bytes are not SQLite's)")
    connection = _open(path)
    try:
        return _read(connection, shown)
    except apsw.InterruptError:
        raise QingLongSourceError(f"{shown}: reading it took more than {MAX_VM_STEPS} steps: refused (a QingLong "
                                  f"database is read in far fewer)") from None
    except apsw.TooBigError:
        raise QingLongSourceError(f"{shown} holds a cell larger than {MAX_CELL_BYTES // 1024} KiB: refused "
                                  f"(QingLong never writes one)") from None
    except apsw.Error as exc:
        raise QingLongSourceError(f"{shown} cannot be read: {exc}") from None
    finally:
        connection.close()


def _open(path: Path) -> apsw.Connection:
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?immutable=1"
    try:
        connection = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    except apsw.Error as exc:
        raise QingLongSourceError(f"the database cannot be opened: {exc}") from None
    connection.config(apsw.SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0)
    connection.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, 1)
    connection.config(apsw.SQLITE_DBCONFIG_ENABLE_VIEW, 0)
    connection.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 0)
    connection.config(apsw.SQLITE_DBCONFIG_DQS_DML, 0)
    connection.limit(apsw.SQLITE_LIMIT_LENGTH, MAX_CELL_BYTES)
    connection.limit(apsw.SQLITE_LIMIT_ATTACHED, 0)
    steps = [0]
    every = max(1, min(_PROGRESS_EVERY, MAX_VM_STEPS // 10))

    def interrupt() -> bool:
        steps[0] += every
        return steps[0] > MAX_VM_STEPS

    connection.set_progress_handler(interrupt, every)
    connection.execute("PRAGMA query_only = ON")
    return connection


def _read(connection: apsw.Connection, shown: str) -> QlDatabase:
    objects = connection.execute(
        "SELECT type, name, sql FROM sqlite_schema WHERE type IN ('table', 'view') LIMIT ?", (MAX_TABLES + 1,)
    ).fetchall()
    if len(objects) > MAX_TABLES:
        raise QingLongSourceError(f"{shown} holds more than {MAX_TABLES} tables: refused (QingLong's has 9)")
    kinds = {name: (kind, sql or "") for kind, name, sql in objects if isinstance(name, str)}
    tables: dict[str, tuple[str, ...]] = {}
    for name, (kind, sql) in kinds.items():
        if kind != "table" or name in _SQLITE_INTERNAL or sql.upper().startswith("CREATE VIRTUAL"):
            continue
        columns = [row[0] for row in connection.execute(
            "SELECT name FROM pragma_table_info(?) LIMIT ?", (name, MAX_COLUMNS + 1))]
        if len(columns) > MAX_COLUMNS:
            raise QingLongSourceError(f"{shown}: table {name!r} has more than {MAX_COLUMNS} columns: refused")
        tables[name] = tuple(c for c in columns if isinstance(c, str))
    _require_schema(kinds, tables, shown)
    counts = {name: _count(connection, name) for name in tables}
    for name in KNOWN_COLUMNS:
        if counts.get(name, 0) > MAX_ROWS:
            raise QingLongSourceError(f"{shown}: {name} holds {counts[name]} rows, more than {MAX_ROWS}: refused")
    unknown_columns = tuple((t, c) for t in KNOWN_COLUMNS for c in tables.get(t, ()) if c not in KNOWN_COLUMNS[t])
    unknown_tables = tuple(sorted(t for t in tables if t not in KNOWN_COLUMNS and t not in OTHER_TABLES))
    return QlDatabase(
        version=schema_version(tables),
        tables=tables,
        row_counts=counts,
        crons=tuple(_rows(connection, "Crontabs", tables["Crontabs"], _cron)),
        envs=tuple(_rows(connection, "Envs", tables["Envs"], _env)),
        subscriptions=tuple(_rows(connection, "Subscriptions", tables["Subscriptions"], _subscription))
        if "Subscriptions" in tables else (),
        unknown_columns=unknown_columns,
        unknown_tables=unknown_tables,
        time_zone=_time_zone(connection, tables),
    )


def _require_schema(kinds: dict[str, tuple[str, str]], tables: dict[str, tuple[str, ...]], shown: str) -> None:
    missing = []
    for table, required in REQUIRED_COLUMNS.items():
        if table in kinds and kinds[table][0] != "table":
            raise QingLongSchemaError(f"{shown}: {table} is a {kinds[table][0]}, not a table: not a QingLong "
                                      f"database (refused, nothing of it run)")
        if table in kinds and kinds[table][1].upper().startswith("CREATE VIRTUAL"):
            raise QingLongSchemaError(f"{shown}: {table} is a virtual table: not a QingLong database")
        if table not in tables:
            missing.append(f"table {table}")
            continue
        missing += [f"{table}.{c}" for c in required if c not in tables[table]]
    if missing:
        found = "; ".join(f"{t} ({', '.join(c[:12])}{', ...' if len(c) > 12 else ''})" for t, c in
                          sorted(tables.items())[:12]) or "no tables"
        raise QingLongSchemaError(
            f"{shown} is not a QingLong database this build knows (QingLong 2.11 or newer): missing "
            f"{', '.join(missing)}; found: {found}")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _count(connection: apsw.Connection, table: str) -> int:
    row = connection.execute(f"SELECT count(*) FROM {_quoted(table)}").fetchone()  # name from sqlite_schema
    return int(row[0]) if row else 0


def _rows(connection: apsw.Connection, table: str, present: tuple[str, ...], build: Any) -> list:
    columns = [c for c in KNOWN_COLUMNS[table] if c in present and (table, c) not in _NEVER_READ]
    query = f"SELECT {', '.join(_quoted(c) for c in columns)} FROM {_quoted(table)} ORDER BY rowid LIMIT ?"
    return [build(dict(zip(columns, row))) for row in connection.execute(query, (MAX_ROWS,))]


# ----------------------------------------------------------------------------------- cells


class _Cells:
    """Typed reads of one row's cells; a cell of the wrong type is recorded, never guessed."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row
        self.problems: list[str] = []
        self.notes: list[str] = []

    def _bad(self, column: str, expected: str, *, required: bool) -> None:
        value = self.row.get(column)
        kind = "binary data" if isinstance(value, bytes) else type(value).__name__
        (self.problems if required else self.notes).append(f"{column} holds {kind}, not {expected}")

    def integer(self, column: str, *, required: bool = False) -> int | None:
        value = self.row.get(column)
        if value is None:
            return None
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 17:
            return int(value)
        self._bad(column, "an integer", required=required)
        return None

    def number(self, column: str) -> float | None:
        value = self.row.get(column)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if value is not None:
            self._bad(column, "a number", required=False)
        return None

    def text(self, column: str, *, required: bool = False) -> str | None:
        value = self.row.get(column)
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # a text column written as a number by hand: its digits
        self._bad(column, "text", required=required)
        return None

    def json_list(self, column: str, item: str | None = None) -> tuple[str, ...]:
        """A JSON column of strings (``labels``) or of ``{item: str}`` objects (``extra_schedules``)."""
        raw = self.row.get(column)
        if raw is None or raw == "":
            return ()
        if not isinstance(raw, str):
            self._bad(column, "JSON text", required=False)
            return ()
        try:
            value = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            self.notes.append(f"{column} is not valid JSON: ignored")
            return ()
        if value is None:
            return ()
        if not isinstance(value, list):
            self.notes.append(f"{column} is not a JSON list: ignored")
            return ()
        out = []
        for element in value:
            if item is not None and isinstance(element, dict):
                element = element.get(item)
            if isinstance(element, str):
                out.append(element)
            else:
                self.notes.append(f"{column} holds an entry that is not {'text' if item is None else item}: ignored")
        return tuple(out)


def _cron(row: dict[str, Any]) -> QlCron:
    cells = _Cells(row)
    cron_id = cells.integer("id", required=True)
    status = cells.integer("status")
    disabled = cells.integer("isDisabled") == 1 or status == 2  # status 2: the legacy "disabled"
    return QlCron(
        id=-1 if cron_id is None else cron_id,
        name=cells.text("name", required=True),
        command=cells.text("command", required=True),
        schedule=cells.text("schedule", required=True),
        disabled=disabled,
        is_system=cells.integer("isSystem") == 1,
        labels=cells.json_list("labels"),
        extra_schedules=cells.json_list("extra_schedules", "schedule"),
        task_before=cells.text("task_before"),
        task_after=cells.text("task_after"),
        work_dir=cells.text("work_dir"),
        allow_multiple_instances=cells.integer("allow_multiple_instances"),
        sub_id=cells.integer("sub_id"),
        problems=tuple(cells.problems),
        notes=tuple(cells.notes),
    )


def _env(row: dict[str, Any]) -> QlEnv:
    cells = _Cells(row)
    env_id = cells.integer("id", required=True)
    created = row.get("createdAt")
    return QlEnv(
        id=-1 if env_id is None else env_id,
        name=cells.text("name", required=True),
        value=cells.text("value", required=True),
        remarks=cells.text("remarks") or "",
        enabled=cells.integer("status") in (0, None),
        position=cells.number("position"),
        pinned=cells.integer("isPinned") == 1,
        labels=cells.json_list("labels"),
        created_at=created if isinstance(created, str) else "",
        problems=tuple(cells.problems),
    )


#: QingLong's interval units and the duration unit each is written in here.
_INTERVAL_UNITS = {"days": "d", "hours": "h", "minutes": "m", "seconds": "s"}


def _subscription(row: dict[str, Any]) -> QlSubscription:
    cells = _Cells(row)
    subscription_id = cells.integer("id", required=True)
    interval = None
    raw = row.get("interval_schedule")
    if isinstance(raw, str) and raw.strip() not in ("", "null"):
        try:
            value = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            value = None
        unit = value.get("type") if isinstance(value, dict) else None
        count = value.get("value") if isinstance(value, dict) else None
        if unit in _INTERVAL_UNITS and type(count) is int and count >= 1:
            interval = (unit, count)
        else:
            cells.notes.append("interval_schedule is not {type, value}: ignored")
    elif raw is not None and not isinstance(raw, str):
        cells.notes.append("interval_schedule is not JSON text: ignored")
    auto_add, auto_remove = cells.integer("autoAddCron"), cells.integer("autoDelCron")
    return QlSubscription(
        id=-1 if subscription_id is None else subscription_id,
        name=cells.text("name"),
        url=cells.text("url", required=True),
        type=cells.text("type", required=True),
        schedule_type=cells.text("schedule_type"),
        schedule=cells.text("schedule"),
        interval=interval,
        whitelist=cells.text("whitelist"),
        blacklist=cells.text("blacklist"),
        dependences=cells.text("dependences"),
        extensions=cells.text("extensions"),
        branch=cells.text("branch"),
        alias=cells.text("alias"),
        disabled=cells.integer("is_disabled") == 1,
        auto_add=auto_add != 0,
        auto_remove=auto_remove != 0,
        pull_type=cells.text("pull_type"),
        proxy=cells.text("proxy"),
        sub_before=cells.text("sub_before"),
        sub_after=cells.text("sub_after"),
        problems=tuple(cells.problems),
        notes=tuple(cells.notes),
    )


def _time_zone(connection: apsw.Connection, tables: dict[str, tuple[str, ...]]) -> str | None:
    if not {"type", "info"} <= set(tables.get("Auths", ())):
        return None
    for (info,) in connection.execute("SELECT info FROM Auths WHERE type = 'systemConfig' ORDER BY rowid LIMIT 10"):
        if not isinstance(info, str):
            continue
        try:
            value = msgspec.json.decode(info)
        except msgspec.DecodeError:
            continue
        zone = value.get("timezone") if isinstance(value, dict) else None
        if isinstance(zone, str) and 0 < len(zone) <= 64:
            return zone
    return None


# ----------------------------------------------------------------------------------- versions


def schema_version(tables: dict[str, tuple[str, ...]]) -> str:
    """Which QingLong wrote a database, told from its tables and columns (each later version
    adds some: docs/qinglong.md); the text names a version or a range."""

    def has(table: str, *columns: str) -> bool:
        return table in tables and all(c in tables[table] for c in columns)

    if has("Crontabs", "work_dir") or has("Envs", "labels") or "RunningInstances" in tables:
        return "2.21 or newer"
    if has("Crontabs", "log_name") or has("Envs", "isPinned"):
        return "2.20"
    if has("Crontabs", "extra_schedules"):
        return "2.16.3 to 2.19"
    if has("Crontabs", "sub_id"):
        return "2.15.8 to 2.16.2"
    if has("Subscriptions", "autoAddCron"):
        return "2.15.7"
    if has("Subscriptions", "proxy") or has("CrontabViews", "filterRelation"):
        return "2.15.0 to 2.15.6"
    if "CrontabViews" in tables:
        return "2.14"
    if "Subscriptions" in tables:
        return "2.13"
    return "2.11 to 2.12"
