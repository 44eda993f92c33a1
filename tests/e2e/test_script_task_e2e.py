"""``task`` as QingLong runs it (docs/qinglong.md, "task"), through a real ``serve`` and the real CLI:
the program by extension, the scripts directory and the script's folder, desi and conc accounts, a
conc Run cancelled whole, and what is refused at submit or fails the Run when it can only be known
at its start."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import msgspec
import pytest

from tests.support.service_harness import Harness, decode_json, process_gone, wait_for

pytestmark = pytest.mark.e2e

ACCOUNTS = "pt_key=a1; pt_pin=张三&pt_key=a2 'q'&pt_key=a3 \"x\" y"


def scripts(harness: Harness) -> Path:
    """The service's scripts directory: ``scripts/`` beside the database (no setting)."""
    folder = harness.db_path.parent / "scripts"
    folder.mkdir(mode=0o755, exist_ok=True)
    return folder


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o644)
    return path


def refused(harness: Harness, *argv: str) -> dict:
    existed = harness.db_path.exists()
    before = harness.cli("list", "--json").stdout if existed else None
    result = harness.cli("submit", "--json", *argv, check=False)
    assert result.returncode == 1, result
    # Nothing stored; no database created for a refused command.
    assert harness.db_path.exists() == existed and (not existed or harness.cli("list", "--json").stdout == before)
    return decode_json(result.stderr)["error"]


def failed_reason(harness: Harness, run_id: str) -> str:
    detail = harness.wait_status(run_id, "failed")
    return detail.attempts[-1].end_reason


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_js_task_runs_with_node_in_its_folder_with_its_arguments(harness: Harness) -> None:
    write(scripts(harness) / "jd" / "jd_bean.js",
          "console.log(`cwd=${process.cwd()} file=${__filename} args=${process.argv.slice(2)}`)\n")
    run_id = harness.cli("submit", "--", "task", "jd/jd_bean.js", "a", "b c").stdout.strip()
    harness.serve()
    harness.wait_status(run_id, "succeeded")
    folder = scripts(harness) / "jd"
    assert harness.cli("logs", run_id).stdout == f"cwd={folder} file={folder / 'jd_bean.js'} args=a,b c\n"
    # The Run keeps the command as it was written; the service's log says what ran it.
    assert decode_json(harness.cli("show", run_id, "--json").stdout)["command"] == ["task", "jd/jd_bean.js", "a", "b c"]
    node = shutil.which("node", path=os.environ["PATH"])
    assert f"program={os.path.realpath(node)}" in harness.services[0].log() or f"program={node}" in harness.services[0].log()


