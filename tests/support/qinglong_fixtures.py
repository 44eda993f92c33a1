"""QingLong data folders and ``data.tgz`` backups for the import tests, built as QingLong builds them.

The tables are the ones QingLong's Sequelize models create (``back/data/*.ts`` of whyour/qinglong,
read at the tags named below), in the DDL Sequelize 6 emits for SQLite, column order included:

- ``2.11.0``: a fresh 2.11.0 database (``Crontabs`` unique on ``command`` alone, ``Envs`` without
  a unique constraint; tables Crontabs, Dependences, Apps, Auths, Envs);
- ``2.16.3``: created by 2.12 (composite unique keys), then started by 2.16.3: ``Subscriptions``
  and ``CrontabViews`` created, ``sub_id``, ``extra_schedules``, ``task_before``, ``task_after``
  and the subscription and view columns added by ``ALTER TABLE`` (appended, in QingLong's order);
- ``2.21.0``: a fresh 2.21.0 database (every table and column in model order);
- ``2.21.0-upgraded``: created by 2.11.2 and started by every version up to 2.21.0: the 2.21
  columns appended by ``ALTER TABLE`` after ``createdAt``/``updatedAt`` (so reading by position
  would read the wrong cells).

Rows are the kind a QingLong user has: Chinese names, ``task`` commands, 5- and 6-field crons,
disabled crons, QingLong's own system crons, an old-style ``ql repo`` subscription, a shell
command with QingLong's absolute paths, multi-account ``JD_COOKIE`` envs (one disabled), a
pinned entry, a loader variable a hostile backup could plant. The database is written with apsw
(never the stdlib ``sqlite3`` in this process).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import apsw

VERSIONS = ("2.11.0", "2.16.3", "2.21.0", "2.21.0-upgraded")

_CRONTABS_2_11 = ("`name` VARCHAR(255), `command` VARCHAR(255), `schedule` VARCHAR(255), `timestamp` VARCHAR(255), "
                  "`saved` TINYINT(1), `status` NUMBER, `isSystem` NUMBER, `pid` NUMBER, `isDisabled` NUMBER, "
                  "`isPinned` NUMBER, `log_path` VARCHAR(255), `labels` JSON, `last_running_time` NUMBER, "
                  "`last_execution_time` NUMBER")
_ENVS_2_11 = ("`value` VARCHAR(255), `timestamp` VARCHAR(255), `status` NUMBER, `position` NUMBER, `name` VARCHAR(255), "
              "`remarks` VARCHAR(255)")
_ID = "`id` INTEGER PRIMARY KEY AUTOINCREMENT"
_TIMES = "`createdAt` DATETIME NOT NULL, `updatedAt` DATETIME NOT NULL"
_APPS = (f"CREATE TABLE IF NOT EXISTS `Apps` ({_ID}, `name` VARCHAR(255), `scopes` JSON, `client_id` VARCHAR(255), "
         f"`client_secret` VARCHAR(255), `tokens` JSON, {_TIMES}, UNIQUE (`name`))")
_AUTHS = f"CREATE TABLE IF NOT EXISTS `Auths` ({_ID}, `ip` VARCHAR(255), `type` VARCHAR(255), `info` JSON, {_TIMES})"
_DEPENDENCES = (f"CREATE TABLE IF NOT EXISTS `Dependences` ({_ID}, `name` VARCHAR(255), `type` NUMBER, "
                f"`timestamp` VARCHAR(255), `status` NUMBER, `log` JSON, `remark` VARCHAR(255), {_TIMES})")
_SUBSCRIPTIONS_2_13 = (
    f"CREATE TABLE IF NOT EXISTS `Subscriptions` ({_ID}, `name` VARCHAR(255), `url` VARCHAR(255), "
    "`schedule` VARCHAR(255), `interval_schedule` JSON, `type` VARCHAR(255), `whitelist` VARCHAR(255), "
    "`blacklist` VARCHAR(255), `status` NUMBER, `dependences` VARCHAR(255), `extensions` VARCHAR(255), "
    "`sub_before` VARCHAR(255), `sub_after` VARCHAR(255), `branch` VARCHAR(255), `pull_type` VARCHAR(255), "
    "`pull_option` JSON, `pid` NUMBER, `is_disabled` NUMBER, `log_path` VARCHAR(255), `schedule_type` VARCHAR(255), "
    f"`alias` VARCHAR(255), {_TIMES}, UNIQUE (`name`, `url`, `schedule`, `interval_schedule`), UNIQUE (`alias`))")
_VIEWS_2_14 = (f"CREATE TABLE IF NOT EXISTS `CrontabViews` ({_ID}, `name` VARCHAR(255), `position` NUMBER, "
               f"`isDisabled` NUMBER, `filters` JSON, `sorts` JSON, {_TIMES}, UNIQUE (`name`))")

#: ``ALTER TABLE`` steps QingLong's boot runs (back/loaders/db.ts), in its order, with the version
#: that added each.
_ALTERS = (
    ("2.15.0", "CrontabViews", "filterRelation", "VARCHAR(255)"),
    ("2.15.0", "Subscriptions", "proxy", "VARCHAR(255)"),
    ("2.15.0", "CrontabViews", "type", "NUMBER"),
    ("2.15.7", "Subscriptions", "autoAddCron", "NUMBER"),
    ("2.15.7", "Subscriptions", "autoDelCron", "NUMBER"),
    ("2.15.8", "Crontabs", "sub_id", "NUMBER"),
    ("2.16.3", "Crontabs", "extra_schedules", "JSON"),
    ("2.16.3", "Crontabs", "task_before", "TEXT"),
    ("2.16.3", "Crontabs", "task_after", "TEXT"),
    ("2.20.0", "Crontabs", "log_name", "VARCHAR(255)"),
    ("2.20.0", "Crontabs", "allow_multiple_instances", "NUMBER"),
    ("2.21.0", "Crontabs", "work_dir", "VARCHAR(255)"),
    ("2.20.0", "Envs", "isPinned", "NUMBER"),
    ("2.21.0", "Envs", "labels", "JSON"),
)

#: A fresh 2.21.0 database, as Sequelize 6 creates it from the 2.21.0 models.
_FRESH_2_21 = (
    f"CREATE TABLE IF NOT EXISTS `Crontabs` ({_ID}, {_CRONTABS_2_11.replace('`isPinned` NUMBER, ', '')}, "
    "`sub_id` NUMBER, `extra_schedules` JSON, `task_before` VARCHAR(255), `task_after` VARCHAR(255), "
    "`log_name` VARCHAR(255), `allow_multiple_instances` NUMBER, `work_dir` VARCHAR(255), "
    f"{_TIMES}, UNIQUE (`name`, `command`, `schedule`))",
    _DEPENDENCES, _APPS, _AUTHS,
    f"CREATE TABLE IF NOT EXISTS `Envs` ({_ID}, {_ENVS_2_11}, `isPinned` NUMBER, `labels` JSON, {_TIMES}, "
    "UNIQUE (`value`, `name`))",
    _SUBSCRIPTIONS_2_13.replace(f", {_TIMES}", ", `proxy` VARCHAR(255), `autoAddCron` NUMBER, `autoDelCron` NUMBER, "
                                + _TIMES),
    _VIEWS_2_14.replace(f", {_TIMES}", f", `filterRelation` VARCHAR(255), `type` NUMBER, {_TIMES}"),
    f"CREATE TABLE IF NOT EXISTS `CrontabStats` ({_ID}, `ref_id` NUMBER NOT NULL, `date` VARCHAR(255) NOT NULL, "
    "`run_count` NUMBER DEFAULT 0, `success_count` NUMBER DEFAULT 0, `fail_count` NUMBER DEFAULT 0, "
    f"`total_time` NUMBER DEFAULT 0, `max_time` NUMBER DEFAULT 0, {_TIMES})",
    "CREATE UNIQUE INDEX `crontab_stats_ref_id_date` ON `CrontabStats` (`ref_id`, `date`)",
    f"CREATE TABLE IF NOT EXISTS `RunningInstances` ({_ID}, `cron_id` NUMBER NOT NULL, `pid` NUMBER, "
    "`log_path` VARCHAR(255), `started_at` NUMBER NOT NULL, `finished_at` NUMBER, `status` NUMBER NOT NULL DEFAULT 0, "
    f"`exit_code` NUMBER, {_TIMES})",
)
# The 2.21 model order puts isPinned after isDisabled (the 2.11 model did too): keep it there.
_FRESH_2_21 = (_FRESH_2_21[0].replace("`isDisabled` NUMBER, ", "`isDisabled` NUMBER, `isPinned` NUMBER, "),
               *_FRESH_2_21[1:])


def _ddl(version: str) -> list[str]:
    if version == "2.21.0":
        return list(_FRESH_2_21)
    if version == "2.11.0":
        crons = f"CREATE TABLE IF NOT EXISTS `Crontabs` ({_ID}, {_CRONTABS_2_11}, {_TIMES}, UNIQUE (`command`))"
        envs = f"CREATE TABLE IF NOT EXISTS `Envs` ({_ID}, {_ENVS_2_11}, {_TIMES})"
        return [crons, _DEPENDENCES, _APPS, _AUTHS, envs]
    # Created by 2.11.2/2.12 (composite unique keys), then booted by newer versions.
    crons = f"CREATE TABLE IF NOT EXISTS `Crontabs` ({_ID}, {_CRONTABS_2_11}, {_TIMES}, UNIQUE (`name`, `command`, `schedule`))"
    envs = f"CREATE TABLE IF NOT EXISTS `Envs` ({_ID}, {_ENVS_2_11}, {_TIMES}, UNIQUE (`value`, `name`))"
    statements = [crons, _DEPENDENCES, _APPS, _AUTHS, envs, _SUBSCRIPTIONS_2_13, _VIEWS_2_14]
    last = "2.16.3" if version == "2.16.3" else "2.21.0"
    statements += [f"ALTER TABLE {table} ADD COLUMN {column} {kind}" for since, table, column, kind in _ALTERS
                   if _version_key(since) <= _version_key(last)]
    if last == "2.21.0":
        statements += list(_FRESH_2_21[-3:])  # CrontabStats, its index, RunningInstances: new tables
    return statements


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


_NOW = "2026-07-18 02:27:53.120 +00:00"
_STAMP = "Sat Jul 18 2026 10:27:53 GMT+0800 (China Standard Time)"


def _cron(name: str | None, command: str, schedule: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "command": command, "schedule": schedule, "timestamp": _STAMP, "saved": 1, "status": 1,
            "isSystem": 0, "pid": None, "isDisabled": 0, "isPinned": 0, "log_path": "", "labels": "[]",
            "last_running_time": 0, "last_execution_time": 0, "createdAt": _NOW, "updatedAt": _NOW, **fields}


def realistic_crons(version: str) -> list[dict[str, Any]]:
    """Crons a QingLong user of ``version`` has (columns the version lacks are left out when written).
    A fresh 2.21 database's rows were made by 2.21 (``allow_multiple_instances`` 0, QingLong's
    default since 2.20); an upgraded one's are legacy rows (NULL there)."""
    rows = _realistic_crons()
    if version == "2.21.0":
        rows = [{"allow_multiple_instances": 0, **row} for row in rows]
    return rows


