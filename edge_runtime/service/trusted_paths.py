"""Which directories a root service may keep files in, or load code from: nobody else can change them.

A directory is trusted when it and every directory above it is owned by root or by this process's
effective user, and none of them is writable by group or others, except an ancestor with the
sticky bit (``/tmp``): there others may add entries but cannot rename or remove ours. The
directory itself gets no such exception when it holds files by fixed names (logs, FIFOs, the
database): in a sticky ``/tmp`` another user could create ``x.log`` or ``db-wal`` first. Every
directory the path passes through, its symlinks' targets included, is checked, so a symlink
cannot lead around the rule, and a symlink on it owned by anyone but root or this user is
refused (its owner could flip it between a trusted directory and their own).

The check walks the path once by descriptors (:func:`hold_trusted_directory`): each component
is opened relative to the directory before it with ``O_NOFOLLOW`` and checked on its descriptor,
and a symlink is followed only by reading it, so the descriptor returned is the directory that
was checked. The service keeps its log directory that way and creates, reads and removes logs
relative to it. apsw opens the database by name, so after the open every file it opened is
verified to be the database (or a side file) in the held directory (:func:`require_opened_in`).
"""

from __future__ import annotations

import os
import stat

from edge_runtime.service.errors import ServiceError

# Typing names only: this module runs before the CLI in every built executable (the install
# directory check), and importing typing there would cost a fifth of ``--version``.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")


class UntrustedDirectoryError(ServiceError, code="SERVICE_UNTRUSTED_DIRECTORY"):
    """A directory the service would keep files in can be changed by another user."""


#: Symlinks followed while walking one path, as the kernel's own bound (ELOOP beyond it).
MAX_SYMLINKS = 40

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _Named:
    """Where a symlink's target ends: the directory reached is named by the symlink's path."""

    __slots__ = ("shown",)

    def __init__(self, shown: str) -> None:
        self.shown = shown


