"""PostgreSQL-only behaviour of the Cluster Profile (cluster-profile.md §4, §7): real database time,
two-connection races, capacity under the Worker row lock, timeouts and error mapping, ambiguous
commits and their replay, clock regression, digest-only storage."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from cluster_postgres.cancellation_dispatch import PostgresCancellationDispatchRepository
from cluster_postgres.errors import RETRYABLE_SQLSTATES, is_retryable
from cluster_postgres.worker_lease import PostgresWorkerLeaseRepository
from edge_runtime.contract.cancellation_dispatch import (
    ClaimCommand,
    DispatchResult,
    RecordResultCommand,
    RepositoryError,
    digest_lease_token,
)
from edge_runtime.contract.run_lease import ClaimedRunOutcome, ClaimRunCommand, NoCapacityOutcome
from edge_runtime.contract.worker_session import RegisterWorkerCommand

REQUESTED = 1_699_999_990_000


def seed(owner: Any, run_id: str, attempt_id: str, *, requested: int | None = REQUESTED, attempt_status: str = "running",
         run_status: str = "running") -> None:
    owner.execute("INSERT INTO runs (id, status, cancel_requested_at_ms, created_at_ms) VALUES (%s, %s, %s, 0)",
                  (run_id, run_status, requested))
    owner.execute("INSERT INTO run_attempts (id, run_id, attempt, status, created_at_ms) VALUES (%s, %s, 1, %s, 0)",
                  (attempt_id, run_id, attempt_status))


def claim(run_id: str = "run-1", attempt_id: str = "att-1", owner: str = "w-a", token: str = "tok-a",
          lease_ms: int = 30_000) -> ClaimCommand:
    return ClaimCommand(run_id=run_id, attempt_id=attempt_id, requested_at_ms=REQUESTED, owner=owner,
                        lease_token=token, lease_duration_ms=lease_ms)


def real_clock(owner: Any) -> None:
    owner.execute("UPDATE ql3_test.clock SET now_ms = NULL")


def db_ms(conn: Any) -> int:
    return conn.execute("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint").fetchone()[0]


# --------------------------------------------------------------------------- database time


def test_lease_expiry_is_database_time_between_two_reads_around_the_call(owner: Any, runtime: Any) -> None:
    real_clock(owner)
    seed(owner, "run-1", "att-1")
    repo = PostgresCancellationDispatchRepository(runtime())
    before = db_ms(owner)
    record = repo.claim(claim(lease_ms=30_000)).dispatch
    after = db_ms(owner)
    assert before <= record.lease_expires_at_ms - 30_000 <= after


def _while_held_for_600_ms(owner: Any, holder: Any, call: Any) -> tuple[int, int, Any]:
    """Run ``call`` while ``holder``'s open transaction keeps a lock it needs; the holder commits
    after 0.6 s (below the runtime role's 1 s lock_timeout). Returns (database time before the
    call, database time at the release, the call's result)."""
    released_at: list[int] = []

    def release() -> None:
        time.sleep(0.6)
        released_at.append(db_ms(owner))
        holder.execute("COMMIT")

    thread = threading.Thread(target=release)
    started = db_ms(owner)
    thread.start()
    try:
        outcome = call()
    finally:
        thread.join()
    return started, released_at[0], outcome


def test_time_is_read_after_the_row_lock_so_a_lock_wait_is_not_hidden(owner: Any, runtime: Any) -> None:
    real_clock(owner)
    seed(owner, "run-1", "att-1")
    repo = PostgresCancellationDispatchRepository(runtime())
    holder = runtime()
    holder.execute("BEGIN")
    holder.execute("SELECT 1 FROM ql3.runs WHERE id = 'run-1' FOR UPDATE")
    started, released, outcome = _while_held_for_600_ms(owner, holder, lambda: repo.claim(claim()))
    # transaction_timestamp() would give ~`started`; the observation follows the 600 ms wait.
    assert outcome.dispatch.updated_at_ms >= released >= started + 500


@pytest.mark.parametrize("held", ["registration lock of a first registration", "worker row of a replacement"])
def test_a_registration_reads_time_after_its_locks_so_the_session_lease_counts_from_after_the_wait(
        owner: Any, runtime: Any, held: str) -> None:
    # ADR-0057 §3: the registration's observation follows its locks: the registration lock and
    # the Worker row lock. Another transaction holds one of them for 0.6 s (below the runtime role's
    # 1 s lock_timeout); the session's heartbeat and expiry must count from after that wait.
    real_clock(owner)
    repo = PostgresWorkerLeaseRepository(runtime())
    command = RegisterWorkerCommand(worker_id="w-wait", session_id="s-2", capabilities={}, max_concurrent_runs=1,
                                    lease_duration_ms=60_000)
    holder = runtime()
    holder.execute("BEGIN")
    if held.startswith("registration"):
        holder.execute("SELECT 1 FROM ql3.runtime_locks WHERE name = 'worker_registration' FOR UPDATE")
    else:
        repo.register(RegisterWorkerCommand(worker_id="w-wait", session_id="s-1", capabilities={},
                                            max_concurrent_runs=1, lease_duration_ms=60_000))
        holder.execute("SELECT 1 FROM ql3.worker_sessions WHERE worker_id = %s FOR UPDATE", (command.worker_id,))
    started, released, outcome = _while_held_for_600_ms(owner, holder, lambda: repo.register(command))
    session = outcome.session
    assert (outcome.status, session.session_id, session.generation) == (
        "registered", "s-2", 1 if held.startswith("registration") else 2)
    # A time read before the lock would be ~`started`, 600 ms before the holder let go.
    assert session.heartbeat_at_ms >= released >= started + 500
    assert session.lease_expires_at_ms == session.heartbeat_at_ms + 60_000


# --------------------------------------------------------------------------- races


def test_two_connections_racing_for_one_dispatch_give_exactly_one_claimed(owner: Any, runtime: Any) -> None:
    rounds = 20
    for i in range(rounds):
        seed(owner, f"run-{i}", f"att-{i}")
    repos = [PostgresCancellationDispatchRepository(runtime()) for _ in range(2)]
    barrier = threading.Barrier(2)
    results: list[list[str]] = [[], []]

    def race(side: int) -> None:
        for i in range(rounds):
            barrier.wait(timeout=30)
            outcome = repos[side].claim(claim(f"run-{i}", f"att-{i}", owner=f"w-{side}", token=f"tok-{side}-{i}"))
            results[side].append(outcome.status)

    threads = [threading.Thread(target=race, args=(side,)) for side in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results[0]) == len(results[1]) == rounds
    for i in range(rounds):
        assert sorted((results[0][i], results[1][i])) == ["claimed", "leased"], i


def test_concurrent_registrations_of_one_worker_are_serialised_by_their_locks(owner: Any, runtime: Any) -> None:
    # ADR-0057 §3/§4 serialise the registrations of one worker: each takes the registration lock
    # before anything else (a row of ql3.runtime_locks, not the ADR's advisory lock, which any
    # role could hold), so racing first registrations never both INSERT (a 23505 for the loser) and every replacement
    # sees the one before it: generations 1..N, one current session, every call succeeds.
    threads_per_round, rounds = 6, 5
    repos = [PostgresWorkerLeaseRepository(runtime()) for _ in range(threads_per_round)]
    for r in range(rounds):
        worker_id = f"w-race-{r}"
        barrier = threading.Barrier(threads_per_round)
        outcomes: dict[int, Any] = {}
        errors: dict[int, BaseException] = {}

        def register(t: int) -> None:
            barrier.wait(timeout=30)
            try:
                outcomes[t] = repos[t].register(RegisterWorkerCommand(
                    worker_id=worker_id, session_id=f"s-{r}-{t}", capabilities={}, max_concurrent_runs=1,
                    lease_duration_ms=60_000))
            except Exception as exc:  # reported below, with the round, instead of lost in the thread
                errors[t] = exc

        threads = [threading.Thread(target=register, args=(t,)) for t in range(threads_per_round)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == {}, (r, {t: f"{type(e).__name__}: {e}" for t, e in errors.items()})
        sessions = sorted((o.session for o in outcomes.values()), key=lambda s: s.generation)
        assert [o.status for o in outcomes.values()] == ["registered"] * threads_per_round, r
        assert [s.generation for s in sessions] == list(range(1, threads_per_round + 1)), r
        assert [s.version for s in sessions] == list(range(threads_per_round)), r
        assert sorted(o.replaced_session for o in outcomes.values()) == [False] + [True] * (threads_per_round - 1), r
        rows = owner.execute("SELECT session_id, generation FROM worker_sessions WHERE worker_id = %s",
                             (worker_id,)).fetchall()
        assert rows == [(sessions[-1].session_id, threads_per_round)], r


def test_concurrent_dispatchers_never_oversell_a_worker_slot(owner: Any, runtime: Any) -> None:
    leases = PostgresWorkerLeaseRepository(runtime())
    session = leases.register(RegisterWorkerCommand(worker_id="w", session_id="s1", capabilities={},
                                                    max_concurrent_runs=3, lease_duration_ms=300_000)).session
    dispatchers, per = 4, 6
    for d in range(dispatchers):
        for i in range(per):
            seed(owner, f"r{d}-{i}", f"a{d}-{i}", requested=None, attempt_status="claimed", run_status="dispatching")
    repos = [PostgresWorkerLeaseRepository(runtime()) for _ in range(dispatchers)]
    barrier = threading.Barrier(dispatchers)
    outcomes: list[Any] = []
    lock = threading.Lock()

    def dispatch(d: int) -> None:
        barrier.wait(timeout=30)
        for i in range(per):
            outcome = repos[d].claim_run(ClaimRunCommand(
                worker_id="w", session_id="s1", session_generation=session.generation, run_id=f"r{d}-{i}",
                attempt_id=f"a{d}-{i}", offer_id=f"o{d}-{i}", lease_token=f"t{d}-{i}", lease_duration_ms=60_000,
                event_id=f"e{d}-{i}"))
            with lock:
                outcomes.append(outcome)

    threads = [threading.Thread(target=dispatch, args=(d,)) for d in range(dispatchers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outcomes) == dispatchers * per
    assert sum(isinstance(o, ClaimedRunOutcome) for o in outcomes) == 3
    assert all(isinstance(o, (ClaimedRunOutcome, NoCapacityOutcome)) for o in outcomes)
    assert leases.count_active_leases("w") == 3
    assert owner.execute("SELECT count(*) FROM run_dispatch_leases WHERE status = 'leased'").fetchone()[0] == 3


# --------------------------------------------------------------------------- timeouts and errors


def test_lock_timeout_is_retryable_after_about_a_second_and_the_connection_is_reusable(owner: Any, runtime: Any) -> None:
    seed(owner, "run-1", "att-1")
    repo = PostgresCancellationDispatchRepository(runtime())
    holder = runtime()
    holder.execute("BEGIN")
    holder.execute("SELECT 1 FROM ql3.runs WHERE id = 'run-1' FOR UPDATE")
    started = time.monotonic()
    with pytest.raises(RepositoryError) as caught:
        repo.claim(claim())
    waited = time.monotonic() - started
    holder.execute("ROLLBACK")
    assert caught.value.retryable is True
    assert caught.value.code == "CLUSTER_STORAGE_FAILED"
    assert "SQLSTATE 55P03" in str(caught.value)  # lock_timeout, not statement_timeout (57014, at 5 s)
    print(f"claim gave up on the held row lock after {waited:.2f} s")
    assert waited >= 0.9  # never before the role's 1 s lock_timeout; how much later is the machine's load
    assert repo.claim(claim()).status == "claimed"  # same connection, same repository


@pytest.mark.parametrize("sqlstate", sorted(RETRYABLE_SQLSTATES) + ["08006", "08003", None])
def test_retryable_sqlstates(sqlstate: str | None) -> None:
    assert is_retryable(sqlstate)


@pytest.mark.parametrize("sqlstate", ["23505", "23514", "23503", "22001", "22P02", "42501", "42P01", "XX000"])
def test_non_retryable_sqlstates(sqlstate: str) -> None:
    assert not is_retryable(sqlstate)


def test_a_killed_connection_is_retryable_and_a_retried_claim_is_an_idempotent_replay(
    owner: Any, runtime: Any, pg_database: Any
) -> None:
    seed(owner, "run-1", "att-1")
    conn = runtime()
    first = PostgresCancellationDispatchRepository(conn).claim(claim())
    assert first.status == "claimed"
    with psycopg.connect(pg_database.superuser_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    with pytest.raises(RepositoryError) as caught:
        PostgresCancellationDispatchRepository(conn).claim(claim())
    assert caught.value.retryable is True and caught.value.code == "CLUSTER_STORAGE_FAILED"
    replay = PostgresCancellationDispatchRepository(runtime()).claim(claim())
    assert replay.status == "claimed" and replay.dispatch == first.dispatch and replay.lease_token == "tok-a"
    other = PostgresCancellationDispatchRepository(runtime()).claim(claim(owner="w-b", token="tok-b"))
    assert other.status == "leased"


def test_connection_lost_during_commit_says_the_outcome_is_unknown(owner: Any, runtime: Any) -> None:
    seed(owner, "run-1", "att-1")
    # A deferred constraint trigger runs at COMMIT; this one kills its own backend there.
    owner.execute("""
        CREATE FUNCTION ql3_test.die() RETURNS trigger LANGUAGE plpgsql AS
            $$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$;
        CREATE CONSTRAINT TRIGGER die_at_commit AFTER INSERT ON ql3.run_cancellation_dispatches
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ql3_test.die();
        GRANT USAGE ON SCHEMA ql3_test TO ql3_runtime;
    """)
    try:
        with pytest.raises(RepositoryError, match="outcome is unknown") as caught:
            PostgresCancellationDispatchRepository(runtime()).claim(claim())
        assert caught.value.retryable is True
    finally:
        owner.execute("DROP TRIGGER die_at_commit ON ql3.run_cancellation_dispatches; DROP FUNCTION ql3_test.die()")
    repo = PostgresCancellationDispatchRepository(runtime())
    retried = repo.claim(claim())
    assert retried.status == "claimed"
    assert repo.claim(claim()) == retried  # and again: the same outcome while the lease is live


def test_a_duplicate_event_id_maps_to_a_non_retryable_storage_error(owner: Any, runtime: Any) -> None:
    seed(owner, "run-1", "att-1")
    repo = PostgresCancellationDispatchRepository(runtime())
    repo.claim(claim())
    owner.execute("INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, payload, "
                  "created_at_ms) VALUES ('evt-1', 'run-1', 9, 't', 'k', 'tool', 'x', '{}', 0)")
    with pytest.raises(RepositoryError, match="SQLSTATE 23505") as caught:
        repo.record_result(RecordResultCommand(run_id="run-1", attempt_id="att-1", owner="w-a", lease_token="tok-a",
                                               expected_version=1, result=DispatchResult.ALREADY_EXITED,
                                               event_id="evt-1"))
    assert caught.value.retryable is False and caught.value.code == "CLUSTER_STORAGE_FAILED"


# --------------------------------------------------------------------------- clock regression


def test_a_row_ahead_of_the_database_clock_is_clamped_and_recorded(owner: Any, runtime: Any) -> None:
    seed(owner, "run-1", "att-1")
    repo = PostgresCancellationDispatchRepository(runtime())
    lease = repo.claim(claim()).dispatch
    owner.execute("UPDATE ql3_test.clock SET now_ms = now_ms - 10000")  # a promoted host's clock lags 10 s
    outcome = repo.record_result(RecordResultCommand(
        run_id="run-1", attempt_id="att-1", owner="w-a", lease_token="tok-a", expected_version=lease.version,
        result=DispatchResult.DISPATCH_ERROR, event_id="evt-r", retry_delay_ms=1_000))
    # Time never runs backwards for the row: the clamped time is its last update.
    assert outcome.dispatch.updated_at_ms == lease.updated_at_ms
    assert outcome.dispatch.next_attempt_at_ms == lease.updated_at_ms + 1_000
    events = owner.execute("SELECT type, payload FROM run_events WHERE run_id = 'run-1' ORDER BY sequence").fetchall()
    assert events[0] == ("run.clock_regressed", {"database_time_ms": START_MS_MINUS_10S, "clamped_time_ms": lease.updated_at_ms})
    assert events[1][0] == "run.cancel_dispatch_failed"


START_MS_MINUS_10S = 1_700_000_000_000 - 10_000


# --------------------------------------------------------------------------- digest only


def test_the_dispatch_table_has_no_raw_token_column_and_stores_the_bare_digest(owner: Any, runtime: Any) -> None:
    seed(owner, "run-1", "att-1")
    PostgresCancellationDispatchRepository(runtime()).claim(claim(token="secret-token-xyz"))
    columns = {c for (c,) in owner.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'ql3'").fetchall()}
    assert "lease_token" not in columns and "lease_token_digest" in columns
    assert owner.execute("SELECT lease_token_digest FROM run_cancellation_dispatches").fetchone()[0] == \
        digest_lease_token("secret-token-xyz")
    dump = owner.execute("SELECT string_agg(row_to_json(d)::text, '') FROM run_cancellation_dispatches d").fetchone()[0]
    assert "secret-token-xyz" not in dump
