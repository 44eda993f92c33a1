"""One pull of a subscription: fetch, choose the files, stage the new folder, read the headers,
plan the schedules' changes, then swap the folder and store the changes together.

A pull that fails changes nothing: everything before the swap happens in a private work
directory (``.subscriptions/<folder>.work/`` in the scripts directory, so the staged folder is on
the same filesystem as the live one), and the swap is two renames around one transaction:

1. ``.subscriptions/<folder>.swap`` records the revision being put in place (synced);
2. the live folder is renamed to ``.subscriptions/<folder>.old``, the staged one into its place;
3. the schedules' changes and the revision are stored in one transaction
   (:meth:`~edge_runtime.contract.subscriptions.SubscriptionStore.apply_pull`);
4. the old folder and the marker are removed. If the transaction fails, the renames are undone.

A pull that dies inside (power cut, SIGKILL) leaves the marker: the next pull of that
subscription first puts back the old folder unless the store holds the marker's revision
(then the new folder stays and the old one goes). A script may meet its folder missing for the
instant between the two renames, never a half-written folder. Signals that end a pull (its Run's
cancel, its timeout: SIGTERM) stop it with nothing changed, and wait while it swaps
(:class:`PullGuard`).

Which files go into the folder, as QingLong's ``ql repo``: the scripts (an extension of the
subscription's list, matching the whitelist and not the blacklist, searched in the path inside the
repository), plus every file the dependence pattern matches (any extension: a ``package.json``
too). The scripts' headers are read as ``scripts scan`` reads them
(:func:`~edge_runtime.qinglong.script_scan.scanned_script`); a script's command is
``task <folder>/<path>``.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import msgspec

from edge_runtime.contract.subscriptions import (
    ChangeKind,
    FoundScript,
    PullCancelledError,
    PullChanges,
    PullError,
    ScriptChange,
    SubscriptionKind,
    SubscriptionRecord,
    plan_script_changes,
)
from edge_runtime.qinglong.errors import ScriptsDirectoryError
from edge_runtime.qinglong.import_plan import schedule_identity
from edge_runtime.qinglong.script_files import DIR_FLAGS, FileWriter, open_file_at, read_chunks, shown_name
from edge_runtime.qinglong.script_scan import MAX_HEADER_BYTES, SCRIPT_SUFFIXES, scanned_script
from edge_runtime.qinglong.subscription_source import MAX_FILE_BYTES, SourceEntry, open_source, shown_size

#: The work area's name in the scripts directory (never walked by ``scripts scan`` or the import).
WORK_AREA = ".subscriptions"
#: Files copied into one folder, at most, and their bytes together.
MAX_FILES = 20_000
MAX_COPY_BYTES = 128 * 1024 * 1024
#: Free space left on the scripts directory's filesystem after a pull's copy, at least.
SPARE_BYTES = 4 * 1024 * 1024


class PullLimits(msgspec.Struct, frozen=True, kw_only=True):
    max_fetch_bytes: int | None = None  # None: the source's own default
    max_files: int = MAX_FILES
    max_copy_bytes: int = MAX_COPY_BYTES


class PullOutcome(msgspec.Struct, rename="camel", kw_only=True):
    """What a pull did: the revision its folder holds now, whether it was up to date already, the
    files copied, the entries not copied (``skipped``: path and why), the headers that give no
    schedule (``problems``: path and why) and the schedules' changes as stored."""

    subscription_id: str
    revision: str
    up_to_date: bool = False
    copied: int = 0
    copied_bytes: int = 0
    skipped: list[tuple[str, str]] = msgspec.field(default_factory=list)
    problems: list[tuple[str, str]] = msgspec.field(default_factory=list)
    changes: list[ScriptChange] = msgspec.field(default_factory=list)


