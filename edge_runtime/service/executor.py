"""Spawning an Attempt: its own session and process group, stdin from /dev/null, output to its FIFO.

``os.posix_spawnp`` (vfork + exec in the C library) is used instead of ``subprocess.Popen``: it
is cheaper on a router's small CPU, reports a failed exec (command not found, not executable) to
the caller as an ``OSError`` instead of a child that exits 127, and leaves the child's lifecycle
entirely to the service (reaped with ``waitpid`` when its pidfd says it exited). ``setsid=True``
makes the child the leader of a new session and process group, so the Attempt's whole tree can be
signalled with one ``killpg`` and no signal aimed at the tree ever reaches the service.

The identity (pid, pgid, start time, boot id) is read right after the spawn, while the child is
still unreaped and its pid therefore cannot be reused. Its pgid is its pid (``setsid``), whatever
the moment: ``posix_spawn`` may return before the child ran ``setsid`` (qemu-user emulates vfork
with fork, so glibc's spawn returns at once), and reading the group from ``/proc`` then would
record the service's own group. ``spawn`` waits, briefly, until ``/proc`` shows the new group, so
a cancel sent at once reaches it.
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence

from edge_runtime.service.errors import ProcfsUnavailableError, SpawnError
from edge_runtime.service.process_identity import ProcessIdentity, read_identity


#: Dispositions reset to the default in the child. Ignored signals survive exec: Python ignores
#: SIGPIPE and SIGXFSZ, and a service started with ``nohup`` or ``&`` inherits ignored SIGHUP,
#: SIGINT and SIGQUIT; a task must see the defaults, as it would from a shell.
_DEFAULT_SIGNALS = tuple(
    sig for sig in signal.Signals
    if 0 < sig < 32 and sig not in (signal.SIGKILL, signal.SIGSTOP)
)


_LIBRARY_PATH = "LD_LIBRARY_PATH"


def task_environment(environ: Mapping[str, str], bundle_dir: str | None = None) -> dict[str, str]:
    """The environment an Attempt gets: the one the service was started with, minus the bundler's.

    PyInstaller's bootloader hands its Python process ``_PYI_*`` variables and puts its own
    directory first on ``LD_LIBRARY_PATH`` (``<bundle_dir>`` or ``<bundle_dir>:<original>``, the
    original also kept as ``LD_LIBRARY_PATH_ORIG``). A task must see none of that: a one-file
    build's directory is deleted when the service exits and can then be re-created by anyone, so
    a task (or an ``edge-runtime`` it runs) would load another user's libraries.
    ``bundle_dir`` defaults to ``sys._MEIPASS`` in a frozen build, None from source.
    """
    if bundle_dir is None and getattr(sys, "frozen", False):
        bundle_dir = getattr(sys, "_MEIPASS", None)
    env = {key: value for key, value in environ.items() if not key.startswith("_PYI_")}
    library_path = env.get(_LIBRARY_PATH)
    if bundle_dir and library_path is not None:
        if library_path == bundle_dir:
            del env[_LIBRARY_PATH]
        elif library_path.startswith(bundle_dir + ":"):
            env[_LIBRARY_PATH] = library_path[len(bundle_dir) + 1:]
        if env.get(_LIBRARY_PATH + "_ORIG") == env.get(_LIBRARY_PATH):
            env.pop(_LIBRARY_PATH + "_ORIG", None)
    return env


def spawn(
    argv: Sequence[str], *, output_fd: int, env: Mapping[str, str], boot_id: str, cwd: str | None = None,
) -> ProcessIdentity:
    """Start ``argv`` in a new session with stdout and stderr on ``output_fd``, in ``cwd`` (None:
    the service's own directory).

    ``output_fd`` is closed here, whatever happens, as soon as the child has its copy: reading the
    identity needs a descriptor, and with the table full (issue 10 point 8) that is the one freed.

    Raises:
        SpawnError: the command could not be started; no process is left behind.
    """
    try:
        if not argv:
            raise SpawnError("the command is empty")
        # dup2 onto 1 and 2 must not clobber its own source: one below 3 is moved up first.
        source = output_fd if output_fd > 2 else _move_above_stderr(output_fd, argv[0])
        try:
            entered = _enter_directory(cwd, argv[0])
        except SpawnError:
            if source != output_fd:
                os.close(source)
            raise
        try:
            pid = os.posix_spawnp(
                argv[0],
                list(argv),
                dict(env),
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, source, 1),
                    (os.POSIX_SPAWN_DUP2, source, 2),
                ],
                setsid=True,
                setsigdef=_DEFAULT_SIGNALS,
                setsigmask=(),  # nothing blocked, whatever the service's own mask is
            )
        except OSError as exc:
            raise SpawnError(f"cannot start {argv[0]!r}: {exc.strerror or exc}", os_errno=exc.errno) from None
        finally:
            _leave_directory(entered)
            if source != output_fd:
                os.close(source)
    finally:
        os.close(output_fd)
    try:
        identity = _identity_as_group_leader(pid, boot_id)
    except ProcfsUnavailableError:  # e.g. ENFILE opening /proc/<pid>/stat for the whole wait
        identity = None
    if identity is None:
        # Unreaped, so the pid (and its group, setsid) is still ours: never leave it unidentified.
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:  # setsid not done yet (emulated kernels): the child alone
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise SpawnError(f"process {pid} could not be identified after its start; it was killed", started=True)
    return identity


def _enter_directory(cwd: str | None, program: str) -> str | None:
    """Make ``cwd`` the service's directory for the spawn; the one to return to (None: no change).

    ``posix_spawn`` has no working-directory action (glibc's ``addchdir_np`` is not exposed), and
    the child inherits the parent's directory at the spawn: the single-threaded service enters
    ``cwd`` just for the call and returns at once (``_leave_directory``). By path, not by a
    descriptor: a start must not need one more descriptor than it has (descriptor exhaustion).
    A directory that is missing or not enterable fails the Attempt (its Run's setting).

    Raises:
        SpawnError: ``cwd`` cannot be entered, or the service's own directory cannot be named.
    """
    if cwd is None:
        return None
    try:
        back = os.getcwd()
    except OSError as exc:
        raise SpawnError(f"cannot start {program!r}: the service's directory: {exc.strerror or exc}") from None
    if back == cwd:
        return None
    try:
        os.chdir(cwd)
    except OSError as exc:
        raise SpawnError(f"cannot start {program!r}: working directory {cwd!r}: {exc.strerror or exc}") from None
    return back


def _leave_directory(back: str | None) -> None:
    if back is not None:
        os.chdir(back)


def _move_above_stderr(fd: int, program: str) -> int:
    """A close-on-exec copy of ``fd`` numbered 3 or above.

    Raises:
        SpawnError: no descriptor left (retryable: nothing was started).
    """
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError as exc:  # EMFILE: out of descriptors, nothing started
        raise SpawnError(f"cannot start {program!r}: {exc.strerror or exc}", os_errno=exc.errno) from None


#: How long ``spawn`` waits for a child to show its own group in /proc (a few ms under emulation;
#: the first read already does on a native kernel).
_SETSID_WAIT_S = 2.0


def _identity_as_group_leader(pid: int, boot_id: str) -> ProcessIdentity | None:
    """The identity of the new group leader ``pid``, or None if /proc shows no such process.

    Its pgid is recorded as its pid (what ``setsid`` makes it), never what /proc shows at this
    instant: under qemu-user the spawn can return before the child has run ``setsid``.
    """
    deadline = time.monotonic() + _SETSID_WAIT_S
    while True:
        try:
            identity = read_identity(pid, boot_id=boot_id)
        except ProcfsUnavailableError:
            # ENFILE (the system's table full) passes: the child is unreaped, its pid still ours.
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
            continue
        if identity is None:
            return None
        # Also done when it already exited: setsid failing or exec failing exits the child (127).
        if identity.pgid == pid or time.monotonic() >= deadline:
            return ProcessIdentity(pid=pid, pgid=pid, start_ticks=identity.start_ticks, boot_id=boot_id)
        time.sleep(0.001)


def seal_inherited_descriptors() -> int:
    """Mark every descriptor above stderr close-on-exec; how many were still inheritable.

    ``posix_spawn`` passes every inheritable descriptor to the child. The service's own are
    close-on-exec already, but it may have inherited some from whoever started it (a shell, an
    init script's pipe); Attempts must not receive those. Call once at start.
    """
    sealed = 0
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return 0  # no /proc: identities cannot be read either, and the service refuses to start
    for name in names:
        fd = int(name)
        if fd <= 2:
            continue
        try:
            if os.get_inheritable(fd):
                os.set_inheritable(fd, False)
                sealed += 1
        except OSError:
            continue  # the listing's own descriptor, closed by now
    return sealed


def reap(pid: int) -> int | None:
    """Reap a child of this service without blocking: its exit code, or None while it runs.

    A negative code is the number of the signal that killed it (``os.waitstatus_to_exitcode``).
    A pid that is not (or no longer) our child reads as None: use the controller for those.
    """
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if reaped == 0:
        return None
    return os.waitstatus_to_exitcode(status)
