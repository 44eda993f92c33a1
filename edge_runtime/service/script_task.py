"""Starting a script task (the rule: edge_runtime/contract/script_task.py; docs/qinglong.md, "task"):
which file, which program, which directory and which accounts, resolved when an Attempt starts.

The Run keeps its command as it was written (``task x.js``); what its Attempt runs is decided here,
from the scripts directory (the ``scripts_dir`` setting) and the Attempt's composed environment:

- the script: a relative FILE in the scripts directory, an absolute one where it is. Root runs it, so
  it must be a regular file that nobody but root (or the service's own user) can change, in a
  trusted directory (``trusted_paths``: every directory above it owned by root or that user and not
  writable by others), and a relative one must stay in the scripts directory once ``..`` and every
  symlink are resolved: a script that leads out (``../x.js``, a link to ``/root/x.js``) is refused;
- the program: the first of the extension's programs found on the task's ``PATH`` (the composed
  environment's, never the service's own and never the working directory: an empty or relative
  ``PATH`` entry is skipped), run by its absolute path;
- the working directory: the script's folder, unless the Run names one (``--cwd``);
- ``desi``: the variable holds only the selected accounts, joined with ``&``;
- ``conc``: a POSIX ``sh`` leader (:data:`CONC_LEADER`) starts one process per selected account in
  the background, each with only its account in the variable, and waits for all of them, exiting
  with the first non-zero status (and a line naming each account that failed). Job control is off
  in a non-interactive shell, so every process stays in the Attempt's session and process group:
  a cancel or a timeout reaches all of them and what they started, as for any task. The accounts
  reach the leader in its environment (``ACCOUNTS_VARIABLE``, removed before the first process
  starts), never on a command line that every local user can read.

Everything that cannot be resolved raises a :class:`~edge_runtime.contract.script_task.TaskUnavailableError`
naming what is missing: the service fails the Run with it, and the user commands refuse the submit with it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from edge_runtime.contract.script_task import (
    ScriptTask,
    TaskInterpreterNotFoundError,
    TaskMode,
    TaskScriptNotFoundError,
    TaskScriptRefusedError,
    missing_interpreter_message,
    parse_task,
    select_accounts,
)
from edge_runtime.service.trusted_paths import directory_problem

#: Where the conc leader finds the selected accounts, ``&``-joined (no account holds a ``&``).
ACCOUNTS_VARIABLE = "_EDGE_RUNTIME_TASK_ACCOUNTS"

#: The conc leader: ``sh -c CONC_LEADER task NAME "N1 N2 ..." PROGRAM SCRIPT ARGS...``. POSIX sh
#: (busybox ash on a router): for each number, the next ``&``-part of the accounts becomes NAME and
#: PROGRAM SCRIPT ARGS starts in the background; then each is waited for, in order.
CONC_LEADER = """\
name=$1 numbers=$2
shift 2
rest=$_EDGE_RUNTIME_TASK_ACCOUNTS
unset _EDGE_RUNTIME_TASK_ACCOUNTS
pids=
for number in $numbers; do
  account=${rest%%&*}
  rest=${rest#*&}
  export "$name=$account"
  "$@" &
  pids="$pids $!"
done
status=0
set -- $numbers
for pid in $pids; do
  wait "$pid"
  code=$?
  if [ "$code" -ne 0 ]; then
    echo "task: account $1 of $name exited with status $code" >&2
    [ "$status" -ne 0 ] || status=$code
  fi
  shift
done
exit "$status"
"""


class TaskLaunch(NamedTuple):
    """What an Attempt of a script task runs."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    #: For the service's log: the program, the script and the account numbers (never an account).
    program: str
    script: str
    numbers: tuple[int, ...]


def find_program(name: str, path: str) -> str | None:
    """The first executable regular file ``name`` in the absolute directories of ``path``."""
    for directory in path.split(":"):
        if not directory.startswith("/"):
            continue  # empty or relative: the working directory, never searched
        candidate = f"{directory.rstrip('/')}/{name}"
        try:
            info = os.stat(candidate)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_interpreter(task: ScriptTask, path: str) -> str:
    """The program that runs ``task``'s script, found on ``path``.

    Raises:
        TaskInterpreterNotFoundError: none of its programs is there (naming what to install).
    """
    for name in task.programs:
        found = find_program(name, path)
        if found is not None:
            return found
    raise TaskInterpreterNotFoundError(missing_interpreter_message(task, path))


def locate_script(task: ScriptTask, scripts_dir: str | None) -> str:
    """The real path of ``task``'s script, checked as root may run it (module docstring).

    Raises:
        TaskScriptNotFoundError: no such file, or (a relative one) no scripts directory.
        TaskScriptRefusedError: it leads out of the scripts directory, is not a regular file, or
            could be changed by another user.
    """
    file = task.file
    if file.startswith("/"):
        shown = file
    else:
        if scripts_dir is None:
            raise TaskScriptNotFoundError(f"task {file}: a relative script is found in the scripts directory, and "
                                          f"this service has none")
        if not os.path.isdir(scripts_dir):
            raise TaskScriptNotFoundError(f"task {file}: the scripts directory {scripts_dir} does not exist "
                                          f"(setting scripts_dir)")
        shown = os.path.join(scripts_dir, file)
    real = os.path.realpath(shown)
    if not file.startswith("/"):
        top = os.path.realpath(scripts_dir)  # type: ignore[arg-type]  (checked above)
        if os.path.commonpath([real, top]) != top:
            raise TaskScriptRefusedError(f"task {file}: {shown} leads to {real}, outside the scripts directory "
                                         f"{top}: refused (a relative script stays in the scripts directory; name "
                                         f"another one by its absolute path)")
    try:
        info = os.stat(real)
    except FileNotFoundError:
        raise TaskScriptNotFoundError(f"task {file}: no such script: {shown}") from None
    except OSError as exc:
        raise TaskScriptNotFoundError(f"task {file}: cannot read {shown}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise TaskScriptRefusedError(f"task {file}: {shown} is not a regular file")
    problem = _writable_by_others(real, info) or directory_problem(os.path.dirname(real))
    if problem is not None:
        raise TaskScriptRefusedError(f"task {file}: refused: {problem}; root would run a script another user can "
                                     f"change (make it and its folders owned by root, not writable by others)")
    return real


def _writable_by_others(path: str, info: os.stat_result) -> str | None:
    if info.st_uid not in (0, os.geteuid()):
        return f"{path} is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}) or root"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def check_task(argv: Sequence[str], *, scripts_dir: str | None, path: str) -> ScriptTask | None:
    """At submit: the script task ``argv`` with its script and program here, or None when ``argv``
    is not one. Its accounts are not checked: the variable may be set before it runs.

    Raises:
        InvalidTaskCommandError: the command asks for nothing this runs.
        TaskUnavailableError: its script or program is missing or refused.
    """
    task = parse_task(argv)
    if task is None:
        return None
    locate_script(task, scripts_dir)
    find_interpreter(task, path)
    return task


def task_launch(argv: Sequence[str], *, env: Mapping[str, str], scripts_dir: str | None,
                cwd: str | None) -> TaskLaunch | None:
    """What an Attempt of the script task ``argv`` runs, with ``env`` (its composed environment)
    and ``cwd`` (the Run's own working directory, or None: the script's folder); None when
    ``argv`` is not a script task.

    Raises:
        InvalidTaskCommandError: the stored command asks for nothing this runs.
        TaskUnavailableError: its script, program or accounts are missing or refused.
    """
    task = parse_task(argv)
    if task is None:
        return None
    script = locate_script(task, scripts_dir)
    path = env.get("PATH", "")
    program = find_interpreter(task, path)
    env = dict(env)
    command = [program, script, *task.args]
    numbers: tuple[int, ...] = ()
    if task.mode is not TaskMode.ONCE:
        name = task.env_name or ""
        selected = select_accounts(task, env.get(name))
        numbers = tuple(number for number, _ in selected)
        accounts = "&".join(account for _, account in selected)
        if task.mode is TaskMode.DESI:
            env[name] = accounts
        else:
            shell = find_program("sh", path)
            if shell is None:
                raise TaskInterpreterNotFoundError(f"task {task.file} conc: sh (which starts one process per "
                                                   f"account) is not on the task's PATH ({path})")
            env.pop(name, None)
            env[ACCOUNTS_VARIABLE] = accounts
            command = [shell, "-c", CONC_LEADER, "task", name, " ".join(map(str, numbers)), *command]
    return TaskLaunch(argv=command, env=env, cwd=cwd if cwd is not None else os.path.dirname(script),
                      program=program, script=script, numbers=numbers)
