"""Spawning an Attempt: under its own monitor, in its own session and process group.

The spawn's interface is this module's ``spawn``: the task's ``argv``, its environment (``env``,
built by ``task_environment``) and where its output goes (an ``AttemptOutput``). The service
never starts the task itself: it starts the Attempt's monitor (``monitor.py``, docs/monitor.md)
with ``os.posix_spawn`` (vfork + exec in the C library: cheap on a router's small CPU), handing it
the log and status files as descriptors 3 and 4 and a report pipe as 5. The monitor forks the task, which calls
``setsid`` (the leader of a new session and process group, so the Attempt's whole tree can be
signalled with one ``killpg`` and no signal aimed at the tree ever reaches the service or the
monitor), resets every signal to its default with nothing blocked (ignored signals survive exec:
Python ignores SIGPIPE and SIGXFSZ, and a service started with ``nohup`` or ``&`` inherits ignored
SIGHUP, SIGINT and SIGQUIT; a task must see the defaults, as from a shell), gets stdin from
``/dev/null`` and stdout and stderr on the monitor's output pipe, and execs ``argv`` (searched on the
environment's ``PATH``).

The monitor reports on the pipe once the exec succeeded (``started PID START_TICKS``, read from
``/proc`` while the task is still unreaped, so its pid cannot have been reused) or failed
(``error ERRNO``: command not found, not executable, no resources), so a failed exec is still an
error here and not a task that exits 127. Its pgid is its pid (``setsid`` ran before the exec).
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from edge_runtime.contract.device import ETC, device_time_zone
from edge_runtime.contract.env_entries import MAX_ENV_STRING_BYTES
from edge_runtime.contract.errors import UnspawnableValueError
from edge_runtime.contract.time_zones import InvalidTimeZoneError
from edge_runtime.service.errors import SpawnError
from edge_runtime.service.log_capture import AttemptOutput, log_tail_bytes
from edge_runtime.service.monitor import REPORT_TIMEOUT_S, MonitorMissingError, monitor_path
from edge_runtime.service.process_identity import ProcessIdentity
from edge_runtime.service.task_user import TaskUser


#: Dispositions reset to the default in the child. Ignored signals survive exec: Python ignores
#: SIGPIPE and SIGXFSZ, and a service started with ``nohup`` or ``&`` inherits ignored SIGHUP,
#: SIGINT and SIGQUIT; a task must see the defaults, as it would from a shell.
_DEFAULT_SIGNALS = tuple(
    sig for sig in signal.Signals
    if 0 < sig < 32 and sig not in (signal.SIGKILL, signal.SIGSTOP)
)


_LIBRARY_PATH = "LD_LIBRARY_PATH"


def task_environment(environ: Mapping[str, str], bundle_dir: str | None = None, etc: Path = ETC) -> dict[str, str]:
    """The environment an Attempt gets: the one the service was started with, minus the bundler's,
    with ``TZ`` (docs/environment.md).

    ``TZ``: the service's own when it has one, else the device's zone as ``serve`` reads it
    (``/etc/TZ``, else ``/etc/localtime``: :func:`~edge_runtime.contract.device.device_time_zone`
    under ``etc``), so a task prints the local time the device's own tools print (musl reads no
    ``/etc/TZ``; a procd service has no ``TZ``). A zone that cannot be read leaves ``TZ`` unset:
    the C library's default, as before; ``serve`` reports that zone as ``schedule.device_zone_invalid``.

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
    if not env.get("TZ", "").strip():
        try:
            env["TZ"] = device_time_zone(env, etc)
        except InvalidTimeZoneError:
            env.pop("TZ", None)  # reported at serve's start (schedule.device_zone_invalid); libc's default
    return env


