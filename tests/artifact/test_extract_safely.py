"""artifact_audit.extract_safely: tarfile's 'data' filter where Python has it (3.11.4+), the same
refusals by hand on an older 3.11 such as Debian 12's own 3.11.2, which the README supports."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tarball(path: Path, members: list[tuple[str, str | None, bytes]]) -> Path:
    """members: (name, symlink target or None, content)."""
    with tarfile.open(path, "w:xz") as tar:
        for name, link, data in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(params=["data-filter", "python-3.11.2"])
def extract(request, audit_module, monkeypatch):
    if request.param == "python-3.11.2":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    return audit_module.extract_safely


def test_a_plain_tree_with_an_inner_link_is_extracted(extract, tmp_path) -> None:
    archive = _tarball(tmp_path / "ok.tar.xz", [("app/lib/a.so", None, b"elf"), ("app/link", "lib/a.so", b"")])
    out = tmp_path / "out"
    with tarfile.open(archive) as tar:
        extract(tar, out)
    assert (out / "app" / "lib" / "a.so").read_bytes() == b"elf"
    assert (out / "app" / "link").read_bytes() == b"elf"


@pytest.mark.parametrize(
    "members",
    [
        [("../escape", None, b"x")],
        [("app/etc", "/etc/passwd", b"")],
        [("app/up", "../../outside", b"")],
    ],
    ids=["dotdot", "absolute-link", "link-out"],
)
def test_paths_leaving_the_tree_are_refused_and_nothing_escapes(extract, tmp_path, members) -> None:
    archive = _tarball(tmp_path / "bad.tar.xz", members)
    out = tmp_path / "deep" / "out"
    with tarfile.open(archive) as tar, pytest.raises(tarfile.TarError):
        extract(tar, out)
    assert not (tmp_path / "deep" / "escape").exists() and not (tmp_path / "outside").exists()


def test_the_build_tools_extract_only_through_extract_safely() -> None:
    """A bare ``extractall(..., filter="data")`` is a TypeError on Python 3.11.2 (build/measure.py had one)."""
    offenders = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "build").rglob("*.py"))
                 if ".extractall(" in path.read_text(encoding="utf-8")]
    assert offenders == []
