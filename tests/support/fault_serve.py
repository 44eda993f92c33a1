"""Run ``edge-runtime`` with every token it draws from ``secrets.token_urlsafe`` appended to the
file named by ``$FAULT_TOKEN_LOG`` (test tooling for the secrets-at-rest scan), and, when
``$FAULT_CLOCK_FILE`` is set, its system clock shifted by the milliseconds that file holds, so a
campaign can make the wall clock of a real service jump without touching the machine's clock.

When ``$FAULT_KILL_AT`` names a step of the start sequence (``after_start``: the Attempt,
its Run Lease and the barrier committed; ``before_spawn``; ``after_spawn``: a process exists, its
identity not recorded; ``after_record``), the service SIGKILLs itself there, once: the file
``$FAULT_KILL_MARK`` is created first, and no kill happens while it exists.

The notification outbox has its own steps (``notify_after_end``, ``notify_before_send``,
``notify_after_send``: see :func:`_install_notify_kill_points`).

When ``$FAULT_DISK_FULL_FILE`` is set, a VFS inheriting the default one is made the default: while
that file exists, every write and sync of a ``-wal`` file fails with SQLITE_FULL (each failure
appends a line to the file, counting the hits). Only the WAL: its writes and syncs happen inside
a commit, so their errors are the commit's own (apsw re-raises a Python VFS exception even where
SQLite ignores the error, as it does for an automatic checkpoint of the main file).

When ``$FAULT_UNDO_FAIL_FILE`` is set, the first spawn fails for lack of descriptors (EMFILE: no
process, so the start must be undone), and while that file exists every undo of a failed start
(``WorkerSession.abandon_start``) fails as a busy database would: the test removes the file to
end the failure.

The service generates its lease tokens in memory and never shows them; this launcher lets the
campaign know every raw token so it can prove none reached the database, the WAL or a log. The
token log lives outside the runtime's directory and is excluded from the scan.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time

import apsw

from edge_runtime.local.clock import SystemClock

_token_urlsafe = secrets.token_urlsafe


def _logged_token_urlsafe(nbytes: int | None = None) -> str:
    token = _token_urlsafe(nbytes)
    with open(os.environ["FAULT_TOKEN_LOG"], "a", encoding="utf-8") as log:
        log.write(token + "\n")
    return token


secrets.token_urlsafe = _logged_token_urlsafe


def _shifted_now_ms(self: SystemClock) -> int:
    with open(os.environ["FAULT_CLOCK_FILE"], encoding="ascii") as offset:
        return max(0, time.time_ns() // 1_000_000 + int(offset.read().strip() or "0"))


if os.environ.get("FAULT_CLOCK_FILE"):
    SystemClock.now_ms = _shifted_now_ms  # type: ignore[method-assign]


#: The default VFS before ours replaces it (inheriting "" would then inherit from ourselves).
_BASE_VFS = apsw.vfs_names()[0]


class _DiskFullFile(apsw.VFSFile):
    def __init__(self, name: object, flags: list[int]) -> None:
        filename = name.filename() if isinstance(name, apsw.URIFilename) else name
        self._wal = isinstance(filename, str) and filename.endswith("-wal")
        super().__init__(_BASE_VFS, name, flags)

    def _full(self) -> None:
        control = os.environ["FAULT_DISK_FULL_FILE"]
        if self._wal and os.path.exists(control):
            with open(control, "a", encoding="ascii") as hits:
                hits.write("hit\n")
            error = apsw.exception_for(apsw.SQLITE_FULL)
            error.args = ("database or disk is full",)
            raise error

    def xWrite(self, data: bytes, offset: int) -> None:
        self._full()
        super().xWrite(data, offset)

    def xSync(self, flags: int) -> None:
        self._full()
        super().xSync(flags)


class _DiskFullVFS(apsw.VFS):
    def __init__(self) -> None:
        super().__init__("fault-disk-full", base=_BASE_VFS, makedefault=True)

    def xOpen(self, name: object, flags: list[int]) -> apsw.VFSFile:
        return _DiskFullFile(name, flags)


if os.environ.get("FAULT_DISK_FULL_FILE"):
    _disk_full_vfs = _DiskFullVFS()  # kept referenced: an unreferenced VFS is unregistered

def _kill_at(step: str) -> None:
    if os.environ.get("FAULT_KILL_AT") == step:
        try:
            os.close(os.open(os.environ["FAULT_KILL_MARK"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)


def _install_kill_points() -> None:
    from edge_runtime.local.runs import LocalRunRepository
    from edge_runtime.service.attempts import start as start_pass
    from edge_runtime.service.worker import WorkerSession

    start, spawn, record = WorkerSession.start, start_pass.spawn, LocalRunRepository.record_running

    def start_then_kill(self, run_id):  # type: ignore[no-untyped-def]
        outcome = start(self, run_id)
        _kill_at("after_start")
        return outcome

    def spawn_between_kills(*args, **kwargs):  # type: ignore[no-untyped-def]
        _kill_at("before_spawn")
        identity = spawn(*args, **kwargs)
        _kill_at("after_spawn")
        return identity

    def record_then_kill(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        attempt = record(self, *args, **kwargs)
        _kill_at("after_record")
        return attempt

    WorkerSession.start = start_then_kill  # type: ignore[method-assign]
    start_pass.spawn = spawn_between_kills  # type: ignore[assignment]
    LocalRunRepository.record_running = record_then_kill  # type: ignore[method-assign]


def _install_notify_kill_points() -> None:
    """The outbox's steps: ``notify_after_end`` (a Run's end and its outbox rows committed, nothing
    sent), ``notify_before_send`` (a row claimed, not sent), ``notify_after_send`` (the provider
    took it, ``sent`` not recorded)."""
    from edge_runtime.local.runs import LocalRunRepository
    from edge_runtime.service import notify_sender

    finish, send_message = LocalRunRepository.finish_attempt, notify_sender.send_message

    def finish_then_kill(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        attempt = finish(self, *args, **kwargs)
        _kill_at("notify_after_end")
        return attempt

    def send_between_kills(*args, **kwargs):  # type: ignore[no-untyped-def]
        _kill_at("notify_before_send")
        send_message(*args, **kwargs)
        _kill_at("notify_after_send")

    LocalRunRepository.finish_attempt = finish_then_kill  # type: ignore[method-assign]
    notify_sender.send_message = send_between_kills  # type: ignore[assignment]


if os.environ.get("FAULT_KILL_AT", "").startswith("notify_"):
    _install_notify_kill_points()
elif os.environ.get("FAULT_KILL_AT"):
    _install_kill_points()


def _install_undo_failures() -> None:
    import errno

    from edge_runtime.contract.worker_lease import WorkerLeaseRepositoryError
    from edge_runtime.service.attempts import start as start_pass
    from edge_runtime.service.errors import SpawnError
    from edge_runtime.service.worker import WorkerSession

    spawn, abandon = start_pass.spawn, WorkerSession.abandon_start
    spawned = []

    def spawn_failing_once(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not spawned:
            spawned.append(True)
            raise SpawnError("cannot start '/bin/sh': Too many open files (injected)", os_errno=errno.EMFILE)
        return spawn(*args, **kwargs)

    def abandon_failing(self, grant, reason):  # type: ignore[no-untyped-def]
        if os.path.exists(os.environ["FAULT_UNDO_FAIL_FILE"]):
            raise WorkerLeaseRepositoryError("database is locked (injected)", retryable=True)
        return abandon(self, grant, reason)

    start_pass.spawn = spawn_failing_once  # type: ignore[assignment]
    WorkerSession.abandon_start = abandon_failing  # type: ignore[method-assign]


if os.environ.get("FAULT_UNDO_FAIL_FILE"):
    _install_undo_failures()

if __name__ == "__main__":
    from edge_runtime.cli import main

    sys.exit(main(sys.argv[1:]))
