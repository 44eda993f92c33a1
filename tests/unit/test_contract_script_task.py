"""The ``task`` rule (edge_runtime/contract/script_task.py, docs/qinglong.md "task"): its argv forms,
the extension -> program table, and the desi/conc selection of accounts from an ``&``-joined value."""

from __future__ import annotations

import pytest

from edge_runtime.contract.runs import InvalidRunCommandError, SubmitRunCommand
from edge_runtime.contract.schedules import AddScheduleCommand, InvalidScheduleCommandError
from edge_runtime.contract.script_task import (
    MAX_CONCURRENT_ACCOUNTS,
    InvalidTaskCommandError,
    ScriptTask,
    TaskAccountsError,
    TaskMode,
    is_task,
    missing_interpreter_message,
    parse_task,
    select_accounts,
    split_accounts,
)


@pytest.mark.parametrize(("argv", "expected"), [
    (["task", "x.js"], ScriptTask(file="x.js")),
    (["task", "x.js", "now"], ScriptTask(file="x.js")),
    (["task", "dir/x.py", "now", "--", "-v", "a b"], ScriptTask(file="dir/x.py", args=("-v", "a b"))),
    (["task", "x.js", "a", "b"], ScriptTask(file="x.js", args=("a", "b"))),
    (["task", "x.js", "--", "now"], ScriptTask(file="x.js", args=("now",))),
    (["task", "-l", "/abs/x.sh"], ScriptTask(file="/abs/x.sh")),
    (["task", "x.js", "desi", "JD_COOKIE", "1", "3"],
     ScriptTask(file="x.js", mode=TaskMode.DESI, env_name="JD_COOKIE", selection=("1", "3"))),
    (["task", "x.js", "conc", "JD_COOKIE", "1-3 5~max", "--", "arg"],
     ScriptTask(file="x.js", mode=TaskMode.CONC, env_name="JD_COOKIE", selection=("1-3", "5~max"), args=("arg",))),
    (["task", "x.js", "conc", "JD_COOKIE"], ScriptTask(file="x.js", mode=TaskMode.CONC, env_name="JD_COOKIE")),
    # QingLong's one stored string, split as a shell splits words.
    (["task dir/x.js"], ScriptTask(file="dir/x.js")),
    (["task  x.mjs desi A_B 2_1"], ScriptTask(file="x.mjs", mode=TaskMode.DESI, env_name="A_B", selection=("2_1",))),
    (["task 'my dir/x.ts' now"], ScriptTask(file="my dir/x.ts")),
    (["task x.cjs", "extra"], ScriptTask(file="x.cjs", args=("extra",))),
])
def test_the_forms_of_a_task_command(argv: list[str], expected: ScriptTask) -> None:
    assert is_task(argv)
    assert parse_task(argv) == expected


@pytest.mark.parametrize("argv", [["/usr/bin/task", "x.js"], ["tasks", "x.js"], ["taskx.js"], ["node", "x.js"],
                                  ["sh", "-c", "task x.js"]])
def test_only_the_program_named_task_is_a_task(argv: list[str]) -> None:
    assert not is_task(argv)
    assert parse_task(argv) is None


@pytest.mark.parametrize(("argv", "message"), [
    (["task"], "task needs a script"),
    (["task", "--", "x.js"], "task needs a script"),
    (["task", "x"], "no program is known for a file without an extension"),
    (["task", "x.rb"], "no program is known for this extension (task runs .js .mjs .cjs .py .pyc .sh .ts)"),
    (["task", ".js"], "no program is known for a file without an extension"),
    (["task", "X.JS"], "no program is known for this extension"),
    (["task", "../x.js"], "climbs out of it"),
    (["task", "a/../../x.js"], "climbs out of it"),
    (["task", "-m", "1h", "x.js"], "give the Run or schedule a timeout with --timeout"),
    (["task", "-x", "x.js"], "task -x: unknown option"),
    (["task", "x.js", "desi"], "needs the name of the variable"),
    (["task", "x.js", "conc", "--"], "needs the name of the variable"),
    (["task", "x.js", "conc", "1BAD"], "not a variable name"),
    (["task", "x.js", "conc", "A", "0"], "'0' is not an account number"),
    (["task", "x.js", "desi", "A", "1,3"], "'1,3' is not an account number"),
    (["task", "x.js", "desi", "A", "1-"], "'1-' is not an account number"),
    (["task", "x.js", "now", "later"], "takes its script's arguments after --"),
    (["task x.js && rm -rf /"], "shell syntax ('&')"),
    (["task x.js $HOME"], "shell syntax ('$')"),
    (["task 'x.js"], "cannot be split into words"),
])
def test_a_task_command_that_asks_for_nothing_this_runs_is_refused(argv: list[str], message: str) -> None:
    with pytest.raises(InvalidTaskCommandError) as error:
        parse_task(argv)
    assert message in str(error.value)
    # The same refusal at submit and schedule add, by every store (the command checks it).
    with pytest.raises(InvalidRunCommandError, match="task"):
        SubmitRunCommand(argv=argv)
    with pytest.raises(InvalidScheduleCommandError, match="task"):
        AddScheduleCommand(expression="@daily", argv=argv)


