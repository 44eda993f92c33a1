"""Hardening against the built executables: what a task inherits, where the build unpacks.

1. A task gets the environment the service was started with: none of the bootloader's ``_PYI_*``
   variables, and the original ``LD_LIBRARY_PATH`` (or none), never the unpack directory.
2. The one-file build refuses an unpack directory another user owns or may write, whether it
   comes from ``$TMPDIR`` or is baked in with ``RUNTIME_TMPDIR``; the one-folder build refuses an
   install directory another user could change; the build refuses to bake a shared path.

Same rules as test_built_binary.py: skipped, saying why, without a current build; CI runs it with
``EDGE_RUNTIME_REQUIRE_ARTIFACT=1`` right after ``make build``, where it cannot skip.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_runtime import __version__
from tests.support.artifact_layout import ROOT, load_path_module
from tests.support.built_binary import LIVENESS_TIMEOUT_S, env, executable, run, wait_for  # noqa: F401
from tests.support.hostile_user import OtherUser, other_user  # noqa: F401

REFUSED = "[ARTIFACT_UNPACK_DIR_UNSAFE]"


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A sticky world-writable directory like /tmp, where the other user can act first."""
    path = Path(tempfile.mkdtemp(prefix="edge-hardening-", dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _task_output(executable: Path, env: dict[str, str], tmp_path: Path, argv: list[str]) -> str:
    """Start ``serve`` with ``env``, run ``argv`` as a Run, return its captured output."""
    db = tmp_path / "svc" / "edge.db"
    log = open(tmp_path / "serve.log", "w")
    service = subprocess.Popen([str(executable), "--db", str(db), "serve"], env=env, cwd=tmp_path,
                               stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "service.started" in (tmp_path / "serve.log").read_text(), "serve to start")
        submitted = run(executable, ["--db", str(db), "submit", "--", *argv], env, tmp_path)
        assert submitted.returncode == 0, submitted.stderr
        run_id = submitted.stdout.strip()

        def ended() -> bool:
            shown = run(executable, ["--db", str(db), "show", run_id, "--json"], env, tmp_path)
            return json.loads(shown.stdout)["status"] in ("succeeded", "failed")

        wait_for(ended, "the task to end")
        logs = run(executable, ["--db", str(db), "logs", run_id], env, tmp_path)
        assert logs.returncode == 0, logs.stderr
        return logs.stdout
    finally:
        service.send_signal(signal.SIGTERM)
        try:
            service.wait(timeout=LIVENESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
        log.close()


@pytest.mark.e2e
@pytest.mark.parametrize("library_path", [None, "/opt/vendor/lib:/opt/other/lib"])
def test_a_task_gets_the_services_environment_without_the_bundlers(executable, env, tmp_path, library_path) -> None:
    service_env = dict(env) if library_path is None else {**env, "LD_LIBRARY_PATH": library_path}
    # A task gets only the documented base and what pass_env lists (docs/environment.md): listing
    # the library path and a bundler variable proves the bundler's parts are removed all the same.
    service_env["EDGE_RUNTIME_PASS_ENV"] = "LD_LIBRARY_PATH,TMPDIR,_PYI_ARCHIVE_FILE"
    # The task prints its environment, then runs the same executable: with the service's unpack
    # directory on its library path it would load (another user's copy of) libpython from there.
    output = _task_output(executable, service_env, tmp_path,
                          ["sh", "-c", 'env; echo "== $("$0" --version)"', str(executable)])
    lines = output.splitlines()
    task_env = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("== "))
    assert not [key for key in task_env if key.startswith("_PYI_")], task_env
    assert "LD_LIBRARY_PATH_ORIG" not in task_env
    assert task_env.get("LD_LIBRARY_PATH") == library_path
    assert task_env["EDGE_RUNTIME_RUN_ID"] and task_env["TMPDIR"] == env["TMPDIR"]
    assert lines[-1] == f"== edge-runtime {__version__}"


#: The one-file build's unpack directory (the one-folder build unpacks nothing).
onefile_only = pytest.mark.parametrize("executable", ["onefile"], indirect=True)


def _refused(result: subprocess.CompletedProcess, db: Path) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith("Error: unsafe ") and result.stderr.rstrip().endswith(REFUSED), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not db.exists()  # nothing of the command ran


@onefile_only
def test_an_unpack_directory_another_user_created_first_is_refused(executable, env, tmp_path, shared_dir,
                                                                   other_user: OtherUser) -> None:
    planted = shared_dir / "edge-unpack"
    other_user.run(["mkdir", "-m", "0755", str(planted)])
    db = tmp_path / "edge.db"
    result = run(executable, ["--db", str(db), "migrate"], {**env, "TMPDIR": str(planted)}, tmp_path)
    _refused(result, db)
    assert f"owned by uid {other_user.uid}" in result.stderr


@onefile_only
@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_an_unpack_directory_writable_by_group_or_others_is_refused(executable, env, tmp_path, mode) -> None:
    unpack = tmp_path / "shared-unpack"
    unpack.mkdir()
    unpack.chmod(mode)
    db = tmp_path / "edge.db"
    result = run(executable, ["--db", str(db), "migrate"], {**env, "TMPDIR": str(unpack)}, tmp_path)
    _refused(result, db)
    assert "writable by group or others" in result.stderr
    assert list(unpack.iterdir()) == []  # the bootloader removed its _MEI directory


@onefile_only
def test_a_sticky_unpack_directory_like_tmp_is_accepted(executable, env, tmp_path) -> None:
    unpack = tmp_path / "sticky-unpack"
    unpack.mkdir()
    unpack.chmod(0o1777)  # /tmp: others may add entries but not rename or remove our _MEI directory
    result = run(executable, ["--version"], {**env, "TMPDIR": str(unpack)}, tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("executable", ["onefolder"], indirect=True)
def test_a_one_folder_install_another_user_can_change_is_refused(executable, env, tmp_path, shared_dir,
                                                                 other_user: OtherUser) -> None:
    install = shared_dir / "opt"
    other_user.run(["mkdir", "-m", "0755", str(install)])
    shutil.copytree(executable.parent, install / executable.parent.name, symlinks=True)
    db = tmp_path / "edge.db"
    result = run(install / executable.parent.name / "edge-runtime", ["--db", str(db), "migrate"], env, tmp_path)
    _refused(result, db)
    assert "unsafe install directory" in result.stderr and f"owned by uid {other_user.uid}" in result.stderr


# ------------------------------------------------------------------ a baked RUNTIME_TMPDIR

@pytest.mark.parametrize("path", ["/tmp/edge-runtime", "/var/tmp/x/y", "/dev/shm/edge", "/tmp/../tmp/e", "rt", "./x"])
def test_the_build_refuses_to_bake_a_shared_or_relative_unpack_directory(path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "build" / "build.py"), "--runtime-tmpdir", path],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"refusing --runtime-tmpdir {path}: it " in result.stderr
    build = load_path_module("edge_runtime_build_script", ROOT / "build" / "build.py")
    assert build.runtime_tmpdir_problem("/mnt/usb/edge-unpack") is None


@pytest.fixture(scope="module")
def baked_base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="edge-baked-", dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def baked_executable(executable, baked_base: Path, tmp_path_factory) -> Path:
    """A one-file build of the same sources with ``<baked_base>/rt`` baked in as RUNTIME_TMPDIR.

    Built with the spec directly: build.py (rightly) refuses to bake a path under /tmp, and this
    is the design the check at run time must still catch in an executable built before that rule.
    """
    assert not (executable.parent / "_internal").is_dir(), "RUNTIME_TMPDIR applies to the one-file build only"
    work = tmp_path_factory.mktemp("baked-build")
    command = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level=WARN", f"--workpath={work / 'work'}",
               f"--distpath={work / 'dist'}", str(ROOT / "build" / "edge-runtime.spec"), "--", "--form", "onefile",
               "--runtime-tmpdir", str(baked_base / "rt")]
    built = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900,
                           env={**os.environ, "PYTHONNODEBUGRANGES": "1"})
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-4000:]
    return work / "dist" / "edge-runtime"


@pytest.mark.e2e
@onefile_only
def test_a_baked_unpack_directory_another_user_created_first_is_refused(baked_executable, baked_base, env, tmp_path,
                                                                        other_user: OtherUser) -> None:
    baked = baked_base / "rt"
    # Missing: the bootloader creates it (root-owned, 0755 under umask 022) and it is used.
    shutil.rmtree(baked, ignore_errors=True)
    ok = run(baked_executable, ["--version"], {**env, "TMPDIR": str(tmp_path)}, tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert baked.stat().st_uid == os.geteuid() and list(baked.iterdir()) == []  # $TMPDIR was ignored
    # Created first by another user: refused, before any command runs.
    shutil.rmtree(baked)
    other_user.run(["mkdir", "-m", "0755", str(baked)])
    db = tmp_path / "edge.db"
    result = run(baked_executable, ["--db", str(db), "migrate"], env, tmp_path)
    _refused(result, db)
    assert f"{baked} is owned by uid {other_user.uid}" in result.stderr
