"""The built executables under test: where they are, both forms as one fixture, a scrubbed environment, and
a bounded run and wait (tests/artifact/test_built_binary*.py).

Without a current build the fixtures skip, saying why; with ``EDGE_RUNTIME_REQUIRE_ARTIFACT=1`` (CI, right
after ``make build``) a missing or stale build fails instead.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.artifact_layout import ROOT, load_path_module

ARTIFACT_DIR_ENV = "EDGE_RUNTIME_ARTIFACT_DIR"
REQUIRE_ENV = "EDGE_RUNTIME_REQUIRE_ARTIFACT"
LIVENESS_TIMEOUT_S = 30.0  # a guard against hanging, not a performance assertion


def unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: CI must test the artifact it just built)")
    pytest.skip(f"{reason}; run `make build` (CI runs this right after building)")


def artifact_dir() -> Path:
    return Path(os.environ.get(ARTIFACT_DIR_ENV) or ROOT / "dist")


@pytest.fixture(scope="module", params=["onefile", "onefolder"])
def executable(request, tmp_path_factory) -> Path:
    dist = artifact_dir()
    if ARTIFACT_DIR_ENV not in os.environ:
        build = load_path_module("edge_runtime_build_script", ROOT / "build" / "build.py")
        if (dist / "edge-runtime").exists() and not build.dist_is_current():
            unavailable("dist/ holds a build of older sources")
    if request.param == "onefile":
        path = dist / "edge-runtime"
        if not path.is_file():
            unavailable(f"no one-file build at {path}")
        return path
    tarballs = sorted(dist.glob("edge-runtime-*.tar.xz"))
    if not tarballs:
        unavailable(f"no one-folder tarball in {dist}")
    target = tmp_path_factory.mktemp("onefolder")
    with tarfile.open(tarballs[-1]) as tar:
        load_path_module("artifact_audit", ROOT / "artifact_audit.py").extract_safely(tar, target)
    (folder,) = target.iterdir()
    return folder / "edge-runtime"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A scrubbed environment: nothing points back into the source tree or the venv."""
    home = tmp_path / "home"
    home.mkdir()
    unpack = tmp_path / "unpack"
    unpack.mkdir()
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(unpack),  # the one-file build unpacks here (docs/building.md: unpack directory)
        "LANG": "C.UTF-8",
        "COLUMNS": "100",
        # A router build tested under qemu-user (make cross-test): where the target's musl loader is.
        **({"QEMU_LD_PREFIX": os.environ["QEMU_LD_PREFIX"]} if os.environ.get("QEMU_LD_PREFIX") else {}),
    }


def run(executable: Path, args: list[str], env: dict[str, str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(executable), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=LIVENESS_TIMEOUT_S, **kwargs
    )


def wait_for(predicate: Callable[[], object], what: str) -> object:
    deadline = time.monotonic() + LIVENESS_TIMEOUT_S
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out after {LIVENESS_TIMEOUT_S} s waiting for {what}")
