"""What apk-tools 3 does to a root when it adds, upgrades and deletes one of our packages.

The router test (build/cross/cross-test.sh) has no apk binary: no registry ships apk-tools 3. This
applies a package to a musl root the way apk 3.0 does (src/database.c) for a package of
directories, regular files and symlinks, reading it with tests/support/adb_reader.py, which refuses
any package apk would refuse or trip over:

- add: the package's arch must be the root's (or noarch) and its dependencies among what the root's
  base system provides (OpenWrt's base provides libc). pre-install (pre-upgrade when another version
  is installed); directories created with their mode; every file written through a temporary file
  and renamed into place, with its mode, owner root and mtime. Under /etc (apk's protected paths:
  +etc, @etc/init.d, !etc/apk; for adding, all three protect alike) a file that exists and differs
  from what the installed version recorded, or that no package recorded, is kept: the package's
  copy goes to FILE.apk-new, unless it equals the file on disk. Files of the old version that the
  new one lacks are removed as on deletion. Then post-install or post-upgrade. The installed version
  again changes nothing (apk: already installed).
- del: pre-deinstall; every file removed except, under /etc, one changed since it was installed
  (its FILE.apk-new is removed in any case); the package's directories removed where empty;
  post-deinstall.
- scripts run as apk runs them: chrooted into the root, as ``SCRIPT VERSION [OLD-VERSION]``, with
  the environment PATH=/usr/sbin:/usr/bin:/sbin:/bin, APK_SCRIPT and APK_PACKAGE; a failing script
  fails the command.

What is installed is kept in ROOT/lib/apk/db/emulated.json (apk's own database is not written).
Usage: python -m tests.support.apk_root add ROOT PACKAGE --arch ARCH [--base NAME]...
       python -m tests.support.apk_root del ROOT NAME
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.adb_reader import AdbFormatError, Package, read_package

STATE = "lib/apk/db/emulated.json"
SCRIPT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


class ApkError(Exception):
    """What apk would refuse, or a script that failed."""


def _protected(path: str) -> bool:
    return path == "etc" or path.startswith("etc/")


def _digest(path: Path) -> str | None:
    """The SHA-256 of a regular file, the target of a symlink prefixed "->", None if absent."""
    if path.is_symlink():
        return "->" + os.readlink(path)
    if not path.exists():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load(root: Path) -> dict:
    state = root / STATE
    return json.loads(state.read_text()) if state.exists() else {}


def _save(root: Path, installed: dict) -> None:
    state = root / STATE
    state.parent.mkdir(parents=True, exist_ok=True)
    temp = state.with_name(state.name + ".tmp")
    temp.write_text(json.dumps(installed, indent=1, sort_keys=True))
    os.replace(temp, state)


def run_script(root: Path, name: str, kind: str, script: str | None, versions: list[str]) -> None:
    if not script:
        return
    relative = f"lib/apk/exec/{name}-{versions[0]}.{kind}"
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)
    try:
        print(f"* Executing {name}-{versions[0]}.{kind}", flush=True)
        result = subprocess.run(
            ["chroot", str(root), "/" + relative, *versions], cwd=root, stdin=subprocess.DEVNULL,
            env={"PATH": SCRIPT_PATH, "APK_SCRIPT": kind, "APK_PACKAGE": name}, check=False)
    finally:
        path.unlink()
    if result.returncode != 0:
        raise ApkError(f"{name}-{versions[0]}.{kind}: script exited with status {result.returncode}")


def _write(root: Path, package: Package, relative: str, destination: Path) -> None:
    file = next(f for f in package.files() if f.path == relative)
    temp = destination.with_name(f".apk.{destination.name}")
    temp.unlink(missing_ok=True)
    if file.link_target is not None:
        temp.symlink_to(file.link_target)
    else:
        temp.write_bytes(package.contents[relative])
        temp.chmod(file.acl.mode)
    os.lchown(temp, 0, 0)
    os.utime(temp, (file.mtime, file.mtime), follow_symlinks=False)
    os.replace(temp, destination)


def _remove_files(root: Path, files: dict[str, str | None], keep: set[str]) -> None:
    for relative, recorded in sorted(files.items()):
        if relative in keep:
            continue
        path = root / relative
        on_disk = _digest(path)
        if _protected(relative):
            (root / (relative + ".apk-new")).unlink(missing_ok=True)
            if on_disk is not None and on_disk != recorded:
                print(f"  kept changed {'/' + relative}", flush=True)
                continue
        if on_disk is not None:
            path.unlink()


def _remove_directories(root: Path, directories: list[str], keep: set[str]) -> None:
    for relative in sorted(directories, key=len, reverse=True):
        if relative and relative not in keep:
            try:
                (root / relative).rmdir()
            except OSError as error:
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                # Not empty: the base system's files, or files someone else put there, stay.


def add(root: Path, package_file: Path, arch: str, base: set[str]) -> None:
    package = read_package(package_file.read_bytes())
    name, version = str(package.info["name"]), str(package.info["version"])
    if package.info.get("arch") not in (arch, "noarch"):
        raise ApkError(f"{name}-{version}: arch {package.info.get('arch')} is not {arch}")
    missing = [dep for dep in package.info["depends"] if dep not in base]
    if missing:
        raise ApkError(f"{name}-{version}: unsatisfiable dependencies: {' '.join(missing)}")
    installed = _load(root)
    old = installed.get(name)
    if old and old["version"] == version:
        print(f"{name}-{version} is already installed", flush=True)
        return
    scripts = {kind: script.decode() for kind, script in package.scripts.items()}
    versions = [version, old["version"]] if old else [version]
    run_script(root, name, "pre-upgrade" if old else "pre-install", scripts.get("pre-upgrade" if old else "pre-install"), versions)

    for directory in package.directories:
        path = root / directory.path
        if not path.exists():
            path.mkdir()
            path.chmod(directory.acl.mode)
            os.lchown(path, 0, 0)
    recorded_before = old["files"] if old else {}
    files: dict[str, str | None] = {}
    for file in package.files():
        destination = root / file.path
        new = "->" + file.link_target if file.link_target is not None else file.sha256.hex()
        files[file.path] = new
        on_disk = _digest(destination)
        if _protected(file.path) and on_disk is not None and on_disk != recorded_before.get(file.path):
            if on_disk != new:
                print(f"  Installing file to /{file.path}.apk-new", flush=True)
                _write(root, package, file.path, root / (file.path + ".apk-new"))
            continue
        _write(root, package, file.path, destination)
    if old:
        _remove_files(root, old["files"], keep=set(files))
        _remove_directories(root, old["directories"], keep={d.path for d in package.directories})
    installed[name] = {"version": version, "files": files, "scripts": scripts,
                       "directories": [d.path for d in package.directories]}
    _save(root, installed)
    run_script(root, name, "post-upgrade" if old else "post-install", scripts.get("post-upgrade" if old else "post-install"), versions)


def delete(root: Path, name: str) -> None:
    installed = _load(root)
    if name not in installed:
        raise ApkError(f"{name} is not installed")
    record = installed.pop(name)
    versions = [record["version"]]
    run_script(root, name, "pre-deinstall", record["scripts"].get("pre-deinstall"), versions)
    _remove_files(root, record["files"], keep=set())
    _remove_directories(root, record["directories"], keep=set())
    _save(root, installed)
    run_script(root, name, "post-deinstall", record["scripts"].get("post-deinstall"), versions)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    adding = commands.add_parser("add")
    adding.add_argument("root", type=Path)
    adding.add_argument("package", type=Path)
    adding.add_argument("--arch", required=True)
    adding.add_argument("--base", action="append", default=[], help="a package the root's base system provides")
    deleting = commands.add_parser("del")
    deleting.add_argument("root", type=Path)
    deleting.add_argument("name")
    args = parser.parse_args(argv)
    try:
        if args.command == "add":
            add(args.root, args.package, args.arch, set(args.base))
        else:
            delete(args.root, args.name)
    except (ApkError, AdbFormatError) as error:
        sys.stderr.write(f"ERROR: {error}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