def test_py_and_sh_tasks_and_the_one_string_form_absolute_paths_and_now(harness: Harness, tmp_path: Path) -> None:
    write(scripts(harness) / "x.py", "import os, sys; print('py', os.getcwd(), sys.argv[1:])\n")
    write(scripts(harness) / "dir" / "x.sh", 'echo "sh ${BASH_VERSION:+bash} $(pwd) $*"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    write(elsewhere / "abs.sh", "echo abs $(pwd)\n")
    py = harness.cli("submit", "--", "task", "x.py", "now", "--", "-v").stdout.strip()
    sh = harness.cli("submit", "--", "task dir/x.sh").stdout.strip()  # as QingLong stores it: one string
    absolute = harness.cli("submit", "--", "task", str(elsewhere / "abs.sh")).stdout.strip()
    harness.serve()
    for run_id in (py, sh, absolute):
        harness.wait_status(run_id, "succeeded")
    assert harness.cli("logs", py).stdout == f"py {scripts(harness)} ['-v']\n"
    assert harness.cli("logs", sh).stdout == f"sh bash {scripts(harness) / 'dir'} \n"
    assert harness.cli("logs", absolute).stdout == f"abs {elsewhere}\n"
    assert "task dir/x.sh" in harness.cli("show", sh).stdout


def test_desi_runs_one_process_with_only_the_selected_accounts(harness: Harness) -> None:
    write(scripts(harness) / "show.sh", 'printf "%s\\n" "$CK"\n')
    harness.cli("env", "set", "CK", ACCOUNTS)
    run_id = harness.cli("submit", "--", "task", "show.sh", "desi", "CK", "3", "1").stdout.strip()
    harness.serve()
    harness.wait_status(run_id, "succeeded")
    parts = ACCOUNTS.split("&")
    assert harness.cli("logs", run_id).stdout == f"{parts[2]}&{parts[0]}\n"


def test_conc_runs_one_process_per_account_each_with_its_own(harness: Harness) -> None:
    write(scripts(harness) / "show.sh", 'printf "account=%s leftover=%s\\n" "$CK" "${_EDGE_RUNTIME_TASK_ACCOUNTS-none}"\n'
                                        '[ "$CK" != "bad" ]\n')
    harness.cli("env", "set", "CK", ACCOUNTS)
    run_id = harness.cli("submit", "--", "task", "show.sh", "conc", "CK").stdout.strip()
    harness.serve()
    harness.wait_status(run_id, "succeeded")
    lines = sorted(harness.cli("logs", run_id).stdout.splitlines())
    assert lines == sorted(f"account={part} leftover=none" for part in ACCOUNTS.split("&"))
    # One account failing fails the Run, and the log names it.
    harness.cli("env", "set", "CK", "good&bad&good")
    failing = harness.cli("submit", "--", "task", "show.sh", "conc", "CK", "1-3").stdout.strip()
    detail = harness.wait_status(failing, "failed")
    assert detail.attempts[-1].exit_code == 1
    assert "task: account 2 of CK exited with status 1" in harness.cli("logs", failing).stdout


@pytest.mark.parametrize("end", ["cancel", "timeout"])
def test_cancel_or_timeout_of_a_conc_run_kills_every_process_and_their_background_children(
        harness: Harness, tmp_path: Path, end: str) -> None:
    pids = tmp_path / "pids"
    write(scripts(harness) / "long.sh", f"sleep 600 & echo $! >> {pids}\necho $$ >> {pids}\nsleep 600\n")
    harness.cli("env", "set", "CK", "a&b&c")
    timeout = ["--timeout", "3s"] if end == "timeout" else []
    run_id = harness.cli("submit", *timeout, "--", "task", "long.sh", "conc", "CK").stdout.strip()
    harness.serve()
    leader = harness.wait_running(run_id)
    started = wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 6 and pids.read_text().split(),
                       "three accounts and their background sleeps")
    if end == "cancel":
        harness.cli("cancel", run_id)
    detail = harness.wait_status(run_id, "cancelled")
    assert detail.cancel_reason == ("timeout" if end == "timeout" else msgspec.UNSET)
    wait_for(lambda: all(process_gone(int(pid)) for pid in [*started, leader.pid]), "every process of the Run to end")


def test_a_missing_script_is_refused_at_submit_and_fails_the_run_when_removed_after(harness: Harness) -> None:
    folder = harness.db_path.parent / "scripts"
    assert refused(harness, "--", "task", "nope.js") == {  # no scripts directory yet: serve never creates it
        "code": "TASK_SCRIPT_NOT_FOUND",
        "message": f"task nope.js: the scripts directory {folder} does not exist (setting scripts_dir)"}
    scripts(harness)
    assert refused(harness, "--", "task", "nope.js") == {
        "code": "TASK_SCRIPT_NOT_FOUND", "message": f"task nope.js: no such script: {folder / 'nope.js'}"}
    script = write(scripts(harness) / "gone.sh", "echo hi\n")
    run_id = harness.cli("submit", "--", "task", "gone.sh").stdout.strip()
    script.unlink()
    harness.serve()
    assert failed_reason(harness, run_id) == f"task gone.sh: no such script: {scripts(harness) / 'gone.sh'}"


def test_a_missing_program_is_refused_at_submit_naming_what_to_install_and_fails_a_stored_run(harness: Harness) -> None:
    write(scripts(harness) / "x.ts", "console.log(1)\n")
    path = "/usr/bin:/bin"
    if any(shutil.which(name, path=path) for name in ("ts-node-transpile-only", "tsx", "ts-node")):
        pytest.skip("a TypeScript runner is installed here")
    message = (f"task x.ts: ts-node-transpile-only, tsx or ts-node is not on the task's PATH ({path}): install a "
               f"TypeScript runner: npm install -g ts-node typescript (QingLong's ts-node-transpile-only), or npm "
               f"install -g tsx")
    assert refused(harness, "--env", f"PATH={path}", "--", "task", "x.ts") == {
        "code": "TASK_INTERPRETER_NOT_FOUND", "message": message}
    # Stored where nothing could check it (another host's submit): the Run fails, saying the same.
    harness.cli("env", "set", "PATH", path)
    [run_id] = harness.submit_many([["task", "x.ts"]])
    harness.serve()
    assert failed_reason(harness, run_id) == message