def _realistic_crons() -> list[dict[str, Any]]:
    return [
        _cron("京豆变动通知", "task jd_bean_change.js", "15 8 * * *", labels='["京东","通知"]', log_path="jd_bean_change/2026-07-18-08-15-00-123.log",
              last_running_time=37, last_execution_time=1784333700, pid=48213),
        _cron("东东农场", "task jd_fruit.js", "5 6-18/6 * * *"),
        _cron("签到领现金", "task jd_cash.js", "0 0 0,12 * * *"),  # 6 fields, seconds first
        _cron("京喜工厂", "task jd_dreamFactory.js", "10 * * * *", isDisabled=1),
        _cron("旧的已停用任务", "task jd_old.js", "0 3 * * *", status=2),  # the legacy "disabled"
        _cron("更新面板", "ql update", "23 3 * * *", isSystem=1, isDisabled=1),
        _cron("删除日志", "ql rmlog 7", "30 7 */7 * *", isDisabled=1),
        _cron("拉取faker2", 'ql repo https://github.com/shufflewzc/faker2.git "jd_|jx_" "activity|backUp" '
              '"^jd[^_]|USER|utils" "main"', "0 0-23/6 * * *"),
        _cron("健康种植", "task jd_health_plant.py", "23 11,13,21 * * *"),
        _cron("农场助力", "task shufflewzc_faker2_main/jd_farm_help.js", "25 1,6 * * *"),
        _cron("微信检查", "python3 /ql/scripts/wx_check.py >> /ql/log/wx.log 2>&1", "*/30 * * * *"),
        _cron("工具", "node /ql/data/scripts/tool.js", "0 4 * * 1-5"),
        _cron("一次性任务", "task once_tool.js", "@once"),
        _cron("极速版签到", "task jd_speed_sign.js", "0 7 * * *", extra_schedules='[{"schedule":"30 21 * * *"}]'),
        _cron("我是大老板", "task jd_wsdlb.js", "5 0-23/6 * * *", task_before="export JD_WSDLB_NUM=3"),
        _cron("工作日15号", "task jd_w15.js", "0 0 15W * *"),  # cron-parser takes W; this build refuses it
        _cron("老路径签到", "task /ql/scripts/jd_bean_sign.js", "3 0,18 * * *"),
        _cron("并行任务", "task jd_parallel.js", "*/10 * * * *", allow_multiple_instances=1),
        _cron("在子目录运行", "task jd_sub.js", "40 9 * * *", work_dir="shufflewzc_faker2_main"),
        _cron(None, "task jd_noname.js", "45 1 * * *"),
    ]


