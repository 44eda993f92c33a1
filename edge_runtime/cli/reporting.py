"""How a command ends: its exit code, an error reported on stderr, the version line.

The floor under the entry point (``main``), the parser and the submit hand-off: each of them
reports an error and picks an exit code the same way, and none of them imports another for it.
It imports nothing beyond the interpreter's start-up set (``--version`` pays for no more), and
msgspec only when an error is reported as JSON.
"""

from __future__ import annotations

import os
import sys

from edge_runtime import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Sequence

#: Exit codes: 0 success, 1 a runtime error (message on stderr), 2 bad usage (argparse's own).
EXIT_ERROR = 1
EXIT_USAGE = 2
#: Like a tool ended by SIGINT (128 + 2): what Ctrl-C leaves.
EXIT_INTERRUPTED = 130
#: Like a tool killed by SIGPIPE (128 + 13), without the traceback: ``list | head -1``.
EXIT_BROKEN_PIPE = 141
#: The error code of bad usage, as ``--json`` reports it (exit code 2).
USAGE_ERROR_CODE = "USAGE"
#: What ``--version`` prints (argparse's version action prints the same for its other spellings).
VERSION_TEXT = f"edge-runtime {__version__}"


def wants_json(argv: Sequence[str]) -> bool:
    """Whether ``--json`` is among the options of ``argv`` (before a ``--``: what follows is a command)."""
    for token in argv:
        if token == "--":
            return False
        if token == "--json":
            return True
    return False


def report_error(as_json: bool, code: str, message: str, *, plain: str | None = None) -> None:
    """One error on stderr: ``Error: MESSAGE [CODE]`` (or ``plain``), or with ``as_json`` one
    JSON object, ``{"error": {"code": ..., "message": ...}}``."""
    if as_json:
        import msgspec

        sys.stderr.write(msgspec.json.encode({"error": {"code": code, "message": message}}).decode() + "\n")
    else:
        sys.stderr.write(f"Error: {message} [{code}]\n" if plain is None else plain)


def drop_stdout() -> None:
    """The reader went away or was interrupted too (``| head``, Ctrl-C): point stdout at
    /dev/null, so what is left in its buffer cannot fail the interpreter's final flush."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
