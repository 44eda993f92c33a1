"""The in-memory record of one watched Attempt, the registry of all of them, and how an exit
status is kept.

Exit codes are kept as shells report them: ``N`` for a normal exit, ``128 + N`` when signal N
ended the process (``os.waitstatus_to_exitcode`` gives ``-N``); the reason names the signal.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator, Mapping, ValuesView
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
    """An Attempt's end, known but not yet recorded (see ``AwaitingKill``)."""

    status: AttemptStatus
    exit_code: int | None
    reason: str | None


# ----------------------------------------------------------------- the states of a watched Attempt
#
#   Unrecorded ──recorded──> Watching ──leader exits──> Exited ──cancelled, group alive──> AwaitingKill
#        │                                                 ▲                                   │
#        └──given up (SIGKILLed)──> Doomed ──leader exits──┘ (with the failure)      SIGKILL step: ended
#
# ``Unrecorded`` and ``Doomed`` are only ever Attempts this service started; re-adopted ones begin
# ``Watching`` (or ``Exited``, when they ended while no service ran).


class Unrecorded(NamedTuple):
    """Started here, its identity not durable yet (recording it failed retryably): recorded by
    ``record_by`` (monotonic) or the process is given up."""

    record_by: float
    error: str | None


class Watching(NamedTuple):
    """Its identity is recorded; its leader is watched (pidfd, or the ``/proc`` poll)."""


class Doomed(NamedTuple):
    """Its identity will never be recorded: SIGKILLed, it ends ``lost`` with ``failure``."""

    failure: str


class Exited(NamedTuple):
    """Its leader is gone; its end is read from what its monitor wrote (until then, again and
    again). ``unrecorded``: it exited before its identity was recorded (recorded first)."""

    since: float
    failure: str | None = None
    unrecorded: bool = False


class AwaitingKill(NamedTuple):
    """Cancelled, its leader ended but members of its group still run: its end waits for the
    SIGKILL step."""

    end: DeferredEnd


AttemptState = Unrecorded | Watching | Doomed | Exited | AwaitingKill


class RunningAttempt:
    """What the service holds in memory for one Attempt whose process it watches: who it is, how
    it is watched, and its ``state`` (one of the types above; the properties below read it)."""

    __slots__ = ("attempt_id", "run_id", "identity", "started_here", "pidfd", "grant", "log_path", "note", "state")

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
        #: The Attempt's log (its status file is beside it); None when it has none recorded.
        self.log_path = log_path
        #: Added to the reason of its end (``"gap"``: it ended while no service watched it).
        self.note: str | None = None
        self.state: AttemptState = Watching()

    # Read-only views of the state, for the parts' and the service's questions.

    @property
    def record_by(self) -> float | None:
        """When an unrecorded identity must be given up (monotonic); None once recorded."""
        return self.state.record_by if isinstance(self.state, Unrecorded) else None

    @property
    def record_error(self) -> str | None:
        return self.state.error if isinstance(self.state, Unrecorded) else None

    @property
    def failure(self) -> str | None:
        """Why the process was killed (its identity could not be recorded), if it was."""
        return self.state.failure if isinstance(self.state, (Doomed, Exited)) else None

    @property
    def deferred(self) -> DeferredEnd | None:
        """Its end, held until its SIGKILL step is done."""
        return self.state.end if isinstance(self.state, AwaitingKill) else None

    @property
    def exited_since(self) -> float | None:
        """When its leader was seen gone (monotonic), while its end is still to be read."""
        return self.state.since if isinstance(self.state, Exited) else None

    @property
    def unrecorded(self) -> bool:
        """Whether its identity is still to be recorded (running or already exited)."""
        return isinstance(self.state, Unrecorded) or (isinstance(self.state, Exited) and self.state.unrecorded)

    # Transitions: each names the event; states not listed stay as they are.

    def await_record(self, record_by: float, error: str | None) -> None:
        """Recording its identity failed retryably: by ``record_by`` it must succeed."""
        self.state = Unrecorded(record_by, error)

    def recorded(self) -> None:
        """Its identity is durable now."""
        if isinstance(self.state, Unrecorded):
            self.state = Watching()
        elif isinstance(self.state, Exited):
            self.state = self.state._replace(unrecorded=False)

    def doom(self, failure: str) -> None:
        """Its identity will never be recorded (it was, or is being, SIGKILLed)."""
        if isinstance(self.state, Exited):
            self.state = Exited(self.state.since, failure)
        elif not isinstance(self.state, AwaitingKill):
            self.state = Doomed(failure)

    def exited(self, now: float) -> None:
        """Its leader was seen gone."""
        if isinstance(self.state, Unrecorded):
            self.state = Exited(now, unrecorded=True)
        elif isinstance(self.state, Doomed):
            self.state = Exited(now, self.state.failure)
        elif isinstance(self.state, Watching):
            self.state = Exited(now)

    def defer(self, end: DeferredEnd) -> None:
        """Its end waits for the SIGKILL step."""
        self.state = AwaitingKill(end)


class Watched(Mapping[str, RunningAttempt]):
    """The Attempts this service watches, by id. Every part of the supervisor and the service
    read it; only ``exits`` changes it (a watch begins, an end is recorded, watching stops)."""

    __slots__ = ("_by_id",)

    def __init__(self) -> None:
        self._by_id: dict[str, RunningAttempt] = {}

    def __getitem__(self, attempt_id: str) -> RunningAttempt:
        return self._by_id[attempt_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, attempt_id: object) -> bool:
        return attempt_id in self._by_id

    def values(self) -> ValuesView[RunningAttempt]:
        return self._by_id.values()

    def add(self, running: RunningAttempt) -> None:
        self._by_id[running.attempt_id] = running

    def discard(self, attempt_id: str) -> None:
        self._by_id.pop(attempt_id, None)

    def clear(self) -> None:
        self._by_id.clear()
