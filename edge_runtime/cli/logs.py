"""``edge-runtime logs RUN``: the captured output of a Run's Attempts.

Without ``--follow`` it prints the latest (or ``--attempt N``) Attempt's log. With ``--follow`` it
follows the Run, not one Attempt: each Attempt's output as it is written, from the latest one on,
through the retries (``--- attempt 2 of 3 ---`` before each Attempt's output when the Run has
retries), until the Run has ended; exit 0 only when it succeeded, else 1 with the status named on
stderr (``RUN_NOT_SUCCEEDED``), so ``logs -f RUN && next`` works. ``--json`` prints one object per
Attempt, ``{runId, attempt, status, text}`` (secrets masked), one a line when following, each once
its Attempt ended.

An Attempt's log is a file on the host whose worker ran it. On the device (Local) that is always
this host. Where workers on several hosts share a store (``edge-runtime-cluster``), the file is read
when the Attempt ran in this host's current boot and the file is here; otherwise the copy the
worker stored when the Attempt ended (``Store.attempt_logs``: the tail, with a note on stderr when
the start is cut); a still-running Attempt of another host is refused with where it runs (followed:
its copy is printed once it ended).

A log path comes from the database, which is hostile input: only ``<log dir>/<attempt file stem>.log``
(the name the service gives that Attempt's log, in the log directory of this host) is ever opened,
relative to the opened log directory and with ``O_NOFOLLOW``; a row naming any other file
(``/etc/shadow``, ``/proc/self/mem``) is refused as ``LOG_PATH_REFUSED`` and nothing is read.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from edge_runtime import operations
from edge_runtime.cli.common import LOCAL_STORES, READ, add_run_command, json_line, open_run, printable
from edge_runtime.contract.redaction import LogMasker, Redactor, store_redactor
from edge_runtime.contract.runs import (
    ACTIVE_ATTEMPT_STATUSES, ACTIVE_RUN_STATUSES, AttemptRecord, AttemptStatus, RunError, RunRecord,
    RunStateConflictError, RunStatus,
)
# Kept importable from here under their old names (tests, the cluster CLI).
from edge_runtime.operations import CommandNotStartedError, HostileLogPathError, LogUnreadableError  # noqa: F401


class LogElsewhereError(RunStateConflictError, code="LOG_ON_OTHER_HOST"):
    """The Attempt's log is on another host: it is still running there, or it ended without a copy."""


class RunNotSucceededError(RunError, code="RUN_NOT_SUCCEEDED"):
    """``logs --follow`` followed the Run (or ``--attempt N``) to its end, and it did not succeed."""


class AttemptLog(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """What ``logs --json`` prints for one Attempt: its output, secrets masked (invalid UTF-8 replaced)."""

    run_id: str
    attempt: int
    status: str
    text: str


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = add_run_command(subparsers, "logs", run, stores, help=help_text)
    parser.add_argument("--attempt", type=int, help="attempt number (default: the latest)")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="keep printing the output as it is written, through the Run's retries, until the Run "
                        "(with --attempt: that Attempt) has ended; exit 0 only when it succeeded")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object per Attempt, {runId, attempt, status, text} (one a line when "
                        "following)")
    parser.add_argument("--log-dir", dest="log_dir",
                        help="the service's log directory (default: as serve resolves it from its configuration)")


#: How often ``--follow`` looks for new output and for the Attempt's end.
FOLLOW_POLL_S = 0.25
#: How long ``--follow`` waits for the stored copy of an Attempt that ended on another host: its
#: worker stores it once the output is complete, at most ``log_linger_ms`` after the end (default 30 s).
COPY_WAIT_S = 60.0
_CHUNK = 64 * 1024


def run(args: argparse.Namespace) -> int:
    with open_run(args, READ) as store:
        store.runs.get(args.run_id)
        reader = _Reader(store, args)
        if not args.follow:
            reader.show(operations.attempt_of(store, args.run_id, args.attempt))
            return 0
        return _follow(store, args, reader)


def _follow(store: Any, args: argparse.Namespace, reader: _Reader) -> int:
    """Every Attempt from the latest (or only ``--attempt N``) on, until the Run has ended; then
    0, or ``RunNotSucceededError`` naming how it ended."""
    number, last = args.attempt, None
    while (attempt := _await_attempt(store, args.run_id, number)) is not None:
        last = reader.show(attempt, follow=True)
        if args.attempt is not None:
            break
        number = attempt.attempt + 1
    run_record = store.runs.get(args.run_id)
    if last is None:  # the Run ended before any Attempt of it (or the one asked for) existed
        if args.attempt is None:
            raise CommandNotStartedError(operations.never_started(run_record, reader.redactor))
        raise RunStateConflictError(f"run {args.run_id} ended {run_record.status.value} without an attempt {args.attempt}")
    if args.attempt is not None:
        if last.status is not AttemptStatus.SUCCEEDED:
            raise RunNotSucceededError(f"attempt {last.attempt} of run {args.run_id} ended {last.status.value}"
                                       f"{_how(reader.redactor, last)}")
    elif run_record.status is not RunStatus.SUCCEEDED:
        raise RunNotSucceededError(f"run {args.run_id} ended {run_record.status.value}"
                                   f"{_how(reader.redactor, last, run_record)}")
    return 0


