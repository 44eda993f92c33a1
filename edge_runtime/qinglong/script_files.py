"""Files under a folder of scripts, walked and written through directory descriptors.

Both sides of a copy go through here: reading a folder of scripts someone else wrote (a QingLong
data folder, a folder given to ``scripts scan``) and writing into the scripts directory, which
root's tasks run code from. The rules are the same on both sides: every name is opened relative
to its folder's descriptor with ``O_NOFOLLOW`` (a symlink is never followed, on the way or at the
end), a file is checked to be a regular file on its open descriptor, names must be UTF-8
without control characters, and folders deeper than :data:`MAX_DEPTH` are not walked.

A file is written under a temporary name beside its final one, synced, and renamed into place
only when its bytes have the SHA-256 that was planned; its folder is synced after. An existing
file is never replaced: the scripts directory must be one nobody else can write to (the CLI holds
it with :func:`edge_runtime.service.trusted_paths.hold_trusted_directory`), so nothing can appear
between the check and the rename.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Iterable, Iterator

import msgspec

from edge_runtime.qinglong.errors import ScriptsDirectoryError

#: Deepest folder walked below the top.
MAX_DEPTH = 32
#: Folders that are not walked, with why (installed packages, caches, a clone's own data).
SKIPPED_FOLDERS = {
    "node_modules": "installed packages are not copied: install them again on this device (npm)",
    "__pycache__": "Python's compiled cache is not copied: it is made again when a script runs",
    ".git": "a git clone's own data is not copied",
    # edge_runtime/qinglong/subscription_pull.py: a pull's download and its staged folder.
    ".subscriptions": "the subscriptions' work area (pulls in progress), not scripts",
}
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CHUNK = 256 * 1024


class WalkEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A file found by :func:`walk` (``skipped`` None: a regular file of ``size`` bytes), or an
    entry that is not walked or not a regular file (``skipped``: why)."""

    path: str
    size: int = 0
    executable: bool = False
    skipped: str | None = None


def name_problem(name: str) -> str | None:
    """Why a file name is not taken (not UTF-8, a control character), or None."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not UTF-8: not copied"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):
        return "its name holds a control character: not copied"
    return None


def shown_name(path: str) -> str:
    """A path that may hold undecodable bytes or controls, as printable ASCII escapes."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace").encode("unicode_escape").decode("ascii")


def walk(top_fd: int) -> Iterator[WalkEntry]:
    """Every entry under the folder open as ``top_fd``, in name order, depth first."""
    stack: list[tuple[int, str, int]] = [(os.dup(top_fd), "", 0)]
    try:
        while stack:
            fd, prefix, depth = stack.pop()
            children: list[tuple[int, str, int]] = []
            try:
                with os.scandir(fd) as entries:
                    names = sorted(entry.name for entry in entries)
                for name in names:
                    path = prefix + name
                    problem = name_problem(name)
                    if problem is not None:
                        yield WalkEntry(path=shown_name(path), skipped=problem)
                        continue
                    try:
                        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # removed while walked
                    if stat.S_ISLNK(info.st_mode):
                        yield WalkEntry(path=path, skipped="a symbolic link: never followed, not copied")
                    elif stat.S_ISDIR(info.st_mode):
                        if name in SKIPPED_FOLDERS:
                            yield WalkEntry(path=path + "/", skipped=SKIPPED_FOLDERS[name])
                        elif depth + 1 > MAX_DEPTH:
                            yield WalkEntry(path=path + "/", skipped=f"deeper than {MAX_DEPTH} folders")
                        else:
                            try:
                                children.append((os.open(name, DIR_FLAGS, dir_fd=fd), path + "/", depth + 1))
                            except OSError as exc:
                                yield WalkEntry(path=path + "/", skipped=f"cannot be opened: {exc.strerror or exc}")
                    elif stat.S_ISREG(info.st_mode):
                        yield WalkEntry(path=path, size=info.st_size, executable=bool(info.st_mode & 0o111))
                    else:
                        yield WalkEntry(path=path, skipped="not a regular file (a FIFO, socket or device): not copied")
                stack.extend(reversed(children))
                children = []
            finally:
                os.close(fd)
                for child, _, _ in children:
                    os.close(child)
    finally:
        for fd, _, _ in stack:
            os.close(fd)


@contextlib.contextmanager
def parent_at(top_fd: int, path: str) -> Iterator[tuple[int, str]]:
    """The folder holding ``path`` (``/``-separated, below ``top_fd``) as an open descriptor, with
    the last name: reached one folder at a time with ``O_NOFOLLOW``, so a symlink on the way fails
    (``ELOOP``/``ENOTDIR``) instead of leading out. Closed on leaving (``top_fd`` stays open)."""
    parts = path.split("/")
    fd = top_fd
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
            if fd != top_fd:
                os.close(fd)
            fd = next_fd
        yield fd, parts[-1]
    finally:
        if fd != top_fd:
            os.close(fd)


def open_file_at(top_fd: int, path: str) -> int:
    """``path`` (``/``-separated, below ``top_fd``) opened read-only, never through a symlink,
    only if it is a regular file.

    Raises:
        OSError: missing, a link on the way (``ELOOP``/``ENOTDIR``) or not a regular file (``EINVAL``).
    """
    with parent_at(top_fd, path) as (fd, name):
        file_fd = os.open(name, FILE_FLAGS, dir_fd=fd)
    if not stat.S_ISREG(os.fstat(file_fd).st_mode):
        os.close(file_fd)
        raise OSError(errno.EINVAL, f"{path} is not a regular file")
    return file_fd


