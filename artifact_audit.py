#!/usr/bin/env python3
"""Prove what is (and is not) inside an edge-runtime artifact.

Usage: artifact_audit.py [--json] [--output FILE] [--budget FILE] ARTIFACT [ARTIFACT ...]

An ARTIFACT is a PyInstaller one-file executable, a one-folder build directory, a tarball of
one (``.tar.xz``), or a wheel (``.whl``, what ``pip install .`` installs). The audit lists every entry: the outer archive's table of contents, every module
of the embedded PYZ, every member of ``base_library.zip``, every shared library and extension
module, and (for one-folder builds) every file under the folder. It then applies these rules:

- ``postgres-driver``: no PostgreSQL driver or client library (psycopg, psycopg2, psycopg_binary,
  psycopg_c, asyncpg, pg8000, libpq*), as a module or as a path component.
- ``cluster-module``: no module or path component named ``cluster`` or starting with ``cluster_``.
- ``third-party``: every top-level package is the standard library (``sys.stdlib_module_names`` of
  the Python running the audit, which must be the build's Python version), one of the allow-list
  (apsw, msgspec, edge_runtime) or PyInstaller's own bootstrap (pyimod*, pyiboot*, pyi_rth*, _pyi*).
- ``stdlib-sqlite3``: neither the stdlib ``sqlite3``/``_sqlite3`` nor a shared ``libsqlite3``
  (apsw carries its own SQLite; two SQLite libraries in one process lose WAL writes).
- ``monitor``: the per-Attempt monitor program (docs/monitor.md) is inside, exactly once, at
  ``edge_runtime/service/native/edge-runtime-monitor`` under the bundle directory (where the service
  looks for it), and is an ELF executable; without it the service refuses to start.
- ``panel``: the web panel is whole (``edge_runtime.panel`` modules, the OpenAPI's QingLong face, ``h11``, the page's files under
  ``edge_runtime/panel/static/``); its bytes are reported.
- ``budget``: the artifact's bytes are within the budget in build/budget.toml (one-file
  executable; one-folder ``.tar.xz``). A bare directory has no budget: its tarball does.

Prints a readable report (or ``--json``); exit 0 only when every rule passes for every artifact,
1 when a rule fails, 2 when an artifact cannot be read.

Standard library plus PyInstaller's own archive readers only, so it runs wherever the build does.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import tomllib
import zipfile
import zlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

sys.path.insert(0, str(Path(__file__).resolve().parent / "build"))
import atomic_publish  # noqa: E402  (build/atomic_publish.py: the one publish step, shared with build.py)

try:
    from PyInstaller.archive.readers import CArchiveReader, NotAnArchiveError
    from PyInstaller.loader.pyimod01_archive import ArchiveReadError
except ImportError:  # the one dependency beyond the stdlib: say so instead of a traceback
    sys.stderr.write("Error: artifact_audit.py needs PyInstaller's archive readers\nTry: pip install -e '.[build]'\n")
    raise SystemExit(2) from None

DEFAULT_BUDGET_FILE = Path(__file__).resolve().parent / "build" / "budget.toml"

POSTGRES_NAMES = frozenset({"psycopg", "psycopg2", "psycopg_binary", "psycopg_c", "asyncpg", "pg8000"})
ALLOWED_THIRD_PARTY = frozenset({"apsw", "msgspec", "h11", "edge_runtime"})
BOOTSTRAP_PREFIXES = ("pyimod", "pyiboot", "pyi_rth", "_pyi")
# The PyInstaller entry script (build/edge-runtime.py): a script, not an importable module.
ENTRY_SCRIPTS = frozenset({"edge-runtime"})
SQLITE_NAMES = frozenset({"sqlite3", "_sqlite3"})
# Where the service looks for the per-Attempt monitor under the bundle directory
# (edge_runtime/service/monitor.py, MONITOR_RELATIVE_PATH).
MONITOR_PATH = "edge_runtime/service/native/edge-runtime-monitor"
# The web panel (docs/panel.md): its modules, the HTTP parser it uses, and the page's files.
# The OpenAPI on the panel's listener (docs/qinglong.md): serve hands the server its QingLong face at start.
PANEL_MODULES = frozenset({"edge_runtime.panel", "edge_runtime.panel.routes", "edge_runtime.panel.api",
                           "edge_runtime.panel.server", "edge_runtime.panel.connections",
                           "edge_runtime.panel.secret_throttle", "edge_runtime.qinglong",
                           "edge_runtime.qinglong.open_routes", "edge_runtime.qinglong.openapi",
                           "edge_runtime.qinglong.crons", "edge_runtime.qinglong.envs", "edge_runtime.qinglong.logs",
                           "h11"})
PANEL_STATIC_DIR = "edge_runtime/panel/static/"
PANEL_STATIC_FILES = frozenset({"index.html", "panel.css", "panel.js", "text.js", "favicon.svg"})

# CArchive typecodes (PyInstaller.archive.readers), as words for the report.
_CARCHIVE_KINDS = {
    "b": "binary",
    "d": "dependency",
    "z": "pyz",
    "Z": "zipfile",
    "M": "bootstrap-package",
    "m": "bootstrap-module",
    "s": "script",
    "x": "data",
    "l": "splash",
}
# Directories of the frozen layout that are not packages: python3.11/lib-dynload/ holds the stdlib's
# extension modules.
_LAYOUT_DIR = re.compile(r"^(python\d+\.\d+|lib-dynload)$")
_EXTENSION_SUFFIX = re.compile(r"\.(cpython-[^.]+|abi3)\.so$")
_TARBALL_SUFFIXES = (".tar", ".tar.xz", ".txz", ".tar.gz", ".tgz", ".tar.bz2")


class AuditError(Exception):
    """An artifact could not be read; the message names it."""


@dataclass
class Entry:
    path: str  # where it is: "PYZ:json.decoder", "base_library.zip:re/__init__.pyc", "_internal/libz.so.1"
    kind: str  # module, package, extension, shared-library, data, script, archive, file, symlink, ...
    size: int  # bytes when unpacked
    stored: int | None = None  # bytes inside the artifact, where they differ (compressed)
    module: str | None = None  # dotted module name, for modules and extension modules
    package: str | None = None  # top-level package directory a data file sits in (edge_runtime/_migrations/...)


@dataclass
class RuleResult:
    rule: str
    passed: bool
    detail: str
    offenders: list[str] = field(default_factory=list)


@dataclass
class ArtifactReport:
    path: str
    form: str  # one-file, one-folder directory, one-folder tarball, wheel
    size: int
    budget: int | None
    unpacked_at_start: int | None  # one-file: bytes the bootloader writes to its temp dir
    options: list[str]
    entries: list[Entry]
    rules: list[RuleResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(rule.passed for rule in self.rules)


# ---------------------------------------------------------------- reading artifacts


def _module_from_pyc_path(member: str) -> str | None:
    """``re/__init__.pyc`` -> ``re``; ``encodings/utf_8.pyc`` -> ``encodings.utf_8``."""
    if not member.endswith(".pyc"):
        return None
    parts = member[: -len(".pyc")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or None


def _module_from_library_path(relative: str) -> str | None:
    """The module an extension shared library implements, or None for a plain shared library."""
    path = PurePosixPath(relative)
    if not _EXTENSION_SUFFIX.search(path.name):
        return None
    stem = path.name.split(".", 1)[0]
    if "lib-dynload" in path.parts:
        return stem
    parts = [part for part in path.parts[:-1] if not _LAYOUT_DIR.match(part)]
    if stem != "__init__":
        parts.append(stem)
    return ".".join(parts) or None


def _package_of(relative: str) -> str | None:
    """The top-level package directory holding a file, relative to the build's contents root.

    ``edge_runtime/_migrations/0001_x.sql`` -> ``edge_runtime``; ``certifi-2024.2.dist-info/RECORD``
    -> ``certifi``; a file at the top (libpython, base_library.zip) -> None.
    """
    parts = [part for part in PurePosixPath(relative).parts if not _LAYOUT_DIR.match(part)]
    if len(parts) < 2:
        return None
    top = parts[0]
    for suffix in (".dist-info", ".egg-info", ".libs", ".data"):
        if top.endswith(suffix):
            top = top[: -len(suffix)].split("-", 1)[0]
    return top


def _library_entry(path: str, relative: str, size: int, stored: int | None) -> Entry:
    module = _module_from_library_path(relative)
    if module:
        return Entry(path, "extension", size, stored, module)
    # A plain shared library in a package's directory (numpy.libs/libopenblas.so) belongs to it.
    return Entry(path, "shared-library", size, stored, package=_package_of(relative))


def _base_library_entries(prefix: str, data: bytes) -> list[Entry]:
    entries = []
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            module = _module_from_pyc_path(info.filename)
            kind = "module" if module else "data"
            entries.append(Entry(f"{prefix}:{info.filename}", kind, info.file_size, info.compress_size, module))
    return entries


def _monitor_kind(magic: bytes) -> str:
    return "monitor" if magic == b"\x7fELF" else "monitor-not-elf"


def _carchive_entries(path: Path, display: str) -> tuple[list[Entry], list[str], int]:
    """Every entry of the executable's CArchive, expanded into the PYZ and base_library.zip.

    Returns (entries, runtime options, bytes a one-file bootloader unpacks at start).
    """
    try:
        archive = CArchiveReader(str(path))
    except (ArchiveReadError, OSError, ValueError) as exc:
        raise AuditError(f"{display}: not a PyInstaller executable ({exc})") from exc
    entries: list[Entry] = []
    unpacked = 0
    for name, (_offset, length, ulength, _compressed, typecode) in sorted(archive.toc.items()):
        kind = _CARCHIVE_KINDS.get(typecode, f"typecode-{typecode}")
        where = f"{display}:{name}"
        # The bootloader unpacks binaries, data and dependencies; PYZ, scripts and bootstrap modules
        # are read in place from the executable.
        if typecode in "bxdZ":
            unpacked += ulength
        if name == MONITOR_PATH:
            entries.append(Entry(where, _monitor_kind(archive.extract(name)[:4]), ulength, length, package="edge_runtime"))
        elif typecode == "b":
            entries.append(_library_entry(where, name, ulength, length))
        elif typecode == "z":
            entries.append(Entry(where, "archive", ulength, length))
            entries.extend(_pyz_entries(archive, name, display))
        elif typecode == "x" and PurePosixPath(name).name == "base_library.zip":
            entries.append(Entry(where, "archive", ulength, length))
            entries.extend(_base_library_entries(where, archive.extract(name)))
        elif typecode in "mMs":
            entries.append(Entry(where, kind, ulength, length, name))
        else:
            entries.append(Entry(where, kind, ulength, length, package=_package_of(name)))
    return entries, list(archive.options), unpacked


def _pyz_entries(archive: CArchiveReader, name: str, display: str) -> list[Entry]:
    try:
        pyz = archive.open_embedded_archive(name)
    except (ArchiveReadError, NotAnArchiveError, KeyError) as exc:
        raise AuditError(f"{display}: cannot open its embedded {name} ({exc})") from exc
    entries = []
    for module, (typecode, _offset, length) in sorted(pyz.toc.items()):
        data = pyz.extract(module, raw=True)  # inflated, not unmarshalled; None for a namespace package
        size = len(data) if data is not None else 0
        kind = {1: "package", 3: "namespace-package"}.get(typecode, "module")
        entries.append(Entry(f"{display}:PYZ:{module}", kind, size, length, module))
    return entries


def _is_pyinstaller_executable(path: Path) -> bool:
    mode = path.lstat().st_mode
    if not stat.S_ISREG(mode) or not mode & stat.S_IXUSR or _EXTENSION_SUFFIX.search(path.name) or ".so" in path.suffixes:
        return False
    with open(path, "rb") as file:
        return file.read(4) == b"\x7fELF"


def _folder_entries(root: Path, display_root: str) -> tuple[list[Entry], list[str]]:
    """Every file under a one-folder build, executables and base_library.zip expanded."""
    files = sorted(p for p in root.rglob("*") if not p.is_dir() or p.is_symlink())
    # sys._MEIPASS of the build: the directory holding base_library.zip (`_internal/` by default).
    contents_roots = [p.parent for p in files if p.name == "base_library.zip"]
    contents_root = contents_roots[0] if contents_roots else root
    entries: list[Entry] = []
    options: list[str] = []
    for path in files:
        display = f"{display_root}/{path.relative_to(root).as_posix()}" if display_root else path.relative_to(root).as_posix()
        if path.is_symlink():
            entries.append(Entry(display, "symlink", 0, None))
            continue
        size = path.stat().st_size
        inside = path.is_relative_to(contents_root)
        relative = path.relative_to(contents_root).as_posix() if inside else path.name
        if inside and relative == MONITOR_PATH:
            with open(path, "rb") as file:
                entries.append(Entry(display, _monitor_kind(file.read(4)), size, package="edge_runtime"))
        elif path.name == "base_library.zip":
            entries.append(Entry(display, "archive", size))
            entries.extend(_base_library_entries(display, path.read_bytes()))
        elif _is_pyinstaller_executable(path):
            entries.append(Entry(display, "executable", size))
            archive_entries, archive_options, _ = _carchive_entries(path, display)
            entries.extend(archive_entries)
            options.extend(archive_options)
        elif ".so" in PurePosixPath(path.name).suffixes or path.name.endswith(".so"):
            entries.append(_library_entry(display, relative, size, None))
        else:
            entries.append(Entry(display, "file", size, package=_package_of(relative) if inside else None))
    return entries, options


def extract_safely(tar: tarfile.TarFile, dest: str | Path) -> None:
    """Extract ``tar`` into ``dest``, refusing absolute paths, ``..``, links leaving the tree and devices.

    That is tarfile's 'data' filter, which Python 3.11.4 added; on an older 3.11 (Debian 12's own
    3.11.2) the same checks run here before anything is written.
    """
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
        return
    members = tar.getmembers()
    for member in members:
        parts = Path(member.name).parts
        if member.name.startswith("/") or ".." in parts:
            raise tarfile.TarError(f"{member.name!r}: path leaves the archive's tree")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise tarfile.TarError(f"{member.name!r}: not a regular file, directory or link")
        if member.issym() or member.islnk():
            base = Path(member.name).parent if member.issym() else Path()
            target = Path(member.linkname)
            if target.is_absolute() or not _stays_inside(base / target):
                raise tarfile.TarError(f"{member.name!r}: link to {member.linkname!r} leaves the archive's tree")
    tar.extractall(dest, members=members)


def _stays_inside(relative: Path) -> bool:
    depth = 0
    for part in relative.parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            return False
    return True


def read_artifact(path: Path, budgets: dict[str, int]) -> ArtifactReport:
    if not path.exists():
        raise AuditError(f"{path}: no such file or directory")
    if path.is_dir():
        entries, options = _folder_entries(path, path.name)
        return ArtifactReport(str(path), "one-folder directory", _tree_size(path), None, None, options, entries)
    if path.name.endswith(".whl"):
        # A wheel (pip install .): its files as installed; it has no budget.
        with tempfile.TemporaryDirectory(prefix="artifact-audit-") as temp:
            try:
                with zipfile.ZipFile(path) as wheel:
                    _extract_zip_safely(wheel, Path(temp))
            except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
                raise AuditError(f"{path}: not a readable wheel ({exc})") from exc
            entries, options = _folder_entries(Path(temp), "")
        return ArtifactReport(str(path), "wheel", path.stat().st_size, None, None, options, entries)
    if path.name.endswith(_TARBALL_SUFFIXES):
        with tempfile.TemporaryDirectory(prefix="artifact-audit-") as temp:
            try:
                with tarfile.open(path) as tar:
                    extract_safely(tar, temp)
            except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
                raise AuditError(f"{path}: not a readable tarball ({exc})") from exc
            entries, options = _folder_entries(Path(temp), "")
        budget = budgets["onefolder_tar_xz_bytes"] if path.name.endswith((".tar.xz", ".txz")) else None
        return ArtifactReport(str(path), "one-folder tarball", path.stat().st_size, budget, None, options, entries)
    entries, options, unpacked = _carchive_entries(path, path.name)
    outer = Entry(path.name, "executable", path.stat().st_size)
    return ArtifactReport(
        str(path), "one-file", path.stat().st_size, budgets["onefile_bytes"], unpacked, options, [outer, *entries]
    )


def _extract_zip_safely(archive: zipfile.ZipFile, dest: Path) -> None:
    """Extract regular members only, each staying inside ``dest``."""
    for info in archive.infolist():
        relative = Path(info.filename)
        if info.is_dir():
            continue
        if relative.is_absolute() or not _stays_inside(relative):
            raise AuditError(f"wheel member {info.filename!r} leaves the extraction directory")
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(info) as source, open(target, "wb") as out:
            shutil.copyfileobj(source, out)


def _tree_size(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if not p.is_dir() or p.is_symlink())


# ---------------------------------------------------------------- rules


def _path_names(entry: Entry) -> list[str]:
    """Every name an entry is known by: its module's components and its path's components.

    A path component is reduced to its stem (``cluster.cpython-311-x86_64-linux-gnu.so`` ->
    ``cluster``, ``psycopg2_binary-2.9.dist-info`` -> ``psycopg2_binary``, ``psycopg.libs`` -> ``psycopg``).
    """
    names = entry.module.split(".") if entry.module else []
    for segment in re.split(r"[/:]", entry.path):
        stem = segment.split(".", 1)[0].split("-", 1)[0]
        if stem:
            names.append(stem)
    return names


def _top_level_names(entry: Entry) -> list[str]:
    """The top-level package an entry belongs to; [] for entries that belong to none."""
    if entry.module:
        return [entry.module.split(".", 1)[0]]
    return [entry.package] if entry.package else []


# The stdlib's build configuration (read by sysconfig, which zoneinfo imports): named after the
# platform, so sys.stdlib_module_names cannot list it.
STDLIB_PLATFORM_PREFIXES = ("_sysconfigdata_",)


def _is_allowed_top_level(name: str) -> bool:
    return (
        name in sys.stdlib_module_names
        or name.startswith(STDLIB_PLATFORM_PREFIXES)
        or name in ALLOWED_THIRD_PARTY
        or name in ENTRY_SCRIPTS
        or name.startswith(BOOTSTRAP_PREFIXES)
    )


def _first(offenders: list[str], limit: int = 20) -> list[str]:
    return sorted(set(offenders))[:limit]


def rule_postgres_driver(report: ArtifactReport) -> RuleResult:
    offenders = [
        e.path
        for e in report.entries
        if POSTGRES_NAMES.intersection(n.lower() for n in _path_names(e))
        or any(segment.lower().startswith("libpq") for segment in re.split(r"[/:]", e.path))
    ]
    detail = "no PostgreSQL driver or libpq" if not offenders else f"{len(set(offenders))} PostgreSQL driver entries"
    return RuleResult("postgres-driver", not offenders, detail, _first(offenders))


def rule_cluster_module(report: ArtifactReport) -> RuleResult:
    offenders = [
        e.path for e in report.entries if any(n == "cluster" or n.startswith("cluster_") for n in _path_names(e))
    ]
    detail = "no module or path named cluster*" if not offenders else f"{len(set(offenders))} cluster entries"
    return RuleResult("cluster-module", not offenders, detail, _first(offenders))


def rule_third_party(report: ArtifactReport) -> RuleResult:
    outside = sorted({top for e in report.entries for top in _top_level_names(e) if not _is_allowed_top_level(top)})
    detail = (
        "every top-level package is stdlib, " + ", ".join(sorted(ALLOWED_THIRD_PARTY)) + " or PyInstaller bootstrap"
        if not outside
        else "top-level packages outside the allow-list: " + ", ".join(outside)
    )
    return RuleResult("third-party", not outside, detail, outside)


def rule_stdlib_sqlite3(report: ArtifactReport) -> RuleResult:
    offenders = [
        e.path
        for e in report.entries
        if (e.module and e.module.split(".", 1)[0] in SQLITE_NAMES)
        or (e.kind == "shared-library" and PurePosixPath(e.path.split(":")[-1]).name.startswith("libsqlite3"))
    ]
    detail = "no stdlib sqlite3 and no shared libsqlite3" if not offenders else "a second SQLite library is inside"
    return RuleResult("stdlib-sqlite3", not offenders, detail, _first(offenders))


def rule_budget(report: ArtifactReport) -> RuleResult:
    if report.budget is None:
        return RuleResult("budget", True, "no budget for this form (the budget applies to the one-file and the .tar.xz)")
    over = report.size - report.budget
    if over > 0:
        detail = f"{report.size:,} bytes is {over:,} bytes over the budget of {report.budget:,} ({_mib(report.budget)})"
        return RuleResult("budget", False, detail, [report.path])
    return RuleResult("budget", True, f"{report.size:,} of {report.budget:,} bytes, {-over:,} bytes to spare")


def rule_monitor(report: ArtifactReport) -> RuleResult:
    found = [e for e in report.entries if e.kind.startswith("monitor")]
    good = [e for e in found if e.kind == "monitor"]
    if len(found) == 1 and good:
        return RuleResult("monitor", True, f"the per-Attempt monitor is inside ({good[0].size:,} bytes)")
    detail = ("no per-Attempt monitor at " + MONITOR_PATH) if not found else \
        f"{len(found)} monitor entries, {len(found) - len(good)} not an ELF executable"
    return RuleResult("monitor", False, detail, [e.path for e in found])


def _panel_entry(entry: Entry) -> bool:
    module = entry.module or ""
    return (module == "h11" or module.startswith(("h11.", "edge_runtime.panel.")) or module in PANEL_MODULES
            or PANEL_STATIC_DIR in entry.path)


def rule_panel(report: ArtifactReport) -> RuleResult:
    """The web panel is whole: its modules, h11 and the page's files; its bytes are reported."""
    found = [e for e in report.entries if _panel_entry(e)]
    modules = {e.module for e in found if e.module}
    files = {e.path.rpartition(PANEL_STATIC_DIR)[2] for e in found if PANEL_STATIC_DIR in e.path}
    missing = sorted(PANEL_MODULES - modules) + sorted(PANEL_STATIC_DIR + f for f in PANEL_STATIC_FILES - files)
    size = sum(e.size for e in found)
    stored = sum(e.size if e.stored is None else e.stored for e in found)
    if missing:
        return RuleResult("panel", False, f"the web panel is incomplete: {len(missing)} missing", missing)
    return RuleResult("panel", True, f"the web panel: {len(found)} entries, {size:,} bytes unpacked, {stored:,} stored "
                                     f"(modules, h11, {len(files)} page files)")