def _how(redactor: Redactor, attempt: AttemptRecord, run_record: RunRecord | None = None) -> str:
    """How an Attempt (and its Run) ended, for the message of a followed end that is no success
    (its reasons masked: a cancel reason or a failed start may repeat a secret)."""
    parts = [f"attempt {attempt.attempt} {attempt.status.value}"] if run_record is not None else []
    if attempt.exit_code is not msgspec.UNSET:
        parts.append(f"exit code {attempt.exit_code}")
    if attempt.end_reason is not msgspec.UNSET:
        parts.append(printable(redactor.text(attempt.end_reason)))
    if run_record is not None and run_record.cancel_reason is not msgspec.UNSET:
        parts.append(f"cancel reason: {printable(redactor.text(run_record.cancel_reason))}")
    return f" ({', '.join(parts)})" if parts else ""


def _await_attempt(store: Any, run_id: str, number: int | None) -> AttemptRecord | None:
    """The Run's Attempt ``number`` (None: the latest) once it exists, or None when the Run has
    ended without it. The Run is read before its Attempts: an Attempt is created before the Run
    can end, so one not listed after an ended Run was read never comes."""
    while True:
        ended = store.runs.get(run_id).status not in ACTIVE_RUN_STATUSES
        attempts = store.runs.attempts(run_id)
        found = [a for a in attempts if number is None or a.attempt == number]
        if found:
            return found[-1]
        if ended:
            return None
        time.sleep(FOLLOW_POLL_S)