def read_chunks(fd: int, limit: int) -> Iterator[bytes]:
    """At most ``limit`` bytes of ``fd`` from where it is, in chunks."""
    left = limit
    while left > 0 and (chunk := os.read(fd, min(CHUNK, left))):
        left -= len(chunk)
        yield chunk


def hash_chunks(chunks: Iterable[bytes]) -> tuple[str, int]:
    """The SHA-256 (hex) and the length of the bytes."""
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def file_here(top_fd: int | None, path: str, limit: int) -> tuple[str | None, str | None] | None:
    """What is at ``path`` below ``top_fd`` (None: nothing, or no directory yet): ``(sha256,
    None)`` for a regular file, ``(None, why it cannot take a file)`` otherwise."""
    if top_fd is None:
        return None
    try:
        fd = open_file_at(top_fd, path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EINVAL, errno.EISDIR):
            return None, f"{path} in the scripts directory is a link, a folder or not a regular file: not replaced"
        return None, f"{path} in the scripts directory cannot be read: {exc.strerror or exc}"
    try:
        digest, _ = hash_chunks(read_chunks(fd, limit + 1))
    finally:
        os.close(fd)
    return digest, None


class FileWriter:
    """Writes files below the scripts directory held as ``top_fd`` (see the module docstring);
    :meth:`close` syncs every folder written into."""

    def __init__(self, top_fd: int) -> None:
        self._top_fd = top_fd
        self._folders: set[str] = set()

    def write(self, path: str, chunks: Iterable[bytes], *, sha256: str | None, limit: int, executable: bool) -> bool:
        """Write ``path`` from ``chunks``: True when written, False when the same bytes were
        there already. ``sha256`` None: bytes whose digest was not known beforehand (a
        subscription's download, checked by git's own object ids), written as they come.

        Raises:
            ScriptsDirectoryError: the bytes are not the planned ones (the source changed), more
                than ``limit``, another file is at ``path``, or a folder on the way is a link or a file.
        """
        parts = path.split("/")
        if any(part in ("", ".", "..") or "\x00" in part for part in parts):
            raise ScriptsDirectoryError(f"{path!r} is not a relative path: refused")
        folder = self._folder(parts[:-1], path)
        try:
            return self._write_in(folder, parts[-1], path, chunks, sha256=sha256, limit=limit, executable=executable)
        finally:
            if folder != self._top_fd:
                os.close(folder)

    def _folder(self, parts: list[str], path: str) -> int:
        fd = self._top_fd
        walked: list[str] = []
        try:
            for part in parts:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    self._folders.add("/".join(walked))
                except FileExistsError:
                    pass
                try:
                    next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise ScriptsDirectoryError(
                        f"{'/'.join([*walked, part])} in the scripts directory is a link or a file, not a folder: "
                        f"{path} not written") from exc
                if fd != self._top_fd:
                    os.close(fd)
                fd = next_fd
                walked.append(part)
        except BaseException:
            if fd != self._top_fd:
                os.close(fd)
            raise
        self._folders.add("/".join(walked))
        return fd

    def _write_in(self, folder: int, name: str, path: str, chunks: Iterable[bytes], *, sha256: str | None, limit: int,
                  executable: bool) -> bool:
        temporary = f".{name}.import-{secrets.token_hex(6)}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o755 if executable else 0o644, dir_fd=folder)
        try:
            digest = hashlib.sha256()
            size = 0
            try:
                for chunk in chunks:
                    size += len(chunk)
                    if size > limit:
                        raise ScriptsDirectoryError(f"{path} grew past {limit} bytes while it was copied: not written")
                    digest.update(chunk)
                    _write_all(fd, chunk)
                os.fchmod(fd, 0o755 if executable else 0o644)  # the umask is not the source's business
                os.fsync(fd)
            finally:
                os.close(fd)
            if sha256 is None:
                sha256 = digest.hexdigest()
            elif digest.hexdigest() != sha256:
                raise ScriptsDirectoryError(f"{path} changed since it was read (its bytes are not the planned ones): "
                                            f"not written; run the import again")
            try:
                here = os.stat(name, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                here = None
            if here is not None:
                if stat.S_ISREG(here.st_mode):
                    existing = os.open(name, FILE_FLAGS, dir_fd=folder)
                    try:
                        same = hash_chunks(read_chunks(existing, limit + 1))[0] == sha256
                    finally:
                        os.close(existing)
                    if same:
                        return False
                raise ScriptsDirectoryError(f"{path}: another file is there already: not replaced")
            os.rename(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
            temporary = ""
            return True
        finally:
            if temporary:
                try:
                    os.unlink(temporary, dir_fd=folder)
                except FileNotFoundError:
                    pass

    def close(self) -> None:
        """Sync every folder a file was written into (a rename is durable once its folder is)."""
        for relative in sorted(self._folders):
            try:
                fd = self._top_fd if not relative else open_dir_at(self._top_fd, relative)
            except OSError:
                continue  # removed since: nothing of ours to make durable there
            try:
                os.fsync(fd)
            finally:
                if fd != self._top_fd:
                    os.close(fd)
        self._folders.clear()


def open_dir_at(top_fd: int, path: str) -> int:
    """The folder ``path`` below ``top_fd``, opened without following a link."""
    fd = top_fd
    for part in path.split("/"):
        next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
        if fd != top_fd:
            os.close(fd)
        fd = next_fd
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
