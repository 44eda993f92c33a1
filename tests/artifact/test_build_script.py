"""build/build.py without building: the platform tag, when a build is skipped, how outputs land."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from tests.support.artifact_layout import ROOT, load_path_module


@pytest.fixture
def build(monkeypatch, tmp_path: Path):
    module = load_path_module("edge_runtime_build_script", ROOT / "build" / "build.py")
    source = tmp_path / "repo"
    (source / "edge_runtime").mkdir(parents=True)
    (source / "edge_runtime" / "__init__.py").write_text('__version__ = "9.9.9"\n')
    (source / "local_migrations").mkdir()
    (source / "local_migrations" / "0001_a.sql").write_text("CREATE TABLE a (x);\n")
    dist = tmp_path / "dist"
    dist.mkdir()
    monkeypatch.setattr(module, "ROOT", source)
    monkeypatch.setattr(module, "DIST_DIR", dist)
    monkeypatch.setattr(module, "STAMP", dist / ".edge-runtime-build.json")
    return module


def test_the_platform_tag_names_os_cpu_and_c_library(build) -> None:
    tag = build.platform_tag()
    assert tag.startswith(f"{sys.platform}-{platform.machine()}")
    libc, version = platform.libc_ver()
    if libc:
        assert tag.endswith(f"-{libc}{version}")


def test_the_fingerprint_follows_sources_and_options(build) -> None:
    first = build.input_fingerprint([])
    assert build.input_fingerprint([]) == first
    assert build.input_fingerprint(["--runtime-tmpdir", "/mnt/usb"]) != first
    (build.ROOT / "local_migrations" / "0002_b.sql").write_text("CREATE TABLE b (x);\n")
    second = build.input_fingerprint([])
    assert second != first
    (build.ROOT / "edge_runtime" / "__init__.py").write_text('__version__ = "9.9.10"\n')
    assert build.input_fingerprint([]) != second


def test_a_build_is_skipped_only_while_its_outputs_are_intact(build) -> None:
    output = build.DIST_DIR / "edge-runtime"
    output.write_bytes(b"\x7fELF one")
    fingerprint = build.input_fingerprint([])
    build.write_stamp(fingerprint, [], [output])
    assert build.up_to_date(fingerprint)
    assert build.dist_is_current()
    assert not build.up_to_date(build.input_fingerprint(["--runtime-tmpdir", "/x"]))
    output.write_bytes(b"\x7fELF one, changed")
    assert not build.up_to_date(fingerprint)
    output.unlink()
    assert not build.up_to_date(fingerprint)


def test_publishing_replaces_the_output_and_leaves_no_temp_file(build, tmp_path: Path) -> None:
    staged = tmp_path / "staged"
    staged.write_bytes(b"new build")
    (build.DIST_DIR / "edge-runtime").write_bytes(b"old build")
    published = build.publish_onefile(staged)
    assert published.read_bytes() == b"new build"
    assert published.stat().st_mode & 0o777 == 0o755
    with pytest.raises(FileNotFoundError):
        build.publish_onefile(tmp_path / "missing")
    assert published.read_bytes() == b"new build"  # a failed publish keeps the last good output
    assert sorted(p.name for p in build.DIST_DIR.iterdir()) == ["edge-runtime"]
