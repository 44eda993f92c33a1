"""``edge-runtime logs RUN``: the captured output of a Run's Attempt.

An Attempt's log is a file on the host whose worker ran it. On the device (Local) that is always
this host. Where workers on several hosts share a store (``edge-runtime-cluster``), the file is read
when the Attempt ran in this host's current boot and the file is here; otherwise the copy the
worker stored when the Attempt ended (``Store.attempt_logs``: the tail, with a note on stderr when
the start is cut); a still-running Attempt of another host is refused with where it runs.

A log path comes from the database, which is hostile input: only ``<log dir>/<attempt file stem>.log``
(the name the service gives that Attempt's log, in the log directory of this host) is ever opened,
relative to the opened log directory and with ``O_NOFOLLOW``; a row naming any other file
(``/etc/shadow``, ``/proc/self/mem``) is refused as ``LOG_PATH_REFUSED`` and nothing is read.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from edge_runtime import operations
from edge_runtime.cli.common import LOCAL_STORES, READ, add_run_command, open_run
from edge_runtime.contract.redaction import LogMasker, Redactor, store_redactor
from edge_runtime.contract.runs import ACTIVE_ATTEMPT_STATUSES, AttemptRecord, RunStateConflictError
# Kept importable from here under their old names (tests, the cluster CLI).
from edge_runtime.operations import HostileLogPathError, LogUnreadableError  # noqa: F401


class LogElsewhereError(RunStateConflictError, code="LOG_ON_OTHER_HOST"):
    """The Attempt's log is on another host: it is still running there, or it ended without a copy."""


def register(subparsers: argparse._SubParsersAction, help_text: str, stores: Any = LOCAL_STORES) -> None:
    parser = add_run_command(subparsers, "logs", run, stores, help=help_text)
    parser.add_argument("--attempt", type=int, help="attempt number (default: the latest)")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="keep printing the output as it is written until the Attempt ends, then exit 0")
    parser.add_argument("--log-dir", dest="log_dir",
                        help="the service's log directory (default: as serve resolves it from its configuration)")


#: How often ``--follow`` looks for new output and for the Attempt's end.
FOLLOW_POLL_S = 0.25
_CHUNK = 64 * 1024


def run(args: argparse.Namespace) -> int:
    with open_run(args, READ) as store:
        store.runs.get(args.run_id)
        attempt = _attempt(store, args)
        # Every printed log masks the secrets' values (docs/environment.md).
        redactor = store_redactor(store)
        masker = redactor.log()
        if attempt.log_path is msgspec.UNSET and args.follow and attempt.status in ACTIVE_ATTEMPT_STATUSES:
            attempt = _wait_for_log(store, args)
        operations.require_log(attempt, args.run_id, redactor)
        copies = store.attempt_logs
        log_dir = Path(args.log_dir) if args.log_dir else args.stores.log_dir(args)
        if copies is None:
            fd = _open_log(attempt, args.run_id, log_dir)  # Local: the log is a file on this device
        else:
            fd = _open_log_here(attempt, args.run_id, log_dir)
            if fd is None:
                return _print_copy(store, copies, attempt, args.run_id, redactor)
        with open(fd, "rb") as log:
            _copy(log, masker)
            while args.follow and attempt.status in ACTIVE_ATTEMPT_STATUSES:
                time.sleep(FOLLOW_POLL_S)
                attempt = _attempt(store, args)  # read before the file: its end's output is all there
                _copy(log, masker)
    sys.stdout.buffer.write(masker.flush())
    sys.stdout.flush()
    return 0


def _attempt(store: Any, args: argparse.Namespace) -> AttemptRecord:
    return operations.attempt_of(store, args.run_id, args.attempt)


def _wait_for_log(store: Any, args: argparse.Namespace) -> AttemptRecord:
    """``--follow`` on an Attempt still starting: wait until it has a log or ends."""
    while True:
        attempt = _attempt(store, args)
        if attempt.log_path is not msgspec.UNSET or attempt.status not in ACTIVE_ATTEMPT_STATUSES:
            return attempt
        time.sleep(FOLLOW_POLL_S)


def _copy(log: Any, masker: LogMasker) -> None:
    """What the log has past its current position, masked, to stdout."""
    while chunk := log.read(_CHUNK):
        sys.stdout.buffer.write(masker.feed(chunk))
    sys.stdout.flush()


def _open_log(attempt: AttemptRecord, run_id: str, log_dir: Path) -> int:
    return operations.open_log(attempt, run_id, log_dir)


def _open_log_here(attempt: AttemptRecord, run_id: str, log_dir: Path) -> int | None:
    """The log file when the Attempt ran in this host's current boot and the file is here (the
    freshest text, even while it runs); None when its log must come from the store's copy."""
    from edge_runtime.service.process_identity import read_boot_id

    if attempt.boot_id is msgspec.UNSET or attempt.boot_id != read_boot_id():
        return None
    try:
        return _open_log(attempt, run_id, log_dir)
    except RunStateConflictError:
        return None  # same kernel, other file system (a container's own mount namespace): use the copy
    except HostileLogPathError:
        return None  # not this host's log directory (another container's worker): the copy, never that file


def _print_copy(store: Any, copies: Any, attempt: AttemptRecord, run_id: str, redactor: Redactor) -> int:
    copy = copies.find(attempt.id)
    if copy is None:
        lease = store.leases.find_lease(attempt.id)
        worker = "an unknown worker" if lease is None else f"worker {lease.worker_id}"
        if attempt.status in ACTIVE_ATTEMPT_STATUSES:
            raise LogElsewhereError(
                f"attempt {attempt.attempt} of run {run_id} is {attempt.status.value} on {worker}, another host: its log "
                f"is the file {attempt.log_path} there (`edge-runtime-cluster logs` on that host reads it); a copy is "
                f"stored here when it ends"
            )
        raise LogElsewhereError(
            f"attempt {attempt.attempt} of run {run_id} ended {attempt.status.value} on {worker}, another host, and no "
            f"copy of its log was stored (its worker did not end it, e.g. it was ended as lost after the worker died): "
            f"the log is the file {attempt.log_path} on that host"
        )
    if copy.truncated:
        sys.stderr.write(f"Note: attempt {attempt.attempt} ran on worker {copy.worker_id}; its log had {copy.size_bytes} bytes, "
                         f"the stored copy is the last {len(copy.content)} (the whole log is {attempt.log_path} there)\n")
    # A copy that kept only the log's end begins where the log was cut: a secret's rest may open it.
    masker = redactor.log(cut_at_start=copy.truncated)
    sys.stdout.buffer.write(masker.feed(copy.content) + masker.flush())
    sys.stdout.flush()
    return 0
