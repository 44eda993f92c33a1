"""CancellationDispatch: the repository's claim + record_result cycle against a raw apsw anchor.

One cycle is what the dispatcher does for one cancel request: claim a fresh dispatch (creating its
row and taking the lease) and record ``termination_requested`` under that lease. Both cases do the
same durable work, two ``BEGIN IMMEDIATE ... COMMIT`` transactions on a file in WAL mode with
``synchronous=FULL`` (two WAL syncs per cycle):

- (a) anchor: the same SQL shape written by hand on the apsw connection, with precomputed values:
  claim tx = read run, read attempt, read dispatch, insert dispatch;
  record tx = read run version, read dispatch, update dispatch (version CAS), update run (CAS),
  insert event.
- (b) repository: ``LocalCancellationDispatchRepository.claim`` + ``record_result`` with commands
  built per cycle, so command validation, token hashing, invariant checks and result building
  are all inside the measured time.

The ratio (b)/(a) is the share of the anchor's rate the repository keeps (target >= 0.8). A second,
informative pair runs with ``synchronous=OFF`` to show the Python work alone, without the syncs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import apsw
from common import Sample, alternate, paired_ratio, print_anchor_comparison, timed_cycles

from edge_runtime.contract.cancellation_dispatch import ClaimCommand, RecordResultCommand
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import SystemClock
from edge_runtime.local.database import LocalDatabase, open_database

REQUESTED_AT_MS = 1_000
LEASE_MS = 30_000
OWNER = "bench-worker"
TOKEN = "bench-lease-token-0123456789"
TARGET = 0.8

_ANCHOR_DIGEST = "sha256:" + hashlib.sha256(b"qinglong.cancellation-dispatch-lease.v1\x00" + TOKEN.encode()).hexdigest()

# The anchor's statements: the same shape the repository issues.
_SELECT_RUN = "SELECT execution_owner, status, cancel_requested_at_ms FROM runs WHERE id = ?"
_SELECT_ATTEMPT = "SELECT run_id, status FROM run_attempts WHERE id = ?"
_SELECT_DISPATCH = (
    "SELECT run_id, attempt_id, status, version, dispatch_count, next_attempt_at_ms, lease_owner, lease_token, "
    "lease_expires_at_ms, last_result, last_dispatched_at_ms, created_at_ms, updated_at_ms "
    "FROM run_cancellation_dispatches WHERE run_id = ?"
)
_INSERT_DISPATCH = (
    "INSERT INTO run_cancellation_dispatches (run_id, attempt_id, status, version, dispatch_count, "
    "next_attempt_at_ms, lease_owner, lease_token, lease_expires_at_ms, last_result, last_dispatched_at_ms, "
    "created_at_ms, updated_at_ms) VALUES (?, ?, 'leased', 1, 1, NULL, ?, ?, ?, NULL, NULL, ?, ?)"
)
_SELECT_RUN_VERSION = "SELECT version, event_sequence FROM runs WHERE id = ?"
_UPDATE_DISPATCH = (
    "UPDATE run_cancellation_dispatches SET status = ?, version = ?, dispatch_count = ?, next_attempt_at_ms = ?, "
    "lease_owner = ?, lease_token = ?, lease_expires_at_ms = ?, last_result = ?, last_dispatched_at_ms = ?, "
    "updated_at_ms = ? WHERE run_id = ? AND version = ?"
)
_UPDATE_RUN = (
    "UPDATE runs SET version = version + 1, event_sequence = event_sequence + 1, updated_at_ms = ? "
    "WHERE id = ? AND version = ? AND event_sequence = ?"
)
_INSERT_EVENT = (
    "INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, attempt_id, payload, "
    "created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _seed(db: LocalDatabase, count: int) -> None:
    """``count`` cancel-requested Runs, each with one running Attempt, in one transaction."""
    connection = db.connection
    with db.write():
        for index in range(count):
            connection.execute(
                "INSERT INTO runs (id, execution_owner, status, version, event_sequence, cancel_requested_at_ms, "
                "created_at_ms) VALUES (?, 'runtime', 'running', 0, 0, ?, 1)",
                (f"run-{index}", REQUESTED_AT_MS),
            )
            connection.execute(
                "INSERT INTO run_attempts (id, run_id, attempt, status, created_at_ms) VALUES (?, ?, 1, 'running', 1)",
                (f"att-{index}", f"run-{index}"),
            )


def _anchor_cycle(connection: apsw.Connection, clock: SystemClock) -> Callable[[int], None]:
    execute = connection.execute
    changes = connection.changes

    def cycle(index: int) -> None:
        run_id, attempt_id = f"run-{index}", f"att-{index}"
        # claim-shaped transaction
        execute("BEGIN IMMEDIATE")
        try:
            now = clock.now_ms()
            run = execute(_SELECT_RUN, (run_id,)).fetchone()
            attempt = execute(_SELECT_ATTEMPT, (attempt_id,)).fetchone()
            if run[2] != REQUESTED_AT_MS or attempt[0] != run_id:
                raise AssertionError("anchor: not eligible")
            if execute(_SELECT_DISPATCH, (run_id,)).fetchone() is not None:
                raise AssertionError("anchor: dispatch exists")
            execute(_INSERT_DISPATCH, (run_id, attempt_id, OWNER, _ANCHOR_DIGEST, now + LEASE_MS, now, now))
            execute("COMMIT")
        except BaseException:
            execute("ROLLBACK")
            raise
        # record-shaped transaction
        execute("BEGIN IMMEDIATE")
        try:
            now = clock.now_ms()
            version, sequence = execute(_SELECT_RUN_VERSION, (run_id,)).fetchone()
            row = execute(_SELECT_DISPATCH, (run_id,)).fetchone()
            if row[3] != 1 or row[7] != _ANCHOR_DIGEST:
                raise AssertionError("anchor: fence")
            execute(_UPDATE_DISPATCH, ("dispatched", 2, 1, None, None, None, None, "termination_requested", now, now,
                                       run_id, 1))
            if changes() != 1:
                raise AssertionError("anchor: dispatch CAS")
            execute(_UPDATE_RUN, (now, run_id, version, sequence))
            if changes() != 1:
                raise AssertionError("anchor: run CAS")
            execute(_INSERT_EVENT, (
                f"evt-{index}", run_id, sequence + 1, "run.cancel_dispatched", f"cancel-dispatch:{attempt_id}:1",
                "worker", OWNER, attempt_id,
                f'{{"attempt_id":"{attempt_id}","dispatch_count":1,"result":"termination_requested"}}', now,
            ))
            execute("COMMIT")
        except BaseException:
            execute("ROLLBACK")
            raise

    return cycle


def _repository_cycle(repo: LocalCancellationDispatchRepository) -> Callable[[int], None]:
    def cycle(index: int) -> None:
        run_id, attempt_id = f"run-{index}", f"att-{index}"
        outcome = repo.claim(
            ClaimCommand(run_id=run_id, attempt_id=attempt_id, requested_at_ms=REQUESTED_AT_MS, owner=OWNER,
                         lease_token=TOKEN, lease_duration_ms=LEASE_MS)
        )
        if outcome.status != "claimed":
            raise AssertionError(f"repository: claim saw {outcome.status}")
        repo.record_result(
            RecordResultCommand(run_id=run_id, attempt_id=attempt_id, owner=OWNER, lease_token=TOKEN,
                                expected_version=outcome.dispatch.version, result="termination_requested",
                                event_id=f"evt-{index}")
        )

    return cycle


def _pair(workdir: Path, sync: str, cycles: int, repetitions: int, warmup: int) -> tuple[dict, float]:
    total = cycles * (repetitions + warmup)
    databases = {}
    cases = {}
    for name in ("anchor", "repository"):
        db = open_database(workdir / f"{name}-{sync.lower()}.db")
        if sync != "FULL":
            db.connection.execute(f"PRAGMA synchronous = {sync}")
        _seed(db, total)
        databases[name] = db
    anchor = _anchor_cycle(databases["anchor"].connection, SystemClock())
    repository = _repository_cycle(LocalCancellationDispatchRepository(databases["repository"]))

    def runner(cycle: Callable[[int], None]) -> Callable[[int], Sample]:
        # Repetition r (warm-ups are negative) uses its own block of fresh Runs.
        return lambda repetition: timed_cycles(cycle, cycles, start=(repetition + warmup) * cycles)

    cases = {f"(a) raw apsw anchor, synchronous={sync}": runner(anchor),
             f"(b) repository, synchronous={sync}": runner(repository)}
    try:
        series = alternate(cases, repetitions, warmup=warmup)
    finally:
        for db in databases.values():
            db.close()
    anchor_series, repository_series = series.values()
    return series, paired_ratio(repository_series, anchor_series)


def run(workdir: Path, quick: bool) -> None:
    # Many short repetitions, alternated, so that a burst of load elsewhere on the machine hits a
    # pair of neighbouring repetitions rather than one whole case.
    cycles, repetitions = (60, 3) if quick else (200, 15)
    full, full_ratio = _pair(workdir, "FULL", cycles, repetitions, warmup=1)
    off, off_ratio = _pair(workdir, "OFF", cycles * 4, repetitions, warmup=1)
    print_anchor_comparison(
        'claim + record_result cycles (2 transactions per cycle)',
        full, full_ratio, off, off_ratio, cycles=cycles, repetitions=repetitions, target=TARGET,
    )
