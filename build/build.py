"""Build the edge-runtime artifacts into dist/ (``make build``).

- ``dist/edge-runtime``: the one-file executable.
- ``dist/edge-runtime-<version>-<platform>.tar.xz``: the one-folder build, tarred with xz.

Both come from build/edge-runtime.spec, one PyInstaller run per form (the one-folder form stores
its modules uncompressed so that xz can compress them together), with build/work/ as PyInstaller's
work and staging directory. Outputs are published the way every file
we produce outside SQLite is (build/atomic_publish.py): written to a temp file, fsynced, renamed,
directory fsynced. ``publish_onefile`` and ``publish_tarball`` take their destination, so the router
build (build/cross/package.py) publishes into its own directory through them.

A build costs minutes of CPU on a small machine, so it is skipped when dist/ already holds the
outputs of the same inputs (sources, migrations, build files, PyInstaller and Python versions,
options); ``--force`` rebuilds anyway.

Usage: build.py [--runtime-tmpdir PATH] [--force]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import platform
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import atomic_publish  # noqa: E402  (build/atomic_publish.py: the one publish step)

ROOT = Path(__file__).resolve().parents[1]
BUILD_DIR = ROOT / "build"
WORK_DIR = BUILD_DIR / "work"
STAGING_DIR = WORK_DIR / "dist"
DIST_DIR = ROOT / "dist"
SPEC = BUILD_DIR / "edge-runtime.spec"
STAMP = DIST_DIR / ".edge-runtime-build.json"
ONEFILE_NAME = "edge-runtime"

# The files whose content decides what the artifacts hold.
_INPUT_GLOBS = (
    "edge_runtime/**/*.py",
    "local_migrations/*.sql",
    "build/edge-runtime.spec",
    "build/edge-runtime.py",
    "build/excludes.toml",
    "build/exclusions.py",
    "build/build.py",
    "build/atomic_publish.py",
    "edge_runtime/service/native/monitor.c",
)


#: Directories where any local user may create entries: a fixed unpack directory baked under one of
#: them can be created first by another user, who then swaps the libraries the bootloader loads.
_SHARED_TMP_ROOTS = ("/tmp", "/var/tmp", "/usr/tmp", "/dev/shm", "/run/shm", "/run/lock", "/var/lock")


def runtime_tmpdir_problem(path: str) -> str | None:
    """Why ``path`` must not be baked in as the one-file build's unpack directory, or None.

    The bootloader creates and loads from it before any of our code runs (docs/building.md: unpack
    directory); the executable itself refuses one owned by another user or writable by others,
    but only after that first load, so the build refuses what is unsafe by design.
    """
    if not path.startswith("/"):
        return "it must be absolute: the bootloader resolves a relative one against whatever directory it starts in"
    normalized = os.path.normpath(path)
    for root in _SHARED_TMP_ROOTS:
        if normalized == root or normalized.startswith(root + "/"):
            return (
                f"it lies in {root}, where another user can create it first; leave RUNTIME_TMPDIR unset "
                "(a fresh private directory under $TMPDIR or /tmp per start) or pick one only root can create"
            )
    return None


class BuildError(Exception):
    """The build could not produce the artifacts; the message says which step failed."""


def platform_tag() -> str:
    """``linux-x86_64-glibc2.36``: the OS, CPU architecture and C library the build runs on.

    A PyInstaller build carries this machine's libpython and extension modules, so it runs only on
    the same CPU architecture with the same (or a newer) C library.
    """
    libc, libc_version = platform.libc_ver()
    tag = f"{sys.platform}-{platform.machine()}"
    return f"{tag}-{libc}{libc_version}" if libc else tag


def project_version() -> str:
    sys.path.insert(0, str(ROOT))
    try:
        from edge_runtime import __version__
    finally:
        sys.path.remove(str(ROOT))
    return __version__


def folder_name() -> str:
    return f"edge-runtime-{project_version()}-{platform_tag()}"


def tarball_path() -> Path:
    return DIST_DIR / f"{folder_name()}.tar.xz"


def input_fingerprint(options: list[str]) -> str:
    """SHA-256 over every input file (path and bytes) and the toolchain that turns them into the build."""
    import PyInstaller  # the build extra; imported here so --help works without it

    digest = hashlib.sha256()
    for pattern in _INPUT_GLOBS:
        for path in sorted(ROOT.glob(pattern)):
            if "__pycache__" in path.parts:
                continue
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    toolchain = [sys.version, PyInstaller.__version__, platform_tag(), *options]
    digest.update(json.dumps(toolchain).encode())
    return digest.hexdigest()


def publish_onefile(source: Path, final: Path | None = None) -> Path:
    """Publish the one-file executable ``source`` as ``final`` (default ``dist/edge-runtime``), mode 0755."""
    final = final or DIST_DIR / ONEFILE_NAME
    return atomic_publish.publish(final, lambda temp: shutil.copyfile(source, temp), mode=0o755)


def _normalized(member: tarfile.TarInfo) -> tarfile.TarInfo:
    # Who built it is nobody's business on the router; root-owned entries unpack the same everywhere.
    member.uid = member.gid = 0
    member.uname = member.gname = "root"
    return member


def publish_tarball(folder: Path, final: Path | None = None) -> Path:
    """Publish the one-folder build ``folder`` as an xz tarball ``final`` (default ``tarball_path()``)."""
    final = final or tarball_path()

    def write(temp: Path) -> None:
        # xz -9e: the one-folder build is mostly libpython and extension modules, which compress
        # well; the extra CPU is spent once, on the build machine.
        with tarfile.open(temp, "w:xz", preset=9 | lzma.PRESET_EXTREME) as tar:
            tar.add(folder, arcname=folder.name, filter=_normalized)

    return atomic_publish.publish(final, write)


def write_stamp(fingerprint: str, options: list[str], outputs: list[Path]) -> None:
    record = {"fingerprint": fingerprint, "options": options, "outputs": {p.name: p.stat().st_size for p in outputs}}
    atomic_publish.publish(STAMP, lambda temp: temp.write_text(json.dumps(record, indent=2) + "\n"))


def dist_is_current() -> bool:
    """Whether dist/ holds a build of the sources as they are now (whatever options it was built with).

    The built-binary smoke test uses this to skip, rather than fail, on a stale local dist/.
    """
    try:
        record = json.loads(STAMP.read_text())
    except FileNotFoundError:
        return False
    return up_to_date(input_fingerprint(list(record.get("options", []))))


def up_to_date(fingerprint: str) -> bool:
    try:
        record = json.loads(STAMP.read_text())
    except FileNotFoundError:
        return False
    if record.get("fingerprint") != fingerprint:
        return False
    outputs = record.get("outputs", {})
    return bool(outputs) and all(
        (DIST_DIR / name).is_file() and (DIST_DIR / name).stat().st_size == size for name, size in outputs.items()
    )


def run_pyinstaller(form: str, spec_args: list[str], *, zlib_level: int, clean: bool) -> Path:
    """One PyInstaller run of the spec for one form; returns its staging directory."""
    staging = STAGING_DIR / form
    command = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--log-level=WARN",
        # A work directory per form: PyInstaller's cache does not notice a changed compression level.
        f"--workpath={WORK_DIR / form}",
        f"--distpath={staging}",
        *(["--clean"] if clean else []),
        str(SPEC),
        "--",
        "--form",
        form,
        *spec_args,
    ]
    print("== " + " ".join(command), flush=True)
    # PYTHONNODEBUGRANGES: compile the collected bytecode without column-position tables (CPython's
    # documented switch for smaller code objects); they only place ^^^ markers under source lines in
    # tracebacks, and a frozen program has no source lines to show. The hash seed keeps repeated
    # builds of the same inputs alike.
    env = {
        **os.environ,
        "PYINSTALLER_ZLIB_COMPRESSION_LEVEL": str(zlib_level),
        "PYTHONNODEBUGRANGES": "1",
        "PYTHONHASHSEED": "0",
    }
    result = subprocess.run(command, cwd=ROOT, env=env, check=False)
    if result.returncode != 0:
        raise BuildError(f"PyInstaller ({form}) failed with exit code {result.returncode} (see its output above)")
    return staging


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="build.py", description="Build the edge-runtime artifacts into dist/.")
    parser.add_argument(
        "--runtime-tmpdir",
        metavar="PATH",
        default=os.environ.get("EDGE_RUNTIME_BUILD_RUNTIME_TMPDIR") or None,
        help="bake a fixed unpack directory into the one-file build (default: none, so the executable "
        "unpacks into $TMPDIR, else /tmp, at run time); also $EDGE_RUNTIME_BUILD_RUNTIME_TMPDIR",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even when dist/ is up to date")
    args = parser.parse_args(argv)
    problem = args.runtime_tmpdir and runtime_tmpdir_problem(args.runtime_tmpdir)
    if problem:
        parser.error(f"refusing --runtime-tmpdir {args.runtime_tmpdir}: {problem}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    onefile_args = ["--runtime-tmpdir", args.runtime_tmpdir] if args.runtime_tmpdir else []
    onefolder_args = ["--folder-name", folder_name()]
    fingerprint = input_fingerprint(onefile_args + onefolder_args)
    if not args.force and up_to_date(fingerprint):
        print(f"== dist/ is up to date with the sources ({STAMP.relative_to(ROOT)}); use --force to rebuild")
        return 0
    DIST_DIR.mkdir(exist_ok=True)
    try:
        # One-file: zlib level 9 everywhere (PyInstaller's PYZ default is 6), the bootloader inflates it.
        staging = run_pyinstaller("onefile", onefile_args, zlib_level=9, clean=args.force)
        onefile = publish_onefile(staging / ONEFILE_NAME)
        # One-folder: modules stored uncompressed (level 0), so xz compresses them all together.
        staging = run_pyinstaller("onefolder", onefolder_args, zlib_level=0, clean=args.force)
        tarball = publish_tarball(staging / folder_name())
    except (BuildError, OSError, tarfile.TarError) as exc:
        sys.stderr.write(f"Error: build failed: {exc}\n")
        return 1
    write_stamp(fingerprint, onefile_args + onefolder_args, [onefile, tarball])
    for path in (onefile, tarball):
        print(f"== built {path.relative_to(ROOT)}: {path.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
