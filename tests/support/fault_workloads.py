"""Repository workloads run through the recording VFS, and the power-cut check of any cut point.

A workload is a sequence of repository operations; after each one returns (is *acknowledged*) the
driver notes the VFS log position and a full dump of the database. A cut at log position ``p``
must then reopen to exactly the state after the last acknowledged operation, or after the one
that was in flight at the cut (its commit may have reached the disk before the API returned).
Anything older means an acknowledged operation was lost; anything else is a state that never
existed, an invariant violation.
"""

from __future__ import annotations

import random
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from edge_runtime.contract.cancellation_dispatch import (
    RETRYABLE_RESULTS,
    CancellationDispatchError,
    ClaimCommand,
    ClaimedOutcome,
    DispatchResult,
    LeasedOutcome,
    NotDueOutcome,
    RecordResultCommand,
)
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.run_lease import ReleaseReason
from edge_runtime.contract.runs import CancelRunCommand, ProcessIdentity, RunError, SubmitRunCommand
from edge_runtime.contract.worker_lease import WorkerLeaseError
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.health import check_health
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.worker_lease_rows import LEASE_COLUMNS, SESSION_COLUMNS, lease_from_row, session_from_row
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.worker import WorkerSession

from tests.support.unfenced_attempts import take_queued_run
from tests.support.vfs_shim import RecordingVFS

T0_MS = 1_700_000_000_000
DB_NAME = "edge-runtime.db"

Dump = dict[str, list[tuple[Any, ...]]]
#: Called after each operation returns; ``volatile_commit=True`` for one committed without a sync
#: (``record_running``), which a cut may lose until a later synced commit makes it durable.
Ack = Callable[..., None]


def dump(db: LocalDatabase) -> Dump:
    """Every row of every table, order-independent: the state two databases are compared by."""
    connection = db.connection
    tables = [
        row[0]
        for row in connection.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
    ]
    return {table: sorted(connection.execute(f"SELECT * FROM {table}").fetchall(), key=repr) for table in tables}


def stored_problems(db: LocalDatabase) -> list[str]:
    """Integrity, health and every stored record's contract invariants (empty when all hold)."""
    problems = []
    integrity = [row[0] for row in db.connection.execute("PRAGMA integrity_check")]
    if integrity != ["ok"]:
        problems.append(f"integrity_check: {integrity[:3]}")
    report = check_health(db)
    problems += [f"{check.name}: {check.detail}" for check in report.checks if not check.ok]
    runs = LocalRunRepository(db)
    try:
        for (run_id,) in db.connection.execute("SELECT id FROM runs").fetchall():
            runs.detail(run_id)  # projects (and so checks) the Run, its Attempts and its events
    except RunError as exc:
        problems.append(f"runs: {exc}")
    try:
        for row in db.connection.execute(f"SELECT {SESSION_COLUMNS} FROM worker_sessions").fetchall():
            session_from_row(row)
        for row in db.connection.execute(f"SELECT {LEASE_COLUMNS} FROM run_dispatch_leases").fetchall():
            lease_from_row(row)
    except WorkerLeaseError as exc:
        problems.append(f"worker leases: {exc}")
    return problems


# --------------------------------------------------------------------------- workloads


@dataclass
class WorkloadContext:
    db: LocalDatabase
    clock: ManualClock
    rng: random.Random
    size: int
    ack: Ack
    tokens: set[str]

    def token(self) -> str:
        token = f"raw-lease-token-{self.rng.getrandbits(64):016x}-{len(self.tokens)}"
        self.tokens.add(token)
        return token


def _seed_runs(ctx: WorkloadContext, count: int, prefix: str) -> list[tuple[str, str]]:
    pairs = [(f"{prefix}-run-{i}", f"{prefix}-att-{i}") for i in range(count)]
    with ctx.db.write() as now:
        for run_id, attempt_id in pairs:
            ctx.db.connection.execute(
                "INSERT INTO runs (id, execution_owner, status, version, event_sequence, cancel_requested_at_ms, "
                "created_at_ms) VALUES (?, 'runtime', 'running', 0, 0, ?, ?)",
                (run_id, now, now),
            )
            ctx.db.connection.execute(
                "INSERT INTO run_attempts (id, run_id, attempt, status, executor_type, created_at_ms) "
                "VALUES (?, ?, 1, 'running', 'local_process', ?)",
                (attempt_id, run_id, now),
            )
    ctx.ack()
    return pairs


