"""The import plan's rules (edge_runtime/qinglong/import_plan.py): how a QingLong cron becomes a
schedule or why it does not (system crons, old-style subscriptions, @once, what the cron parser
refuses), its command as argv, overlap, pause and zone, what is "here already" (identity), and
how envs become env entries (QingLong's order, what an entry carries, secrets, names never imported)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from edge_runtime.contract.env_entries import NewEnvEntry
from edge_runtime.contract.time_zones import InvalidTimeZoneError
from edge_runtime.qinglong import import_plan
from edge_runtime.qinglong.import_plan import (
    Action, EnvEntries, Existing, ImportPlan, choose_zone, plan_crons, qinglong_command, schedule_identity,
    system_cron, task_script,
)
from edge_runtime.qinglong.sqlite_reader import QlCron, QlEnv

SCRIPTS = "/srv/edge/scripts"


@pytest.mark.parametrize(("command", "argv", "cwd"), [
    ("task jd_bean.js", ["task", "jd_bean.js"], None),
    ("  task dir/x.py now  ", ["task", "dir/x.py", "now"], None),
    ("task jd_x.js desi JD_COOKIE 1 3", ["task", "jd_x.js", "desi", "JD_COOKIE", "1", "3"], None),
    ("task -m 30m jd_x.js", ["task", "-m", "30m", "jd_x.js"], None),
    ("jd_bean.js", ["task", "jd_bean.js"], None),  # QingLong runs it as `task jd_bean.js`
    ("task /ql/scripts/jd_old.js", ["task", "jd_old.js"], None),  # before 2.11.3 QingLong wrote absolute paths
    ("task /ql/data/scripts/a/b.js", ["task", "a/b.js"], None),
    ("node /ql/data/scripts/tool.js --flag", ["node", f"{SCRIPTS}/tool.js", "--flag"], SCRIPTS),
    ("python3 'my script.py'", ["python3", "my script.py"], SCRIPTS),
    ("python3 /ql/scripts/x.py >> /ql/log/x.log 2>&1", ["sh", "-c", f"python3 {SCRIPTS}/x.py >> /ql/log/x.log 2>&1"],
     SCRIPTS),
    ("cd /tmp && task a.js", ["sh", "-c", "cd /tmp && task a.js"], SCRIPTS),
    ("A=1 task a.js", ["sh", "-c", "A=1 task a.js"], SCRIPTS),
    ("echo $HOME", ["sh", "-c", "echo $HOME"], SCRIPTS),
])
def test_a_command_runs_here_as_qinglong_ran_it(command: str, argv: list[str], cwd: str | None) -> None:
    converted = qinglong_command(command, SCRIPTS)
    assert not isinstance(converted, str), converted
    assert converted[:2] == (argv, cwd)


def test_commands_that_cannot_be_carried_say_why() -> None:
    assert qinglong_command("   ", SCRIPTS) == "its command is empty"
    assert "old-style subscription" in qinglong_command("ql repo https://x/y.git jd_", SCRIPTS)
    assert "ql raw" in qinglong_command("ql raw https://x/y.js", SCRIPTS)
    assert "QingLong's own tool" in qinglong_command("ql something", SCRIPTS)
    for command in ("python3 /ql/scripts/x.py >> /ql/log/x.log", "task /ql/config/x.sh", "node /ql/repo/x.js"):
        _, _, notes = qinglong_command(command, SCRIPTS)
        assert any("still names a path under /ql/" in note for note in notes), command
    _, _, notes = qinglong_command("task /ql/scripts/x.js", SCRIPTS)
    assert not any("still names" in note for note in notes)


@pytest.mark.parametrize(("command", "is_system"), [
    ("ql update", True), ("ql rmlog 7", True), ("  ql bot", True), ("ql extra", True), ("git_pull", True),
    ("sleep 12 && git_pull >> $QL_DIR/log/git_pull.log 2>&1", True), ("diy whyour hundun", True),
    ("export_sharecodes", True), ("rebuild >> x 2>&1", True), ("rm_log >/dev/null 2>&1", True),
    ("js resetpwd", True), ("js runall", True),
    ("task jd_bean.js", False), ("ql repo https://x", False), ("ql updater", False), ("rebuilder.sh", False),
])
def test_qinglongs_own_crons_are_recognised(command: str, is_system: bool) -> None:
    assert system_cron(QlCron(id=1, command=command)) is is_system
    assert system_cron(QlCron(id=1, command="task x.js", is_system=True))


def test_the_script_of_a_task_command() -> None:
    assert task_script(["task", "-m", "1h", "-l", "a/b.js", "now"]) == "a/b.js"
    assert task_script(["node", "x.js"]) is None


def _plan(existing_schedules=frozenset(), scripts=None) -> tuple[ImportPlan, Existing]:
    plan = ImportPlan(where="x", layout="l", version="2.21", scripts_dir=SCRIPTS, time_zone="CST-8", zone_note="n")
    here = dict(scripts or {})
    return plan, Existing(schedules=existing_schedules, script=lambda path: here.get(path))


def test_a_cron_becomes_a_schedule_paused_when_disabled_with_qinglongs_overlap() -> None:
    plan, existing = _plan()
    plan_crons(plan, [
        QlCron(id=1, name="京豆", command="task jd_bean.js", schedule="0 0 8 * * *", allow_multiple_instances=0),
        QlCron(id=2, name="停用", command="task jd_off.js", schedule="15 8 * * *", disabled=True),
        QlCron(id=3, name="并行", command="task jd_p.js", schedule="*/5 * * * *", allow_multiple_instances=1),
        QlCron(id=4, name="开机", command="task boot.js", schedule="@boot"),
    ], existing, {"jd_bean.js", "jd_off.js", "jd_p.js", "boot.js"})
    assert [item.action for item in plan.items] == [Action.CREATE] * 4
    commands = [command for _, command in plan.schedules]
    assert [(c.name, c.expression, c.argv, c.paused, c.overlap.value, c.time_zone) for c in commands] == [
        ("京豆", "0 0 8 * * *", ["task", "jd_bean.js"], False, "replace", "CST-8"),
        ("停用", "15 8 * * *", ["task", "jd_off.js"], True, "skip", "CST-8"),
        ("并行", "*/5 * * * *", ["task", "jd_p.js"], False, "skip", "CST-8"),
        ("开机", "@boot", ["task", "boot.js"], False, "skip", "CST-8"),
    ]
    assert plan.items[1].notes[0] == "paused: disabled in QingLong"
    assert any("overlap" in note for note in plan.items[2].notes)
    assert plan.items[0].detail == {"name": "京豆", "expression": "0 8 * * *", "command": ["task", "jd_bean.js"],
                                    "paused": False, "overlap": "replace", "timeZone": "CST-8"}


def test_crons_that_do_not_become_schedules_say_why() -> None:
    plan, existing = _plan()
    plan_crons(plan, [
        QlCron(id=1, name="更新面板", command="ql update", schedule="23 3 * * *", is_system=True),
        QlCron(id=2, name="一次", command="task once.js", schedule="@once"),
        QlCron(id=3, name="W", command="task w.js", schedule="0 0 15W * *"),
        QlCron(id=4, name="坏", command="task b.js", schedule="0 0 31 2 *"),
        QlCron(id=5, problems=("command holds binary data, not text",)),
        QlCron(id=6, name="订阅", command="ql repo https://github.com/x/y.git", schedule="0 0 * * *"),
    ], existing, set())
    reasons = [(item.action, item.reason) for item in plan.items]
    assert all(action is Action.SKIP for action, _ in reasons) and plan.schedules == []
    assert reasons[0][1] == "QingLong's own system cron: not a task of yours"
    assert reasons[1][1].startswith("@once: QingLong runs it only when started by hand")
    assert reasons[2][1].startswith("a schedule cannot express it: invalid schedule expression '0 0 15W * *'")
    assert reasons[3][1].startswith("a schedule cannot express it:") and "never" in reasons[3][1]
    assert reasons[4][1] == "its cells cannot be read: command holds binary data, not text"
    assert "old-style subscription" in reasons[5][1]


def test_extra_schedules_become_schedules_and_what_is_not_carried_is_said() -> None:
    plan, existing = _plan()
    plan_crons(plan, [QlCron(id=7, name="签到", command="task s.js", schedule="0 7 * * *",
                             extra_schedules=("30 21 * * *",), labels=("京东",), task_before="export A=1",
                             work_dir="sub", sub_id=3)], existing, set())
    assert [item.source for item in plan.items] == ["Crontabs id 7", "Crontabs id 7, extra schedule 1"]
    assert [c.expression for _, c in plan.schedules] == ["0 7 * * *", "30 21 * * *"]
    assert [c.labels for _, c in plan.schedules] == [["京东"], ["京东"]]  # carried onto each schedule
    notes = plan.items[0].notes
    assert not any("labels" in note for note in notes)
    assert "task_before not carried: export A=1" in notes and "work_dir not carried: sub" in notes
    assert any("subscription 3" in note for note in notes)
    assert "its script s.js is neither in the backup's scripts/ nor in the scripts directory" in notes


def test_labels_a_schedule_cannot_hold_are_said_and_the_schedule_still_comes() -> None:
    plan, existing = _plan()
    plan_crons(plan, [QlCron(id=8, name="多标签", command="task m.js", schedule="0 8 * * *",
                             labels=tuple(f"l{i}" for i in range(40)))], existing, set())
    (row,) = plan.items
    assert row.action.value == "create" and plan.schedules[0][1].labels is msgspec.UNSET
    assert any(note.startswith("labels not carried (a schedule has at most") for note in row.notes)


def test_a_schedule_here_already_or_twice_in_the_data_is_not_created_again() -> None:
    here = frozenset({schedule_identity("京豆", ["task", "jd_bean.js"], "15 8 * * *")})
    plan, existing = _plan(here)
    plan_crons(plan, [
        QlCron(id=1, name="京豆", command="task jd_bean.js", schedule="15   8 * * *"),  # the same, canonically
        QlCron(id=2, name="京豆", command="task jd_bean.js", schedule="0 9 * * *"),
        QlCron(id=3, name="京豆", command=" task  jd_bean.js ", schedule="0 9 * * *"),  # 2.11.0 kept no unique key
        QlCron(id=4, name="京豆 2", command="task jd_bean.js", schedule="15 8 * * *"),  # another name: another one
    ], existing, {"jd_bean.js"})
    assert [(item.action, item.reason[:20]) for item in plan.items] == [
        (Action.EXISTS, "a schedule with this"), (Action.CREATE, ""), (Action.SKIP, "the same schedule as"),
        (Action.CREATE, "")]
    assert "Crontabs id 2" in plan.items[2].reason


def _env(id_: int, name: str, value: str, *, enabled: bool = True, position: float | None = None,
         pinned: bool = False, remarks: str = "") -> QlEnv:
    return QlEnv(id=id_, name=name, value=value, enabled=enabled, position=position, pinned=pinned, remarks=remarks,
                 created_at=f"2026-01-0{id_ % 9 + 1}")


class _Entries:
    """A store's env entries as the import target asks them: exact matches, and adds."""

    def __init__(self, here: dict[str, list[str]]) -> None:
        self.here = here
        self.added: list[NewEnvEntry] = []

    def list(self, *, name: str, value: str) -> list[Any]:
        return [SimpleNamespace(id=7)] if value in self.here.get(name, ()) else []

    def add(self, entries: list[NewEnvEntry]) -> None:
        self.added.extend(entries)


