"""The ``edge-runtime`` command line: argument parsing, output formats and exit codes only.

Dependency direction: cli -> local, service and contract; contract <- local and contract <-
service, which never import each other; cluster_postgres -> cli (the user commands, on its own
store). Only the composition roots here (``serve`` and ``common.LOCAL_STORES``) pick the Local
adapter. Each sub-command lives in its own module with ``register(subparsers)`` and
``run(args) -> int``; business rules stay in the layers below. Errors are printed to stderr as
one ``Error: ...`` line with a non-zero exit code.
"""

from __future__ import annotations

from edge_runtime.cli.main import main

__all__ = ["main"]