@dataclass
class _Lease:
    owner: str
    token: str
    version: int


@dataclass
class _DispatchDriver:
    """Claims and records results for cancel-requested Runs, like several racing dispatchers."""

    ctx: WorkloadContext
    repo: LocalCancellationDispatchRepository
    leases: dict[str, _Lease] = field(default_factory=dict)
    stale: dict[str, _Lease] = field(default_factory=dict)
    events: int = 0

    def step(self, run_id: str, attempt_id: str, requested_at_ms: int) -> None:
        ctx = self.ctx
        lease = self.leases.get(run_id)
        stale = self.stale.pop(run_id, None)
        try:
            if stale is not None:
                # A dispatcher whose lease was taken over reports late: the fence must reject it.
                self._record(run_id, attempt_id, stale)
            elif lease is None:
                owner = ctx.rng.choice(("worker-a", "worker-b"))
                token = ctx.token()
                outcome = self.repo.claim(
                    ClaimCommand(run_id, attempt_id, requested_at_ms, owner, token, ctx.rng.choice((1_000, 30_000)))
                )
                if isinstance(outcome, ClaimedOutcome):
                    self.leases[run_id] = _Lease(owner, token, outcome.dispatch.version)
                elif isinstance(outcome, (LeasedOutcome, NotDueOutcome)):
                    ctx.clock.advance(ctx.rng.randint(1_000, 40_000))
            elif ctx.rng.random() < 0.2:
                # Let the lease expire and have someone else take it over.
                ctx.clock.advance(31_000)
                self.stale[run_id] = self.leases.pop(run_id)
            else:
                self._record(run_id, attempt_id, self.leases.pop(run_id))
        except CancellationDispatchError:
            pass  # fence rejections and not-eligible states are expected outcomes, nothing written
        ctx.ack()
        ctx.clock.advance(ctx.rng.randint(0, 3_000))

    def _record(self, run_id: str, attempt_id: str, lease: _Lease) -> None:
        ctx = self.ctx
        result = ctx.rng.choice(list(DispatchResult))
        delay = ctx.rng.randint(1, 5_000) if result in RETRYABLE_RESULTS else None
        self.events += 1
        kwargs = {} if delay is None else {"retry_delay_ms": delay}
        self.repo.record_result(
            RecordResultCommand(
                run_id, attempt_id, lease.owner, lease.token, lease.version, result,
                f"evt-{ctx.rng.getrandbits(48):012x}-{self.events}", **kwargs,
            )
        )