class PullGuard:
    """Turns the signals that end a pull (SIGTERM: its Run's cancel or timeout; SIGINT; SIGHUP)
    into :class:`PullCancelledError` while nothing is changed yet, and holds them while the pull
    swaps its folder and stores its changes (:meth:`swapping`), where stopping half-way would leave
    the work for the next pull's recovery."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self) -> None:
        self._swapping = False
        self.held: int | None = None

    def install(self) -> None:
        for number in self.SIGNALS:
            signal.signal(number, self._on_signal)

    @contextmanager
    def installed(self) -> Iterator[PullGuard]:
        """Installed for the block, the previous handlers put back after it (a pull run inside
        another program, a test, leaves its signals as they were)."""
        saved = {number: signal.getsignal(number) for number in self.SIGNALS}
        self.install()
        try:
            yield self
        finally:
            for number, handler in saved.items():
                signal.signal(number, handler)

    def _on_signal(self, number: int, _frame: object) -> None:
        if self._swapping:
            self.held = number
            return
        raise PullCancelledError(f"cancelled ({signal.Signals(number).name}) before it changed anything: nothing "
                                 f"changed")

    @contextmanager
    def swapping(self) -> Iterator[None]:
        """Hold the signals from here; once the block has stored the pull they stay held to the
        end (the pull is done: a cancel now would only interrupt its clean-up), else a failed
        swap, undone, lets them act again."""
        self._swapping = True
        try:
            yield
        except BaseException:
            self._swapping = False
            raise


# ----------------------------------------------------------------------------------- the work area


def _open_dir(parent: int, name: str, *, make: bool, mode: int = 0o700) -> int:
    if make:
        try:
            os.mkdir(name, mode, dir_fd=parent)
        except FileExistsError:
            pass
    fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        os.close(fd)
        raise PullError(f"{name} in the scripts directory is not this user's own folder (owner {info.st_uid}, mode "
                        f"{stat.S_IMODE(info.st_mode):o}): refused; nothing changed")
    return fd


def _exists(parent: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=parent, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def _remove_tree(parent: int, name: str) -> None:
    """Remove ``name`` below ``parent`` (a folder, by descriptors, never through a link; or a file)."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=parent)
    else:
        os.unlink(name, dir_fd=parent)


def _read_marker(area: int, name: str) -> str | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=area)
    except FileNotFoundError:
        return None
    try:
        return os.read(fd, 200).decode("ascii", "replace").strip()
    finally:
        os.close(fd)


