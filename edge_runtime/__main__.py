"""``python -m edge_runtime`` runs the CLI."""

import sys

from edge_runtime.cli import main

if __name__ == "__main__":
    sys.exit(main())