def test_the_program_is_picked_by_extension() -> None:
    programs = {file: parse_task(["task", file]).programs
                for file in ("a.js", "a.mjs", "a.cjs", "a.py", "a.pyc", "a.sh", "a.ts", "d.x/a.py")}
    assert programs == {"a.js": ("node",), "a.mjs": ("node",), "a.cjs": ("node",), "a.py": ("python3",),
                        "a.pyc": ("python3",), "a.sh": ("bash", "sh"),
                        "a.ts": ("ts-node-transpile-only", "tsx", "ts-node"), "d.x/a.py": ("python3",)}


def test_a_missing_program_names_what_to_install() -> None:
    message = missing_interpreter_message(parse_task(["task", "x.ts"]), "/usr/bin:/bin")
    assert message == ("task x.ts: ts-node-transpile-only, tsx or ts-node is not on the task's PATH (/usr/bin:/bin): "
                       "install a TypeScript runner: npm install -g ts-node typescript (QingLong's "
                       "ts-node-transpile-only), or npm install -g tsx")
    assert missing_interpreter_message(parse_task(["task", "x.js"]), "/bin") == (
        "task x.js: node is not on the task's PATH (/bin): install Node.js (opkg install node)")


def test_accounts_are_the_and_parts_of_the_value() -> None:
    assert split_accounts("a&b&c") == ["a", "b", "c"]
    assert split_accounts("a&&c") == ["a", "", "c"]  # a place is kept: account 3 is still c
    assert split_accounts("a&") == ["a"]
    assert split_accounts("") == [] and split_accounts(None) == []
    assert split_accounts("pt_key=1; pt_pin=中文 x") == ["pt_key=1; pt_pin=中文 x"]


@pytest.mark.parametrize(("selection", "numbers"), [
    ((), [1, 2, 3, 4, 5]),
    (("1", "3"), [1, 3]),
    (("3", "1"), [3, 1]),
    (("2-4",), [2, 3, 4]),
    (("4~2",), [4, 3, 2]),
    (("2_3", "1-max"), [2, 3, 1, 4, 5]),
    (("max",), [5]),
    (("max-4",), [5, 4]),
    (("1", "1", "1-2"), [1, 2]),
])
def test_desi_selects_accounts_by_number_and_range(selection: tuple[str, ...], numbers: list[int]) -> None:
    task = ScriptTask(file="x.js", mode=TaskMode.DESI, env_name="CK", selection=selection)
    assert select_accounts(task, "a1&a2&a3&a4&a5") == [(n, f"a{n}") for n in numbers]


def test_an_account_beyond_the_value_or_no_value_fails_naming_it() -> None:
    task = ScriptTask(file="x.js", mode=TaskMode.CONC, env_name="CK", selection=("1-4",))
    with pytest.raises(TaskAccountsError) as error:
        select_accounts(task, "a&b&c")
    assert str(error.value) == "task x.js conc CK: account 4 was asked for, and the variable has 3 accounts"
    for value in (None, ""):
        with pytest.raises(TaskAccountsError, match="task x.js conc CK: the variable is not set or empty"):
            select_accounts(task, value)


def test_conc_starts_a_bounded_number_of_processes() -> None:
    value = "&".join(f"a{n}" for n in range(1, MAX_CONCURRENT_ACCOUNTS + 2))
    conc = ScriptTask(file="x.js", mode=TaskMode.CONC, env_name="CK")
    with pytest.raises(TaskAccountsError, match=f"conc runs at most {MAX_CONCURRENT_ACCOUNTS} processes"):
        select_accounts(conc, value)
    desi = ScriptTask(file="x.js", mode=TaskMode.DESI, env_name="CK")  # one process: any number of accounts
    assert len(select_accounts(desi, value)) == MAX_CONCURRENT_ACCOUNTS + 1
