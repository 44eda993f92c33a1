"""The one-file build's Python process dies with its launcher, as ``prctl(PR_SET_PDEATHSIG)`` would do.

The one-file executable runs as two processes. PyInstaller's bootloader, the *launcher* (the pid a
supervisor, a pidfile or ``ps`` sees), unpacks the program into ``$TMPDIR/_MEI<its pid as %08x><6
random>``, forks and execs itself as the *child* that runs Python, forwards the signals it can catch
and removes the directory once the child is gone. SIGKILL cannot be caught: a child whose launcher
was killed (by hand, by a timeout, by procd or systemd escalating a stop) ran on, re-parented to
init, holding the worker session and the database next to the service the supervisor restarted.

So the child watches its launcher and, when it exits, takes the signal a parent-death signal would
have brought: SIGTERM for ``serve`` (a clean stop: running Attempts stay re-adoptable by the next
start; one still running ``_STOP_TIMEOUT_S`` later is killed, as its supervisor would have done),
SIGKILL for every other command. Not prctl itself: calling it needs ctypes and libffi, about 77 KB
of the one-file budget for one system call. A pidfd of the launcher (Linux 5.3+, as the service's
own process watch) turns readable when it exits, and a daemon thread blocked on it sends the signal:
no wake-up until then. Kernels without pidfds get a parent-pid check once per ``_POLL_S``.

The unpack directory the dead launcher can no longer remove is removed by a small *reaper*, a
fork of this process that waits (on a pidfd of this process, else on its own parent pid) until
this process has exited. Not by this process itself: while the watch thread removed it, the main
thread could still be starting and loading modules from there, fail half-way and end the process
with the directory half removed; and ``serve`` still loads modules while it stops cleanly.

The launcher's pid comes from the unpack directory's name (the bootloader embeds it there and
verifies it itself), not from ``getppid()`` at start, which is already init's when the launcher
died first. That race is closed by checking, after the pidfd is opened, that the parent is still
the launcher: a re-parented process never gets its parent back. The one-folder build runs Python
in the launcher's own process, so none of this applies there, nor to runs from source: there
``bind_to_launcher`` returns at once, and ``signal`` (an enum module, a few ms to import) is
imported only by the functions that act for a one-file child.
"""

from __future__ import annotations

import os
import sys
import time

from edge_runtime.service.watch import open_pidfd

_POLL_S = 1.0  # the parent-pid check where the kernel gives no pidfd
_REAPER_POLL_S = 0.05  # the reaper's check, where the kernel gives no pidfd: the removal follows the exit closely
#: How long ``serve`` may take to stop after its launcher died before it is killed: the stop timeout
#: of the shipped systemd unit and procd script (TimeoutStopSec, term_timeout).
_STOP_TIMEOUT_S = 30.0
_HEX = frozenset("0123456789abcdef")


def launcher_pid() -> int | None:
    """The launcher's pid when this is the Python process of a one-file build, else None."""
    home = getattr(sys, "_MEIPASS", "") if getattr(sys, "frozen", False) else ""
    name = os.path.basename(home)
    # "_MEI" + the launcher's pid as %08x + mkdtemp's six characters: the name the bootloader makes
    # and checks. The one-folder build's home is its "_internal" directory.
    if len(name) != 18 or not name.startswith("_MEI") or not _HEX.issuperset(name[4:12]):
        return None
    return int(name[4:12], 16)


def bind_to_launcher(command: str | None) -> None:
    """Make this process end when the one-file launcher does (no-op anywhere else).

    ``command`` is the CLI command word: ``serve`` is stopped with SIGTERM, anything else killed.
    """
    launcher = launcher_pid()
    if launcher is None:
        if getattr(sys, "frozen", False) and os.path.basename(getattr(sys, "_MEIPASS", "")).startswith("_MEI"):
            # A one-file build whose bootloader does not put its pid in the directory name (older
            # than pyproject's floor): nothing ties this process to its launcher. Say so, not silently.
            _say("edge-runtime: warning: this one-file build's unpack directory does not name its launcher "
                 "(built with a PyInstaller older than 6.22?); this process will outlive a SIGKILL of it\n")
        return
    import signal

    signum = signal.SIGTERM if command == "serve" else signal.SIGKILL
    pidfd = open_pidfd(launcher)
    if os.getppid() != launcher:
        # Either the launcher is already gone (we were re-parented before getting here), or this
        # is a process that inherited a one-file child's environment and ran the same executable
        # (the bootloader then skips the launcher): its launcher is someone else's, still alive.
        if not _exited(launcher, pidfd):
            if pidfd is not None:
                os.close(pidfd)
            return
        _end(launcher, signum)
        return
    import threading

    threading.Thread(target=_watch, args=(launcher, pidfd, signum), name="launcher-watch", daemon=True).start()