def test_envs_become_entries_in_qinglongs_order_with_what_they_carry() -> None:
    entries = _Entries({"HERE": ["same"], "OTHER": ["mine"]})
    target = EnvEntries(entries)
    rows = target.plan([
        _env(1, "JD_COOKIE", "pt_key=a;pt_pin=1;", position=3.0, remarks="大号"),
        _env(2, "JD_COOKIE", "pt_key=b;pt_pin=2;", position=2.0),
        _env(3, "JD_COOKIE", "pt_key=c;pt_pin=3;", position=1.0, enabled=False),
        _env(4, "JD_COOKIE", "pt_key=p;pt_pin=4;", position=None, pinned=True),
        _env(5, "HERE", "same"), _env(6, "OTHER", "theirs"), _env(7, "LD_PRELOAD", "/tmp/x.so"),
        _env(8, "bad-name", "v"), _env(10, "BIG", "x" * 140_000),
        QlEnv(id=11, problems=("value holds binary data, not text",)),
        _env(12, "DEBUG", "false"), _env(13, "PUSH_KEY", "abc"), _env(14, "DEBUG", "false"),
    ])
    by_source = {item.source: (item, payload) for item, payload in rows}
    cookies = [by_source[f"Envs id {i}"] for i in (4, 1, 2, 3)]
    assert [item.source for item, _ in rows][:4] == ["Envs id 4", "Envs id 1", "Envs id 2", "Envs id 3"]  # pinned first
    assert [p.value for _, p in cookies] == ["pt_key=p;pt_pin=4;", "pt_key=a;pt_pin=1;", "pt_key=b;pt_pin=2;",
                                             "pt_key=c;pt_pin=3;"]
    assert all(p.secret and p.name == "JD_COOKIE" for _, p in cookies)
    assert [p.enabled for _, p in cookies] == [True, True, True, False]  # a disabled entry comes in disabled
    assert cookies[0][1].pinned and cookies[1][1].remarks == "大号"
    assert cookies[0][0].summary == "JD_COOKIE (enabled, pinned, secret)"
    assert all("pt_key" not in item.summary and "pt_key" not in repr(item.detail) for item, _ in cookies)
    assert by_source["Envs id 5"][0].action is Action.EXISTS and by_source["Envs id 5"][0].reason == "here already (entry 7)"
    assert by_source["Envs id 6"][0].action is Action.CREATE  # another account of OTHER: added beside "mine"
    assert "never imported from a backup" in by_source["Envs id 7"][0].reason
    assert by_source["Envs id 8"][0].reason.startswith("not a variable name")
    assert "MAX_ARG_STRLEN" in by_source["Envs id 10"][0].reason
    assert by_source["Envs id 11"][0].reason == "its cells cannot be read: value holds binary data, not text"
    assert by_source["Envs id 12"][1] == NewEnvEntry(name="DEBUG", value="false")
    assert by_source["Envs id 14"][0].reason == "the same account as Envs id 12"
    assert by_source["Envs id 13"][0].reason.startswith("its name marks a secret, and its value has 3 characters, too few")
    created = [payload for item, payload in rows if item.action is Action.CREATE]
    assert sorted(p.name for p in created) == ["DEBUG"] + ["JD_COOKIE"] * 4 + ["OTHER"]
    target.apply(created[0])
    assert entries.added == [created[0]]