def dispatch_workload(ctx: WorkloadContext) -> None:
    """CancellationDispatch claim / record_result cycles on seeded cancel-requested Runs."""
    pairs = _seed_runs(ctx, max(2, ctx.size // 4), "d")
    requested = {run_id: at for run_id, at in ctx.db.connection.execute("SELECT id, cancel_requested_at_ms FROM runs")}
    driver = _DispatchDriver(ctx, LocalCancellationDispatchRepository(ctx.db))
    for _ in range(ctx.size):
        run_id, attempt_id = ctx.rng.choice(pairs)
        driver.step(run_id, attempt_id, requested[run_id])


def runs_workload(ctx: WorkloadContext) -> None:
    """Runs submitted, started, cancelled (before and after an Attempt), dispatched and finished."""
    runs = LocalRunRepository(ctx.db)
    driver = _DispatchDriver(ctx, LocalCancellationDispatchRepository(ctx.db))
    queued: list[str] = []
    claimed: list[tuple[str, str]] = []
    cancelling: list[tuple[str, str, int]] = []
    for step in range(ctx.size):
        choice = ctx.rng.random()
        try:
            if choice < 0.3 or not (queued or claimed or cancelling):
                argv = ["/bin/sh", "-c", f"echo step {step}"]
                queued.append(runs.submit(SubmitRunCommand(argv=argv, name=f"job-{step}")).id)
            elif choice < 0.45 and queued:
                run_id = queued.pop(ctx.rng.randrange(len(queued)))
                if ctx.rng.random() < 0.3:
                    runs.request_cancel(CancelRunCommand(run_id=run_id, reason="user"))
                else:
                    attempt = take_queued_run(ctx.db, run_id, actor_id="service")
                    if attempt is not None:
                        claimed.append((run_id, attempt.id))
            elif choice < 0.6 and claimed:
                run_id, attempt_id = claimed.pop(ctx.rng.randrange(len(claimed)))
                if ctx.rng.random() < 0.5:
                    run = runs.request_cancel(CancelRunCommand(run_id=run_id))
                    cancelling.append((run_id, attempt_id, run.cancel_requested_at_ms))
                else:
                    runs.finish_attempt(attempt_id, ctx.rng.choice(("succeeded", "failed")), actor_id="service")
            elif cancelling:
                run_id, attempt_id, requested_at = ctx.rng.choice(cancelling)
                if ctx.rng.random() < 0.15:
                    cancelling.remove((run_id, attempt_id, requested_at))
                    runs.finish_attempt(attempt_id, "cancelled", actor_id="service", exit_code=-15)
                else:
                    driver.step(run_id, attempt_id, requested_at)
                    continue  # the driver acknowledged its own step
        except RunError:
            pass  # state conflicts are expected outcomes with nothing written
        ctx.ack()
        ctx.clock.advance(ctx.rng.randint(0, 2_000))


def worker_lease_workload(ctx: WorkloadContext) -> None:
    """Worker sessions and Run Leases as the service drives them: register, claim, start barrier,
    running, renew, complete or release, heartbeats, a restart (new session), and offline."""
    runs = LocalRunRepository(ctx.db)
    identity = ProcessIdentity(pid=4242, pgid=4242, start_ticks=1, boot_id="fault-boot")

    def drawn_token(nbytes: int | None = None) -> str:
        # Every Run Lease token the service-side code draws, registered for the secrets scan.
        return ctx.token()

    with mock.patch.object(secrets, "token_urlsafe", drawn_token):
        worker = _register(ctx)
        for step in range(ctx.size):
            try:
                if step % 5 == 4:
                    worker.heartbeat(2)
                elif step == ctx.size // 2:
                    worker = _register(ctx)  # a restart: generation + 1 over the earlier session
                else:
                    _lease_cycle(ctx, runs, worker, identity)
                    continue
            except (EdgeRuntimeError, RunError):
                pass  # fence rejections and refusals are expected outcomes with nothing written
            ctx.ack()
            ctx.clock.advance(ctx.rng.randint(0, 1_500))
        worker.offline()
        ctx.ack()


def _register(ctx: WorkloadContext) -> WorkerSession:
    worker = WorkerSession(LocalWorkerLeaseRepository(ctx.db), worker_id="fault-worker", slots=2, session_lease_ms=30_000, run_lease_ms=60_000)
    worker.register()
    ctx.ack()
    return worker


def _lease_cycle(ctx: WorkloadContext, runs: LocalRunRepository, worker: WorkerSession, identity: ProcessIdentity) -> None:
    """One Run through the lease authority; each repository call is acknowledged on its own."""
    def step(action: Callable[[], Any], *, volatile: bool = False) -> Any:
        try:
            return action()
        except (EdgeRuntimeError, RunError):
            return None
        finally:
            ctx.ack(volatile_commit=volatile)
            ctx.clock.advance(ctx.rng.randint(0, 1_000))

    run = step(lambda: runs.submit(SubmitRunCommand(argv=["/bin/true"])))
    attempt = run and step(lambda: take_queued_run(ctx.db, run.id, actor_id=worker.owner))
    grant = attempt and step(lambda: worker.claim(run.id, attempt.id))
    if grant is None:
        return
    if ctx.rng.random() < 0.25:
        step(lambda: worker.release(grant, ReleaseReason.DECLINED))
        return
    step(lambda: worker.begin_start(grant))
    step(lambda: runs.record_running(attempt.id, identity, log_path="/dev/null", actor_id=worker.owner), volatile=True)
    if ctx.rng.random() < 0.5:
        step(lambda: worker.renew(grant))
    step(lambda: runs.finish_attempt(attempt.id, ctx.rng.choice(("succeeded", "failed")), actor_id=worker.owner))
    step(lambda: worker.complete(attempt.id))


WORKLOADS: dict[str, Callable[[WorkloadContext], None]] = {
    "dispatch": dispatch_workload,
    "runs": runs_workload,
    "worker_lease": worker_lease_workload,
}


# --------------------------------------------------------------------------- recording and cuts


@dataclass
class Recording:
    vfs: RecordingVFS
    directory: Path
    acks: list[int]
    snapshots: list[Dump]
    tokens: set[str]
    #: Indexes of the acks whose operation committed without a sync (see ``Ack``).
    volatile: set[int] = field(default_factory=set)

    @property
    def db_path(self) -> Path:
        return self.directory / DB_NAME


def record(
    name: str,
    directory: Path,
    rng: random.Random,
    size: int,
    *,
    checkpoint_pages: int | None = None,
    pragmas: tuple[str, ...] = (),
) -> Recording:
    """Run workload ``name`` on a fresh database through a new recording VFS.

    Args:
        checkpoint_pages: a small ``wal_autocheckpoint`` makes checkpoints (and their main-file
            writes and syncs) part of the run, so cuts land inside them too.
        pragmas: extra statements run after the open (the detector's self-test weakens
            durability with them to prove a lost acknowledgement is caught).
    """
    directory.mkdir(parents=True, exist_ok=True)
    vfs = RecordingVFS()
    clock = ManualClock(T0_MS)
    acks: list[int] = []
    snapshots: list[Dump] = []
    tokens: set[str] = set()
    volatile: set[int] = set()
    db = open_database(directory / DB_NAME, clock=clock, vfs=vfs.name)
    try:
        if checkpoint_pages is not None:
            db.connection.execute(f"PRAGMA wal_autocheckpoint = {int(checkpoint_pages)}")
        for pragma in pragmas:
            db.connection.execute(pragma)

        def ack(*, volatile_commit: bool = False) -> None:
            if volatile_commit:
                volatile.add(len(acks))
            acks.append(vfs.position())
            snapshots.append(dump(db))

        ack()  # the open (with its migrations) is operation 0
        WORKLOADS[name](WorkloadContext(db, clock, rng, size, ack, tokens))
    finally:
        db.close()
        vfs.unregister()
    # Closing checkpoints and removes the WAL: cuts after the last ack see that too.
    acks.append(vfs.position())
    snapshots.append(snapshots[-1])
    return Recording(vfs, directory, acks, snapshots, tokens, volatile)


@dataclass
class CutResult:
    position: int
    torn: bool
    lost: int
    problems: list[str]


def check_cut(recording: Recording, position: int, workdir: Path, rng: random.Random | None = None) -> CutResult:
    """Materialise the power-cut state at ``position``, reopen it with plain apsw and judge it."""
    if workdir.exists():
        shutil.rmtree(workdir)
    copies = recording.vfs.materialise(position, workdir, rng)
    path = workdir / DB_NAME
    acked = sum(1 for at in recording.acks if at <= position)
    # The last durable acknowledgement, or any later one (unsynced commits that reached the disk
    # anyway, and the operation in flight at the cut).
    durable = max(acked - 1, 0)
    while durable > 0 and durable in recording.volatile:
        durable -= 1
    allowed = set(range(durable, min(acked, len(recording.snapshots) - 1) + 1))
    result = CutResult(position, rng is not None, 0, [])
    try:
        db = open_database(path, clock=ManualClock(T0_MS))
    except Exception as exc:  # noqa: BLE001 - any failure to reopen is the finding itself
        result.problems.append(f"reopen failed: {type(exc).__name__}: {exc} (files: {sorted(map(str, copies))})")
        return result
    try:
        result.problems += stored_problems(db)
        state = dump(db)
    finally:
        db.close()
    if any(state == recording.snapshots[index] for index in allowed):
        return result
    older = [index for index in range(min(allowed)) if recording.snapshots[index] == state]
    if older:
        result.lost = min(allowed) - max(older)
        result.problems.append(
            f"{result.lost} acknowledged operation(s) lost: state equals the one after operation {max(older)}, "
            f"but {acked} were acknowledged"
        )
    else:
        result.problems.append(f"state after the cut matches no state the workload ever acknowledged (acked={acked})")
    return result
