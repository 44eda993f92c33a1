"""The ports of the device service: what it needs from storage, time and wake-up.

The service (``edge_runtime.service``) talks only to these Protocols; an adapter implements them
(``edge_runtime.local`` on SQLite, ``cluster_postgres`` on PostgreSQL) and a composition root
(``edge_runtime.cli.serve``, ``cluster_postgres.serve``; for the user commands
``edge_runtime.cli.common.LOCAL_STORES``, ``cluster_postgres.commands``) picks one and passes it
in. Time belongs to the store: every ``*_at_ms`` a port returns is in the store's time, and the
service compares it only with ``Store.now_ms()``
(the device's guarded clock on Local, database time on PostgreSQL). The wake-up belongs to the store
too: a datagram socket that the CLI pokes on Local, ``LISTEN/NOTIFY`` on PostgreSQL.

The Run/Attempt operations are described in ``docs/runs.md``. The user commands (``submit``,
``cancel``, ``show``, ``list``, ``events``, ``logs``, ``dispatch``, ``schedule``) are written once against these
ports too: the edge CLI opens the Local store for them, ``edge-runtime-cluster`` a PostgreSQL one;
the operations they share with the panel (``edge_runtime.operations``) need only ``UserStore``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from edge_runtime.contract.cancellation_dispatch import (
    ClaimCommand,
    ClaimOutcome,
    DispatchRecord,
    RecordResultCommand,
    RecordResultOutcome,
)
from edge_runtime.contract.env_entries import EnvironmentStore
from edge_runtime.contract.errors import StoredRowError
from edge_runtime.contract.notifications import NotificationStore
from edge_runtime.contract.schedules import ScheduleAdmin
from edge_runtime.contract.subscriptions import SubscriptionStore
from edge_runtime.contract.run_lease import (
    BeginStartCommand,
    ClaimRunCommand,
    ClaimRunOutcome,
    CompleteRunLeaseCommand,
    LeaseTransitionOutcome,
    ReleaseRunLeaseCommand,
    RenewRunLeaseCommand,
    RunLeaseRecord,
    StartRunCommand,
    StartRunOutcome,
)
from edge_runtime.contract.run_events import RunEvent
from edge_runtime.contract.runs import (
    AttemptRecord,
    AttemptStatus,
    CancelRunCommand,
    CancellationCandidate,
    KillCandidate,
    RunDetail,
    RunRecord,
    RunStatus,
    StoredAttemptLog,
    SubmitRunCommand,
)
from edge_runtime.contract.worker_session import (
    HeartbeatCommand,
    OfflineCommand,
    RegisterOutcome,
    RegisterWorkerCommand,
    WorkerSessionRecord,
)


@runtime_checkable
class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch, a non-negative safe integer."""
        ...