def _exited(pid: int, pidfd: int | None) -> bool:
    """Whether ``pid`` has exited: a zombie counts (it no longer waits for its child)."""
    if pidfd is not None:
        import select

        return bool(select.select([pidfd], [], [], 0)[0])
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in (b"Z", b"X")


def _watch(launcher: int, pidfd: int | None, signum: int) -> None:
    import signal

    if pidfd is not None:
        import select

        select.select([pidfd], [], [])  # readable once the launcher has exited
    else:
        while os.getppid() == launcher:
            time.sleep(_POLL_S)
    _end(launcher, signum)
    # Still here: a clean stop is under way. One stuck past the supervisors' own stop timeout is
    # killed, as the supervisor would have done had its SIGKILL reached this process.
    time.sleep(_STOP_TIMEOUT_S)
    _say(f"edge-runtime: not stopped {_STOP_TIMEOUT_S:g} s after the launcher exited; killing\n")
    os.kill(os.getpid(), signal.SIGKILL)


def _end(launcher: int, signum: int) -> None:
    """Leave the unpack directory to a reaper (the dead launcher no longer removes it), then take ``signum``."""
    import signal

    try:
        _start_reaper(sys._MEIPASS)
        if signal.getsignal(signum) not in (signal.SIG_DFL, None):
            _say(f"edge-runtime: the one-file launcher (pid {launcher}) exited; stopping as on SIGTERM\n")
    finally:
        os.kill(os.getpid(), signum)


def _start_reaper(home: str) -> None:
    """Fork a process that removes ``home`` once this process has exited, however it ends."""
    # Loaded before the fork: the reaper must not load a module from the directory it removes.
    import select
    import shutil  # noqa: F401  (used by _remove)
    import signal

    me = os.getpid()
    pidfd = open_pidfd(me)  # opened before the fork: it cannot name a later holder of our pid
    try:
        reaper = os.fork()
    except OSError as exc:
        _say(f"edge-runtime: cannot start the process that removes the unpack directory {home}: {exc}\n")
        if pidfd is not None:
            os.close(pidfd)
        return
    if reaper:
        if pidfd is not None:
            os.close(pidfd)
        return
    code = 0
    try:  # the reaper: it never returns into the command's code
        os.setsid()  # out of the process group: a Ctrl-C or a group kill aimed at the command spares it
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)  # stderr stays, to report a failed removal; a reader of stdout sees EOF
        # The database, sockets and pipes of the command are not the reaper's to hold open.
        high = os.sysconf("SC_OPEN_MAX")
        if pidfd is None:
            os.closerange(3, high)
        else:
            os.closerange(3, pidfd)
            os.closerange(pidfd + 1, high)
        if pidfd is not None:
            select.select([pidfd], [], [])
        else:
            while os.getppid() == me:
                time.sleep(_REAPER_POLL_S)
        _remove(home)
    except BaseException as exc:  # noqa: BLE001  (reported; the reaper must end here whatever happened)
        _say(f"edge-runtime: the unpack directory {home} was not removed: {exc!r}\n")
        code = 1
    finally:
        os._exit(code)


def _remove(home: str) -> None:
    import shutil

    try:
        shutil.rmtree(home)
    except OSError as exc:
        _say(f"edge-runtime: could not remove the unpack directory {home}: {exc}\n")


def _say(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr was the dead launcher's terminal or a closed pipe: there is no one left to tell
