"""QingLong's ``task`` command (docs/qinglong.md, "task"): which argv is one, what it asks for, which
program runs its script, and which accounts of an ``&``-joined variable each process gets. Pure: no I/O.

A command whose program is exactly ``task`` (``["task", "x.js", ...]``), or QingLong's one stored
string (``["task dir/x.js now"]``, split into words as a shell would, shell syntax refused), is a
script task:

- ``task FILE [now] [-- ARGS]``: run FILE once (``now`` is QingLong's "no random delay"; there is no
  random delay here, so it changes nothing);
- ``task FILE desi NAME [N...] [-- ARGS]``: one process that sees only the accounts N... of the
  variable NAME (its ``&``-parts, numbered from 1), joined with ``&`` again;
- ``task FILE conc NAME [N...] [-- ARGS]``: one process per account N..., all at once, each seeing
  only its own account in NAME;
- ``task FILE ARGS...`` (a second word that is none of those): FILE with the arguments ARGS.

N is a number, a range ``A-B`` (also ``A~B``, ``A_B``, descending too) or ``max`` (the last account,
also in ranges: ``3-max``); none means every account. ``-l`` before FILE is accepted and changes
nothing (QingLong's own: it only showed the log); ``-m T`` (QingLong's per-run timeout) is refused:
the Run's or schedule's timeout is ``--timeout``.

FILE's extension picks the program (:data:`INTERPRETERS`); a relative FILE is found in the scripts
directory, an absolute one where it is. This module decides the rule once; the service resolves it
when it starts an Attempt (``edge_runtime.service.script_task``: the file, its folder as the working
directory, the program on the task's ``PATH``), and the user commands check the same at submit where
the scripts directory is on their own device.
"""

from __future__ import annotations

import enum
import posixpath
import re
from collections.abc import Sequence

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError

#: The program name that makes a command a script task; a program of that name elsewhere is run by
#: its path (``/usr/bin/task``), which is never one.
TASK_PROGRAM = "task"

#: The programs that run a script, by its extension, tried in this order on the task's ``PATH``.
#: ``.sh`` scripts are QingLong's bash scripts, so bash first, a router's busybox ``sh`` else.
#: ``.ts``: QingLong's own runner first (``ts-node-transpile-only``, from the ts-node package).
INTERPRETERS: dict[str, tuple[str, ...]] = {
    ".js": ("node",), ".mjs": ("node",), ".cjs": ("node",),
    ".py": ("python3",), ".pyc": ("python3",),
    ".sh": ("bash", "sh"),
    ".ts": ("ts-node-transpile-only", "tsx", "ts-node"),
}

#: What to install when none of an extension's programs is on the task's ``PATH``.
INSTALL_HINTS: dict[str, str] = {
    "node": "install Node.js (opkg install node)",
    "python3": "install Python 3 (opkg install python3)",
    "bash": "install a shell (opkg install bash)",
    "ts-node-transpile-only": "install a TypeScript runner: npm install -g ts-node typescript (QingLong's "
                              "ts-node-transpile-only), or npm install -g tsx",
}

#: ``conc`` starts this many processes at most (one per account): a router runs out of memory long
#: before QingLong's unbounded fan-out would end.
MAX_CONCURRENT_ACCOUNTS = 64

#: A variable name, as env entries and ``--env`` take it.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: An account number item: ``N``, ``max``, or a range of them joined by ``-``, ``~`` or ``_``.
_ITEM = re.compile(r"(\d+|max)(?:[-~_](\d+|max))?")
#: Shell syntax in QingLong's one-string form: a shell would run it otherwise than as words.
_SHELL_SYNTAX = re.compile(r"[;&|<>()$`*?\n]")

_USAGE = "task FILE [now | desi NAME [N...] | conc NAME [N...]] [-- ARGS]"


class InvalidTaskCommandError(EdgeRuntimeError, code="INVALID_TASK_COMMAND"):
    """A ``task`` command that asks for nothing this runs (the message says which rule)."""


class TaskUnavailableError(EdgeRuntimeError, code="TASK_UNAVAILABLE"):
    """A ``task`` command that cannot run here now: its script, its program or its accounts are
    missing or refused. At submit nothing is stored; at an Attempt's start its Run fails with the message."""


class TaskScriptNotFoundError(TaskUnavailableError, code="TASK_SCRIPT_NOT_FOUND"):
    """The script is not there (or the scripts directory is not)."""


class TaskScriptRefusedError(TaskUnavailableError, code="TASK_SCRIPT_REFUSED"):
    """The script is there but root must not run it: it leads out of the scripts directory, is not a
    regular file, or could be changed by another user."""


