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

REASON_ADOPTED_EXIT = "the process exited while re-adopted after a service restart; its exit status is unknown"


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

    __slots__ = ("attempt_id", "run_id", "identity", "own_child", "pidfd", "grant", "deferred", "failure", "fifo_path",
                 "gone_since", "record_by", "record_error")

    def __init__(
        self, attempt_id: str, run_id: str, identity: ProcessIdentity, *, own_child: bool, grant: RunGrant | None
    ) -> None:
        self.attempt_id = attempt_id
        self.run_id = run_id
        self.identity = identity
        self.own_child = own_child
        self.pidfd: int | None = None
        self.grant = grant
        #: (status, exit code, reason) decided at the leader's exit, applied after the SIGKILL step.
        #: How the Attempt ended, held until its SIGKILL step is done (then recorded).
        self.deferred: DeferredEnd | None = None
        #: Set when the process had to be killed because its identity could not be recorded.
        self.failure: str | None = None
        #: Our own child whose identity is not durable yet (recording it failed retryably): the
        #: monotonic time by which it must be recorded or the process killed; None once recorded.
        self.record_by: float | None = None
        #: Why the last try to record the identity failed (for the reason if it is given up).
        self.record_error: str | None = None
        #: The Attempt's FIFO, unlinked when the Attempt ends.
        self.fifo_path: Path | None = None
        #: Re-adopted only: when its exit was first seen (monotonic); its parent may record it.
        self.gone_since: float | None = None
