"""Assemble small artifacts in PyInstaller's real formats, fast, for the audit's tests.

A real build takes a minute of CPU; these take milliseconds. They use PyInstaller's own archive
writers, so the audit reads exactly the format a build produces:

- one-file: an ELF-looking stub followed by a CArchive holding a PYZ, base_library.zip, shared
  libraries and data files (the bootloader itself is irrelevant to the audit);
- one-folder: ``NAME/edge-runtime`` (stub + CArchive with the PYZ) and ``NAME/_internal/...``;
- tarball: that folder tarred with xz.

What goes in is a clean baseline (stdlib, apsw, msgspec, edge_runtime, libpython) plus whatever a
test adds: extra PYZ modules and extra files.
"""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

from PyInstaller.archive.writers import CArchiveWriter, ZlibArchiveWriter

FOLDER_NAME = "edge-runtime-0.0.0-test"
PYLIB = "libpython3.11.so.1.0"
_ELF_STUB = b"\x7fELF" + b"\0" * 1020

BASE_PYZ = {
    "edge_runtime": "package",
    "edge_runtime.cli": "package",
    "edge_runtime.cli.main": "module",
    "msgspec": "package",
    "json": "package",
    "json.decoder": "module",
    "typing": "module",
    "_pyi_rth_utils": "package",
    "edge_runtime.panel": "package",
    "edge_runtime.panel.routes": "module",
    "edge_runtime.panel.api": "module",
    "edge_runtime.panel.server": "module",
    "edge_runtime.panel.connections": "module",
    "edge_runtime.panel.secret_throttle": "module",
    "edge_runtime.qinglong": "package",
    "edge_runtime.qinglong.open_routes": "module",
    "edge_runtime.qinglong.openapi": "module",
    "edge_runtime.qinglong.crons": "module",
    "edge_runtime.qinglong.envs": "module",
    "edge_runtime.qinglong.logs": "module",
    "h11": "package",
}
BASE_LIBRARY = ["os.pyc", "encodings/__init__.pyc", "encodings/utf_8.pyc", "re/__init__.pyc"]
#: The per-Attempt monitor, where the service looks for it (an ``extra_files`` value None drops a file).
MONITOR = "edge_runtime/service/native/edge-runtime-monitor"
BASE_FILES = {
    PYLIB: b"libpython" * 100,
    "libz.so.1": b"libz" * 50,
    "python3.11/lib-dynload/_struct.cpython-311-x86_64-linux-gnu.so": b"_struct" * 50,
    "apsw/__init__.cpython-311-x86_64-linux-gnu.so": b"apsw" * 200,
    "msgspec/_core.cpython-311-x86_64-linux-gnu.so": b"msgspec" * 100,
    "edge_runtime/_migrations/0001_legacy_layout.sql": b"CREATE TABLE t (x);\n",
    MONITOR: b"\x7fELF" + b"monitor" * 100,
    "edge_runtime/panel/static/index.html": b"<!doctype html>",
    "edge_runtime/panel/static/panel.css": b"body{}",
    "edge_runtime/panel/static/panel.js": b"'use strict';",
    "edge_runtime/panel/static/text.js": b"var PANEL_TEXT = {};",
    "edge_runtime/panel/static/favicon.svg": b"<svg/>",
}


def _write_pyz(path: Path, modules: dict[str, str]) -> None:
    entries, code = [], {}
    for name, kind in sorted(modules.items()):
        source = name.replace(".", "/") + ("/__init__.py" if kind == "package" else ".py")
        entries.append((name, source, "PYMODULE"))
        code[name] = compile("", source, "exec")
    ZlibArchiveWriter(str(path), entries, code_dict=code)


def _base_library_bytes(members: list[str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for member in members:
            archive.writestr(member, b"\0" * 16)
    return buffer.getvalue()


def _write_executable(path: Path, work: Path, entries: list[tuple[str, str, bool, str]]) -> None:
    package = work / f"{path.name}.pkg"
    CArchiveWriter(str(package), entries, PYLIB)
    path.write_bytes(_ELF_STUB + package.read_bytes())
    path.chmod(0o755)


def _files(extra_files: dict[str, bytes | None] | None) -> dict[str, bytes]:
    return {name: data for name, data in {**BASE_FILES, **(extra_files or {})}.items() if data is not None}


def _modules(extra_pyz: dict[str, str | None] | None) -> dict[str, str]:
    """The baseline's modules with ``extra_pyz`` over them (a value None drops a module)."""
    return {name: kind for name, kind in {**BASE_PYZ, **(extra_pyz or {})}.items() if kind is not None}


def _is_binary(name: str) -> bool:
    return ".so" in Path(name).suffixes or name.endswith(".so")


def make_onefile(
    directory: Path, *, extra_pyz: dict[str, str] | None = None, extra_files: dict[str, bytes] | None = None
) -> Path:
    work = directory / "work"
    work.mkdir(parents=True)
    pyz = work / "PYZ.pyz"
    _write_pyz(pyz, _modules(extra_pyz))
    base_library = work / "base_library.zip"
    base_library.write_bytes(_base_library_bytes(BASE_LIBRARY))
    entries = [("PYZ.pyz", str(pyz), False, "z"), ("base_library.zip", str(base_library), True, "x")]
    for index, (name, data) in enumerate(sorted(_files(extra_files).items())):
        source = work / f"file-{index}"
        source.write_bytes(data)
        # Random bytes do not compress; stored as they are, the artifact is as big as a test asks.
        entries.append((name, str(source), False, "b" if _is_binary(name) or name == MONITOR else "x"))
    entries += [("O", "", False, "o"), ("X utf8", "", False, "o")]
    executable = directory / "edge-runtime"
    _write_executable(executable, work, entries)
    return executable


def make_onefolder(
    directory: Path, *, extra_pyz: dict[str, str] | None = None, extra_files: dict[str, bytes] | None = None
) -> Path:
    work = directory / "work"
    work.mkdir(parents=True)
    folder = directory / FOLDER_NAME
    contents = folder / "_internal"
    contents.mkdir(parents=True)
    pyz = work / "PYZ.pyz"
    _write_pyz(pyz, _modules(extra_pyz))
    _write_executable(
        folder / "edge-runtime",
        work,
        [("PYZ.pyz", str(pyz), False, "z"), ("pyi-contents-directory _internal", "", False, "o")],
    )
    (contents / "base_library.zip").write_bytes(_base_library_bytes(BASE_LIBRARY))
    for name, data in _files(extra_files).items():
        target = contents / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return folder


def make_tarball(directory: Path, **contents: dict) -> Path:
    folder = make_onefolder(directory, **contents)
    tarball = directory / f"{FOLDER_NAME}.tar.xz"
    with tarfile.open(tarball, "w:xz", preset=0) as tar:  # preset 0: fast; random data stays random
        tar.add(folder, arcname=folder.name)
    return tarball


MAKERS = {"onefile": make_onefile, "folder": make_onefolder, "tarball": make_tarball}


def random_bytes(size: int) -> bytes:
    return os.urandom(size)
