"""The emulation of apk 3 that the router test applies packages with (tests/support/apk_root.py), on
packages without scripts (the scripts run chrooted in a musl root, under `make cross-test`).

What apk 3.0 itself did with our package, add, upgrade and del into a musl root, is recorded in
docs/building.md (router builds, the apk v3 format); these pin the same rules here: a file under
/etc changed since it was installed is kept and the package's copy goes beside it as .apk-new; on
removal the changed file stays and everything else of the package goes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import apk_root
from tests.support.artifact_layout import ROOT, load_path_module

apkv3 = load_path_module("apkv3", ROOT / "build" / "cross" / "apkv3.py")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="apk installs files owned by root: needs root")

ARCH = "mipsel_24kc"


def _package(tmp_path: Path, version: str, config: bytes) -> Path:
    tree = tmp_path / f"tree-{version}"
    (tree / "etc/config").mkdir(parents=True)
    (tree / "usr/lib/demo").mkdir(parents=True)
    (tree / "etc/config/demo").write_bytes(config)
    (tree / "etc/config/demo").chmod(0o600)
    (tree / "usr/lib/demo/program").write_bytes(f"program {version}\n".encode())
    if version == "1.0":
        (tree / "usr/lib/demo/only-in-1.0").write_bytes(b"dropped by the upgrade\n")
    output = tmp_path / f"demo-{version}.apk"
    apkv3.write(output, tree, {"name": "demo", "version": version, "arch": ARCH, "depends": "libc"}, {}, 0)
    return output


def test_add_upgrade_and_del_keep_a_changed_configuration(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    apk_root.add(root, _package(tmp_path, "1.0", b"defaults 1.0\n"), ARCH, {"libc"})
    config = root / "etc/config/demo"
    assert config.read_bytes() == b"defaults 1.0\n" and config.stat().st_mode & 0o7777 == 0o600
    assert (root / "usr/lib/demo/program").read_bytes() == b"program 1.0\n"

    config.write_bytes(b"the user's settings\n")
    apk_root.add(root, _package(tmp_path, "1.1", b"defaults 1.1\n"), ARCH, {"libc"})
    assert config.read_bytes() == b"the user's settings\n"
    assert (root / "etc/config/demo.apk-new").read_bytes() == b"defaults 1.1\n"
    assert (root / "usr/lib/demo/program").read_bytes() == b"program 1.1\n"
    assert not (root / "usr/lib/demo/only-in-1.0").exists()

    apk_root.delete(root, "demo")
    assert config.read_bytes() == b"the user's settings\n"
    assert not (root / "etc/config/demo.apk-new").exists()
    assert not (root / "usr/lib/demo").exists()


def test_an_unchanged_configuration_is_upgraded_and_removed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    apk_root.add(root, _package(tmp_path, "1.0", b"defaults 1.0\n"), ARCH, {"libc"})
    apk_root.add(root, _package(tmp_path, "1.1", b"defaults 1.1\n"), ARCH, {"libc"})
    assert (root / "etc/config/demo").read_bytes() == b"defaults 1.1\n"
    assert not (root / "etc/config/demo.apk-new").exists()
    apk_root.delete(root, "demo")
    assert not (root / "etc/config/demo").exists()


def test_a_file_no_package_recorded_is_kept_on_a_first_add(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc/config").mkdir(parents=True)
    (root / "etc/config/demo").write_bytes(b"left by an earlier install\n")
    apk_root.add(root, _package(tmp_path, "1.0", b"defaults 1.0\n"), ARCH, {"libc"})
    assert (root / "etc/config/demo").read_bytes() == b"left by an earlier install\n"
    assert (root / "etc/config/demo.apk-new").read_bytes() == b"defaults 1.0\n"


@pytest.mark.parametrize(("arch", "base", "message"), [
    ("aarch64_cortex-a53", {"libc"}, "arch mipsel_24kc is not aarch64_cortex-a53"),
    (ARCH, set(), "unsatisfiable dependencies: libc"),
])
def test_add_refuses_what_apk_refuses(tmp_path: Path, arch: str, base: set[str], message: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(apk_root.ApkError, match=message):
        apk_root.add(root, _package(tmp_path, "1.0", b"defaults\n"), arch, base)
    assert list(root.iterdir()) == []
