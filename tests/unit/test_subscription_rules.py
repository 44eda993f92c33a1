"""The subscription rules of the contract (edge_runtime/contract/subscriptions.py): which sources,
folders, branches and patterns a subscription takes, and what a pull changes in the schedules
(``plan_script_changes``, decided once, stored by the store)."""

from __future__ import annotations

import msgspec
import pytest

from edge_runtime.contract.cron import InvalidCronExpressionError
from edge_runtime.contract.subscriptions import (
    AddSubscriptionCommand,
    ChangeKind,
    FoundScript,
    InvalidSubscriptionError,
    SubscriptionKind,
    SubscriptionScript,
    branch_problem,
    folder_problem,
    plan_script_changes,
    url_problem,
)

GIT, FILE = SubscriptionKind.GIT, SubscriptionKind.FILE


@pytest.mark.parametrize(("kind", "url", "wanted"), [
    (GIT, "https://github.com/a/b.git", None),
    (GIT, "git://127.0.0.1:9418/r", None),
    (GIT, "file:///srv/repo.git", None),
    (GIT, "ssh://git@github.com/a/b.git", "pulls https://"),
    (GIT, "git@github.com:a/b.git", "pulls https://"),
    (GIT, "ext::evil-command", "pulls https://"),
    (GIT, "https://user:pass@github.com/a/b.git", "user name or password"),
    (GIT, "file://relative/path", "absolute path"),
    (GIT, "https:///a/b", "names no host"),
    (GIT, "https://github.com/a b", "blank or a control character"),
    (GIT, "https://github.com/a/\x1b[2J", "blank or a control character"),
    (GIT, "https://例子.测试/a/b.git", "must be ASCII"),
    (FILE, "https://raw.githubusercontent.com/o/r/main/jd_x.js", None),
    (FILE, "file:///etc/passwd", "pulls https://"),
])
def test_the_urls_a_subscription_pulls(kind: SubscriptionKind, url: str, wanted: str | None) -> None:
    problem = url_problem(kind, url)
    assert problem is None if wanted is None else wanted in problem


@pytest.mark.parametrize(("folder", "ok"), [
    ("shufflewzc_faker2_main", True), ("a.b-c", True), ("..", False), (".hidden", False), ("-x", False),
    ("a/b", False), ("", False), ("x" * 65, False), ("中文", False)])
def test_a_folder_is_one_plain_name(folder: str, ok: bool) -> None:
    assert (folder_problem(folder) is None) is ok


@pytest.mark.parametrize(("branch", "ok"), [
    ("main", True), ("release/v2", True), ("v1.2", True), ("--upload-pack=touch /tmp/x", False), ("-b", False),
    ("a..b", False), ("a/", False), ("x.lock", False), ("a b", False), ("a~1", False), ("/a", False)])
def test_a_branch_is_never_an_option_nor_a_range(branch: str, ok: bool) -> None:
    assert (branch_problem(branch) is None) is ok


def _command(**fields: object) -> AddSubscriptionCommand:
    base: dict[str, object] = dict(kind=GIT, url="https://github.com/a/b.git", name="b", folder="a_b",
                                   scripts_dir="/etc/edge-runtime/scripts", pull_command=["edge-runtime", "pull"],
                                   expression="0 4 * * *", extensions=["js", "py"])
    return AddSubscriptionCommand(**{**base, **fields})


@pytest.mark.parametrize(("fields", "wanted"), [
    ({"whitelist": "jd_(|"}, "is not a regular expression"),
    ({"blacklist": ""}, "a regular expression of 1 to 1024"),
    ({"extensions": []}, "the extensions must be"),
    ({"extensions": ["j/s"]}, "the extensions must be"),
    ({"task_user": "Root!"}, "is not a user name"),
    ({"kind": FILE, "url": "https://x/y.js", "branch": "main"}, "a file subscription has no branch"),
    ({"scripts_dir": "relative"}, "absolute path"),
    ({"pull_command": []}, "the pull command"),
    ({"folder": "../etc"}, "one name of letters"),
])
def test_a_malformed_subscription_is_refused_whole(fields: dict[str, object], wanted: str) -> None:
    with pytest.raises(InvalidSubscriptionError) as error:
        _command(**fields)
    assert wanted in str(error.value)