def _env(name: str, value: str, position: float | None, **fields: Any) -> dict[str, Any]:
    return {"name": name, "value": value, "timestamp": _STAMP, "status": 0, "position": position, "remarks": "",
            "createdAt": _NOW, "updatedAt": _NOW, **fields}


def realistic_envs(version: str) -> list[dict[str, Any]]:
    return [
        _env("JD_COOKIE", "pt_key=AAJmX1;pt_pin=jd_用户一;", 4.5e15, remarks="大号"),
        _env("JD_COOKIE", "pt_key=AAJmX2;pt_pin=jd_user2;", 4.49999e15, remarks="小号"),
        _env("JD_COOKIE", "pt_key=AAJmX3;pt_pin=jd_user3;", 4.49998e15, status=1, remarks="已过期"),
        _env("JD_COOKIE", "pt_key=AAJmX0;pt_pin=jd_pinned;", 1.0, isPinned=1),  # pinned: first despite its position
        _env("TG_BOT_TOKEN", "123456:ABC-def_ghi", 4.4e15),
        _env("TG_USER_ID", "987654321", 4.3e15),
        _env("JD_DEBUG", "false", None),
        _env("NODE_OPTIONS", "--require /tmp/evil.js", 4.2e15),
        _env("jd-cookie", "bad name, set through QingLong's PUT", 4.1e15),
        _env("PUSH_PLUS_TOKEN", "pp_token_value", 4.0e15, status=1),
        _env("QUOTED", "it's \"quoted\" & spaced 中文", 3.9e15),
    ]


