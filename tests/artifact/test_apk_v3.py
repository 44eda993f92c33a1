"""The apk v3 package writer (build/cross/apkv3.py) against apk-tools' own ``apk mkpkg``, and the reader
that checks every package in the router test (tests/support/adb_reader.py).

No registry ships apk-tools 3 (OpenWrt 25.12's package manager), so CI cannot run ``apk``. What it
runs instead, on every run:

- the writer, given the tree ``demo_tree`` builds and the arguments ``MKPKG_ARGS``, writes what
  ``apk mkpkg`` of apk-tools 3.0.6 wrote for them: ``data/apk-mkpkg-3.0.6-demo.apk`` was made once
  by that mkpkg (``SOURCE_DATE_EPOCH`` unset, the tree owned by root) and is compared byte for byte
  after decompression (the compressed bytes depend on the zlib at hand);
- the reader, written apart from the writer, reads that same file as apk described it, and reads
  back what the writer wrote, and refuses damaged packages;
- the writer refuses what it cannot write the way mkpkg does.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tests.support.adb_reader import AdbFormatError, read_package
from tests.support.artifact_layout import ROOT, load_path_module

apkv3 = load_path_module("apkv3", ROOT / "build" / "cross" / "apkv3.py")

FIXTURE = Path(__file__).with_name("data") / "apk-mkpkg-3.0.6-demo.apk"
LONG_SCRIPT = b"#!/bin/sh\n# " + b"a script longer than 255 bytes is a 16-bit blob. " * 6 + b"\nexit 0\n"
SCRIPTS = {
    "post-install": b"#!/bin/sh\n/etc/init.d/demo enable\n/etc/init.d/demo start\n",
    "post-upgrade": LONG_SCRIPT,
    "pre-deinstall": b"#!/bin/sh\n/etc/init.d/demo stop\n/etc/init.d/demo disable\n",
}
INFO = {
    "name": "demo", "version": "1.2.3-r4", "arch": "aarch64_cortex-a53",
    "description": "A demo package: what an OpenWrt package of ours holds", "license": "Proprietary",
    "origin": "demo", "maintainer": "QingLong Edge Runtime", "depends": "libc zlib",
}
# The fixture's command line, with the scripts in files of these names beside the tree.
MKPKG_ARGS = [arg for key, value in INFO.items() for arg in ("--info", f"{key}:{value}")] + [
    arg for kind in SCRIPTS for arg in ("--script", f"{kind}:{kind}.sh")]


def demo_tree(root: Path) -> dict[str, bytes]:
    """The fixture's tree: nested directories, executables, a 0600 conffile, a symlink, an empty
    file, a dotfile, a file larger than one copy buffer, small and large mtimes. Its files by path."""
    files = {
        "etc/config/demo": (0o600, 1_790_000_000, b"config service 'main'\n\toption slots '2'\n"),
        "etc/init.d/demo": (0o755, 1_790_000_000, b"#!/bin/sh /etc/rc.common\nUSE_PROCD=1\nSTART=95\n"),
        "usr/lib/demo/demo": (0o755, 1_790_000_001, b"\x7fELF" + bytes(range(256)) * 3),
        "usr/lib/demo/_internal/.keep": (0o644, 5, b"."),
        "usr/lib/demo/_internal/empty": (0o644, 0, b""),
        "usr/lib/demo/_internal/libbig.so": (0o644, 1_790_000_001, b"0123456789abcdef" * 6000),
        "lib/apk/packages/demo.list": (0o644, 1_790_000_000, b"/etc/config/demo\n/etc/init.d/demo\n"),
    }
    for relative, (mode, mtime, content) in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)
        os.utime(path, (mtime, mtime))
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/demo").symlink_to("../lib/demo/demo")
    os.utime(root / "usr/bin/demo", (1_790_000_002, 1_790_000_002), follow_symlinks=False)
    for directory in [root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]:
        directory.chmod(0o755)
    return {relative: content for relative, (_, _, content) in files.items()}


def _inflate(package: bytes) -> bytes:
    assert package[:4] == b"ADBd"
    return zlib.decompress(package[4:], -15)


def _write(tmp_path: Path, tree: Path, info: dict[str, str] | None = None, scripts: dict[str, bytes] | None = None,
           mtime: int | None = None) -> bytes:
    output = tmp_path / "out.apk"
    apkv3.write(output, tree, INFO if info is None else info, SCRIPTS if scripts is None else scripts, mtime)
    return output.read_bytes()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    demo_tree(root)
    return root


def test_the_writer_writes_what_apk_mkpkg_wrote(tmp_path: Path, tree: Path) -> None:
    written = _write(tmp_path, tree)
    assert _inflate(written) == _inflate(FIXTURE.read_bytes())


def test_the_command_line_takes_apk_mkpkgs_arguments(tmp_path: Path, tree: Path) -> None:
    for kind, script in SCRIPTS.items():
        (tmp_path / f"{kind}.sh").write_bytes(script)
    output = tmp_path / "cli.apk"
    result = subprocess.run([sys.executable, str(ROOT / "build" / "cross" / "apkv3.py"), "--files", str(tree),
                             "--output", str(output), *MKPKG_ARGS], cwd=tmp_path, capture_output=True, text=True,
                            env={k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}, check=False)
    assert result.returncode == 0, result.stderr
    assert _inflate(output.read_bytes()) == _inflate(FIXTURE.read_bytes())


def test_the_reader_reads_the_package_apk_mkpkg_made() -> None:
    package = read_package(FIXTURE.read_bytes())
    assert package.compression == "deflate"
    assert {k: package.info[k] for k in ("name", "version", "arch", "license", "origin", "maintainer")} == {
        k: INFO[k] for k in ("name", "version", "arch", "license", "origin", "maintainer")}
    assert package.info["depends"] == ["libc", "zlib"]
    assert package.scripts == SCRIPTS
    assert [d.path for d in package.directories] == [
        "", "etc", "etc/config", "etc/init.d", "lib", "lib/apk", "lib/apk/packages", "usr", "usr/bin", "usr/lib",
        "usr/lib/demo", "usr/lib/demo/_internal"]
    files = {f.path: f for f in package.files()}
    assert files["usr/bin/demo"].link_target == "../lib/demo/demo"
    assert files["etc/config/demo"].acl == (0o600, "root", "root")
    assert files["usr/lib/demo/_internal/.keep"].mtime == 5
    assert files["usr/lib/demo/demo"].mtime == 1_790_000_001
    assert package.info["installed-size"] == sum(len(c) for c in package.contents.values())


def test_what_the_writer_writes_reads_back_as_the_tree(tmp_path: Path, tree: Path) -> None:
    expected = demo_tree(tmp_path / "again")
    package = read_package(_write(tmp_path, tree, mtime=0))
    assert package.contents == expected
    for file in package.files():
        info = (tree / file.path).lstat()
        assert (file.acl.mode, file.mtime, file.size) == (stat.S_IMODE(info.st_mode), 0, info.st_size), file.path
    assert {d.path: d.acl.mode for d in package.directories} == {d.path: 0o755 for d in package.directories}
    first_id = package.info["hashes"]
    assert len(first_id) == 20
    assert _write(tmp_path, tree, mtime=0) == _write(tmp_path, tree, mtime=0)  # the same tree, the same bytes


def test_the_unique_id_is_the_digest_of_the_metadata_written_without_it(tmp_path: Path, tree: Path) -> None:
    stream = _inflate(_write(tmp_path, tree))
    (word,) = struct.unpack_from("<I", stream, 8)
    adb = bytearray(stream[12:8 + (word & 0x3FFFFFFF)])
    unique_id = read_package(_write(tmp_path, tree)).info["hashes"]
    at = adb.find(unique_id)
    adb[at:at + 20] = bytes(20)
    assert hashlib.sha256(adb).digest()[:20] == unique_id


def _blocks(stream: bytes) -> list[tuple[int, int, int]]:
    """(offset, type, raw size) of each block of a decompressed package."""
    found, position = [], 8
    while position < len(stream):
        (word,) = struct.unpack_from("<I", stream, position)
        found.append((position, word >> 30, word & 0x3FFFFFFF))
        position += ((word & 0x3FFFFFFF) + 7) // 8 * 8
    return found


def _repack(stream: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return b"ADBd" + compressor.compress(stream) + compressor.flush()


@pytest.mark.parametrize(("damage", "message"), [
    ("flipped data byte", "does not match its size or SHA-256"),
    ("data blocks swapped", "out of order or mislabelled"),
    ("data block dropped", "5 data blocks for 6 non-empty files"),
    ("truncated", "runs past the end"),
    ("not a package schema", "not a package"),
    ("misaligned value", "is not aligned to 4"),
    ("unsorted files", "files not sorted by name"),
    ("second ADB block", "only it, must be the ADB block"),
])
def test_the_reader_refuses_a_damaged_package(damage: str, message: str) -> None:
    stream = bytearray(_inflate(FIXTURE.read_bytes()))
    blocks = _blocks(bytes(stream))
    data = [b for b in blocks if b[1] == 2]
    adb_at = blocks[0][0] + 4
    if damage == "flipped data byte":
        stream[data[0][0] + 12] ^= 0xFF
    elif damage == "data blocks swapped":
        (a, _, a_size), (b, _, b_size) = data[0], data[1]
        first = bytes(stream[a:a + (a_size + 7) // 8 * 8])
        second = bytes(stream[b:b + (b_size + 7) // 8 * 8])
        stream[a:b + len(second)] = second + bytes(stream[a + len(first):b]) + first
    elif damage == "data block dropped":
        start, _, size = data[-1]
        del stream[start:start + (size + 7) // 8 * 8]
    elif damage == "truncated":
        del stream[-5:]
    elif damage == "not a package schema":
        stream[4:8] = b"indx"
    elif damage == "misaligned value":
        (root,) = struct.unpack_from("<I", stream, adb_at + 4)
        struct.pack_into("<I", stream, adb_at + 4, root + 1)
    elif damage == "unsorted files":
        package = read_package(FIXTURE.read_bytes())
        first = package.directories[-1].files[0].path.rsplit("/", 1)[1].encode()  # ".keep"
        at = stream.find(bytes([len(first)]) + first, adb_at)
        stream[at + 1] = ord("~")  # "~keep" sorts after the next file, "empty"
    elif damage == "second ADB block":
        start, _, size = blocks[0]
        stream[start:start] = stream[start:start + (size + 7) // 8 * 8]
    with pytest.raises(AdbFormatError, match=message):
        read_package(_repack(bytes(stream)))


@pytest.mark.parametrize(("change", "message"), [
    ({"version": "1.0 beta"}, "not a valid apk version"),
    ({"name": "-demo"}, "not a valid package name"),
    ({"depends": "libc>=1.2"}, "only plain package names"),
])
def test_the_writer_refuses_fields_apk_would_refuse(tmp_path: Path, tree: Path, change: dict[str, str], message: str) -> None:
    with pytest.raises(apkv3.PackageError, match=message):
        _write(tmp_path, tree, info={**INFO, **change})
    assert not (tmp_path / "out.apk").exists()


def test_the_writer_refuses_files_it_cannot_write_as_mkpkg_does(tmp_path: Path, tree: Path) -> None:
    os.link(tree / "etc/init.d/demo", tree / "etc/init.d/demo-again")
    with pytest.raises(apkv3.PackageError, match="hard links"):
        _write(tmp_path, tree)
    (tree / "etc/init.d/demo-again").unlink()
    os.mkfifo(tree / "etc/fifo")
    with pytest.raises(apkv3.PackageError, match="only regular files"):
        _write(tmp_path, tree)
