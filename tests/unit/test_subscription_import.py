"""QingLong's subscriptions in an import (edge_runtime/qinglong/import_subscriptions.py): its
``Subscriptions`` rows (their credentials never read) and its old-style ``ql repo``/``ql raw``
crons become subscriptions, and a first pull takes over the crons the import brought for their
folder instead of making them twice."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import msgspec
import pytest

from edge_runtime.cli.main import main
from edge_runtime.contract.subscriptions import SubscriptionKind
from edge_runtime.local.database import open_database
from edge_runtime.local.store import LocalStore
from edge_runtime.qinglong.import_plan import Action, ImportPlan
from edge_runtime.qinglong.import_subscriptions import plan_subscriptions
from edge_runtime.qinglong.sqlite_reader import QlCron, QlSubscription, read_database
from edge_runtime.qinglong.subscription_pull import pull
from tests.support.git_sources import Repo
from tests.support.qinglong_fixtures import make_data_folder, write_database

PULL = ["edge-runtime", "--db", "/x.db", "subscription", "pull"]
NOW = "2026-07-18 02:27:53.120 +00:00"


def _plan(rows: tuple[QlSubscription, ...] = (), crons: list[QlCron] | None = None, *,
          here: dict[str, str] | None = None, pull_command: list[str] | str = PULL) -> ImportPlan:
    plan = ImportPlan(where="x", layout="l", version="2.21", scripts_dir="/s", time_zone="CST-8", zone_note="n")
    plan_subscriptions(plan, rows, crons or [], here=here or {}, pull_command=pull_command)
    return plan


def _row(**fields: object) -> QlSubscription:
    base: dict[str, object] = dict(id=1, name="faker2", url="https://github.com/shufflewzc/faker2.git",
                                   type="public-repo", schedule_type="crontab", schedule="0 0-23/6 * * *",
                                   whitelist="jd_|jx_", blacklist="activity|backUp", dependences="utils",
                                   branch="main", alias="shufflewzc_faker2_main")
    return QlSubscription(**{**base, **fields})


def test_a_subscription_row_becomes_a_subscription_with_qinglongs_fields() -> None:
    every6h = _row(id=2, alias="every6h", schedule_type="interval", interval=("hours", 6), disabled=True,
                   auto_add=False)
    plan = _plan((_row(), every6h))
    [(first, one), (second, two)] = plan.subscriptions
    assert (one.kind, one.folder, one.branch, one.whitelist, one.blacklist, one.dependence, one.expression,
            one.auto_add, one.auto_remove, one.paused) == (
        SubscriptionKind.GIT, "shufflewzc_faker2_main", "main", "jd_|jx_", "activity|backUp", "utils",
        "0 0-23/6 * * *", True, True, False)
    assert one.pull_command == PULL and one.scripts_dir == "/s"
    assert any("auto-add on, as in QingLong" in note for note in first.notes)
    assert (two.expression, two.paused, two.auto_add) == ("@every 6h", True, False)
    assert second.notes[0] == "its pull schedule is paused: disabled in QingLong"


@pytest.mark.parametrize(("fields", "reason"), [
    ({"type": "private-repo"}, "a private repository"),
    ({"url": "git@github.com:a/b.git"}, "pulls https://"),
    ({"url": "https://u:p@github.com/a/b.git"}, "user name or password"),
    ({"whitelist": "jd_(["}, "Python's re does not"),
    ({"schedule": "61 * * * *"}, "a subscription cannot express it"),
    ({"problems": ("url holds binary data, not text",)}, "its cells cannot be read"),
])
def test_what_cannot_be_a_subscription_is_skipped_with_the_reason(fields: dict[str, object], reason: str) -> None:
    [item] = _plan((_row(**fields),)).items
    assert item.action is Action.SKIP and reason in item.reason


def test_old_style_crons_become_subscriptions_in_qinglongs_argument_order() -> None:
    crons = [QlCron(id=7, name="拉faker", schedule="5 */4 * * *", disabled=True,
                    command="ql repo https://github.com/a/b.git 'jd_|jx_' activity utils main 'js py' '' false"),
             QlCron(id=8, name="raw", schedule="0 1 * * *", command="ql raw https://x.example/o/r/main/jd_x.js")]
    plan = _plan(crons=crons)
    [(_, repo), (_, raw)] = plan.subscriptions
    assert (repo.url, repo.whitelist, repo.blacklist, repo.dependence, repo.branch, repo.extensions, repo.auto_add,
            repo.auto_remove, repo.paused, repo.folder, repo.expression) == (
        "https://github.com/a/b.git", "jd_|jx_", "activity", "utils", "main", ["js", "py"], False, True, True,
        "a_b_main", "5 */4 * * *")
    assert (raw.kind, raw.folder, raw.url) == (SubscriptionKind.FILE, "main_jd_x", "https://x.example/o/r/main/jd_x.js")


def test_here_already_another_urls_folder_and_a_second_row_for_one_folder() -> None:
    url = "https://github.com/shufflewzc/faker2.git"
    assert _plan((_row(),), here={"shufflewzc_faker2_main": url}).items[0].action is Action.EXISTS
    taken = _plan((_row(),), here={"shufflewzc_faker2_main": "https://other/x.git"}).items[0]
    assert taken.action is Action.SKIP and "not replaced" in taken.reason
    twice = _plan((_row(), _row(id=2, name="again")))
    assert [i.action for i in twice.items] == [Action.CREATE, Action.SKIP]
    no_program = _plan((_row(),), pull_command="refusing to schedule pulls by /tmp/x").items[0]
    assert no_program.action is Action.SKIP and no_program.reason.startswith("refusing")


def test_the_reader_never_reads_a_private_repositorys_credentials(tmp_path: Path) -> None:
    secret = "-----BEGIN OPENSSH PRIVATE KEY-----secret"
    path = write_database(tmp_path / "db.sqlite", "2.21.0", extra_sql=[
        "INSERT INTO Subscriptions (name, url, type, pull_type, pull_option, schedule_type, interval_schedule, "
        f"alias, autoAddCron, createdAt, updatedAt) VALUES ('p', 'git@x:a/b.git', 'private-repo', 'ssh-key', "
        f"'{{\"private_key\": \"{secret}\"}}', 'interval', '{{\"type\":\"days\",\"value\":1}}', 'a_b', 0, "
        f"'{NOW}', '{NOW}')"])
    database = read_database(path)
    private = next(s for s in database.subscriptions if s.type == "private-repo")
    assert (private.interval, private.auto_add, private.auto_remove, private.pull_type) == (("days", 1), False, True,
                                                                                          "ssh-key")
    assert secret not in json.dumps(msgspec.to_builtins(database), ensure_ascii=False)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_first_pull_takes_over_the_crons_the_import_brought(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    repo = Repo(tmp_path / "src")
    repo.commit({"jd_a.js": "/*\n15 8 * * * jd_a.js\n*/\nconst $ = new Env('京豆');\n"})
    crons = [{"name": "京豆", "command": "task mine_src/jd_a.js", "schedule": "15 8 * * *", "sub_id": 9,
              "createdAt": NOW, "updatedAt": NOW}]
    data = make_data_folder(tmp_path / "ql", crons=crons, envs=[], scripts={}, extra_sql=[
        "INSERT INTO Subscriptions (id, name, url, schedule, type, schedule_type, alias, createdAt, updatedAt) "
        f"VALUES (9, 'mine', '{repo.url}', '0 3 * * *', 'public-repo', 'crontab', 'mine_src', '{NOW}', '{NOW}')"])
    db = tmp_path / "state" / "e.db"
    assert main(["--db", str(db), "import", "qinglong", str(data), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"]["created"] == {"schedule": 1, "subscription": 2}  # mine, and the fixture's faker2
    with open_database(db, create=False) as database:
        store = LocalStore(database, str(db), database.clock)
        mine = next(s for s in store.subscriptions.list() if s.folder == "mine_src")
        scripts = tmp_path / "state" / "scripts"
        fd = os.open(scripts, os.O_RDONLY | os.O_DIRECTORY)
        try:
            outcome = pull(store, mine, fd, say=lambda _: None)
        finally:
            os.close(fd)
        assert [c.kind.value for c in outcome.changes] == ["adopt"]
        tasks = [r for r in store.schedules.list() if r.command[0] == "task"]
        assert [(r.name, r.command) for r in tasks] == [("京豆", ["task", "mine_src/jd_a.js"])]
