"""What an Attempt of a ``task`` command runs (edge_runtime/service/script_task.py): the program by
absolute path from the task's PATH, the script's real path and folder, and the accounts of desi and
conc in the environment, never in argv (the end-to-end runs: tests/e2e/test_script_task_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_runtime.contract.script_task import TaskInterpreterNotFoundError, TaskScriptRefusedError
from edge_runtime.service.script_task import ACCOUNTS_VARIABLE, CONC_LEADER, find_program, task_launch


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A scripts directory with ``jd/x.py``, and a ``bin`` with ``python3`` and ``sh`` in it."""
    scripts, bin_dir = tmp_path / "scripts", tmp_path / "bin"
    (scripts / "jd").mkdir(parents=True)
    (scripts / "jd" / "x.py").write_text("print(1)\n")
    bin_dir.mkdir()
    for name in ("python3", "sh"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    return scripts, bin_dir


def test_a_program_is_found_only_in_absolute_path_entries(tree, monkeypatch) -> None:
    scripts, bin_dir = tree
    assert find_program("python3", f"/nowhere::.:bin:{bin_dir}") == f"{bin_dir}/python3"
    monkeypatch.chdir(bin_dir)  # the working directory, however written, is never searched
    assert find_program("python3", ":.") is None
    monkeypatch.chdir(bin_dir.parent)
    assert find_program("python3", "bin") is None
    (bin_dir / "plain").write_text("not executable\n")
    assert find_program("plain", str(bin_dir)) is None


def test_once_runs_the_program_on_the_real_script_in_its_folder(tree) -> None:
    scripts, bin_dir = tree
    (scripts / "link.py").symlink_to(scripts / "jd" / "x.py")  # a link that stays inside is followed
    launch = task_launch(["task", "link.py", "a"], env={"PATH": str(bin_dir)}, scripts_dir=str(scripts), cwd=None)
    assert launch.argv == [f"{bin_dir}/python3", str(scripts / "jd" / "x.py"), "a"]
    assert launch.cwd == str(scripts / "jd") and launch.env == {"PATH": str(bin_dir)}
    given = task_launch(["task", "jd/x.py"], env={"PATH": str(bin_dir)}, scripts_dir=str(scripts), cwd="/srv")
    assert given.cwd == "/srv"  # the Run's own directory wins
    assert task_launch(["python3", "x.py"], env={}, scripts_dir=str(scripts), cwd=None) is None


def test_desi_narrows_the_variable_and_conc_hands_the_accounts_to_its_leader_in_the_environment(tree) -> None:
    scripts, bin_dir = tree
    env = {"PATH": str(bin_dir), "CK": "secret-1&secret-2&secret-3"}
    desi = task_launch(["task", "jd/x.py", "desi", "CK", "3", "1"], env=env, scripts_dir=str(scripts), cwd=None)
    assert desi.env["CK"] == "secret-3&secret-1" and desi.numbers == (3, 1)
    conc = task_launch(["task", "jd/x.py", "conc", "CK", "2-3", "--", "arg"], env=env, scripts_dir=str(scripts),
                       cwd=None)
    assert conc.argv == [f"{bin_dir}/sh", "-c", CONC_LEADER, "task", "CK", "2 3", f"{bin_dir}/python3",
                         str(scripts / "jd" / "x.py"), "arg"]
    assert "CK" not in conc.env and conc.env[ACCOUNTS_VARIABLE] == "secret-2&secret-3"
    assert not any("secret" in word for word in conc.argv)  # argv is every local user's to read
    assert env["CK"] == "secret-1&secret-2&secret-3"  # the composed environment is not changed in place


def test_what_cannot_run_is_said(tree, tmp_path: Path) -> None:
    scripts, bin_dir = tree
    with pytest.raises(TaskInterpreterNotFoundError, match=r"python3 is not on the task's PATH \(/nowhere\)"):
        task_launch(["task", "jd/x.py"], env={"PATH": "/nowhere"}, scripts_dir=str(scripts), cwd=None)
    (tmp_path / "out.py").write_text("print(1)\n")
    (scripts / "out.py").symlink_to(tmp_path / "out.py")
    with pytest.raises(TaskScriptRefusedError, match="outside the scripts directory"):
        task_launch(["task", "out.py"], env={"PATH": str(bin_dir)}, scripts_dir=str(scripts), cwd=None)
    no_sh = tmp_path / "no-sh"
    no_sh.mkdir()
    (no_sh / "python3").symlink_to(bin_dir / "python3")
    with pytest.raises(TaskInterpreterNotFoundError, match="sh \\(which starts one process per account\\)"):
        task_launch(["task", "jd/x.py", "conc", "CK"], env={"PATH": str(no_sh), "CK": "a&b"},
                    scripts_dir=str(scripts), cwd=None)