RULES = (rule_postgres_driver, rule_cluster_module, rule_third_party, rule_stdlib_sqlite3, rule_monitor, rule_panel,
         rule_budget)


_PYTHON_VERSION_IN_PATH = re.compile(r"(?:libpython|python)(\d+\.\d+)(?:\.so|/lib-dynload)")


def check_python_version(report: ArtifactReport) -> None:
    """The stdlib's module list differs between Python versions: audit with the build's version.

    Raises:
        AuditError: the artifact carries another Python version than the one running the audit.
    """
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    found = {m.group(1) for e in report.entries if (m := _PYTHON_VERSION_IN_PATH.search(e.path))}
    if found and found != {running}:
        raise AuditError(
            f"{report.path}: built with Python {', '.join(sorted(found))}, audited with Python {running}; "
            f"run the audit with the build's Python, whose sys.stdlib_module_names matches"
        )


def audit(path: Path, budgets: dict[str, int]) -> ArtifactReport:
    report = read_artifact(path, budgets)
    check_python_version(report)
    report.rules = [rule(report) for rule in RULES]
    return report


def load_budgets(path: Path) -> dict[str, int]:
    try:
        with open(path, "rb") as file:
            budgets = tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AuditError(f"budget file {path}: {exc}") from exc
    for key in ("onefile_bytes", "onefolder_tar_xz_bytes"):
        if not isinstance(budgets.get(key), int) or budgets[key] <= 0:
            raise AuditError(f"budget file {path}: {key} must be a positive integer number of bytes")
    return budgets