def _directory_rule(fd: int, shown: str, *, final: bool, sticky_ok: bool) -> str | None:
    info = os.fstat(fd)
    if info.st_uid not in (0, os.geteuid()):
        return f"{shown} is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}) or root"
    shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if shared and not (info.st_mode & stat.S_ISVTX and (sticky_ok or not final)):
        return f"{shown} is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _walk(path: str | os.PathLike[str], sticky_ok: bool) -> tuple[int | None, str | None]:
    """Open ``path``'s directory chain once, from ``/``, one component at a time relative to the
    directory before it (``O_DIRECTORY|O_NOFOLLOW``): ``(descriptor of the directory, None)``, or
    ``(None, why it is not trusted)``. A symlink is followed by reading it, only if root or this
    user owns it; each directory is checked on its open descriptor, so what is checked is what
    is used, and nothing can be swapped in between."""
    trusted = {0, os.geteuid()}
    pending: list[str | _Named] = [part for part in os.path.abspath(os.fspath(path)).split("/") if part]
    pending.reverse()  # a stack: the next component last
    stack = [(os.open("/", _DIRECTORY_FLAGS), "/")]
    links = 0
    try:
        while pending:
            part = pending.pop()
            if isinstance(part, _Named):
                stack[-1] = (stack[-1][0], part.shown)
                continue
            if part == ".":
                continue
            if part == "..":
                if len(stack) > 1:
                    os.close(stack.pop()[0])
                continue
            parent, parent_shown = stack[-1]
            problem = _directory_rule(parent, parent_shown, final=False, sticky_ok=sticky_ok)
            if problem is not None:
                return None, problem
            shown = os.path.join(parent_shown, part)
            try:
                info = os.stat(part, dir_fd=parent, follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    if info.st_uid not in trusted:
                        return None, (f"{shown} is a symlink owned by uid {info.st_uid}, not by this user "
                                      f"(uid {os.geteuid()}) or root: its owner could point it elsewhere at any time")
                    links += 1
                    if links > MAX_SYMLINKS:
                        return None, f"{shown}: too many levels of symbolic links"
                    target = os.readlink(part, dir_fd=parent)
                    pending.append(_Named(shown))
                    pending.extend(reversed([p for p in target.split("/") if p]))
                    if target.startswith("/"):
                        while len(stack) > 1:
                            os.close(stack.pop()[0])
                    continue
                if not stat.S_ISDIR(info.st_mode):
                    return None, f"{shown} is not a directory"
                stack.append((os.open(part, _DIRECTORY_FLAGS, dir_fd=parent), shown))
            except OSError as exc:
                return None, f"{shown}: {exc.strerror or exc}"
        fd, shown = stack[-1]
        problem = _directory_rule(fd, shown, final=True, sticky_ok=sticky_ok)
        if problem is not None:
            return None, problem
        stack.pop()
        return fd, None
    finally:
        for fd, _ in stack:
            os.close(fd)


def directory_problem(path: str | os.PathLike[str], *, sticky_ok: bool = False) -> str | None:
    """Why ``path`` cannot be trusted, or None. ``sticky_ok`` also lets the directory itself be sticky."""
    fd, problem = _walk(path, sticky_ok)
    if fd is not None:
        os.close(fd)
    return problem


def hold_trusted_directory(path: str | os.PathLike[str], what: str) -> int:
    """A descriptor of the trusted directory ``path`` (``O_DIRECTORY``, close-on-exec), opened by
    the walk that checked it: files opened, listed or removed relative to it are in the directory
    that was checked, whatever a symlink on ``path`` points to by then.

    Raises:
        UntrustedDirectoryError: naming ``what``, when ``path`` is not trusted.
    """
    fd, problem = _walk(path, False)
    if fd is None:
        raise UntrustedDirectoryError(
            f"refusing the {what} {os.fspath(path)}: {problem}; another user could replace what the "
            f"service writes or reads there (make it owned by uid {os.geteuid()} with mode 0700 or 0755)"
        )
    return fd


def require_trusted_directory(path: str | os.PathLike[str], what: str) -> None:
    """Raise UntrustedDirectoryError naming ``what`` when ``path`` is not trusted."""
    os.close(hold_trusted_directory(path, what))


#: The files SQLite keeps beside a database, by the suffixes it gives their names.
SIDE_FILE_SUFFIXES = ("-wal", "-shm", "-journal")


def opened_files() -> frozenset[tuple[int, int, int]]:
    """``(descriptor, st_dev, st_ino)`` of every regular file this process holds open."""
    held = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            info = os.stat(f"/proc/self/fd/{name}")  # the open file itself, wherever its path leads now
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        if stat.S_ISREG(info.st_mode):
            held.add((int(name), info.st_dev, info.st_ino))
    return frozenset(held)


def entry_identity(dir_fd: int, name: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of what ``name`` in the directory ``dir_fd`` is (followed, as an open
    by name follows it), None if there is nothing by that name."""
    try:
        info = os.stat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


def require_opened_in(dir_fd: int, name: str, before: frozenset[tuple[int, int, int]],
                      checked: tuple[int, int] | None, shown: str | os.PathLike[str]) -> None:
    """Raise UntrustedDirectoryError unless every regular file opened since ``before``
    (:func:`opened_files`) is the database ``name`` or one of its side files in the checked
    directory ``dir_fd``, the database among them, and the one that was there before the open
    (``checked``, :func:`entry_identity`) when there was one. A library that opens by name
    (apsw) after the check thereby provably opened what was checked, not what a symlink flip
    pointed at in between."""
    database = entry_identity(dir_fd, name)
    allowed = {entry_identity(dir_fd, name + suffix) for suffix in SIDE_FILE_SUFFIXES} | {database}
    opened = {(dev, ino) for _, dev, ino in opened_files() - before}
    if database is None or database not in opened or (checked is not None and database != checked) \
            or not opened <= allowed:
        raise UntrustedDirectoryError(
            f"refusing the database {os.fspath(shown)}: the file opened is not the one whose directory was "
            f"checked (its path changed in between: a symlink on it flipped?)"
        )


def open_verified(path: str | os.PathLike[str], open_by_name: Callable[[], T], close: Callable[[T], None]) -> T:
    """``open_by_name()`` (a library's open of the database at ``path`` by name), verified by
    :func:`require_opened_in` against the database's directory held by :func:`hold_trusted_directory`.

    Raises:
        UntrustedDirectoryError: the directory is not trusted, or what was opened is not in it
            (then it is closed again with ``close``).
    """
    absolute = os.path.abspath(os.fspath(path))
    dir_fd = hold_trusted_directory(os.path.dirname(absolute), "database's directory")
    try:
        name = os.path.basename(absolute)
        checked, before = entry_identity(dir_fd, name), opened_files()
        opened = open_by_name()
        try:
            require_opened_in(dir_fd, name, before, checked, path)
        except BaseException:
            close(opened)
            raise
        return opened
    finally:
        os.close(dir_fd)


def unpack_directory_problem(bundle_dir: str, *, one_file: bool) -> str | None:
    """Why the directory a frozen build runs from (``sys._MEIPASS``) is unsafe, or None.

    One-file: the private ``_MEIxxxxxx`` directory the bootloader just made, inside an unpack
    directory (``$TMPDIR``, ``/tmp`` or the baked ``RUNTIME_TMPDIR``) that may be sticky like
    ``/tmp``. One-folder: the install's ``_internal`` directory. The bootloader has already loaded
    libpython from it by the time any Python runs, so this can only refuse to go on, not undo
    that load (docs/building.md: unpack directory).
    """
    if not one_file:
        return directory_problem(bundle_dir)
    info = os.lstat(bundle_dir)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        return f"{bundle_dir} is not a private (0700) directory of uid {os.geteuid()}"
    return directory_problem(os.path.dirname(bundle_dir), sticky_ok=True)
