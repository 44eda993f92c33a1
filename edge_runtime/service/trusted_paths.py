"""Which directories a root service may keep files in, or load code from: nobody else can change them.

A directory is trusted when it and every directory above it is owned by root or by this process's
effective user, and none of them is writable by group or others, except an ancestor with the
sticky bit (``/tmp``): there others may add entries but cannot rename or remove ours. The
directory itself gets no such exception when it holds files by fixed names (logs, FIFOs, the
database): in a sticky ``/tmp`` another user could create ``x.log`` or ``db-wal`` first. Both the
path as written and its resolved form are checked, so a symlink cannot lead around the rule, and
each component of the path as written is ``lstat``-ed: a symlink on it owned by anyone but root or
this user is refused (its owner could flip it between a trusted directory and their own).

A check by path is followed by an open by path (apsw opens the database by name): the file that
was opened is verified to be the one that was checked (:func:`require_opened_file`).
"""

from __future__ import annotations

import os
import stat

from edge_runtime.service.errors import ServiceError


class UntrustedDirectoryError(ServiceError):
    """A directory the service would keep files in can be changed by another user."""

    code = "SERVICE_UNTRUSTED_DIRECTORY"


def directory_problem(path: str | os.PathLike[str], *, sticky_ok: bool = False) -> str | None:
    """Why ``path`` cannot be trusted, or None. ``sticky_ok`` also lets the directory itself be sticky."""
    trusted = {0, os.geteuid()}
    written = os.path.abspath(os.fspath(path))
    component = written
    while True:
        try:
            info = os.lstat(component)
        except OSError as exc:
            return f"{component}: {exc.strerror or exc}"
        if stat.S_ISLNK(info.st_mode) and info.st_uid not in trusted:
            return (f"{component} is a symlink owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}) "
                    f"or root: its owner could point it elsewhere at any time")
        if component == os.path.dirname(component):
            break
        component = os.path.dirname(component)
    for chain_of in (written, os.path.realpath(written)):
        prefixes = [chain_of]
        while prefixes[-1] != os.path.dirname(prefixes[-1]):
            prefixes.append(os.path.dirname(prefixes[-1]))
        for prefix in prefixes:
            try:
                info = os.stat(prefix)
            except OSError as exc:
                return f"{prefix}: {exc.strerror or exc}"
            if not stat.S_ISDIR(info.st_mode):
                return f"{prefix} is not a directory"
            if info.st_uid not in trusted:
                return f"{prefix} is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}) or root"
            shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            if shared and not (info.st_mode & stat.S_ISVTX and (sticky_ok or prefix != chain_of)):
                return f"{prefix} is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def require_trusted_directory(path: str | os.PathLike[str], what: str) -> None:
    """Raise UntrustedDirectoryError naming ``what`` when ``path`` is not trusted."""
    problem = directory_problem(path)
    if problem is not None:
        raise UntrustedDirectoryError(
            f"refusing the {what} {os.fspath(path)}: {problem}; another user could replace what the "
            f"service writes or reads there (make it owned by uid {os.geteuid()} with mode 0700 or 0755)"
        )


def file_identity(path: str | os.PathLike[str]) -> tuple[int, int]:
    """``(st_dev, st_ino)`` of the file at ``path`` (a symlink followed: what an open by name gets)."""
    info = os.stat(path)
    return info.st_dev, info.st_ino


def require_opened_file(path: str | os.PathLike[str], checked: tuple[int, int]) -> None:
    """Raise UntrustedDirectoryError unless this process holds ``checked`` (``file_identity``) open:
    the file a library opened by name after the directory check is the one that was checked, not
    one a symlink flip put there in between."""
    resolved = os.path.realpath(path)
    for name in os.listdir("/proc/self/fd"):
        try:  # the open file itself, whatever its path now; by name too (a freed inode is reused by -wal)
            if os.readlink(f"/proc/self/fd/{name}") != resolved:
                continue
            info = os.stat(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if (info.st_dev, info.st_ino) == checked:
            return
    raise UntrustedDirectoryError(
        f"refusing the database {os.fspath(path)}: the file opened is not the one whose directory was checked "
        f"(its path changed in between: a symlink on it flipped?)"
    )


def unpack_directory_problem(bundle_dir: str, *, one_file: bool) -> str | None:
    """Why the directory a frozen build runs from (``sys._MEIPASS``) is unsafe, or None.

    One-file: the private ``_MEIxxxxxx`` directory the bootloader just made, inside an unpack
    directory (``$TMPDIR``, ``/tmp`` or the baked ``RUNTIME_TMPDIR``) that may be sticky like
    ``/tmp``. One-folder: the install's ``_internal`` directory. The bootloader has already loaded
    libpython from it by the time any Python runs, so this can only refuse to go on, not undo
    that load (README: unpack directory).
    """
    if not one_file:
        return directory_problem(bundle_dir)
    info = os.lstat(bundle_dir)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        return f"{bundle_dir} is not a private (0700) directory of uid {os.geteuid()}"
    return directory_problem(os.path.dirname(bundle_dir), sticky_ok=True)