# ---------------------------------------------------------------- reporting


def _mib(size: int) -> str:
    return f"{size / 1_048_576:.2f} MiB"


def _origin(top: str) -> str:
    if top in ALLOWED_THIRD_PARTY:
        return top
    if top.startswith(BOOTSTRAP_PREFIXES) or top in ENTRY_SCRIPTS:
        return "bootstrap"
    if top in sys.stdlib_module_names:
        return "stdlib"
    return "other"


def counts(report: ArtifactReport) -> dict[str, dict[str, int]]:
    by_kind = Counter(e.kind for e in report.entries)
    by_origin = Counter(_origin(e.module.split(".", 1)[0]) for e in report.entries if e.module)
    pyz = sum(1 for e in report.entries if ":PYZ:" in e.path)
    base = sum(1 for e in report.entries if "base_library.zip:" in e.path)
    return {
        "kinds": dict(sorted(by_kind.items())),
        "modules_by_origin": dict(sorted(by_origin.items())),
        "containers": {"pyz_modules": pyz, "base_library_members": base},
    }


def largest(report: ArtifactReport, n: int = 10) -> list[Entry]:
    # Containers (the PYZ, base_library.zip, the executable itself) are listed by their contents.
    return sorted((e for e in report.entries if e.kind not in ("archive", "executable")), key=lambda e: -e.size)[:n]


