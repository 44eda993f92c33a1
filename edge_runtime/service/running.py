"""The in-memory record of one watched Attempt, and how an exit status is kept.

Exit codes are kept as shells report them: ``N`` for a normal exit, ``128 + N`` when signal N
ended the process (``os.waitstatus_to_exitcode`` gives ``-N``); the reason names the signal.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import NamedTuple

from edge_runtime.contract.runs import AttemptStatus, ProcessIdentity
from edge_runtime.service.worker import RunGrant

#: A re-adopted Attempt of a release without monitors (no status file): nothing kept its status.
REASON_ADOPTED_EXIT = "the process exited while re-adopted after a service restart; its exit status is unknown"
#: A re-adopted Attempt whose process had exited when recovery found it, started by a release
#: without monitors (no status file): nothing kept its status.
REASON_GONE = "the process exited while no service was watching it; its exit status is unknown"
#: The monitor is gone (killed) without having written the task's end.
REASON_MONITOR_GONE = "the attempt's monitor ended without recording the exit status; it is unknown"


def exit_code_of(status: int) -> int:
    """``os.waitstatus_to_exitcode`` style (negative for a signal) -> shell style (128 + signal)."""
    return 128 - status if status < 0 else status


def describe_exit(status: int) -> str | None:
    if status >= 0:
        return None
    try:
        return f"terminated by {signal.Signals(-status).name}"
    except ValueError:
        return f"terminated by signal {-status}"


class DeferredEnd(NamedTuple):
    """An Attempt's end, known but not yet recorded (see ``RunningAttempt.deferred``)."""

    status: AttemptStatus
    exit_code: int | None
    reason: str | None


class RunningAttempt:
    """What the service holds in memory for one Attempt whose process it watches."""

    __slots__ = ("attempt_id", "run_id", "identity", "started_here", "pidfd", "grant", "deferred", "failure",
                 "log_path", "exited_since", "record_by", "record_error", "note")

    def __init__(
        self, attempt_id: str, run_id: str, identity: ProcessIdentity, *, started_here: bool, grant: RunGrant | None,
        log_path: Path | None,
    ) -> None:
        self.attempt_id = attempt_id
        self.run_id = run_id
        self.identity = identity
        #: Started by this service (else re-adopted from an earlier session).
        self.started_here = started_here
        self.pidfd: int | None = None
        self.grant = grant
        #: How the Attempt ended, held until its SIGKILL step is done (then recorded).
        self.deferred: DeferredEnd | None = None
        #: Set when the process had to be killed because its identity could not be recorded.
        self.failure: str | None = None
        #: Our own child whose identity is not durable yet (recording it failed retryably): the
        #: monotonic time by which it must be recorded or the process killed; None once recorded.
        self.record_by: float | None = None
        #: Why the last try to record the identity failed (for the reason if it is given up).
        self.record_error: str | None = None
        #: The Attempt's log (its status file is beside it); None when it has none recorded.
        self.log_path = log_path
        #: When its leader was seen gone (monotonic) while its monitor had not written its end yet.
        self.exited_since: float | None = None
        #: Added to the reason of its end (e.g. that it ended while no service ran).
        self.note: str | None = None