def test_a_bad_pull_schedule_is_refused_with_the_cron_parsers_reason() -> None:
    with pytest.raises(InvalidCronExpressionError):
        _command(expression="61 * * * *")


# ----------------------------------------------------------------------------------- the plan


def _known(path: str, name: str, expression: str | None, schedule_id: str | None) -> SubscriptionScript:
    return SubscriptionScript(path=path, name=name, **({} if expression is None else {"expression": expression}),
                              **({} if schedule_id is None else {"schedule_id": schedule_id}))


def _found(path: str, name: str, expression: str | None) -> FoundScript:
    return FoundScript(path=path, name=name, expression=expression, command=["task", f"f/{path}"])


def _kinds(changes: list) -> list[tuple[str, str]]:
    return [(change.kind.value, change.path) for change in changes]


def test_new_scripts_get_paused_schedules_unless_auto_add() -> None:
    found = [_found("a.js", "A", "0 9 * * *"), _found("util.js", "util.js", None)]
    paused = plan_script_changes([], found, auto_add=False, auto_remove=False)
    assert _kinds(paused) == [("add", "a.js"), ("note", "util.js")]
    assert paused[0].paused and paused[0].command == ["task", "f/a.js"]
    enabled = plan_script_changes([], found, auto_add=True, auto_remove=False)
    assert not enabled[0].paused


def test_a_changed_header_changes_the_schedule_and_an_unchanged_one_nothing() -> None:
    known = [_known("a.js", "A", "0 9 * * *", "s1"), _known("b.js", "B", "0 8 * * *", "s2")]
    found = [_found("a.js", "A2", "0 10 * * *"), _found("b.js", "B", "0 8 * * *")]
    [change] = plan_script_changes(known, found, auto_add=False, auto_remove=False)
    assert (change.kind, change.schedule_id, change.expression, change.before_expression, change.name,
            change.before_name) == (ChangeKind.CHANGE, "s1", "0 10 * * *", "0 9 * * *", "A2", "A")


def test_a_removed_script_loses_its_schedule_only_with_auto_remove() -> None:
    known = [_known("a.js", "A", "0 9 * * *", "s1"), _known("util.js", "util.js", None, None)]
    assert _kinds(plan_script_changes(known, [], auto_add=False, auto_remove=True)) == [
        ("remove", "a.js"), ("forget", "util.js")]
    kept = plan_script_changes(known, [], auto_add=False, auto_remove=False)
    assert _kinds(kept) == [("keep", "a.js"), ("forget", "util.js")] and kept[0].schedule_id == "s1"


def test_a_schedule_removed_by_hand_is_never_made_again() -> None:
    known = [_known("a.js", "A", "0 9 * * *", None)]  # its schedule_id was set NULL by the removal
    assert plan_script_changes(known, [_found("a.js", "A", "0 9 * * *")], auto_add=True, auto_remove=True) == []
    [note] = plan_script_changes(known, [_found("a.js", "A", "0 10 * * *")], auto_add=True, auto_remove=True)
    assert note.kind is ChangeKind.NOTE and note.schedule_id is None


def test_a_header_that_loses_its_schedule_leaves_the_schedule_and_one_that_gains_one_gets_one() -> None:
    [lost] = plan_script_changes([_known("a.js", "A", "0 9 * * *", "s1")], [_found("a.js", "A", None)],
                                 auto_add=False, auto_remove=True)
    assert lost.kind is ChangeKind.NOTE and lost.expression is None
    [back] = plan_script_changes([_known("a.js", "A", None, "s1")], [_found("a.js", "A", "0 7 * * *")],
                                 auto_add=False, auto_remove=False)
    assert back.kind is ChangeKind.CHANGE and back.schedule_id == "s1"
    [gained] = plan_script_changes([_known("u.js", "u.js", None, None)], [_found("u.js", "u.js", "0 6 * * *")],
                                   auto_add=False, auto_remove=False)
    assert gained.kind is ChangeKind.ADD and gained.paused


def test_a_schedule_here_already_is_adopted_not_made_twice() -> None:
    [adopted] = plan_script_changes([], [_found("a.js", "A", "0 9 * * *")], auto_add=False, auto_remove=False,
                                    adoptable={"a.js": "imported"})
    assert adopted.kind is ChangeKind.ADOPT and adopted.schedule_id == "imported"


def test_the_records_are_strict() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"path": "a", "name": "a", "bogus": 1}, SubscriptionScript)
