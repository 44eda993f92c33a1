"""The OpenWrt packages of a router build (build/cross/openwrt-package.sh): the .ipk for opkg and
the .apk for apk 3 hold the same files, from the one-folder tarball, and what each package manager
needs to keep the settings and run the service.

Run against a stand-in one-folder tarball (a few files, the real init script, defaults and
installer), so this takes seconds; `make cross-test` installs the real packages under qemu-user.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.support.adb_reader import read_package
from tests.support.artifact_layout import ROOT

OPENWRT = ROOT / "build" / "openwrt"
NAME = "edge-runtime-9.9.9-linux-aarch64_cortex-a53-musl"
VERSION = "9.9.9-r1"
ARCH = "aarch64_cortex-a53"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in build in DIR (tarball and the `edge-runtime` link), packaged by the script."""
    out = tmp_path_factory.mktemp("dist")
    folder = tmp_path_factory.mktemp("folder") / NAME
    (folder / "_internal").mkdir(parents=True)
    (folder / "openwrt").mkdir()
    (folder / "edge-runtime").write_bytes(b"\x7fELF stand-in")
    (folder / "_internal" / "libpython3.11.so.1.0").write_bytes(b"\x7fELF" + bytes(5000))
    for source, target, mode in (("install.sh", "install.sh", 0o755), ("edge-runtime.init", "openwrt/edge-runtime.init", 0o755),
                                 ("edge-runtime.config", "openwrt/edge-runtime.config", 0o644)):
        (folder / target).write_bytes((OPENWRT / source).read_bytes())
        (folder / target).chmod(mode)
    (folder / "edge-runtime").chmod(0o755)
    with tarfile.open(out / f"{NAME}.tar.xz", "w:xz") as tar:
        tar.add(folder, arcname=NAME)
    (out / "edge-runtime").symlink_to(NAME)
    env = {**os.environ, "EDGE_CROSS_CACHE": str(tmp_path_factory.mktemp("cache")), "EDGE_CROSS_BUILD_PYTHON": sys.executable}
    result = subprocess.run(["bash", str(ROOT / "build" / "cross" / "openwrt-package.sh"), "aarch64-musl", str(out), VERSION],
                            env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _ipk_members(ipk: Path) -> tuple[dict[str, tarfile.TarInfo], dict[str, bytes], dict[str, bytes]]:
    with tarfile.open(ipk) as outer:
        data = tarfile.open(fileobj=io.BytesIO(outer.extractfile("./data.tar.gz").read()))
        control = tarfile.open(fileobj=io.BytesIO(outer.extractfile("./control.tar.gz").read()))
    members = {m.name.removeprefix("./"): m for m in data.getmembers() if m.name != "."}
    contents = {name: data.extractfile(m).read() for name, m in members.items() if m.isfile()}
    controls = {m.name.removeprefix("./"): control.extractfile(m).read() for m in control.getmembers() if m.isfile()}
    return members, contents, controls


def test_the_apk_holds_the_program_the_service_and_the_settings(built: Path) -> None:
    package = read_package((built / f"edge-runtime_{VERSION}_{ARCH}.apk").read_bytes())
    assert (package.info["name"], package.info["version"], package.info["arch"]) == ("edge-runtime", VERSION, ARCH)
    assert package.info["depends"] == ["libc"]
    files = {f.path: f for f in package.files()}
    assert files["usr/bin/edge-runtime"].link_target == "../lib/edge-runtime/edge-runtime"
    assert files["usr/lib/edge-runtime/edge-runtime"].acl.mode == 0o755
    assert package.contents["etc/init.d/edge-runtime"] == (OPENWRT / "edge-runtime.init").read_bytes()
    assert files["etc/init.d/edge-runtime"].acl == (0o755, "root", "root")
    assert package.contents["etc/config/edge-runtime"] == (OPENWRT / "edge-runtime.config").read_bytes()
    assert files["etc/config/edge-runtime"].acl == (0o600, "root", "root")
    # The installer has no place in a package manager's copy.
    assert not [p for p in files if p.startswith(("usr/lib/edge-runtime/openwrt", "usr/lib/edge-runtime/install.sh"))]
    assert {f.mtime for f in package.files()} == {0}


def test_the_apk_carries_openwrts_records_for_sysupgrade(built: Path) -> None:
    package = read_package((built / f"edge-runtime_{VERSION}_{ARCH}.apk").read_bytes())
    records = "lib/apk/packages/edge-runtime"
    config = package.contents["etc/config/edge-runtime"]
    assert package.contents[f"{records}.conffiles"] == b"/etc/config/edge-runtime\n"
    assert package.contents[f"{records}.conffiles_static"] == (
        f"/etc/config/edge-runtime {hashlib.sha256(config).hexdigest()}\n".encode())
    listed = package.contents[f"{records}.list"].decode().splitlines()
    assert listed == sorted("/" + f.path for f in package.files() if not f.path.startswith("lib/apk/packages/"))


def test_the_apk_scripts_enable_start_restart_and_stop_the_service(built: Path) -> None:
    scripts = {kind: text.decode() for kind, text in
               read_package((built / f"edge-runtime_{VERSION}_{ARCH}.apk").read_bytes()).scripts.items()}
    assert sorted(scripts) == ["post-install", "post-upgrade", "pre-deinstall"]
    assert "/etc/init.d/edge-runtime enable\n/etc/init.d/edge-runtime start\n" in scripts["post-install"]
    # An upgrade restarts only a service the user left enabled.
    assert "/etc/init.d/edge-runtime enabled && /etc/init.d/edge-runtime restart\n" in scripts["post-upgrade"]
    assert "/etc/init.d/edge-runtime stop\n/etc/init.d/edge-runtime disable\n" in scripts["pre-deinstall"]
    for script in scripts.values():
        assert script.startswith("#!/bin/sh\n")


def test_the_ipk_and_the_apk_install_the_same_files(built: Path) -> None:
    members, contents, controls = _ipk_members(built / f"edge-runtime_{VERSION}_{ARCH}.ipk")
    package = read_package((built / f"edge-runtime_{VERSION}_{ARCH}.apk").read_bytes())
    apk_files = {f.path: f for f in package.files() if not f.path.startswith("lib/apk/")}
    ipk_files = {name: m for name, m in members.items() if not m.isdir()}
    assert sorted(ipk_files) == sorted(apk_files)
    for path, file in apk_files.items():
        member = ipk_files[path]
        if file.link_target is not None:
            assert member.linkname == file.link_target, path
        else:
            assert contents[path] == package.contents[path], path
            assert member.mode & 0o7777 == file.acl.mode, path
    assert b"Version: 9.9.9-r1\n" in controls["control"] and f"Architecture: {ARCH}\n".encode() in controls["control"]
    assert controls["conffiles"] == b"/etc/config/edge-runtime\n"
    # opkg runs only the new postinst on an upgrade: it restarts the service a user left enabled.
    assert b'if [ "$PKG_UPGRADE" = 1 ]; then\n    /etc/init.d/edge-runtime enabled && /etc/init.d/edge-runtime restart\n' \
        in controls["postinst"]