def render_text(reports: list[ArtifactReport]) -> str:
    lines: list[str] = []
    for report in reports:
        lines.append(f"== {report.path} ({report.form}): every entry")
        lines.append(f"{'bytes':>11} {'stored':>10}  {'kind':<18} path")
        for e in report.entries:
            stored = f"{e.stored:,}" if e.stored is not None else "-"
            lines.append(f"{e.size:>11,} {stored:>10}  {e.kind:<18} {e.path}")
        lines.append("")
    for report in reports:
        lines.append(f"== {report.path} ({report.form})")
        budget = f" / budget {report.budget:,} bytes ({_mib(report.budget)})" if report.budget else " (no budget)"
        lines.append(f"size: {report.size:,} bytes ({_mib(report.size)}){budget}")
        if report.unpacked_at_start is not None:
            lines.append(f"unpacked at start: {report.unpacked_at_start:,} bytes ({_mib(report.unpacked_at_start)})")
        if report.options:
            lines.append("runtime options: " + ", ".join(report.options))
        summary = counts(report)
        lines.append("entries by kind: " + ", ".join(f"{k} {v}" for k, v in summary["kinds"].items()))
        lines.append("modules by origin: " + ", ".join(f"{k} {v}" for k, v in summary["modules_by_origin"].items()))
        lines.append(
            f"containers: PYZ {summary['containers']['pyz_modules']} modules, "
            f"base_library.zip {summary['containers']['base_library_members']} members"
        )
        lines.append("ten largest entries (bytes unpacked):")
        for e in largest(report):
            lines.append(f"  {e.size:>11,}  {e.path}")
        lines.append("rules:")
        for rule in report.rules:
            lines.append(f"  {'PASS' if rule.passed else 'FAIL'}  {rule.rule}: {rule.detail}")
            for offender in rule.offenders if not rule.passed else []:
                lines.append(f"          {offender}")
        lines.append(f"verdict: {'PASS' if report.passed else 'FAIL'}")
        lines.append("")
    overall = all(r.passed for r in reports)
    lines.append(f"== audit {'PASSED' if overall else 'FAILED'}: {len(reports)} artifact(s)")
    return "\n".join(lines) + "\n"


