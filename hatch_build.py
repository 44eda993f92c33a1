"""Wheel build hook: compile the per-Attempt monitor (docs/monitor.md) into the wheel, or, for an
editable install, into the source tree.

The service refuses to start without ``edge_runtime/service/native/edge-runtime-monitor``, so a
non-editable install (``pip install .``, the wheel) must carry it. The program is built here from
``monitor.c`` with the same compiler and flags as ``make monitor`` (``$CC``, default ``cc``), for
the machine that builds the wheel, which is then tagged for that platform (not ``py3-none-any``).
A source tree's binary is never copied in: it may be stale or another machine's.

An editable install (``pip install -e .``) runs the code of the source tree, which looks for its
monitor beside itself: the program is built where ``make monitor`` puts it, so ``edge-runtime
serve`` works after either.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MONITOR_SOURCE = "edge_runtime/service/native/monitor.c"
MONITOR_TARGET = "edge_runtime/service/native/edge-runtime-monitor"
#: The Makefile's MONITOR_CFLAGS (tests/unit/test_wheel_monitor.py keeps the two equal).
MONITOR_CFLAGS = ("-Os", "-Wall", "-Wextra", "-D_FORTIFY_SOURCE=2")


def compile_monitor(source: Path, binary: Path) -> None:
    """``source`` compiled to the executable ``binary`` with ``$CC`` and the Makefile's flags."""
    compiler = shlex.split(os.environ.get("CC") or "cc")
    subprocess.run([*compiler, *MONITOR_CFLAGS, "-o", str(binary), str(source)], check=True)
    binary.chmod(0o755)


class MonitorBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        source = Path(self.root) / MONITOR_SOURCE
        if version == "editable":
            target = Path(self.root) / MONITOR_TARGET
            building = target.with_name(target.name + ".tmp")
            compile_monitor(source, building)
            os.replace(building, target)  # as make does: never a half-written program in its place
            return
        out_dir = Path(tempfile.mkdtemp(prefix="edge-runtime-monitor-"))
        self._out_dir = out_dir
        binary = out_dir / "edge-runtime-monitor"
        compile_monitor(source, binary)
        build_data["force_include"][str(binary)] = MONITOR_TARGET
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        out_dir = getattr(self, "_out_dir", None)
        if out_dir is not None:
            for child in out_dir.iterdir():
                child.unlink()
            out_dir.rmdir()
