"""PyInstaller entry script for the ``edge-runtime`` executable (same as ``python -m edge_runtime``).

Named with a hyphen on purpose: the build puts this directory on the analysis path, and a file
named like a module (``edge_runtime.py``) would shadow the real package.
"""

import sys

from edge_runtime.cli import main

sys.exit(main())