def write_database(path: Path, version: str, crons: Iterable[dict[str, Any]] | None = None,
                   envs: Iterable[dict[str, Any]] | None = None, *, time_zone: str | None = None,
                   extra_sql: Iterable[str] = ()) -> Path:
    """A QingLong database of ``version`` at ``path`` with ``crons`` and ``envs`` (default: the
    realistic ones), plus rows in its other tables; ``time_zone`` goes to its systemConfig
    (2.18.2+)."""
    if version not in VERSIONS:
        raise ValueError(f"unknown fixture version {version!r}; have {VERSIONS}")
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = apsw.Connection(str(path))
    try:
        for statement in _ddl(version):
            connection.execute(statement)
        columns = {table: [row[1] for row in connection.execute(f"PRAGMA table_info(`{table}`)")]
                   for table in ("Crontabs", "Envs")}
        with connection:
            for row in realistic_crons(version) if crons is None else crons:
                _insert(connection, "Crontabs", row, columns["Crontabs"])
            for row in realistic_envs(version) if envs is None else envs:
                _insert(connection, "Envs", row, columns["Envs"])
            _other_rows(connection, version, time_zone)
            for statement in extra_sql:
                connection.execute(statement)
    finally:
        connection.close()
    return path


def _insert(connection: apsw.Connection, table: str, row: dict[str, Any], columns: list[str]) -> None:
    present = {k: v for k, v in row.items() if k in columns}
    names = ", ".join(f"`{k}`" for k in present)
    marks = ", ".join("?" for _ in present)
    connection.execute(f"INSERT INTO `{table}` ({names}) VALUES ({marks})", tuple(present.values()))


def _other_rows(connection: apsw.Connection, version: str, time_zone: str | None) -> None:
    connection.execute("INSERT INTO Apps (name, scopes, client_id, client_secret, tokens, createdAt, updatedAt) "
                       "VALUES ('system', '[\"crons\",\"system\"]', 'Ab_1cD2eF3gH', 'sEcReT-0123456789_abcdefg', '[]', ?, ?)",
                       (_NOW, _NOW))
    connection.execute("INSERT INTO Auths (type, info, createdAt, updatedAt) VALUES ('authConfig', ?, ?, ?)",
                       (json.dumps({"username": "admin", "password": "plain-password"}), _NOW, _NOW))
    if time_zone is not None:
        connection.execute("INSERT INTO Auths (type, info, createdAt, updatedAt) VALUES ('systemConfig', ?, ?, ?)",
                           (json.dumps({"lang": "zh", "timezone": time_zone}), _NOW, _NOW))
    connection.execute("INSERT INTO Dependences (name, type, status, log, remark, createdAt, updatedAt) "
                       "VALUES ('axios', 0, 1, '[]', '', ?, ?)", (_NOW, _NOW))
    if version != "2.11.0":
        connection.execute(
            "INSERT INTO Subscriptions (name, url, schedule, type, whitelist, blacklist, status, dependences, branch, "
            "schedule_type, alias, createdAt, updatedAt) VALUES ('faker2', 'https://github.com/shufflewzc/faker2.git', "
            "'0 0-23/6 * * *', 'public-repo', 'jd_|jx_', 'activity|backUp', 1, '^jd[^_]|USER|utils', 'main', "
            "'crontab', 'shufflewzc_faker2_main', ?, ?)", (_NOW, _NOW))