class TaskInterpreterNotFoundError(TaskUnavailableError, code="TASK_INTERPRETER_NOT_FOUND"):
    """No program for the script's extension is on the task's ``PATH``."""


class TaskAccountsError(TaskUnavailableError, code="TASK_ACCOUNTS_UNAVAILABLE"):
    """``desi``/``conc``: the variable is not set, or has fewer accounts than asked for."""


class TaskMode(enum.StrEnum):
    ONCE = "once"
    DESI = "desi"
    CONC = "conc"


class ScriptTask(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """What a ``task`` command asks for."""

    #: The script as written: relative to the scripts directory, or absolute.
    file: str
    mode: TaskMode = TaskMode.ONCE
    #: ``desi``/``conc``: the variable whose accounts are selected.
    env_name: str | None = None
    #: ``desi``/``conc``: the account numbers as written, one item each (none: every account).
    selection: tuple[str, ...] = ()
    #: The script's own arguments.
    args: tuple[str, ...] = ()

    @property
    def programs(self) -> tuple[str, ...]:
        """The programs that may run it, in the order they are tried."""
        return INTERPRETERS[script_extension(self.file)]


def script_extension(file: str) -> str:
    """The extension of ``file``'s last component (``.js``), or ``""``."""
    name = file.rpartition("/")[2]
    stem, dot, extension = name.rpartition(".")
    return f".{extension}" if dot and stem else ""


def task_words(argv: Sequence[str]) -> list[str] | None:
    """The words after ``task`` when ``argv`` is a script task, else None.

    Raises:
        InvalidTaskCommandError: QingLong's one-string form with shell syntax or unbalanced quotes.
    """
    if not argv:
        return None
    first = argv[0]
    if first == TASK_PROGRAM:
        return list(argv[1:])
    if not _one_string(first):
        return None
    syntax = _SHELL_SYNTAX.search(first)
    if syntax is not None:
        raise InvalidTaskCommandError(
            f"the command {first!r} has shell syntax ({syntax.group()!r}): give task its words, or run it with sh -c")
    import shlex  # only for this form: never loaded by a plain submit

    try:
        words = shlex.split(first)
    except ValueError as exc:
        raise InvalidTaskCommandError(f"the command {first!r} cannot be split into words: {exc}") from None
    return [*words[1:], *argv[1:]]


def is_task(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is a script task (well formed or not)."""
    return bool(argv) and (argv[0] == TASK_PROGRAM or _one_string(argv[0]))


def _one_string(first: str) -> bool:
    """Whether a program word is QingLong's stored one-string form, ``task`` and a blank first."""
    return first.startswith(TASK_PROGRAM) and first[len(TASK_PROGRAM):][:1] in (" ", "\t")


def parse_task(argv: Sequence[str]) -> ScriptTask | None:
    """What the script task ``argv`` asks for; None when ``argv`` is not one.

    Raises:
        InvalidTaskCommandError: a task command that asks for nothing this runs (no script, an
            extension no program is known for, ``desi``/``conc`` without a variable, a malformed
            account number, ``-m``).
    """
    words = task_words(argv)
    if words is None:
        return None
    while words and words[0].startswith("-") and words[0] != "--":
        option = words.pop(0)
        if option == "-m":
            raise InvalidTaskCommandError("task -m (QingLong's timeout of one run) is not taken here: give the Run "
                                          "or schedule a timeout with --timeout")
        if option != "-l":
            raise InvalidTaskCommandError(f"task {option}: unknown option (the form is {_USAGE})")
    if not words or words[0] == "--" or not words[0]:
        raise InvalidTaskCommandError(f"task needs a script: {_USAGE}")
    file, rest = words[0], words[1:]
    problem = file_problem(file)
    if problem is not None:
        raise InvalidTaskCommandError(problem)
    if not rest:
        return ScriptTask(file=file)
    head = rest[0]
    if head == "now":
        return ScriptTask(file=file, args=_after_double_dash(rest[1:], "now"))
    if head in (TaskMode.DESI, TaskMode.CONC):
        mode = TaskMode(head)
        if len(rest) < 2 or rest[1] == "--":
            raise InvalidTaskCommandError(f"task {file} {head} needs the name of the variable whose accounts it "
                                          f"runs: task {file} {head} NAME [N...]")
        name = rest[1]
        if not _NAME.fullmatch(name):
            raise InvalidTaskCommandError(f"task {file} {head} {name}: not a variable name (letters, digits and _, "
                                          f"not starting with a digit)")
        split = rest.index("--") if "--" in rest else len(rest)
        selection = tuple(item for word in rest[2:split] for item in word.split())
        for item in selection:
            if not _item_valid(item):
                raise InvalidTaskCommandError(
                    f"task {file} {head} {name}: {item!r} is not an account number (N, A-B, A~B, A_B or max, "
                    f"from 1; several separated by spaces)")
        return ScriptTask(file=file, mode=mode, env_name=name, selection=selection, args=tuple(rest[split + 1:]))
    return ScriptTask(file=file, args=tuple(rest[1:] if head == "--" else rest))


def task_problem(argv: Sequence[str]) -> str | None:
    """Why the script task ``argv`` cannot run anywhere, or None (also when it is no task)."""
    try:
        parse_task(argv)
    except InvalidTaskCommandError as exc:
        return str(exc)
    return None


def file_problem(file: str) -> str | None:
    """Why ``file`` cannot be a task's script, or None: an extension no program is known for, or a
    relative path that climbs out of the scripts directory."""
    extension = script_extension(file)
    if extension not in INTERPRETERS:
        known = " ".join(INTERPRETERS)
        return (f"task {file}: no program is known for {'this extension' if extension else 'a file without an extension'} "
                f"(task runs {known}); run another program directly: -- PROGRAM ARGS")
    if not file.startswith("/") and (posixpath.normpath(file) + "/").startswith("../"):
        return f"task {file}: a relative script is found in the scripts directory, and this one climbs out of it"
    return None


def _after_double_dash(words: list[str], after: str) -> tuple[str, ...]:
    if not words:
        return ()
    if words[0] != "--":
        raise InvalidTaskCommandError(f"task FILE {after} takes its script's arguments after --: task FILE {after} "
                                      f"-- {' '.join(words)}")
    return tuple(words[1:])


def _item_valid(item: str) -> bool:
    match = _ITEM.fullmatch(item)
    return match is not None and all(part in (None, "max") or int(part) >= 1 for part in match.groups())


def split_accounts(value: str | None) -> list[str]:
    """The accounts of an ``&``-joined value, numbered from 1 by their place (QingLong's ``IFS='&'
    read -ra``): none for an unset or empty value; an empty last part (a trailing ``&``) is none."""
    if not value:
        return []
    parts = value.split("&")
    if parts[-1] == "":
        parts.pop()
    return parts


def selected_numbers(selection: Sequence[str], count: int, *, what: str) -> list[int]:
    """The account numbers (from 1) ``selection`` names among ``count`` accounts, in its order, each
    once (the first time it is named); every account when ``selection`` is empty.

    Raises:
        TaskAccountsError: a number beyond ``count``, or no account at all (``what`` names the
            variable in the message).
        InvalidTaskCommandError: an item that is not an account number.
    """
    if count == 0:
        raise TaskAccountsError(f"{what}: the variable is not set or empty: it has no account to run")
    numbers: list[int] = []
    for item in selection or ("1-max",):
        match = _ITEM.fullmatch(item)
        if match is None or not _item_valid(item):
            raise InvalidTaskCommandError(f"{what}: {item!r} is not an account number")
        first, last = (count if part == "max" else int(part) for part in (match.group(1), match.group(2) or match.group(1)))
        for number in (first, last):
            if number > count:
                raise TaskAccountsError(f"{what}: account {number} was asked for, and the variable has {count} "
                                        f"account{'s' if count != 1 else ''}")
        step = 1 if last >= first else -1
        for number in range(first, last + step, step):
            if number not in numbers:
                numbers.append(number)
    return numbers


def select_accounts(task: ScriptTask, value: str | None) -> list[tuple[int, str]]:
    """The accounts of ``value`` (the variable ``task.env_name`` as the task would see it) that
    ``task`` selects: ``(number, account)`` pairs in the order of its selection.

    Raises:
        TaskAccountsError: the variable has no account, fewer than asked for, or (``conc``) more
            selected than :data:`MAX_CONCURRENT_ACCOUNTS`.
    """
    what = f"task {task.file} {task.mode.value} {task.env_name}"
    accounts = split_accounts(value)
    numbers = selected_numbers(task.selection, len(accounts), what=what)
    if task.mode is TaskMode.CONC and len(numbers) > MAX_CONCURRENT_ACCOUNTS:
        raise TaskAccountsError(f"{what}: {len(numbers)} accounts selected; conc runs at most "
                                f"{MAX_CONCURRENT_ACCOUNTS} processes at once (select fewer, or use several schedules)")
    return [(number, accounts[number - 1]) for number in numbers]


def missing_interpreter_message(task: ScriptTask, path: str) -> str:
    """Why ``task`` cannot start: none of its programs is on the task's ``PATH`` (``path``)."""
    programs = task.programs
    names = programs[0] if len(programs) == 1 else ", ".join(programs[:-1]) + " or " + programs[-1]
    hint = INSTALL_HINTS.get(programs[0], f"install {programs[0]}")
    return f"task {task.file}: {names} is not on the task's PATH ({path}): {hint}"
