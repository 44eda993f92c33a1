"""The router build recipe (build/cross/) is consistent: every target has a budget, every input the
scripts name is pinned with a checksum. (The builds themselves run in `make cross`/`cross-test`
and in CI; they take minutes and need qemu, so they are not part of `make test`.)"""

from __future__ import annotations

import re
import tomllib

from tests.support.artifact_layout import ROOT

CROSS = ROOT / "build" / "cross"
ONEFILE_LIMIT = 4_718_592  # router builds: one-file <= 4.5 MiB for every target


def _targets() -> list[str]:
    return re.findall(r"^([a-z0-9-]+)\)$", (CROSS / "targets.sh").read_text(), re.MULTILINE)


def _lock() -> dict[str, tuple[str, str, str]]:
    entries = {}
    for line in (CROSS / "inputs.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version, sha256, file = line.split()
            assert name not in entries, f"{name} pinned twice"
            entries[name] = (version, sha256, file)
    return entries


def test_every_target_has_a_budget_within_the_router_limit() -> None:
    with open(ROOT / "build" / "budget.toml", "rb") as file:
        cross = tomllib.load(file)["cross"]
    targets = _targets()
    assert targets == ["aarch64-musl", "mipsel-musl-sf", "mipsel-musl-hf", "armv7-musl"]
    assert sorted(cross) == sorted(targets)
    for target in targets:
        assert 0 < cross[target]["onefile_bytes"] <= ONEFILE_LIMIT, target
        assert 0 < cross[target]["onefolder_tar_xz_bytes"], target


def test_every_input_the_scripts_use_is_pinned_with_a_sha256() -> None:
    lock = _lock()
    for name, (version, sha256, file) in lock.items():
        assert re.fullmatch(r"[0-9a-f]{64}", sha256), name
        assert version and file, name
    scripts = "\n".join(path.read_text() for path in CROSS.glob("*.sh"))
    used = set(re.findall(r'lock_field "?([a-z0-9.+-]+)(?![:\w.+-])', scripts)) | set(re.findall(r"^need ([a-z0-9.+-]+)", scripts, re.M))
    per_arch = {"musl:", "busybox-static:"}
    for name in used:
        assert name in lock, f"{name} is used by build/cross but not pinned in inputs.lock"
    for prefix in per_arch:  # "musl:$DEB_ARCH": one pin per Debian architecture of a target
        for arch in ("arm64", "armhf", "mipsel"):
            assert f"{prefix}{arch}" in lock
