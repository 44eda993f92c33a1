"""Reading a QingLong data folder, or the ``data.tgz`` its backup writes, as the hostile input it is.

A source gives three things: a private copy of its database (``db/database.sqlite``, for
:mod:`edge_runtime.qinglong.sqlite_reader`), the list of its scripts (``scripts/``, each with its
size and SHA-256) with the entries that will not be copied and why, and the names in its
``config/`` folder (not imported; the plan says so).

The folder (``/ql/data``; ``/ql`` itself for the layout before QingLong 2.11.3, or a ``/ql``
whose ``data/`` holds it) is read through directory descriptors, every name relative to the one
before it with ``O_NOFOLLOW``: a symlink is never followed, a FIFO or device never opened, and a
file is checked on its open descriptor. The archive (``data/...`` members, as QingLong's export
writes them, or members without that prefix) is read as a stream, twice at most (the listing,
then the copy); nothing in it is ever extracted by ``tarfile``. Each member is checked by
``tarfile.data_filter`` (where this Python has it: 3.11.4 and later; a router's Debian-built 3.11.2
has not) and, because that filter is not enough alone, by the rules here in any case:

- a member named by an absolute path or with a ``..`` component refuses the whole archive (a
  real export never has one);
- a link (symbolic or hard) is never made: inside ``scripts/`` it is listed as skipped (saying
  when it points outside the archive), and a database that is a link refuses the archive;
- FIFOs, devices and sparse files are skipped; a name that is not UTF-8 or holds a control
  character is skipped;
- a member read twice under the same name refuses the archive (which copy wins is a trick);
- sizes are bounded: the database (:data:`MAX_DATABASE_BYTES`), a script
  (:data:`MAX_SCRIPT_BYTES`), all scripts (:data:`MAX_SCRIPT_FILES`, :data:`MAX_SCRIPTS_BYTES`)
  and the archive as read (:data:`MAX_ARCHIVE_MEMBERS` members, :data:`MAX_ARCHIVE_BYTES`
  uncompressed bytes), so a compression bomb ends at a bound, not at a full disk.

A database with a non-empty ``-wal`` or ``-journal`` beside it is refused: QingLong is running
or stopped mid-write, and the file alone is not what QingLong last saw.
"""

from __future__ import annotations

import errno
import os
import stat
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, BinaryIO

import msgspec

from edge_runtime.qinglong.errors import QingLongSourceError
from edge_runtime.qinglong.script_files import (
    DIR_FLAGS, FILE_FLAGS, MAX_DEPTH, SKIPPED_FOLDERS, hash_chunks, name_problem, open_file_at, parent_at, read_chunks,
    shown_name, walk,
)

#: Largest QingLong database read (a long-used one holds run statistics: tens of MiB at most).
MAX_DATABASE_BYTES = 256 * 1024 * 1024
#: Largest script copied (bundled scripts reach a few MiB).
MAX_SCRIPT_BYTES = 16 * 1024 * 1024
#: Most script files, and most bytes of them, one import copies.
MAX_SCRIPT_FILES = 20_000
MAX_SCRIPTS_BYTES = 1024 * 1024 * 1024
#: Most members, and most uncompressed bytes, read from an archive (logs included: they are
#: streamed past, never kept).
MAX_ARCHIVE_MEMBERS = 200_000
MAX_ARCHIVE_BYTES = 8 * 1024 * 1024 * 1024
DATABASE_NAME = "database.sqlite"
_SIDE_SUFFIXES = ("-wal", "-journal")
_CHUNK = 256 * 1024
_NEDB_FILES = ("crontab.db", "env.db", "auth.db")