def test_the_program_is_looked_up_on_the_tasks_path_never_in_its_folder(harness: Harness) -> None:
    write(scripts(harness) / "x.py", "print(1)\n")
    impostor = write(scripts(harness) / "python3", "#!/bin/sh\necho impostor\n")
    impostor.chmod(0o755)
    for path in ("", ".", "relative/bin"):  # the working directory, however written
        error = refused(harness, "--env", f"PATH={path}", "--", "task", "x.py")
        assert error["code"] == "TASK_INTERPRETER_NOT_FOUND", error


def test_a_script_leading_out_of_the_scripts_directory_or_changeable_by_others_is_refused(harness: Harness,
                                                                                          tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    write(outside / "x.sh", "echo outside\n")
    (scripts(harness) / "link.sh").symlink_to(outside / "x.sh")
    (scripts(harness) / "dirlink").symlink_to(outside)
    for file in ("link.sh", "dirlink/x.sh"):
        error = refused(harness, "--", "task", file)
        assert error["code"] == "TASK_SCRIPT_REFUSED" and "outside the scripts directory" in error["message"], error
    assert refused(harness, "--", "task", "../outside/x.sh")["code"] == "INVALID_RUN_COMMAND"
    shared = write(scripts(harness) / "shared.sh", "echo hi\n")
    shared.chmod(0o666)
    error = refused(harness, "--", "task", "shared.sh")
    assert error["code"] == "TASK_SCRIPT_REFUSED" and "writable by group or others (mode 0666)" in error["message"]
    # The service applies the same rule to what it finds stored.
    harness.cli("migrate")
    [leading_out, writable] = harness.submit_many([["task", "link.sh"], ["task", "shared.sh"]])
    harness.serve()
    assert "outside the scripts directory" in failed_reason(harness, leading_out)
    assert "writable by group or others" in failed_reason(harness, writable)


def test_a_schedule_of_a_missing_script_is_refused_and_desi_without_the_variable_fails_its_run(harness: Harness) -> None:
    result = harness.cli("schedule", "add", "@daily", "--", "task", "nope.py", check=False)
    assert result.returncode == 1 and "[TASK_SCRIPT_NOT_FOUND]" in result.stderr
    write(scripts(harness) / "x.sh", "echo $CK\n")
    schedule_id = harness.cli("schedule", "add", "@daily", "--", "task", "x.sh", "desi", "CK", "2").stdout.strip()
    harness.serve()
    run_id = decode_json(harness.cli("schedule", "run", schedule_id, "--json").stdout)["runId"]
    assert failed_reason(harness, run_id) == "task x.sh desi CK: the variable is not set or empty: it has no account to run"
    harness.cli("env", "set", "CK", "only-one")
    run_id = decode_json(harness.cli("schedule", "run", schedule_id, "--json").stdout)["runId"]
    assert failed_reason(harness, run_id) == "task x.sh desi CK: account 2 was asked for, and the variable has 1 account"


def test_a_submit_handed_to_the_service_is_checked_there(harness: Harness) -> None:
    write(scripts(harness) / "x.sh", "echo handed\n")
    service = harness.serve()
    run_id = harness.cli("submit", "--", "task", "x.sh").stdout.strip()
    harness.wait_status(run_id, "succeeded")
    assert harness.cli("logs", run_id).stdout == "handed\n"
    # Refused by the service (nothing stored there), then by the CLI the same way, which reports it.
    assert refused(harness, "--", "task", "nope.sh")["code"] == "TASK_SCRIPT_NOT_FOUND"
    assert "submit_handoff.declined error=TASK_SCRIPT_NOT_FOUND" in service.log()
    assert [r["id"] for r in decode_json(harness.cli("list", "--json").stdout)] == [run_id]


def test_desi_and_conc_number_the_enabled_entries_of_a_name_in_list_order(harness: Harness) -> None:
    write(scripts(harness) / "show.sh", 'printf "[%s]\\n" "$CK"\n')
    for value in ("张三 'one'", "two", "three \"3\""):
        harness.cli("env", "add", "CK", value)
    harness.cli("env", "disable", "2")  # account 2 is now the third entry
    desi = harness.cli("submit", "--", "task", "show.sh", "desi", "CK", "2").stdout.strip()
    conc = harness.cli("submit", "--", "task", "show.sh", "conc", "CK").stdout.strip()
    harness.serve()
    harness.wait_status(desi, "succeeded")
    harness.wait_status(conc, "succeeded")
    assert harness.cli("logs", desi).stdout == "[three \"3\"]\n"
    assert sorted(harness.cli("logs", conc).stdout.splitlines()) == ["[three \"3\"]", "[张三 'one']"]