class _Reader:
    """Prints Attempts' logs for one ``logs`` command: as text (with a header per Attempt when
    following a Run with retries) or as one ``AttemptLog`` each (``--json``)."""

    def __init__(self, store: Any, args: argparse.Namespace) -> None:
        self._store, self._args = store, args
        self._run_id: str = args.run_id
        # Every printed log and reason masks the secrets (docs/environment.md).
        self.redactor = store_redactor(store)
        self._log_dir: Path | None = None

    def log_dir(self) -> Path:
        if self._log_dir is None:  # resolved once a log is to be read: a config error never hides why there is none
            args = self._args
            self._log_dir = Path(args.log_dir) if args.log_dir else args.stores.log_dir(args)
        return self._log_dir

    def show(self, attempt: AttemptRecord, *, follow: bool = False) -> AttemptRecord:
        """Print ``attempt``'s log (``follow``: as it is written, until it ended); the Attempt as it
        ended (or is, without ``follow``)."""
        as_json, masker = self._args.json, self.redactor.log()
        collected: list[bytes] = []
        write: Callable[[bytes], object] = collected.append if as_json else _stdout
        if follow and not as_json:
            total = _attempts_of(self._store.runs.get(self._run_id))
            if max(total, attempt.attempt) > 1:
                _stdout(f"--- attempt {attempt.attempt} of {max(total, attempt.attempt)} ---\n".encode())
        if attempt.log_path is msgspec.UNSET and follow and attempt.status in ACTIVE_ATTEMPT_STATUSES:
            attempt = self._wait_for_log(attempt)
        try:
            operations.require_log(attempt, self._run_id, self.redactor)
        except CommandNotStartedError as exc:
            if not follow:
                raise
            sys.stderr.write(f"Note: {exc}\n")  # the next Attempt, if any, is followed all the same
        else:
            attempt = self._copy(attempt, masker, write, follow)
        write(masker.flush())
        if as_json:
            sys.stdout.write(json_line(AttemptLog(run_id=self._run_id, attempt=attempt.attempt,
                                                  status=attempt.status.value,
                                                  text=b"".join(collected).decode("utf-8", "replace"))))
        sys.stdout.flush()
        return attempt

    def _attempt(self, number: int) -> AttemptRecord:
        return operations.attempt_of(self._store, self._run_id, number)

    def _wait_for_log(self, attempt: AttemptRecord) -> AttemptRecord:
        """An Attempt still starting: wait until it has a log or ends."""
        while attempt.log_path is msgspec.UNSET and attempt.status in ACTIVE_ATTEMPT_STATUSES:
            time.sleep(FOLLOW_POLL_S)
            attempt = self._attempt(attempt.attempt)
        return attempt

    def _copy(self, attempt: AttemptRecord, masker: LogMasker, write: Callable[[bytes], object],
              follow: bool) -> AttemptRecord:
        """The Attempt's log through ``masker`` to ``write`` (``follow``: until the Attempt ended)."""
        copies = self._store.attempt_logs
        if copies is None:
            fd = operations.open_log(attempt, self._run_id, self.log_dir())  # Local: the log is a file on this device
        else:
            fd = _open_log_here(attempt, self._run_id, self.log_dir())
            if fd is None:
                return self._copy_stored(copies, attempt, write, follow)
        with open(fd, "rb") as log:
            _drain(log, masker, write)
            while follow and attempt.status in ACTIVE_ATTEMPT_STATUSES:
                time.sleep(FOLLOW_POLL_S)
                attempt = self._attempt(attempt.attempt)  # read before the file: its end's output is all there
                _drain(log, masker, write)
        return attempt

    def _copy_stored(self, copies: Any, attempt: AttemptRecord, write: Callable[[bytes], object],
                     follow: bool) -> AttemptRecord:
        """The copy of the log its worker stored: for an Attempt that ran on another host."""
        if follow and attempt.status in ACTIVE_ATTEMPT_STATUSES:
            sys.stderr.write(f"Note: attempt {attempt.attempt} runs on another host: its output is shown once it "
                             f"ended (the copy its worker stores)\n")
            while attempt.status in ACTIVE_ATTEMPT_STATUSES:
                time.sleep(FOLLOW_POLL_S)
                attempt = self._attempt(attempt.attempt)
        copy = copies.find(attempt.id)
        # Its worker stores the copy once the output is complete, which may be after the end (a
        # leftover process holding it: log_linger_ms); a lost Attempt's worker stores none.
        waited_until = time.monotonic() + COPY_WAIT_S
        while (copy is None and follow and attempt.status is not AttemptStatus.LOST
               and time.monotonic() < waited_until):
            time.sleep(FOLLOW_POLL_S)
            copy = copies.find(attempt.id)
        if copy is None:
            raise _elsewhere(self._store, attempt, self._run_id)
        if copy.truncated:
            sys.stderr.write(f"Note: attempt {attempt.attempt} ran on worker {copy.worker_id}; its log had "
                             f"{copy.size_bytes} bytes, the stored copy is the last {len(copy.content)} (the whole "
                             f"log is {attempt.log_path} there)\n")
        # A copy that kept only the log's end begins where the log was cut: a secret's rest may open it.
        masker = self.redactor.log(cut_at_start=copy.truncated)
        write(masker.feed(copy.content) + masker.flush())
        return attempt


def _attempts_of(run_record: RunRecord) -> int:
    """How many Attempts the Run may have: the first and its retries."""
    return 1 + (0 if run_record.retries is msgspec.UNSET else run_record.retries)


def _stdout(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def _drain(log: Any, masker: LogMasker, write: Callable[[bytes], object]) -> None:
    """What the log has past its current position, masked, to ``write``."""
    while chunk := log.read(_CHUNK):
        write(masker.feed(chunk))


def _open_log_here(attempt: AttemptRecord, run_id: str, log_dir: Path) -> int | None:
    """The log file when the Attempt ran in this host's current boot and the file is here (the
    freshest text, even while it runs); None when its log must come from the store's copy."""
    from edge_runtime.service.process_identity import read_boot_id

    if attempt.boot_id is msgspec.UNSET or attempt.boot_id != read_boot_id():
        return None
    try:
        return operations.open_log(attempt, run_id, log_dir)
    except RunStateConflictError:
        return None  # same kernel, other file system (a container's own mount namespace): use the copy
    except HostileLogPathError:
        return None  # not this host's log directory (another container's worker): the copy, never that file


def _elsewhere(store: Any, attempt: AttemptRecord, run_id: str) -> LogElsewhereError:
    lease = store.leases.find_lease(attempt.id)
    worker = "an unknown worker" if lease is None else f"worker {lease.worker_id}"
    if attempt.status in ACTIVE_ATTEMPT_STATUSES:
        return LogElsewhereError(
            f"attempt {attempt.attempt} of run {run_id} is {attempt.status.value} on {worker}, another host: its log "
            f"is the file {attempt.log_path} there (`edge-runtime-cluster logs` on that host reads it); a copy is "
            f"stored here when it ends"
        )
    return LogElsewhereError(
        f"attempt {attempt.attempt} of run {run_id} ended {attempt.status.value} on {worker}, another host, and no "
        f"copy of its log was stored (its worker did not end it, e.g. it was ended as lost after the worker died): "
        f"the log is the file {attempt.log_path} on that host"
    )
