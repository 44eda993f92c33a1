"""The CLI's entry point and the one place that turns a command's errors into exit codes (the
codes and the error report themselves are ``reporting``'s, the floor below).

What a command imports is what it uses, and each command pays only for its own imports: this
module imports nothing beyond the interpreter's own start-up set and ``reporting`` (the error
hierarchy comes with the command that runs), so ``--version`` is answered before the parser
(argparse) is built, and the parser
(``edge_runtime.cli.parser``) imports only the module of the command being run. A command's
module imports the layers below it inside the functions that use them (docs/architecture.md:
imports), so ``submit`` never loads the service stack, cron or the lease authority.
"""

from __future__ import annotations

import sys

from edge_runtime.cli.reporting import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    VERSION_TEXT,
    drop_stdout,
    report_error,
    wants_json,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (``--version`` pays for no more)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

_GLOBAL_OPTIONS_WITH_VALUE = frozenset({"--db"})


def _command_in(argv: Sequence[str]) -> str | None:
    """The command word of ``argv`` (the first non-option after the global options), if any."""
    tokens = iter(argv)
    for token in tokens:
        if token in _GLOBAL_OPTIONS_WITH_VALUE:
            next(tokens, None)
        elif not token.startswith("-"):
            return token
    return None


def require_utf8(what: str, text: str) -> None:
    """Python hands undecodable argument and environment bytes over as lone surrogates, which
    fail deep inside SQLite or msgspec; every id, name, command and path we use is UTF-8 text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
        sys.stderr.write(f"Error: {what} ({shown}) is not valid UTF-8\n")
        raise SystemExit(EXIT_USAGE) from None


def _quiet_broken_pipe() -> int:
    # The reader went away (``| head``): leave as a SIGPIPE'd tool would, without a word.
    drop_stdout()
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    for position, token in enumerate(argv, 1):
        require_utf8(f"argument {position}", token)
    command = _command_in(argv)
    if getattr(sys, "frozen", False):  # first: a one-file child must not outlive its launcher
        from edge_runtime.cli.launcher import bind_to_launcher

        bind_to_launcher(command)
    if argv == ["--version"]:  # the common spelling, answered without building the parser
        sys.stdout.write(VERSION_TEXT + "\n")
        return 0
    if command == "submit":  # handed to a running service, before the command stack is imported
        from edge_runtime.cli.submit_handoff import try_hand_off

        handed_off = try_hand_off(argv)
        if handed_off is not None:
            return handed_off
    from edge_runtime.cli.parser import CliParser, build_parser

    CliParser.json_errors = wants_json(argv)
    parser = build_parser(load=() if command is None else (command,))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    def run() -> int:
        if args.db is None:
            # A command that a task hands to the service instead (`notify send`, with the
            # Attempt's capability in its environment): no database is opened here at all.
            handed_off = getattr(args, "run_without_db", None)
            code = None if handed_off is None else handed_off(args)
            if code is not None:
                return code
            from edge_runtime.cli.db_path import default_db_path, require_trusted_database_directory

            args.db = str(default_db_path())
            require_utf8("the database path", args.db)
            require_trusted_database_directory(args.db)  # a path from the environment, maybe another user's
        return args.run(args)

    # Also when --json stands where only the command parses it (`schedule edit ID --json`).
    return execute(run, json_errors=bool(getattr(args, "json", False)) or CliParser.json_errors)


def execute(run: Callable[[], int], *, json_errors: bool = False) -> int:
    """Run a command and turn its errors into the exit codes above (``edge-runtime-cluster`` runs
    the same user commands through it). With ``json_errors`` (the command's ``--json``) an error
    is one JSON object on stderr, ``{"error": {"code": ..., "message": ...}}``, same exit code."""
    # Here, not at the top: ``--version`` never needs the error hierarchy (a command's module has
    # loaded it by now).
    from edge_runtime.contract.errors import EdgeRuntimeError

    try:
        code = run()
        sys.stdout.flush()  # a closed pipe surfaces here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except EdgeRuntimeError as exc:
        report_error(json_errors, exc.code, str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        # Ctrl-C in `logs | slow-reader`: the reader is interrupted too, so the interpreter's final
        # flush of stdout would raise BrokenPipeError: drop what is left, as for a closed pipe.
        _quiet_broken_pipe()
        report_error(json_errors, "INTERRUPTED", "interrupted")
        return EXIT_INTERRUPTED