def _write_marker(area: int, name: str, revision: str) -> None:
    _remove_tree(area, name)
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=area)
    try:
        os.write(fd, revision.encode("ascii") + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.fsync(area)


def recover(scripts_fd: int, area: int, folder: str, stored_revision: str | None,
            say: Callable[[str], object]) -> None:
    """Finish what a pull of ``folder`` that died left (module docstring): the store holds
    ``stored_revision``."""
    _remove_tree(area, f"{folder}.work")
    marker = _read_marker(area, f"{folder}.swap")
    if _exists(area, f"{folder}.old"):
        if not _exists(scripts_fd, folder):
            os.rename(f"{folder}.old", folder, src_dir_fd=area, dst_dir_fd=scripts_fd)
            say(f"recovered: a pull that died while it swapped left {folder} renamed; put back")
        elif marker is not None and marker == stored_revision:
            _remove_tree(area, f"{folder}.old")
            say(f"recovered: the previous pull was stored; its old folder removed")
        else:
            os.rename(folder, f"{folder}.work", src_dir_fd=scripts_fd, dst_dir_fd=area)
            os.rename(f"{folder}.old", folder, src_dir_fd=area, dst_dir_fd=scripts_fd)
            _remove_tree(area, f"{folder}.work")
            say(f"recovered: a pull that died before it was stored had swapped {folder}; the previous folder is "
                f"back")
        os.fsync(scripts_fd)
    _remove_tree(area, f"{folder}.swap")
    os.fsync(area)


def remove_folder(scripts_fd: int, folder: str) -> None:
    """Remove a removed subscription's folder and what its pulls left in the work area."""
    _remove_tree(scripts_fd, folder)
    try:
        area = os.open(WORK_AREA, DIR_FLAGS, dir_fd=scripts_fd)
    except FileNotFoundError:
        return
    try:
        for suffix in (".work", ".old", ".swap", ".lock"):
            _remove_tree(area, folder + suffix)
    finally:
        os.close(area)


@contextmanager
def _locked(area: int, folder: str) -> Iterator[None]:
    import fcntl

    fd = os.open(f"{folder}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=area)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PullError(f"another pull of {folder} is running: this one changed nothing") from None
        yield
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------------- choosing files


class Chosen(msgspec.Struct, kw_only=True):
    """The entries a pull copies, and which of them are scripts whose header is read."""

    copy: list[SourceEntry] = msgspec.field(default_factory=list)
    scripts: list[str] = msgspec.field(default_factory=list)
    skipped: list[tuple[str, str]] = msgspec.field(default_factory=list)


def choose(record: SubscriptionRecord, entries: list[SourceEntry]) -> Chosen:
    """The files of ``entries`` the folder takes (module docstring), and the skipped ones."""
    chosen = Chosen()
    if record.kind is SubscriptionKind.FILE:
        for entry in entries:
            chosen.copy.append(entry)
            if entry.path.endswith(SCRIPT_SUFFIXES):
                chosen.scripts.append(entry.path)
        return chosen
    suffixes = tuple(f".{extension}" for extension in record.extensions)
    whitelist, blacklist, dependence = (None if value is msgspec.UNSET else re.compile(value) for value in
                                        (record.whitelist, record.blacklist, record.dependence))
    for entry in entries:
        script = entry.path.endswith(suffixes) and (whitelist is None or whitelist.search(entry.path)) \
            and not (blacklist is not None and blacklist.search(entry.path))
        needed = script or (dependence is not None and dependence.search(entry.path))
        if not needed:
            continue
        if entry.skipped is not None:
            chosen.skipped.append((entry.path, entry.skipped))
            continue
        chosen.copy.append(entry)
        if script and entry.path.endswith(SCRIPT_SUFFIXES):
            chosen.scripts.append(entry.path)
    # Links and submodules are said even when no filter would take them: they are never made.
    listed = {path for path, _ in chosen.skipped}
    chosen.skipped += [(e.path, e.skipped) for e in entries if e.skipped is not None and e.path not in listed
                       and ("symbolic link" in e.skipped or "submodule" in e.skipped)]
    return chosen


# ----------------------------------------------------------------------------------- the pull


def pull(store: Any, record: SubscriptionRecord, scripts_fd: int, *, say: Callable[[str], object],
         guard: PullGuard | None = None, environ: Mapping[str, str] | None = None,
         limits: PullLimits = PullLimits(), source_options: Mapping[str, object] | None = None) -> PullOutcome:
    """Pull ``record`` into its folder of the scripts directory open as ``scripts_fd``; ``store``
    has ``subscriptions`` and ``schedules``; ``say`` writes a line of the pull's log.

    Raises:
        PullError: (and its subclasses) nothing was changed; the message says why.
    """
    guard = guard or PullGuard()
    environ = os.environ if environ is None else environ
    folder = record.folder
    try:
        area = _open_dir(scripts_fd, WORK_AREA, make=True)
    except OSError as exc:
        raise PullError(f"cannot open {WORK_AREA} in the scripts directory: {exc.strerror or exc}; nothing "
                        f"changed") from None
    try:
        with _locked(area, folder):
            record = store.subscriptions.get(record.id)  # as it is now that this pull holds the lock
            base_revision = None if record.revision is msgspec.UNSET else record.revision
            try:
                recover(scripts_fd, area, folder, base_revision, say)
                work_fd = _open_dir(area, f"{folder}.work", make=True)
            except OSError as exc:
                raise PullError(f"cannot prepare the pull of {folder}: {exc.strerror or exc}; nothing changed") \
                    from None
            # git and the download tools are handed a path: the scripts directory is a trusted
            # one (only root or this user can change it), so the path names this same folder.
            work = os.path.join(record.scripts_dir, WORK_AREA, f"{folder}.work")
            try:
                if not os.path.samestat(os.stat(work, follow_symlinks=False), os.fstat(work_fd)):
                    raise PullError(f"{work} is not the work folder this pull made: refused; nothing changed")
                return _pull_in(store, record, scripts_fd, area, work_fd, work, base_revision, say=say, guard=guard,
                                environ=environ, limits=limits, source_options=source_options or {})
            finally:
                os.close(work_fd)
                _remove_tree(area, f"{folder}.work")
    finally:
        os.close(area)


def _pull_in(store: Any, record: SubscriptionRecord, scripts_fd: int, area: int, work_fd: int, work: str,
             base_revision: str | None, *, say: Callable[[str], object], guard: PullGuard,
             environ: Mapping[str, str], limits: PullLimits, source_options: Mapping[str, object]) -> PullOutcome:
    options = dict(source_options)
    if limits.max_fetch_bytes is not None and record.kind is SubscriptionKind.GIT:
        options["max_fetch_bytes"] = limits.max_fetch_bytes
    source = open_source(record, work, environ, **options)
    folder = record.folder
    try:
        if record.kind is SubscriptionKind.GIT:
            upstream = source.remote_revision()
            if upstream is not None and upstream == base_revision and _exists(scripts_fd, folder):
                say(f"up to date: {folder} holds {upstream[:12]}, the newest upstream; nothing to do")
                return PullOutcome(subscription_id=record.id, revision=upstream, up_to_date=True)
        revision = source.fetch()
        entries = source.entries()
        shown = revision[:19] if revision.startswith("sha256:") else revision[:12]
        say(f"fetched {shown}: {len(entries)} entries")
        if revision == base_revision and _exists(scripts_fd, folder):
            say(f"up to date: {folder} holds this already; nothing to do")
            return PullOutcome(subscription_id=record.id, revision=revision, up_to_date=True)
        chosen = choose(record, entries)
        outcome = PullOutcome(subscription_id=record.id, revision=revision, skipped=chosen.skipped)
        _check_size(chosen, scripts_fd, limits)
        staged = _open_dir(work_fd, "new", make=True, mode=0o755)
        try:
            os.fchmod(staged, 0o755)  # the folder tasks read from: as the scripts directory's own
            writer = FileWriter(staged)
            try:
                for entry in chosen.copy:
                    writer.write(entry.path, source.read(entry), sha256=None, limit=MAX_FILE_BYTES,
                                 executable=entry.executable)
                    outcome.copied += 1
                    outcome.copied_bytes += entry.size
            finally:
                writer.close()
            source.close()
            found = _read_headers(staged, folder, chosen.scripts, outcome)
            known = store.subscriptions.scripts(record.id)
            changes = plan_script_changes(known, found, auto_add=record.auto_add, auto_remove=record.auto_remove,
                                          adoptable=_adoptable(store, known, found))
            _carry_kept(scripts_fd, staged, folder, changes, say)
        finally:
            os.close(staged)
        pulled = PullChanges(subscription_id=record.id, base_revision=base_revision, revision=revision,
                             changes=changes)
        with guard.swapping():
            outcome.changes = _swap_and_store(store, scripts_fd, area, work_fd, folder, pulled)
        return outcome
    except ScriptsDirectoryError as exc:
        raise PullError(f"the pull of {folder} failed: {exc}; nothing changed") from None
    except OSError as exc:
        raise PullError(f"the pull of {folder} failed: {exc.strerror or exc}"
                        f"{' (' + exc.filename + ')' if isinstance(exc.filename, str) else ''}; nothing changed") \
            from None
    finally:
        source.close()


def _check_size(chosen: Chosen, scripts_fd: int, limits: PullLimits) -> None:
    total = sum(entry.size for entry in chosen.copy)
    if len(chosen.copy) > limits.max_files:
        raise PullError(f"the source has {len(chosen.copy)} files to copy: more than {limits.max_files}; narrow it "
                        f"with --whitelist or --blacklist; nothing changed")
    if total > limits.max_copy_bytes:
        raise PullError(f"the files to copy take {shown_size(total)}: more than {shown_size(limits.max_copy_bytes)}; "
                        f"narrow them with --whitelist or --blacklist; "
                        f"nothing changed")
    info = os.fstatvfs(scripts_fd)
    free = info.f_bavail * info.f_frsize
    if total + SPARE_BYTES > free:
        raise PullError(f"the files need {total // 1024} KiB and the scripts directory has {free // 1024} KiB free "
                        f"(keeping {SPARE_BYTES // (1024 * 1024)} MiB spare); nothing changed")


def _read_headers(staged: int, folder: str, scripts: list[str], outcome: PullOutcome) -> list[FoundScript]:
    found = []
    for path in scripts:
        fd = open_file_at(staged, path)
        try:
            text = b"".join(read_chunks(fd, MAX_HEADER_BYTES)).decode("utf-8", "replace")
        finally:
            os.close(fd)
        scanned = scanned_script(text, path, ["task", f"{folder}/{path}"])
        if scanned.problem is not None:
            outcome.problems.append((path, scanned.problem))
        found.append(FoundScript(path=path, name=scanned.name, expression=scanned.expression,
                                 command=scanned.command))
    return found


def _adoptable(store: Any, known: list[Any], found: list[FoundScript]) -> dict[str, str]:
    """For each new script, a schedule already here with its name, command and expression that no
    script of any subscription has (an imported QingLong cron of the same repository, a ``scripts
    scan --add``): it becomes the script's instead of a second one."""
    known_paths = {script.path for script in known}
    wanted = {schedule_identity(s.name, s.command, s.expression): s.path for s in found
              if s.expression is not None and s.path not in known_paths}
    if not wanted:
        return {}
    taken = {script.schedule_id for subscription in store.subscriptions.list()
             for script in store.subscriptions.scripts(subscription.id) if script.schedule_id is not msgspec.UNSET}
    adoptable = {}
    for schedule in store.schedules.list():
        if schedule.id in taken:
            continue
        name = None if schedule.name is msgspec.UNSET else schedule.name
        path = wanted.get((name, tuple(schedule.command), schedule.expression))
        if path is not None and path not in adoptable:
            adoptable[path] = schedule.id
    return adoptable


def _carry_kept(scripts_fd: int, staged: int, folder: str, changes: list[ScriptChange],
                say: Callable[[str], object]) -> None:
    """A script gone upstream whose schedule stays (no auto-remove) keeps its file: copied from
    the live folder into the staged one."""
    kept = [change for change in changes if change.kind is ChangeKind.KEEP]
    if not kept:
        return
    try:
        live = os.open(folder, DIR_FLAGS, dir_fd=scripts_fd)
    except FileNotFoundError:
        live = None
    writer = FileWriter(staged)
    try:
        for change in kept:
            try:
                if live is None:
                    raise FileNotFoundError(errno.ENOENT, "no folder")
                fd = open_file_at(live, change.path)
            except OSError:
                say(f"note    {shown_name(change.path)}: gone upstream and from its folder; its schedule stays")
                continue
            try:
                executable = bool(os.fstat(fd).st_mode & 0o111)
                writer.write(change.path, read_chunks(fd, MAX_FILE_BYTES + 1), sha256=None, limit=MAX_FILE_BYTES,
                             executable=executable)
            finally:
                os.close(fd)
    finally:
        writer.close()
        if live is not None:
            os.close(live)


def _swap_and_store(store: Any, scripts_fd: int, area: int, work_fd: int, folder: str,
                    pulled: PullChanges) -> list[ScriptChange]:
    _write_marker(area, f"{folder}.swap", pulled.revision)
    had_folder = _exists(scripts_fd, folder)
    if had_folder:
        os.rename(folder, f"{folder}.old", src_dir_fd=scripts_fd, dst_dir_fd=area)
    os.rename("new", folder, src_dir_fd=work_fd, dst_dir_fd=scripts_fd)
    os.fsync(scripts_fd)
    os.fsync(area)
    try:
        applied = store.subscriptions.apply_pull(pulled)
    except BaseException:
        os.rename(folder, "new", src_dir_fd=scripts_fd, dst_dir_fd=work_fd)
        if had_folder:
            os.rename(f"{folder}.old", folder, src_dir_fd=area, dst_dir_fd=scripts_fd)
        os.fsync(scripts_fd)
        _remove_tree(area, f"{folder}.swap")
        raise
    _remove_tree(area, f"{folder}.old")
    _remove_tree(area, f"{folder}.swap")
    os.fsync(area)
    return applied