def refuse_unspawnable(argv: Sequence[str], env: Mapping[str, str], cwd: str | None) -> None:
    """Refuse what no process can be given: a NUL byte in the command, the working directory or a
    variable, a variable name that is empty or holds ``=``. Every command that stores them refuses
    them, so only another program's row holds one; Python would raise ``ValueError`` wherever it
    met one (a path, ``posix_spawn``). Called once per Attempt, before its command is resolved
    (``attempts/start.py``), with what ``spawn`` will get.

    Raises:
        UnspawnableValueError: naming the value (never showing it: it may be a secret).
    """
    problem = None
    for index, arg in enumerate(argv):
        if "\0" in arg:
            problem = f"argument {index} of the command holds a NUL byte"
            break
    if problem is None and cwd is not None and "\0" in cwd:
        problem = "the working directory holds a NUL byte"
    if problem is None:
        for name, value in env.items():
            if "\0" in name or "=" in name or not name:
                problem = f"the variable name {name!r} cannot be given to a process (empty, or holds '=' or a NUL byte)"
                break
            if "\0" in value:
                problem = f"the variable {name} (an env entry, or the Run's own) holds a NUL byte"
                break
    if problem is not None:
        raise UnspawnableValueError(f"{problem}: no process can be given it; another program stored it "
                                    f"(`edge-runtime check` names the row)")


def spawn(
    argv: Sequence[str], *, output: AttemptOutput, env: Mapping[str, str], boot_id: str, log_cap_bytes: int,
    log_linger_ms: int, cwd: str | None = None, leftover_grace_ms: int = 0, user: TaskUser | None = None,
) -> ProcessIdentity:
    """Start ``argv`` under a new monitor that writes its output to ``output`` (capped at
    ``log_cap_bytes``, its end kept; drained for ``log_linger_ms`` after the task ended while a
    descendant holds it) and its exit status to ``output``'s status file. The task runs in
    ``cwd`` (None: the service's own directory); the monitor enters it, so the service never
    changes its own. The monitor is the task's subreaper: when the task ends, every process it left
    (in its group or not) gets SIGTERM, and SIGKILL ``leftover_grace_ms`` later, before the
    status is written. With ``user``, the task runs as that user, with its groups (the monitor
    switches in the task's process before the exec; the monitor stays the service's user); a
    service that is not root can only name itself, which changes nothing.

    ``output``'s descriptors stay open: the caller closes them (``close_after_spawn``, or
    ``abandon`` when this raises).

    Raises:
        SpawnError: the command could not be started; no process is left behind.
    """
    if not argv:
        raise SpawnError("the command is empty")
    if cwd is not None and not os.path.isdir(cwd):
        # Checked at submit too; said here with its name, since the monitor's report has only an errno.
        raise SpawnError(f"cannot start {argv[0]!r}: working directory {cwd!r} does not exist")
    try:
        program = os.fspath(monitor_path())
    except MonitorMissingError as exc:
        raise SpawnError(str(exc)) from None
    report_read, report_write = _pipe(argv[0])
    copies: list[int] = []
    try:
        sources = (*output.descriptors(), report_write)
        # A source numbered 5 or below could be clobbered by another's dup2 onto 3..5 (or be a
        # target's stdio): those go through a copy above 10. A service's are above, as a rule.
        handed = []
        for fd in sources:
            if fd <= 5:
                fd = _copy_above(fd, argv[0])
                copies.append(fd)
            handed.append(fd)
        actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
        actions += [(os.POSIX_SPAWN_DUP2, fd, 3 + index) for index, fd in enumerate(handed)]
        switch = user is not None and not (os.geteuid() != 0 and user.uid == os.geteuid())
        monitor_argv = [program, *(("--cwd", cwd) if cwd is not None else ()), "--grace", str(leftover_grace_ms),
                        *(user.monitor_arguments() if switch else ()), str(log_cap_bytes), str(log_tail_bytes(log_cap_bytes)), str(log_linger_ms), "--", *argv]
        try:
            first = os.posix_spawn(program, monitor_argv, dict(env), file_actions=actions, setsid=True,
                                   setsigdef=_DEFAULT_SIGNALS, setsigmask=())
        except OSError as exc:
            raise SpawnError(f"cannot start the monitor of {argv[0]!r}: {exc.strerror or exc}"
                             f"{_too_big(monitor_argv, env) if exc.errno == errno.E2BIG else ''}",
                             os_errno=exc.errno) from None
    except BaseException:
        os.close(report_read)
        raise
    finally:
        for fd in (*copies, report_write):
            os.close(fd)
    try:
        os.waitpid(first, 0)  # it forks the monitor proper and exits at once
        line = _read_report(report_read)
    finally:
        os.close(report_read)
    return _identity_from_report(line, argv[0], boot_id)