def render_json(reports: list[ArtifactReport]) -> str:
    document = {
        "passed": all(r.passed for r in reports),
        "artifacts": [
            {
                "path": r.path,
                "form": r.form,
                "sizeBytes": r.size,
                "budgetBytes": r.budget,
                "unpackedAtStartBytes": r.unpacked_at_start,
                "options": r.options,
                "passed": r.passed,
                "rules": [asdict(rule) for rule in r.rules],
                "counts": counts(r),
                "largest": [asdict(e) for e in largest(r)],
                "entries": [asdict(e) for e in r.entries],
            }
            for r in reports
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """A reader sees the old report or the whole new one (build/atomic_publish.py)."""
    atomic_publish.publish(path, lambda temp: temp.write_text(text, encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="artifact_audit.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("artifacts", nargs="+", type=Path, metavar="ARTIFACT")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--output", type=Path, metavar="FILE", help="also write the report to FILE (atomically)")
    parser.add_argument("--budget", type=Path, default=DEFAULT_BUDGET_FILE, metavar="FILE", help="budget file")
    args = parser.parse_args(argv)
    try:
        budgets = load_budgets(args.budget)
        reports = [audit(path, budgets) for path in args.artifacts]
    except AuditError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 2
    text = render_json(reports) if args.json else render_text(reports)
    sys.stdout.write(text)
    if args.output:
        write_atomically(args.output, text)
    return 0 if all(r.passed for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