class ScriptFile(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """A script (or any file) under ``scripts/``: its path there (``/``-separated), size,
    whether it is executable, and the SHA-256 of the bytes read (the copy must match it)."""

    path: str
    size: int
    executable: bool
    sha256: str


class SkippedPath(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """An entry under ``scripts/`` that is not copied, and why."""

    path: str
    reason: str


Progress = Callable[[str], object]


def _no_progress(_: str) -> None:
    return None


class QingLongSource:
    """An opened QingLong data folder or backup (:func:`open_source`); ``close`` removes the
    private copy of its database."""

    def __init__(self, *, kind: str, where: str, work_dir: tempfile.TemporaryDirectory, database: Path,
                 scripts: list[ScriptFile], skipped: list[SkippedPath], config: list[str], layout: str,
                 streamer: Callable[[dict[str, ScriptFile]], Iterator[tuple[ScriptFile, Iterator[bytes]]]],
                 closer: Callable[[], None]) -> None:
        self.kind = kind  # "folder" or "archive"
        self.where = where
        self.database = database
        self.scripts = scripts
        self.skipped = skipped
        self.config = config
        self.layout = layout
        self._work_dir = work_dir
        self._streamer = streamer
        self._closer = closer

    def stream(self, files: Iterable[ScriptFile]) -> Iterator[tuple[ScriptFile, Iterator[bytes]]]:
        """Each of ``files`` with its content in chunks, read again from the source (consume a
        file's chunks before asking for the next). The caller checks the SHA-256 it recorded:
        a file changed since it was listed is not the file that was planned."""
        return self._streamer({f.path: f for f in files})

    def close(self) -> None:
        try:
            self._closer()
        finally:
            self._work_dir.cleanup()

    def __enter__(self) -> QingLongSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_source(path: str | os.PathLike[str], *, progress: Progress = _no_progress) -> QingLongSource:
    """The QingLong data at ``path``: a folder, or an archive (a regular file).

    Raises:
        QingLongSourceError: not a QingLong data folder or backup, or refused as hostile; the
            message says what was found.
    """
    shown = os.fspath(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise QingLongSourceError(f"cannot read {shown}: {exc.strerror or exc}") from None
    work_dir = tempfile.TemporaryDirectory(prefix="edge-runtime-qinglong-")
    try:
        if stat.S_ISDIR(info.st_mode):
            return _open_folder(shown, work_dir, progress)
        if stat.S_ISREG(info.st_mode):
            return _open_archive(shown, work_dir, progress)
        raise QingLongSourceError(f"{shown} is neither a folder nor a file (a QingLong data folder or its data.tgz)")
    except OSError as exc:
        work_dir.cleanup()
        raise QingLongSourceError(f"cannot read {shown}: {exc.strerror or exc}") from None
    except BaseException:
        work_dir.cleanup()
        raise


# ----------------------------------------------------------------------------------- the folder


def _open_folder(shown: str, work_dir: tempfile.TemporaryDirectory, progress: Progress) -> QingLongSource:
    root_fd = os.open(shown, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the path the user named
    try:
        root_fd, layout = _folder_root(root_fd, shown)
    except BaseException:
        os.close(root_fd)
        raise
    try:
        database = Path(work_dir.name) / DATABASE_NAME
        db_fd = _open_dir(root_fd, "db")
        try:
            _refuse_side_files(lambda name: _lstat(db_fd, name), f"{shown}/db")
            _copy_database(lambda: _open_file(db_fd, DATABASE_NAME), database, f"{shown}/db/{DATABASE_NAME}")
        finally:
            os.close(db_fd)
        scripts: list[ScriptFile] = []
        skipped: list[SkippedPath] = []
        scripts_fd = _open_dir(root_fd, "scripts", missing_ok=True)
        if scripts_fd is not None:
            try:
                _walk_scripts(scripts_fd, scripts, skipped, progress)
            finally:
                os.close(scripts_fd)
        config = _config_names(root_fd)
    except BaseException:
        os.close(root_fd)
        raise

    def streamer(wanted: dict[str, ScriptFile]) -> Iterator[tuple[ScriptFile, Iterator[bytes]]]:
        for path, file in wanted.items():
            yield file, _folder_chunks(root_fd, path)

    return QingLongSource(kind="folder", where=shown, work_dir=work_dir, database=database, scripts=scripts,
                          skipped=skipped, config=config, layout=layout, streamer=streamer,
                          closer=lambda: os.close(root_fd))


def _folder_root(root_fd: int, shown: str) -> tuple[int, str]:
    """The descriptor of the folder holding ``db/`` (``shown`` itself or its ``data/``) and the
    layout found."""
    if _lstat(root_fd, "db/" + DATABASE_NAME) is not None:
        return root_fd, "a QingLong data folder"
    data = _lstat(root_fd, "data")
    if data is not None and stat.S_ISDIR(data.st_mode):
        data_fd = _open_dir(root_fd, "data")
        if _lstat(data_fd, "db/" + DATABASE_NAME) is not None:
            os.close(root_fd)
            return data_fd, "a QingLong install folder (its data/ read)"
        os.close(data_fd)
    nedb = [name for name in _NEDB_FILES if _lstat(root_fd, "db/" + name) is not None]
    if nedb:
        raise QingLongSourceError(
            f"{shown} is a QingLong 2.10 (or older) data folder: db/ holds {', '.join(nedb)} and no "
            f"{DATABASE_NAME}; this build reads QingLong 2.11 and newer (start QingLong 2.11 or newer on it once, "
            f"which moves the data into {DATABASE_NAME}, then import again)")
    found = sorted(os.listdir(root_fd))[:12]
    raise QingLongSourceError(
        f"{shown} is not a QingLong data folder: no db/{DATABASE_NAME} in it (a data folder, /ql/data, holds db/, "
        f"scripts/ and config/); found: {', '.join(found) or 'nothing'}")


def _lstat(dir_fd: int, relative: str) -> os.stat_result | None:
    """``lstat`` of ``relative`` under ``dir_fd`` without following a symlink on the way, or None."""
    try:
        with parent_at(dir_fd, relative) as (fd, name):
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        raise


def _open_dir(dir_fd: int, name: str, *, missing_ok: bool = False) -> int | None:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise QingLongSourceError(f"no {name}/ folder in the QingLong data") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise QingLongSourceError(f"{name} in the QingLong data is a symlink or not a folder: refused "
                                      f"(links are never followed)") from None
        raise QingLongSourceError(f"cannot open {name}/ in the QingLong data: {exc.strerror or exc}") from None


def _open_file(dir_fd: int, name: str) -> int:
    """``name`` in ``dir_fd`` opened read-only only if it is a regular file (never a symlink,
    FIFO or device; checked on the open descriptor)."""
    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{name} is not a regular file")
    return fd


def _refuse_side_files(lookup: Callable[[str], os.stat_result | None], shown: str) -> None:
    for suffix in _SIDE_SUFFIXES:
        info = lookup(DATABASE_NAME + suffix)
        if info is not None and (info.st_size > 0 or not stat.S_ISREG(info.st_mode)):
            raise QingLongSourceError(
                f"{shown}/{DATABASE_NAME}{suffix} is not empty: QingLong is running, or stopped in the middle of a "
                f"write, and {DATABASE_NAME} alone is not what it last saw; stop QingLong (or export a backup from "
                f"its panel: System settings, Data backup) and import again")


def _copy_database(open_fd: Callable[[], int], dest: Path, shown: str) -> None:
    try:
        fd = open_fd()
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EINVAL, errno.ENXIO):
            raise QingLongSourceError(f"{shown} is not a regular file (a symlink, FIFO or device): refused") from None
        raise QingLongSourceError(f"cannot read {shown}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "rb", closefd=False) as source:
            _write_private(source, dest, MAX_DATABASE_BYTES, shown)
    finally:
        os.close(fd)


def _write_private(source: IO[bytes], dest: Path, limit: int, shown: str) -> None:
    """Copy ``source`` into the new private file ``dest`` (mode 0600), refusing more than ``limit`` bytes."""
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(out, "wb") as sink:
        copied = 0
        while chunk := source.read(_CHUNK):
            copied += len(chunk)
            if copied > limit:
                raise QingLongSourceError(f"{shown} is larger than {_amount(limit)}: refused "
                                          f"(a QingLong database is far smaller)")
            sink.write(chunk)


def _walk_scripts(scripts_fd: int, scripts: list[ScriptFile], skipped: list[SkippedPath], progress: Progress) -> None:
    """Every regular file under ``scripts/`` into ``scripts`` (hashed), the rest into ``skipped``."""
    total = 0
    for entry in walk(scripts_fd):
        if entry.skipped is not None:
            skipped.append(SkippedPath(path=entry.path, reason=entry.skipped))
            continue
        if entry.size > MAX_SCRIPT_BYTES:
            skipped.append(SkippedPath(path=entry.path, reason=_too_large(entry.size)))
            continue
        try:
            fd = open_file_at(scripts_fd, entry.path)
        except OSError as exc:
            skipped.append(SkippedPath(path=entry.path, reason=f"cannot be read: {exc.strerror or exc}"))
            continue
        try:
            digest, size = hash_chunks(read_chunks(fd, MAX_SCRIPT_BYTES + 1))
        finally:
            os.close(fd)
        if size > MAX_SCRIPT_BYTES:
            skipped.append(SkippedPath(path=entry.path, reason=_too_large(size)))
            continue
        total += size
        _check_totals(len(scripts) + 1, total)
        scripts.append(ScriptFile(path=entry.path, size=size, executable=entry.executable, sha256=digest))
        if len(scripts) % 1000 == 0:
            progress(f"read {len(scripts)} scripts")


def _folder_chunks(root_fd: int, path: str) -> Iterator[bytes]:
    """The content of ``scripts/<path>``, opened again by the same rules as the listing."""
    fd = open_file_at(root_fd, "scripts/" + path)
    try:
        yield from read_chunks(fd, MAX_SCRIPT_BYTES + 1)
    finally:
        os.close(fd)


def _config_names(root_fd: int) -> list[str]:
    config_fd = _open_dir(root_fd, "config", missing_ok=True)
    if config_fd is None:
        return []
    try:
        return sorted(name for name in os.listdir(config_fd) if name_problem(name) is None)
    finally:
        os.close(config_fd)


# ----------------------------------------------------------------------------------- the archive

#: The prefixes a data folder's members may carry: QingLong's export (``data/``) or none.
_ROOTS = ("data/", "")


class _Member(msgspec.Struct):
    name: str  # without the root
    size: int
    executable: bool
    kind: str  # "file", "link", "special", "dir"
    link_out: bool = False


def _open_archive(shown: str, work_dir: tempfile.TemporaryDirectory, progress: Progress) -> QingLongSource:
    fd = os.open(shown, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    archive = os.fdopen(fd, "rb")
    try:
        if not stat.S_ISREG(os.fstat(archive.fileno()).st_mode):
            raise QingLongSourceError(f"{shown} is not a regular file")
        listing = _list_archive(archive, shown, Path(work_dir.name), progress)
    except BaseException:
        archive.close()
        raise
    root, database, scripts, skipped, config = listing

    def streamer(wanted: dict[str, ScriptFile]) -> Iterator[tuple[ScriptFile, Iterator[bytes]]]:
        try:
            yield from members(wanted)
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise QingLongSourceError(f"{shown} cannot be read any further: {exc}") from None

    def members(wanted: dict[str, ScriptFile]) -> Iterator[tuple[ScriptFile, Iterator[bytes]]]:
        archive.seek(0)
        with _tar_stream(archive, shown) as tar:
            for member in tar:
                name = _member_name(member.name)
                if name is None or not name.startswith(root + "scripts/") or not member.isreg():
                    continue
                file = wanted.get(name[len(root + "scripts/"):])
                if file is None:
                    continue
                extracted = tar.extractfile(member)
                if extracted is None:
                    continue
                yield file, _stream_chunks(extracted, MAX_SCRIPT_BYTES + 1)

    layout = "a QingLong backup (data.tgz)" if root == "data/" else "an archive of a QingLong data folder"
    return QingLongSource(kind="archive", where=shown, work_dir=work_dir, database=database, scripts=scripts,
                          skipped=skipped, config=config, layout=layout, streamer=streamer, closer=archive.close)


def _tar_stream(archive: BinaryIO, shown: str) -> tarfile.TarFile:
    try:
        return tarfile.open(fileobj=archive, mode="r|*")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise QingLongSourceError(f"{shown} is not a tar archive (gzip, bzip2, xz or plain): {exc}") from None


def _member_name(raw: str) -> str | None:
    """The member's name without a leading ``./``; None for the archive's own ``.``."""
    name = raw
    while name.startswith("./"):
        name = name[2:]
    name = name.rstrip("/")
    return name or None


def _filter_verdict(member: tarfile.TarInfo, dest: str) -> str | None:
    """What ``tarfile.data_filter`` says of ``member``: "leaves" (an absolute name, or outside),
    "link out", or None (nothing, a special file the rules here skip, or no such filter here)."""
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is None:
        return None
    try:
        data_filter(member, dest)
    except tarfile.FilterError as exc:  # its subclasses exist wherever data_filter does
        kind = type(exc).__name__
        if kind in ("AbsolutePathError", "OutsideDestinationError"):
            return "leaves"
        if kind in ("AbsoluteLinkError", "LinkOutsideDestinationError"):
            return "link out"
    return None


def _link_out(member: tarfile.TarInfo, name: str) -> bool:
    """Whether a link member points outside the archive's folder (absolute, or up past its top):
    the rule here, whether or not ``data_filter`` is there to say it too."""
    if not (member.issym() or member.islnk()):
        return False
    target = member.linkname
    if target.startswith("/"):
        return True
    base = name.rsplit("/", 1)[0] if member.issym() and "/" in name else ""  # a hard link names from the top
    depth = 0
    for part in ([*base.split("/")] if base else []) + target.split("/"):
        if part in ("", "."):
            continue
        depth += -1 if part == ".." else 1
        if depth < 0:
            return True
    return False


def _hostile_name(name: str) -> bool:
    return name.startswith("/") or any(part == ".." for part in name.split("/"))


def _list_archive(archive: BinaryIO, shown: str, work_dir: Path,
                  progress: Progress) -> tuple[str, Path, list[ScriptFile], list[SkippedPath], list[str]]:
    members = 0
    read_bytes = 0
    databases: dict[str, Path] = {}
    side_files: dict[str, int] = {}
    found: dict[str, dict[str, _Member]] = {root: {} for root in _ROOTS}
    hashes: dict[str, str] = {}
    config: dict[str, list[str]] = {root: [] for root in _ROOTS}
    seen: set[str] = set()
    top_level: set[str] = set()
    filter_dest = str(work_dir / "check")
    try:
        with _tar_stream(archive, shown) as tar:
            for member in tar:
                members += 1
                if members > MAX_ARCHIVE_MEMBERS:
                    raise QingLongSourceError(f"{shown} holds more than {MAX_ARCHIVE_MEMBERS} members: refused")
                if members % 10_000 == 0:
                    progress(f"read {members} archive members")
                name = _member_name(member.name)
                if name is None:
                    continue
                if _hostile_name(member.name) or _hostile_name(name):
                    raise QingLongSourceError(
                        f"{shown} has a member named {member.name!r}, which leaves the archive's folder (an absolute "
                        f"path or a '..'): refused whole, nothing read from it (QingLong's own backups never have one)")
                verdict = _filter_verdict(member, filter_dest)
                if verdict == "leaves":
                    raise QingLongSourceError(
                        f"{shown} has a member named {member.name!r}, which leaves the archive's folder: refused "
                        f"whole")
                link_out = verdict == "link out" or _link_out(member, name)
                if member.isreg():
                    read_bytes += member.size
                    if read_bytes > MAX_ARCHIVE_BYTES:
                        raise QingLongSourceError(f"{shown} holds more than {_amount(MAX_ARCHIVE_BYTES)}: refused "
                                                  f"(a compression bomb, or not a QingLong backup)")
                top_level.add(name.split("/", 1)[0])
                for root in _ROOTS:
                    if not name.startswith(root):
                        continue
                    inner = name[len(root):]
                    if inner in (f"db/{DATABASE_NAME}", *(f"db/{DATABASE_NAME}{s}" for s in _SIDE_SUFFIXES)) \
                            or inner.startswith("scripts/"):
                        if name in seen and not member.isdir():
                            raise QingLongSourceError(f"{shown} holds {name!r} twice: refused (which copy is meant "
                                                      f"cannot be told)")
                        seen.add(name)
                    if inner == f"db/{DATABASE_NAME}":
                        if not member.isreg():
                            raise QingLongSourceError(f"{shown}: {name} is not a regular file (a link or a device): "
                                                      f"refused")
                        if member.size > MAX_DATABASE_BYTES:
                            raise QingLongSourceError(f"{shown}: {name} is larger than {_amount(MAX_DATABASE_BYTES)}: "
                                                      f"refused")
                        dest = work_dir / f"{len(databases)}-{DATABASE_NAME}"
                        extracted = tar.extractfile(member)
                        if extracted is None:
                            raise QingLongSourceError(f"{shown}: {name} cannot be read")
                        _write_private(extracted, dest, MAX_DATABASE_BYTES, f"{shown}: {name}")
                        databases[root] = dest
                    elif inner.startswith(f"db/{DATABASE_NAME}-"):
                        side_files[root + inner[len("db/"):]] = member.size if member.isreg() else 1
                    elif inner.startswith("scripts/") and not member.isdir():
                        path = inner[len("scripts/"):]
                        entry = _classify(member, path, link_out)
                        found[root][path] = entry
                        if entry.kind == "file" and entry.size <= MAX_SCRIPT_BYTES:
                            extracted = tar.extractfile(member)
                            if extracted is not None:
                                digest, size = hash_chunks(_stream_chunks(extracted, MAX_SCRIPT_BYTES + 1))
                                hashes[root + path] = digest
                    elif inner.startswith("config/") and member.isreg() and inner.count("/") == 1:
                        config[root].append(inner[len("config/"):])
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise QingLongSourceError(f"{shown} cannot be read as an archive: {exc}") from None
    if len(databases) > 1:
        raise QingLongSourceError(f"{shown} holds two databases (data/db/{DATABASE_NAME} and db/{DATABASE_NAME}): "
                                  f"refused (which one is meant cannot be told)")
    if not databases:
        raise QingLongSourceError(
            f"{shown} is not a QingLong backup: no data/db/{DATABASE_NAME} (nor db/{DATABASE_NAME}) in it; found at "
            f"its top: {', '.join(sorted(top_level)[:12]) or 'nothing'}")
    root, database = next(iter(databases.items()))
    for side, size in side_files.items():
        if side.startswith(root) and size > 0:
            raise QingLongSourceError(
                f"{shown}: {side} is not empty: the backup was taken while QingLong was writing, and {DATABASE_NAME} "
                f"alone is not what it last saw; export the backup again")
    scripts, skipped = _archive_scripts(found[root], {k[len(root):]: v for k, v in hashes.items()
                                                      if k.startswith(root)})
    return root, database, scripts, skipped, sorted(config[root])


def _classify(member: tarfile.TarInfo, path: str, link_out: bool) -> _Member:
    if member.issym() or member.islnk():
        return _Member(name=path, size=0, executable=False, kind="link", link_out=link_out)
    if member.isreg() and not member.issparse():
        return _Member(name=path, size=member.size, executable=bool(member.mode & 0o111), kind="file")
    return _Member(name=path, size=0, executable=False, kind="special")


def _archive_scripts(found: dict[str, _Member], hashes: dict[str, str]) -> tuple[list[ScriptFile], list[SkippedPath]]:
    scripts: list[ScriptFile] = []
    skipped: list[SkippedPath] = []
    links = {path for path, entry in found.items() if entry.kind == "link"}
    files = {path for path, entry in found.items() if entry.kind == "file"}
    total = 0
    for path in sorted(found):
        entry = found[path]
        ancestors = ["/".join(path.split("/")[:i]) for i in range(1, path.count("/") + 1)]
        problem = name_problem(path)
        if problem is not None:
            skipped.append(SkippedPath(path=shown_name(path), reason=problem))
        elif entry.kind == "link":
            where = "pointing outside the archive" if entry.link_out else "inside the archive"
            skipped.append(SkippedPath(path=path, reason=f"a link ({where}): links are never made, not copied"))
        elif entry.kind == "special":
            skipped.append(SkippedPath(path=path, reason="not a regular file (a FIFO, device or sparse file): "
                                                         "not copied"))
        elif any(a in links for a in ancestors):
            skipped.append(SkippedPath(path=path, reason="inside a folder that is a link in the archive: not copied"))
        elif any(a in files for a in ancestors):
            skipped.append(SkippedPath(path=path, reason="inside a folder that is a file in the archive: not copied"))
        elif any(part in SKIPPED_FOLDERS for part in path.split("/")[:-1]):
            folder = next(part for part in path.split("/")[:-1] if part in SKIPPED_FOLDERS)
            skipped.append(SkippedPath(path=path, reason=SKIPPED_FOLDERS[folder]))
        elif path.count("/") >= MAX_DEPTH:
            skipped.append(SkippedPath(path=path, reason=f"deeper than {MAX_DEPTH} folders"))
        elif entry.size > MAX_SCRIPT_BYTES or path not in hashes:
            skipped.append(SkippedPath(path=path, reason=_too_large(entry.size)))
        else:
            total += entry.size
            _check_totals(len(scripts) + 1, total)
            scripts.append(ScriptFile(path=path, size=entry.size, executable=entry.executable, sha256=hashes[path]))
    return scripts, _folded(skipped)


def _folded(skipped: list[SkippedPath]) -> list[SkippedPath]:
    """Entries inside a skipped folder (``node_modules/``...) as one entry for the folder."""
    out: list[SkippedPath] = []
    folders: set[str] = set()
    for entry in skipped:
        parts = entry.path.split("/")
        folder = next((i for i, part in enumerate(parts[:-1]) if part in SKIPPED_FOLDERS), None)
        if folder is None:
            out.append(entry)
            continue
        path = "/".join(parts[:folder + 1]) + "/"
        if path not in folders:
            folders.add(path)
            out.append(SkippedPath(path=path, reason=entry.reason))
    return out


def _stream_chunks(source: IO[bytes], limit: int) -> Iterator[bytes]:
    left = limit
    while left > 0:
        try:
            chunk = source.read(min(_CHUNK, left))
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise QingLongSourceError(f"the archive cannot be read any further: {exc}") from None
        if not chunk:
            return
        left -= len(chunk)
        yield chunk


# ----------------------------------------------------------------------------------- shared


def _check_totals(count: int, total: int) -> None:
    if count > MAX_SCRIPT_FILES:
        raise QingLongSourceError(f"scripts/ holds more than {MAX_SCRIPT_FILES} files: refused (copy the folders you "
                                  f"need by hand, or remove what QingLong no longer uses)")
    if total > MAX_SCRIPTS_BYTES:
        raise QingLongSourceError(f"scripts/ holds more than {_amount(MAX_SCRIPTS_BYTES)}: refused")


def _too_large(size: int) -> str:
    return f"larger than {_amount(MAX_SCRIPT_BYTES)} ({size} bytes): not copied"


def _amount(size: int) -> str:
    for unit, scale in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} bytes"
