"""The ``edge-runtime`` command line: argument parsing, output formats and exit codes only.

Dependency direction: contract <- local <- service <- cli. Each sub-command lives in its own
module with ``register(subparsers)`` and ``run(args) -> int``; business rules stay in the layers
below. Errors are printed to stderr as one ``Error: ...`` line with a non-zero exit code.
"""

from __future__ import annotations

from edge_runtime.cli.main import main

__all__ = ["main"]