class RunStore(Protocol):
    """Runs and Attempts: the operations the service calls (``docs/runs.md``)."""

    def get(self, run_id: str) -> RunRecord: ...
    def find_run_ids(self, form: str, limit: int) -> list[str]:
        """Ids of the Runs whose id begins or ends with ``form`` (a short id form), at most ``limit``."""
        ...
    def get_attempt(self, attempt_id: str) -> AttemptRecord | None: ...
    def queued_run_ids(self, limit: int) -> list[str]: ...
    def release_due_retries(self, *, actor_id: str) -> int:
        """Queue again the ``retry_wait`` Runs whose wait is over; how many (no write when none)."""
        ...
    def active_attempts(self) -> list[AttemptRecord]: ...
    def record_running(self, attempt_id: str, identity: Any, *, log_path: str, actor_id: str) -> AttemptRecord: ...
    def finish_attempt(self, attempt_id: str, status: AttemptStatus, *, actor_id: str, exit_code: int | None = None,
                       reason: str | None = None) -> AttemptRecord: ...
    def cancellation_candidates(self, limit: int = 32) -> list[CancellationCandidate]: ...
    def record_termination_requested(self, attempt_id: str, *, grace_ms: int) -> AttemptRecord: ...
    def record_escaped_processes(self, attempt_id: str, pids: list[int], *, actor_id: str) -> None: ...
    def record_fenced_end(self, attempt_id: str, *, exit_code: int | None, reason: str | None,
                          actor_id: str) -> None: ...
    def lost_with_process(self, worker_id: str, *, boot_id: str, limit: int) -> list[AttemptRecord]:
        """This worker's Attempts that were ended ``lost`` (elsewhere: another session's sweep)
        with a process identity recorded on ``boot_id`` and no ``run.fenced_end`` event yet: the
        processes a worker restarted with the same id must look for and stop. Newest first."""
        ...
    def kill_candidates(self) -> list[KillCandidate]: ...
    def record_killed(self, attempt_id: str, *, actor_id: str, outcome: str = "killed") -> AttemptRecord: ...
    def next_due_at_ms(self) -> int | None: ...
    # The user commands' reads and requests (docs/runs.md, "Reads for the CLI").
    def attempts(self, run_id: str) -> list[AttemptRecord]: ...
    def detail(self, run_id: str) -> RunDetail: ...
    def list_runs(self, *, limit: int = 50, status: RunStatus | None = None, name: str | None = None,
                  schedule_id: str | None = None) -> list[RunRecord]: ...
    def events(self, run_id: str) -> list[RunEvent]: ...
    def submit(self, cmd: SubmitRunCommand, *, actor_id: str = "cli") -> RunRecord: ...
    def submit_batch(self, cmds: list[SubmitRunCommand], *, actor_id: str = "cli") -> list[str]:
        """Queue every command as a new Run in one transaction (all or none; at most
        ``MAX_BATCH_RUNS``); the new Runs' ids, in the order of ``cmds``."""
        ...
    def request_cancel(self, cmd: CancelRunCommand, *, actor_id: str = "cli") -> RunRecord: ...
    def set_aside(self, run_id: str, error: StoredRowError, *, actor_id: str) -> bool:
        """End a Run waiting to start (``WAITING_TO_START_STATUSES``) that ``error`` (a broken
        stored row) keeps from starting: ``failed``, with the error's code and reason recorded;
        False when it no longer waits."""
        ...


class CancellationDispatchStore(Protocol):
    """The durable, fenced, leased CancellationDispatch (spec §6)."""

    def claim(self, cmd: ClaimCommand) -> ClaimOutcome: ...
    def record_result(self, cmd: RecordResultCommand) -> RecordResultOutcome: ...
    # The user commands' (``dispatch show|rearm``).
    def find_by_run_id(self, run_id: str) -> DispatchRecord | None: ...
    def rearm(self, run_id: str, expected_version: int, *, event_id: str, actor_id: str) -> RecordResultOutcome: ...


class WorkerLeaseStore(Protocol):
    """The two authorities of spec §5: the Worker Session and the Run Lease, and the fenced start."""

    def register(self, cmd: RegisterWorkerCommand) -> RegisterOutcome: ...
    def heartbeat(self, cmd: HeartbeatCommand) -> WorkerSessionRecord: ...
    def offline(self, cmd: OfflineCommand) -> WorkerSessionRecord: ...
    def claim_run(self, cmd: ClaimRunCommand) -> ClaimRunOutcome: ...
    def start_run(self, cmd: StartRunCommand) -> StartRunOutcome: ...
    def abandon_start(self, lease: RunLeaseRecord, *, reason: str, actor_id: str) -> RunStatus: ...
    def sweep_orphans(self, cmd: Any, *, abandon_after_ms: int) -> list[tuple[str, RunStatus]]: ...
    def free_slots(self, worker_id: str, session_generation: int) -> int: ...
    def begin_start(self, cmd: BeginStartCommand) -> LeaseTransitionOutcome: ...
    def release(self, cmd: ReleaseRunLeaseCommand) -> LeaseTransitionOutcome: ...
    def renew(self, cmd: RenewRunLeaseCommand) -> RunLeaseRecord: ...
    def complete(self, cmd: CompleteRunLeaseCommand) -> LeaseTransitionOutcome: ...
    def find_session(self, worker_id: str) -> WorkerSessionRecord | None: ...
    def find_lease(self, attempt_id: str) -> RunLeaseRecord | None: ...
    def list_active_leases(self, worker_id: str) -> list[RunLeaseRecord]: ...


