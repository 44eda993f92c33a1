"""PyInstaller entry script for the ``edge-runtime`` executable (same as ``python -m edge_runtime``).

Named with a hyphen on purpose: the build puts this directory on the analysis path, and a file
named like a module (``edge_runtime.py``) would shadow the real package.
"""

import os
import sys

if getattr(sys, "frozen", False) and hasattr(sys, "_MEIPASS"):
    # One-file and one-folder builds: refuse to run from an unpack (or install) directory another
    # user could have changed. Too late to stop the bootloader's own loads; see docs/building.md: unpack directory.
    from edge_runtime.service.trusted_paths import unpack_directory_problem

    # The one-file bootloader names its own unpack directory here; a one-folder build sets nothing.
    _one_file = os.environ.get("_PYI_APPLICATION_HOME_DIR") == sys._MEIPASS
    _problem = unpack_directory_problem(sys._MEIPASS, one_file=_one_file)
    if _problem is not None:
        sys.stderr.write(
            f"Error: unsafe {'unpack' if _one_file else 'install'} directory: {_problem}; the bootloader already loaded Python from it, "
            "so nothing else runs (docs/building.md: unpack directory) [ARTIFACT_UNPACK_DIR_UNSAFE]\n"
        )
        sys.exit(1)

try:
    from edge_runtime.cli import main  # noqa: E402
except KeyboardInterrupt:  # Ctrl-C while the CLI loads: as quiet as once it runs (no traceback)
    sys.exit(130)

sys.exit(main())