def test_a_dry_run_without_a_database_finds_nothing_here() -> None:
    rows = EnvEntries(None).plan([_env(1, "DEBUG", "false")])
    assert [(item.action, payload) for item, payload in rows] == [(Action.CREATE, NewEnvEntry(name="DEBUG", value="false"))]


@pytest.mark.parametrize(("name", "secret"), [("JD_COOKIE", True), ("TG_BOT_TOKEN", True), ("PUSH_KEY", True),
                                              ("SMTP_PASSWORD", True), ("elmck", True), ("JD_DEBUG", False),
                                              ("TG_USER_ID", False)])
def test_credential_names_are_stored_as_secrets(name: str, secret: bool) -> None:
    assert bool(import_plan.SECRET_NAME.search(name)) is secret


def test_the_zone_is_qinglongs_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    assert choose_zone("CET-1CEST,M3.5.0,M10.5.0/3", "Asia/Shanghai", "UTC0")[0] == "CET-1CEST,M3.5.0,M10.5.0/3"
    with pytest.raises(InvalidTimeZoneError):
        choose_zone("not a zone!", None, "UTC0")
    zone, why = choose_zone(None, None, "UTC0")
    assert zone in ("Asia/Shanghai", "CST-8") and "its image runs in Asia/Shanghai" in why

    def no_zoneinfo(text: str):
        if "/" in text:
            raise InvalidTimeZoneError("no zoneinfo")
    monkeypatch.setattr(import_plan, "time_zone", no_zoneinfo)
    assert choose_zone(None, "Asia/Shanghai", "UTC0")[0] == "CST-8"  # a router without zoneinfo
    zone, why = choose_zone(None, "Europe/Berlin", "UTC0")
    assert zone == "UTC0" and "give --tz" in why