class AttemptLogStore(Protocol):
    """Copies of Attempt logs kept in the store, for ``logs`` run on another host than the worker's.

    An Attempt's log is a file on the host that ran it. Where workers share a store across hosts
    (PostgreSQL), the service hands the tail of the log (``STORED_LOG_MAX_BYTES`` at most) to
    ``keep`` once the Attempt has ended; the Local store has none (``Store.attempt_logs`` is None:
    the CLI runs on the device and reads the file).
    """

    def keep(self, attempt_id: str, content: bytes, *, size_bytes: int, worker_id: str) -> bool:
        """Store the copy, in one short transaction; the first copy stands (a repeat stores nothing
        and returns False). ``size_bytes`` is the whole log's size, ``content`` at most its last
        ``STORED_LOG_MAX_BYTES``."""
        ...

    def find(self, attempt_id: str) -> StoredAttemptLog | None: ...


class WakeSource(Protocol):
    """What wakes a sleeping service when another process committed work for it."""

    #: Why a preferred place for the wake-up could not be used (logged once at start).
    refused: list[str]
    #: Where the wake-up listens (for the log).
    where: str

    def fileno(self) -> int: ...
    def drain(self) -> None: ...
    def close(self) -> None: ...


class UserStore(Protocol):
    """What the user operations (``edge_runtime.operations``: the CLI's commands, the panel, the
    QingLong face) need of a store: its Runs, variables and schedules, and the wake-up after a
    change. Part of ``Store``: every store is one."""

    runs: RunStore
    #: The env entries (``env add|set|list...``; both stores keep them), or None for a store that keeps none.
    environment: EnvironmentStore | None
    #: The schedule commands' repository (``schedule add|edit|run|list|show|pause|resume|remove``).
    schedules: ScheduleAdmin
    #: Notification channels, rules and the outbox (docs/notifications.md; both stores keep them),
    #: or None for a store that keeps none: their secrets are masked in every output too.
    notifications: NotificationStore | None
    #: The subscriptions (``subscription list|run|pause|resume|remove``): the Local store's alone;
    #: a store that keeps none has none (the operations read it with ``getattr(..., None)``).
    subscriptions: SubscriptionStore | None

    def wake_workers(self) -> None:
        """After a committed change a serving worker should act on now (a submit, cancel, rearm):
        wake it (the Local store pokes the service's socket; PostgreSQL already NOTIFYs in the
        change's own transaction). Best effort: an error here means only that work waits for the
        next poll, never that the change is lost."""
        ...


class Store(UserStore, Protocol):
    """One opened store: its repositories, its time and its wake-up. Closed by the caller."""

    #: What this store is, for the log (a database path; never a credential).
    where: str
    dispatches: CancellationDispatchStore
    leases: WorkerLeaseStore
    #: Copies of ended Attempts' logs, or None where the logs are only files (Local).
    attempt_logs: AttemptLogStore | None

    def now_ms(self) -> int:
        """The store's time, the only time the service compares stored ``*_at_ms`` values with."""
        ...

    def open_wake(self) -> WakeSource: ...

    def keep_time(self, *, final: bool = False) -> None:
        """Persist what the store needs to keep its time monotonic (the Local clock watermark);
        called once per tick, cheap when there is nothing to do."""
        ...

    def close(self) -> None: ...
