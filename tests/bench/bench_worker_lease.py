"""Run Lease: the repository's claim_run + renew + release cycle against a raw apsw anchor.

One cycle is what a dispatcher does with an offer it ends up declining: claim a fresh ``claimed``
Attempt for the worker's session, renew the grant once, and release it. Both cases do the same
durable work, three ``BEGIN IMMEDIATE ... COMMIT`` transactions on a file in WAL mode with
``synchronous=FULL`` (three WAL syncs per cycle):

- (a) anchor: the same SQL shape written by hand on the apsw connection, with precomputed values:
  claim tx = read session, read run, read attempt, read lease, count the session's active
  leases, insert lease, set the Attempt projection (CAS on the old one), bump the Run (CAS),
  insert event; renew tx = read session, read lease, update lease (version CAS), update the
  projection (CAS); release tx = read session, read lease, read attempt, update lease (CAS),
  clear the projection (CAS), read run, bump the Run (CAS), insert event.
- (b) repository: ``LocalWorkerLeaseRepository.claim_run`` + ``renew`` + ``release`` with commands
  built per cycle, so command validation, token hashing, record invariant checks (including the
  capabilities hash of every session read) and result building are inside the measured time.

The ratio (b)/(a) is the share of the anchor's rate the repository keeps (target >= 0.8). A second,
informative pair runs with ``synchronous=OFF`` to show the Python work alone, without the syncs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import apsw
from common import Sample, alternate, paired_ratio, print_anchor_comparison, timed_cycles

from edge_runtime.contract.run_lease import ClaimRunCommand, ReleaseRunLeaseCommand, RenewRunLeaseCommand
from edge_runtime.contract.worker_session import HeartbeatCommand, RegisterWorkerCommand
from edge_runtime.local.clock import SystemClock
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository

WORKER = "bench-worker"
SESSION = "0190c1a2-0000-7000-8000-00000000beef"
LEASE_MS = 30_000
SESSION_MS = 300_000
TOKEN = "bench-run-lease-token-0123456789"
OFFER = "bench-offer"
CAPABILITIES = {"executors": ["local_process"], "arch": "mipsel", "memory_mb": 128}
TARGET = 0.8

_DIGEST = hashlib.sha256(b"qinglong.run-lease.v1\x00" + TOKEN.encode()).hexdigest()

# The anchor's statements: the same shape the repository issues.
_SELECT_SESSION = (
    "SELECT worker_id, session_id, generation, status, version, capabilities, capabilities_hash, "
    "max_concurrent_runs, available_slots, heartbeat_at_ms, lease_expires_at_ms, created_at_ms, updated_at_ms "
    "FROM worker_sessions WHERE worker_id = ?"
)
_SELECT_RUN = "SELECT execution_owner, status, cancel_requested_at_ms, version, event_sequence FROM runs WHERE id = ?"
_SELECT_ATTEMPT = "SELECT run_id, status FROM run_attempts WHERE id = ?"
_LEASE_COLUMNS = (
    "attempt_id, run_id, worker_id, session_id, session_generation, lease_generation, version, token_digest, "
    "offer_id, status, expires_at_ms, acquired_at_ms, renewed_at_ms, started_at_ms, released_at_ms, "
    "release_reason, completed_at_ms, updated_at_ms"
)
_SELECT_LEASE = f"SELECT {_LEASE_COLUMNS} FROM run_dispatch_leases WHERE attempt_id = ?"
_COUNT_ACTIVE = (
    "SELECT count(*) FROM run_dispatch_leases "
    "WHERE worker_id = ? AND session_generation = ? AND status = 'leased' AND attempt_id <> ?"
)
_INSERT_LEASE = f"INSERT INTO run_dispatch_leases ({_LEASE_COLUMNS}) VALUES ({', '.join('?' * 18)})"
_UPDATE_LEASE = (
    "UPDATE run_dispatch_leases SET run_id = ?, worker_id = ?, session_id = ?, session_generation = ?, "
    "lease_generation = ?, version = ?, token_digest = ?, offer_id = ?, status = ?, expires_at_ms = ?, "
    "acquired_at_ms = ?, renewed_at_ms = ?, started_at_ms = ?, released_at_ms = ?, release_reason = ?, "
    "completed_at_ms = ?, updated_at_ms = ? WHERE attempt_id = ? AND version = ?"
)
_MOVE_PROJECTION = (
    "UPDATE run_attempts SET lease_worker_id = ?, lease_session_id = ?, lease_session_generation = ?, "
    "lease_generation = ?, lease_version = ?, lease_token_digest = ?, lease_offer_id = ?, lease_expires_at_ms = ?, "
    "updated_at_ms = ? WHERE id = ? AND lease_worker_id IS ? AND lease_session_id IS ? "
    "AND lease_session_generation IS ? AND lease_generation IS ? AND lease_version IS ? AND lease_token_digest IS ? "
    "AND lease_offer_id IS ? AND lease_expires_at_ms IS ?"
)
_UPDATE_RUN = (
    "UPDATE runs SET version = version + 1, event_sequence = event_sequence + 1, updated_at_ms = ? "
    "WHERE id = ? AND version = ? AND event_sequence = ?"
)
_INSERT_EVENT = (
    "INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, attempt_id, payload, "
    "created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_NONE8 = (None,) * 8


def _seed(db: LocalDatabase, count: int) -> LocalWorkerLeaseRepository:
    """One live session and ``count`` dispatching Runs, each with one ``claimed`` Attempt."""
    repo = LocalWorkerLeaseRepository(db)
    repo.register(RegisterWorkerCommand(worker_id=WORKER, session_id=SESSION, capabilities=CAPABILITIES,
                                        max_concurrent_runs=4, lease_duration_ms=SESSION_MS))
    connection = db.connection
    with db.write():
        for index in range(count):
            connection.execute(
                "INSERT INTO runs (id, execution_owner, status, version, event_sequence, created_at_ms) "
                "VALUES (?, 'runtime', 'dispatching', 0, 0, 1)",
                (f"run-{index}",),
            )
            connection.execute(
                "INSERT INTO run_attempts (id, run_id, attempt, status, created_at_ms) VALUES (?, ?, 1, 'claimed', 1)",
                (f"att-{index}", f"run-{index}"),
            )
    return repo


def _keep_session_alive(repo: LocalWorkerLeaseRepository) -> None:
    """A heartbeat between repetitions (never timed): a long run must not outlive the session lease."""
    session = repo.find_session(WORKER)
    repo.heartbeat(HeartbeatCommand(worker_id=WORKER, session_id=SESSION, generation=session.generation,
                                    expected_version=session.version, available_slots=4,
                                    lease_duration_ms=SESSION_MS))


def _transaction(execute: Callable, body: Callable[[], None]) -> None:
    execute("BEGIN IMMEDIATE")
    try:
        body()
        execute("COMMIT")
    except BaseException:
        execute("ROLLBACK")
        raise


def _anchor_cycle(connection: apsw.Connection, clock: SystemClock) -> Callable[[int], None]:
    execute = connection.execute
    changes = connection.changes

    def expect_one(what: str) -> None:
        if changes() != 1:
            raise AssertionError(f"anchor: {what} CAS")

    def cycle(index: int) -> None:
        run_id, attempt_id = f"run-{index}", f"att-{index}"
        state: dict = {}

        def claim() -> None:
            now = clock.now_ms()
            session = execute(_SELECT_SESSION, (WORKER,)).fetchone()
            if session[3] != "online" or session[10] <= now:
                raise AssertionError("anchor: session")
            generation = session[2]
            run = execute(_SELECT_RUN, (run_id,)).fetchone()
            attempt = execute(_SELECT_ATTEMPT, (attempt_id,)).fetchone()
            if run[2] is not None or attempt[1] != "claimed":
                raise AssertionError("anchor: not claimable")
            if execute(_SELECT_LEASE, (attempt_id,)).fetchone() is not None:
                raise AssertionError("anchor: lease exists")
            if execute(_COUNT_ACTIVE, (WORKER, generation, attempt_id)).fetchone()[0] >= session[8]:
                raise AssertionError("anchor: capacity")
            expires = now + LEASE_MS
            execute(_INSERT_LEASE, (attempt_id, run_id, WORKER, SESSION, generation, 1, 1, _DIGEST, OFFER, "leased",
                                    expires, now, None, None, None, None, None, now))
            projection = (WORKER, SESSION, generation, 1, 1, _DIGEST, OFFER, expires)
            execute(_MOVE_PROJECTION, (*projection, now, attempt_id, *_NONE8))
            expect_one("projection")
            execute(_UPDATE_RUN, (now, run_id, run[3], run[4]))
            expect_one("run")
            execute(_INSERT_EVENT, (
                f"c-{index}", run_id, run[4] + 1, "run.lease_claimed", f"run-lease:{attempt_id}:1:claimed", "worker",
                WORKER, attempt_id,
                f'{{"attempt_id":"{attempt_id}","worker_id":"{WORKER}","session_generation":{generation},'
                f'"lease_generation":1,"lease_version":1,"offer_id":"{OFFER}"}}', now,
            ))
            state.update(generation=generation, projection=projection, acquired=now)

        def renew() -> None:
            now = clock.now_ms()
            session = execute(_SELECT_SESSION, (WORKER,)).fetchone()
            lease = execute(_SELECT_LEASE, (attempt_id,)).fetchone()
            if session[2] != lease[4] or lease[6] != 1 or lease[7] != _DIGEST:
                raise AssertionError("anchor: fence")
            expires = now + LEASE_MS
            execute(_UPDATE_LEASE, (run_id, WORKER, SESSION, state["generation"], 1, 2, _DIGEST, OFFER, "leased",
                                    expires, state["acquired"], now, None, None, None, None, now, attempt_id, 1))
            expect_one("lease")
            projection = (*state["projection"][:4], 2, _DIGEST, OFFER, expires)
            execute(_MOVE_PROJECTION, (*projection, now, attempt_id, *state["projection"]))
            expect_one("projection")
            state.update(projection=projection, expires=expires, renewed=now)

        def release() -> None:
            now = clock.now_ms()
            session = execute(_SELECT_SESSION, (WORKER,)).fetchone()
            lease = execute(_SELECT_LEASE, (attempt_id,)).fetchone()
            if session[2] != lease[4] or lease[6] != 2 or lease[7] != _DIGEST:
                raise AssertionError("anchor: fence")
            if execute(_SELECT_ATTEMPT, (attempt_id,)).fetchone()[1] != "claimed":
                raise AssertionError("anchor: start barrier")
            execute(_UPDATE_LEASE, (run_id, WORKER, SESSION, state["generation"], 1, 3, _DIGEST, OFFER, "released",
                                    state["expires"], state["acquired"], state["renewed"], None, now, "declined",
                                    None, now, attempt_id, 2))
            expect_one("lease")
            execute(_MOVE_PROJECTION, (*_NONE8, now, attempt_id, *state["projection"]))
            expect_one("projection")
            run = execute(_SELECT_RUN, (run_id,)).fetchone()
            execute(_UPDATE_RUN, (now, run_id, run[3], run[4]))
            expect_one("run")
            execute(_INSERT_EVENT, (
                f"x-{index}", run_id, run[4] + 1, "run.lease_released", f"run-lease:{attempt_id}:1:released",
                "worker", WORKER, attempt_id,
                f'{{"attempt_id":"{attempt_id}","worker_id":"{WORKER}","session_generation":{state["generation"]},'
                f'"lease_generation":1,"lease_version":3,"reason":"declined"}}', now,
            ))

        _transaction(execute, claim)
        _transaction(execute, renew)
        _transaction(execute, release)

    return cycle


def _repository_cycle(repo: LocalWorkerLeaseRepository, generation: int) -> Callable[[int], None]:
    def cycle(index: int) -> None:
        run_id, attempt_id = f"run-{index}", f"att-{index}"
        outcome = repo.claim_run(
            ClaimRunCommand(worker_id=WORKER, session_id=SESSION, session_generation=generation, run_id=run_id,
                            attempt_id=attempt_id, offer_id=OFFER, lease_token=TOKEN, lease_duration_ms=LEASE_MS,
                            event_id=f"c-{index}")
        )
        if outcome.status != "claimed":
            raise AssertionError(f"repository: claim saw {outcome.status}")
        lease = repo.renew(
            RenewRunLeaseCommand(worker_id=WORKER, session_id=SESSION, session_generation=generation,
                                 attempt_id=attempt_id, lease_token=TOKEN, expected_version=outcome.lease.version,
                                 lease_duration_ms=LEASE_MS)
        )
        repo.release(
            ReleaseRunLeaseCommand(worker_id=WORKER, session_id=SESSION, session_generation=generation,
                                   attempt_id=attempt_id, lease_token=TOKEN, expected_version=lease.version,
                                   reason="declined", event_id=f"x-{index}")
        )

    return cycle


def _pair(workdir: Path, sync: str, cycles: int, repetitions: int, warmup: int) -> tuple[dict, float]:
    total = cycles * (repetitions + warmup)
    databases = {}
    repos = {}
    for name in ("anchor", "repository"):
        db = open_database(workdir / f"{name}-{sync.lower()}.db")
        if sync != "FULL":
            db.connection.execute(f"PRAGMA synchronous = {sync}")
        repos[name] = _seed(db, total)
        databases[name] = db
    generation = repos["repository"].find_session(WORKER).generation
    anchor = _anchor_cycle(databases["anchor"].connection, SystemClock())
    repository = _repository_cycle(repos["repository"], generation)

    def runner(name: str, cycle: Callable[[int], None]) -> Callable[[int], Sample]:
        # Repetition r (warm-ups are negative) uses its own block of fresh Attempts.
        def repetition(number: int) -> Sample:
            _keep_session_alive(repos[name])
            return timed_cycles(cycle, cycles, start=(number + warmup) * cycles)

        return repetition

    cases = {f"(a) raw apsw anchor, synchronous={sync}": runner("anchor", anchor),
             f"(b) repository, synchronous={sync}": runner("repository", repository)}
    try:
        series = alternate(cases, repetitions, warmup=warmup)
    finally:
        for db in databases.values():
            db.close()
    anchor_series, repository_series = series.values()
    return series, paired_ratio(repository_series, anchor_series)


def run(workdir: Path, quick: bool) -> None:
    cycles, repetitions = (60, 3) if quick else (200, 9)
    full, full_ratio = _pair(workdir, "FULL", cycles, repetitions, warmup=1)
    off, off_ratio = _pair(workdir, "OFF", cycles * 4, repetitions, warmup=1)
    print_anchor_comparison(
        'claim_run + renew + release cycles (3 transactions per cycle)',
        full, full_ratio, off, off_ratio, cycles=cycles, repetitions=repetitions, target=TARGET,
    )
