"""A non-editable install carries the per-Attempt monitor: the wheel (what ``pip install .``
installs) is built in a temporary directory, holds an executable ELF monitor compiled from
``monitor.c`` at the path the service looks in, the service finds it from the installed copy,
and the artifact audit's ``monitor`` rule knows it."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support.artifact_layout import ROOT as REPO, load_path_module

artifact_audit = load_path_module("artifact_audit", REPO / "artifact_audit.py")

MONITOR = "edge_runtime/service/native/edge-runtime-monitor"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (built,) = out.glob("*.whl")
    return built


def test_the_wheel_holds_an_executable_monitor_built_for_this_platform(wheel: Path) -> None:
    assert not wheel.name.endswith("-none-any.whl")  # a native program inside: a platform wheel
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo(MONITOR)
        assert archive.read(info)[:4] == b"\x7fELF"
        assert (info.external_attr >> 16) & stat.S_IXUSR


def test_the_installed_copy_finds_its_monitor(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            path = Path(archive.extract(info, target))
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                path.chmod(mode)
    probe = ("import edge_runtime.service.monitor as m; p = m.monitor_path(); "
             "print(p.relative_to(m.__file__.rsplit('/edge_runtime/', 1)[0]))")
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {probe}"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == MONITOR


def test_the_audit_reads_a_wheel_and_its_monitor_rule_passes(wheel: Path) -> None:
    report = artifact_audit.read_artifact(wheel, {"onefile_bytes": 0, "onefolder_tar_xz_bytes": 0})
    assert report.form == "wheel"
    result = artifact_audit.rule_monitor(report)
    assert result.passed, result.detail


def test_the_hook_compiles_with_the_makefiles_flags() -> None:
    makefile = (REPO / "Makefile").read_text()
    flags = re.search(r"^MONITOR_CFLAGS := (.*)$", makefile, re.M).group(1).split()
    hook = (REPO / "hatch_build.py").read_text()  # not imported: hatchling lives in pip's build environment
    hook_flags = re.search(r"^MONITOR_CFLAGS = \((.*)\)$", hook, re.M).group(1)
    assert flags == re.findall(r'"([^"]+)"', hook_flags)


def _source_copy(target: Path) -> Path:
    """This checkout's tracked files in ``target``, without a monitor program built in it."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in listed.decode().split("\0"):
        if name and name != MONITOR and (REPO / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target / name)
    assert not (target / MONITOR).exists()
    return target


def test_an_editable_install_builds_the_monitor_where_its_code_looks_and_serve_starts(tmp_path: Path) -> None:
    source = _source_copy(tmp_path / "clone")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # The dependencies are this environment's own (no index is asked): a .pth names its packages.
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # What a user of a clone may run instead of make.
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps", "-e", str(source)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    monitor = source / MONITOR
    assert monitor.read_bytes()[:4] == b"\x7fELF" and os.access(monitor, os.X_OK)
    (tmp_path / "state").mkdir(mode=0o700)
    env = {"PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(tmp_path),
           "EDGE_RUNTIME_DB": str(tmp_path / "state" / "e.db")}
    serve = subprocess.Popen(["edge-runtime", "serve"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        first = serve.stderr.readline()
    finally:
        serve.terminate()
        rest = serve.communicate(timeout=60)[1]
    assert " service.started " in first, first + rest  # not SERVICE_MONITOR_MISSING