#: Scripts of the fixture data folder: what the crons above name, with real-looking headers.
SCRIPTS = {
    "jd_bean_change.js": "/*\n京豆变动通知\n15 8 * * * jd_bean_change.js\n*/\nconst $ = new Env('京豆变动通知');\n",
    "jd_fruit.js": "// cron: 5 6-18/6 * * *\nconst $ = new Env('东东农场');\n",
    "jd_cash.js": "const $ = new Env('签到领现金');\n",
    "jd_health_plant.py": "# -*- coding: utf-8 -*-\n'''\ncron: 23 11,13,21 * * * jd_health_plant.py\nnew Env('健康种植');\n'''\n",
    "shufflewzc_faker2_main/jd_farm_help.js": "/*\n25 1,6 * * * jd_farm_help.js\n*/\nconst $ = new Env('农场助力');\n",
    "shufflewzc_faker2_main/sendNotify.js": "module.exports = {}\n",
    "wx_check.py": "print('ok')\n",
    "sendNotify.js": "module.exports = {}\n",
    "notify.py": "def send(title, content): pass\n",
}


def make_data_folder(root: Path, version: str = "2.21.0", *, scripts: dict[str, str | bytes] | None = None,
                     **database: Any) -> Path:
    """A QingLong data folder (``root``/data: ``db/database.sqlite``, ``scripts/``, ``config/``,
    ``log/``) and its path; ``database`` goes to :func:`write_database`."""
    data = root / "data"
    write_database(data / "db" / "database.sqlite", version, **database)
    for relative, content in (SCRIPTS if scripts is None else scripts).items():
        target = data / "scripts" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
    (data / "config").mkdir(parents=True, exist_ok=True)
    (data / "config" / "config.sh").write_text("export RandomDelay=\"300\"\nexport TG_BOT_TOKEN=\"\"\n")
    (data / "config" / "task_before.sh").write_text("#!/usr/bin/env bash\n")
    (data / "log" / "jd_bean_change").mkdir(parents=True, exist_ok=True)
    (data / "log" / "jd_bean_change" / "2026-07-18-08-15-00-123.log").write_text("## 开始执行...\n")
    return data


def make_data_tgz(data: Path, archive: Path, *, extra: Iterable[tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]] = (),
                  prefix: str = "data") -> Path:
    """``archive``: the data folder ``data`` as QingLong's backup writes it (members ``data/...``),
    plus ``extra`` members (a TarInfo, or a TarInfo with its bytes) for hostile cases."""
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(data.rglob("*")):
            name = f"{prefix}/{path.relative_to(data).as_posix()}" if prefix else path.relative_to(data).as_posix()
            tar.add(path, arcname=name, recursive=False)
        for member in extra:
            if isinstance(member, tuple):
                info, content = member
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
            else:
                tar.addfile(member)
    return archive


def tar_member(name: str, *, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = mode
    return info


def scale_rows(count_crons: int, count_envs: int, corpus: list[tuple[str, str, str]]) -> tuple[list[dict], list[dict]]:
    """``count_crons`` crons (names and expressions from ``corpus``: (script, name, expression)
    rows of real headers) and ``count_envs`` envs, 1 in 10 crons disabled, envs in 20 names."""
    crons = []
    for index in range(count_crons):
        script, name, expression = corpus[index % len(corpus)]
        crons.append(_cron(f"{name} {index}", f"task {script}", expression, isDisabled=int(index % 10 == 0)))
    envs = [_env("JD_COOKIE" if index % 5 == 0 else f"VAR_{index % 20}", f"pt_key=K{index:04d};pt_pin=用户{index};",
                 4.5e15 - index * 1e10, status=int(index % 7 == 0)) for index in range(count_envs)]
    return crons, envs


def os_mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o7777