def _too_big(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """Why execve said E2BIG, with the sizes: a task's command and environment that the kernel
    refuses fail its Attempt at start (docs/environment.md, "Limits")."""
    strings = [*argv, *(f"{name}={value}" for name, value in env.items())]
    sizes = [len(text.encode("utf-8", "surrogateescape")) + 1 for text in strings]
    return (f" (its command and environment are {len(strings)} strings of {sum(sizes)} bytes, the longest "
            f"{max(sizes)}; Linux allows one string at most {MAX_ENV_STRING_BYTES} bytes and all of them together "
            f"a quarter of the stack limit, `ulimit -s`)")


def _read_report(fd: int) -> str:
    """The monitor's one line, or what it left when it exited or ran out of time without one."""
    deadline = time.monotonic() + REPORT_TIMEOUT_S
    data = b""
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        readable, _, _ = select.select([fd], [], [], remaining)
        if not readable:
            continue
        chunk = os.read(fd, 128)
        if not chunk:
            break
        data += chunk
    return data.decode("ascii", "replace").strip()


def _identity_from_report(line: str, program: str, boot_id: str) -> ProcessIdentity:
    parts = line.split()
    if len(parts) == 3 and parts[0] == "started" and parts[1].isdigit() and parts[2].isdigit() and int(parts[2]):
        pid = int(parts[1])
        return ProcessIdentity(pid=pid, pgid=pid, start_ticks=int(parts[2]), boot_id=boot_id)
    if len(parts) == 3 and parts[0] == "error" and parts[1].isdigit():
        code = int(parts[1])
        raise SpawnError(f"cannot start {program!r}: {_STAGES.get(parts[2], '')}{os.strerror(code)}", os_errno=code)
    if len(parts) == 3 and parts[0] == "started" and parts[1].isdigit():
        # Its start time could not be read: nothing could cancel it safely. Unreaped until its
        # monitor sees it exit, so the group is still its own.
        _kill_group(int(parts[1]))
        raise SpawnError(f"process {parts[1]} could not be identified after its start; it was killed", started=True)
    # No report: the monitor failed (or is stuck); whether a task began is unknown.
    raise SpawnError(f"the monitor of {program!r} gave no start report ({line or 'it exited'})", started=True)


#: What the monitor's ``error ERRNO STAGE`` report failed at, as the start failure says it.
_STAGES = {"user": "cannot switch to the task's user: ", "cwd": "cannot enter its working directory: ",
           "exec": "", "monitor": "its monitor failed: "}


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _pipe(program: str) -> tuple[int, int]:
    try:
        return os.pipe2(os.O_CLOEXEC)
    except OSError as exc:
        raise SpawnError(f"cannot start {program!r}: {exc.strerror or exc}", os_errno=exc.errno) from None


def _copy_above(fd: int, program: str) -> int:
    """A close-on-exec copy of ``fd`` numbered 10 or above.

    Raises:
        SpawnError: no descriptor left (retryable: nothing was started).
    """
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    except OSError as exc:  # EMFILE: out of descriptors, nothing started
        raise SpawnError(f"cannot start {program!r}: {exc.strerror or exc}", os_errno=exc.errno) from None


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
