"""``edge-runtime submit [--name N] [--env K=V] [--cwd DIR] -- CMD ARGS...``: queue a command as a new Run; print its id.

``submit --batch FILE|-`` queues many: one command a line (a JSON array of strings, or with
``--shell`` a line for ``sh -c``), every line checked before anything is stored, all stored in one
transaction (``RunStore.submit_batch``), one id a line printed. The options apply to every Run.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
from collections.abc import Iterator
from typing import Any

import msgspec

from edge_runtime import operations
from edge_runtime.cli.common import CREATE, LOCAL_STORES, add_json_flag, json_line, print_json, wake_service
from edge_runtime.contract.redaction import store_redactor
from edge_runtime.contract.durations import parse_duration_ms
from edge_runtime.contract.runs import MAX_BATCH_RUNS, MAX_RETRIES, InvalidRunCommandError, SubmitRunCommand

#: What ``--shell`` runs each line with (the shell every router has: busybox ``ash`` on OpenWrt).
SHELL_ARGV = ("sh", "-c")


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = subparsers.add_parser(
        "submit",
        help=help_text,
        description="Queue CMD ARGS... as a new Run. The command is executed directly (no shell); "
        "use `-- sh -c '...'` for shell syntax. With --batch FILE, queue one Run per line of FILE "
        "instead, all or none, with the options applying to every Run.",
    )
    parser.add_argument("--name", help="a short label shown by list and show")
    parser.add_argument("--timeout", metavar="D", help="cancel the Run (reason timeout) once it ran D (90s, 5m, 1h30m)")
    add_run_options(parser)
    parser.add_argument("--batch", metavar="FILE",
                        help="queue one Run per line of FILE (- for stdin), each a JSON array of strings "
                        f"(all checked first, stored in one transaction; at most {MAX_BATCH_RUNS}); print one id a line")
    parser.add_argument("--shell", action="store_true",
                        help="with --batch: each line is a shell command line, run as `sh -c LINE`")
    add_json_flag(parser)
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run")
    parser.set_defaults(run=run, stores=stores, usage_error=parser.error)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """``--env K=V`` and ``--cwd DIR``, the same on ``submit`` and the schedule commands."""
    parser.add_argument("--env", action="append", metavar="K=V",
                        help="a variable of this task only, over the shared ones (repeatable)")
    parser.add_argument("--cwd", metavar="DIR", help="the working directory (default: the service's work_dir)")
    parser.add_argument("--retries", metavar="N", type=_retries,
                        help=f"start a new Attempt after a failed or lost one, at most N times (0..{MAX_RETRIES})")
    parser.add_argument("--retry-delay", metavar="D",
                        help="wait D before the first retry (default 10s); doubled for each next one, at most 1h")
    parser.add_argument("--user", metavar="U",
                        help="run as this device user, with its groups and HOME (default: the service's task_user "
                             "setting, else the service's own user); it must exist")


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The given ``--env``/``--cwd``/``--retries``/``--retry-delay``/``--user`` as command fields
    (``edge_runtime.operations.run_options``: the panel validates the same way). A user is checked
    against this host's users when its stores run the tasks here (``users_here``).

    Raises:
        InvalidRunCommandError: a malformed ``K=V``, ``--cwd`` is not a directory, no such user.
    """
    here = getattr(args.stores, "users_here", False)
    return operations.run_options(env=args.env, cwd=args.cwd, retries=args.retries, retry_delay=args.retry_delay,
                                  task_user=args.user, user_exists=operations.device_user_exists if here else None)


