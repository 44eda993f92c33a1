"""The ``edge-runtime`` command line: argument parsing, output formats and exit codes only.

Dependency direction: cli -> contract, local, service, operations and the faces it mounts (panel,
qinglong); contract <- local, contract <- service and contract <- qinglong, which never import
each other; cluster_postgres -> cli (the user commands, on its own store). Only the composition roots here (``serve`` and ``common.LOCAL_STORES``) pick the Local
adapter. Each sub-command lives in its own module with ``register(subparsers)`` and
``run(args) -> int``; business rules stay in the layers below. Errors are printed to stderr as
one ``Error: ...`` line with a non-zero exit code.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (``--version`` pays for no more)
if TYPE_CHECKING:
    from collections.abc import Sequence

try:
    from edge_runtime.cli.reporting import EXIT_INTERRUPTED, drop_stdout

    # Imported here, before ``main`` below is defined: importing a submodule sets the package's
    # attribute of its name, which must stay the function the console script and builds call.
    from edge_runtime.cli.main import main as _run
except KeyboardInterrupt:  # Ctrl-C while the CLI loads (argparse, gettext): leave as quietly
    raise SystemExit(130) from None  # EXIT_INTERRUPTED, perhaps not loaded yet


def main(argv: Sequence[str] | None = None) -> int:
    """The console script's entry point: :func:`edge_runtime.cli.main.main`, wrapped so that a
    Ctrl-C while the CLI is still loading (argparse, gettext, the command's module) ends it as
    quietly as one while it runs: no traceback, exit code 130. A Ctrl-C after the command
    returned (while the interpreter exits) ends the process by the signal, also without a word
    (as the console script only: called with ``argv``, the caller's SIGINT handler is left alone)."""
    # The interpreter's own C module (already loaded at start-up): ``signal`` would import enum.
    import _signal as signal

    try:
        return _run(argv)
    except KeyboardInterrupt:
        drop_stdout()
        return EXIT_INTERRUPTED
    finally:
        # Only as the console script (argv from sys.argv): a caller in-process keeps its handler.
        if argv is None and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, signal.SIG_DFL)


__all__ = ["EXIT_INTERRUPTED", "drop_stdout", "main"]