def _retries(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number 0..{MAX_RETRIES}, got {text!r}") from None
    if not 0 <= value <= MAX_RETRIES:
        raise argparse.ArgumentTypeError(f"expected a whole number 0..{MAX_RETRIES}, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if args.batch is not None:
        if argv:
            args.usage_error("give either --batch FILE or -- CMD ARGS, not both")
        return _run_batch(args)
    if args.shell:
        args.usage_error("--shell applies to the lines of --batch; for one command use -- sh -c '...'")
    # Validate before touching the store: a bad request must not even create the database file.
    command = SubmitRunCommand(argv=argv, **_common_fields(args))
    check_task_first(args, command.argv, command.env)
    with args.stores.open(args, CREATE) as store:
        record = operations.submit(store, command, note_when_none=True,
                                   scripts_dir=lambda: args.stores.scripts_dir(args))
        printed = handed_off_output(store, record, as_json=args.json)
    sys.stdout.write(printed)
    return 0


def check_task_first(args: argparse.Namespace, argv: list[str], env: Any) -> None:
    """Check a ``task`` command before a database that does not exist yet is created for it (a
    refused command creates nothing; without a database there is no shared ``PATH`` either). An
    existing database is opened first: ``operations.submit`` and ``add_schedule`` check there,
    with its shared variables."""
    db = getattr(args, "db", None)
    if db is not None and not os.path.exists(db):
        operations.require_runnable_task(argv, env, lambda: args.stores.scripts_dir(args))


def handed_off_output(store: Any, record: Any, *, as_json: bool) -> str:
    """What ``submit`` prints for the stored ``record``: its id, or with ``--json`` the record
    (secrets masked), one line."""
    if not as_json:
        return record.id + "\n"
    return json_line(record, store_redactor(store))


def handed_off_command(db_path: str, request: Any) -> tuple[SubmitRunCommand, bool] | None:
    """The command of a ``submit`` handed to the service on ``db_path`` (``request``: a
    ``HandoffRequest``) and whether it asked for ``--json``; None when the hand-off declines it
    and the client must run it itself: not a plain ``submit`` (a batch, help, a usage error), a
    database other than the service's, or a working directory only the client can resolve.

    Raises:
        EdgeRuntimeError: the command is refused (the client's own run reports it the usual way).
    """
    from edge_runtime.cli.parser import Declined, DecliningParser, build_parser

    try:
        args = build_parser(load=("submit",), parser_class=DecliningParser).parse_args(request.argv)
    except Declined:
        return None
    if args.command != "submit" or args.batch is not None or args.shell:
        return None
    named_db = request.db_path if args.db is None else os.path.join(request.cwd, args.db)
    if os.path.abspath(named_db) != os.path.abspath(db_path) or os.path.abspath(request.db_path) != os.path.abspath(db_path):
        return None
    if args.cwd is not None:
        if args.cwd.startswith("~"):
            return None  # the client's home, not the service's
        args.cwd = os.path.join(request.cwd, args.cwd)  # relative to the client's directory
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    return SubmitRunCommand(argv=argv, **_common_fields(args)), bool(args.json)


def _common_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The fields every Run of this ``submit`` gets (its options), checked once."""
    return {
        "name": msgspec.UNSET if args.name is None else args.name,
        "timeout_ms": msgspec.UNSET if args.timeout is None else parse_duration_ms(args.timeout),
        **run_options(args),
    }


def _run_batch(args: argparse.Namespace) -> int:
    # Every line is checked before the store is opened: one bad line stores nothing.
    commands = batch_commands(args.batch, _common_fields(args), shell=args.shell)
    for command in commands:
        check_task_first(args, command.argv, command.env)
    with args.stores.open(args, CREATE) as store:
        scripts_dir = functools.cache(lambda: args.stores.scripts_dir(args))  # read once, for a task line only
        shared = functools.cache(operations.shared_variables(store))
        for command in commands:
            operations.require_runnable_task(command.argv, command.env, scripts_dir, shared)
        run_ids = store.runs.submit_batch(commands)
        wake_service(store.wake_workers, note_when_none=True)
    if args.json:
        print_json(run_ids)
    else:
        sys.stdout.write("".join(run_id + "\n" for run_id in run_ids))
    return 0


def batch_commands(source: str, fields: dict[str, Any], *, shell: bool) -> list[SubmitRunCommand]:
    """The commands of a batch file (``-``: stdin): one a line, blank lines skipped.

    Raises:
        InvalidRunCommandError: the file cannot be read, holds no command or more than
            ``MAX_BATCH_RUNS``, or a line is not a valid command (the first such line, by its number).
    """
    decode = None if shell else msgspec.json.Decoder(list[str]).decode
    commands: list[SubmitRunCommand] = []
    for number, raw in _numbered_lines(source):
        text = raw.strip()
        if not text:
            continue
        if len(commands) == MAX_BATCH_RUNS:
            raise InvalidRunCommandError(
                f"--batch {source}: more than {MAX_BATCH_RUNS} commands (at most {MAX_BATCH_RUNS} Runs a batch); "
                f"split it (line {number} is the first one over)")
        try:
            argv = [*SHELL_ARGV, text] if shell else decode(text)
            commands.append(SubmitRunCommand(argv=argv, **fields))
        except (msgspec.DecodeError, InvalidRunCommandError) as exc:
            form = "shell command" if shell else "JSON array of strings"
            raise InvalidRunCommandError(f"--batch {source}, line {number}: not a valid command ({form}): {exc}") from None
    if not commands:
        raise InvalidRunCommandError(f"--batch {source}: no command in it (one a line)")
    return commands


def _numbered_lines(source: str) -> Iterator[tuple[int, str]]:
    """The lines of ``source`` (``-``: stdin) with their numbers from 1, decoded as UTF-8; read as
    they are needed, so a file far over the batch limit is not read to its end."""
    try:
        with contextlib.nullcontext(sys.stdin.buffer) if source == "-" else open(source, "rb") as file:
            for number, raw in enumerate(file, 1):
                try:
                    yield number, raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise InvalidRunCommandError(f"--batch {source}, line {number}: not valid UTF-8") from None
    except OSError as exc:
        raise InvalidRunCommandError(f"--batch {source}: cannot read it: {exc.strerror or exc}") from None
