"""The HA gate (cluster-profile.md §7, as ADR-0456's): a lease committed on a primary survives a
crash and promotion of its streaming standby, and its old token still fences it.

Also the digest-only proof for what a table read cannot see: WAL segments and the statement log
(``log_statement = all`` logs every bind parameter) hold the token's digest, never the token.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from cluster_postgres.cancellation_dispatch import PostgresCancellationDispatchRepository
from cluster_postgres.connection import connect
from cluster_postgres.migrations import migrate
from cluster_postgres.readiness import bootstrap, require_ready
from cluster_postgres.worker_lease import PostgresWorkerLeaseRepository
from edge_runtime.contract.cancellation_dispatch import (
    ClaimCommand,
    DispatchResult,
    DispatchStatus,
    FenceRejectedError,
    RecordResultCommand,
    RepositoryError,
    digest_lease_token,
)
from edge_runtime.contract.run_lease import ClaimRunCommand, RenewRunLeaseCommand
from edge_runtime.contract.worker_lease import WorkerLeaseFenceRejectedError, digest_run_lease_token
from edge_runtime.contract.worker_session import RegisterWorkerCommand
from tests.support.ha_cluster import HaPair, unavailable_reason
from tests.support.pg_test_database import unavailable

DISPATCH_TOKEN = "ha-gate-dispatch-token-" + "k" * 40
RUN_LEASE_TOKEN = "ha-gate-run-lease-token-" + "z" * 40
REQUESTED = 1_000


def _dsn(server: Any, user: str, dbname: str = "qinglong") -> str:
    return f"host=127.0.0.1 port={server.port} user={user} dbname={dbname} connect_timeout=5"


def _timeline(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return int(conn.execute("SELECT pg_walfile_name(pg_current_wal_insert_lsn())").fetchone()[0][:8], 16)


def _until(predicate: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_a_committed_lease_survives_crash_and_promotion_and_the_old_token_still_fences_it() -> None:
    reason = unavailable_reason()
    if reason is not None:
        unavailable(reason)
    with HaPair() as ha:
        primary, standby = ha.primary, ha.standby
        bootstrap(primary.dsn, "qinglong")
        migrate(_dsn(primary, "ql3_migration_owner"))
        require_ready(_dsn(primary, "ql3_runtime"))
        ha.wait_streaming()
        # Synchronous replication is switched on only once the standby streams.
        with psycopg.connect(primary.dsn, autocommit=True) as admin:
            admin.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            admin.execute("SELECT pg_reload_conf()")
            assert _until(lambda: admin.execute(
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'").fetchone()[0] == 1)
        with psycopg.connect(_dsn(primary, "ql3_migration_owner"), autocommit=True) as owner:
            owner.execute("INSERT INTO ql3.runs (id, status, cancel_requested_at_ms, created_at_ms) VALUES "
                          "('run-1', 'running', %s, 0), ('run-2', 'dispatching', NULL, 0)", (REQUESTED,))
            owner.execute("INSERT INTO ql3.run_attempts (id, run_id, attempt, status, created_at_ms) VALUES "
                          "('att-1', 'run-1', 1, 'running', 0), ('att-2', 'run-2', 1, 'claimed', 0)")

        # Claim on the primary: a cancellation dispatch lease and a Run Lease.
        conn = connect(_dsn(primary, "ql3_runtime"))
        dispatch = PostgresCancellationDispatchRepository(conn).claim(ClaimCommand(
            run_id="run-1", attempt_id="att-1", requested_at_ms=REQUESTED, owner="worker-a",
            lease_token=DISPATCH_TOKEN, lease_duration_ms=300_000)).dispatch
        leases = PostgresWorkerLeaseRepository(conn)
        session = leases.register(RegisterWorkerCommand(worker_id="worker-a", session_id="s1", capabilities={},
                                                        max_concurrent_runs=2, lease_duration_ms=300_000)).session
        run_lease = leases.claim_run(ClaimRunCommand(
            worker_id="worker-a", session_id="s1", session_generation=session.generation, run_id="run-2",
            attempt_id="att-2", offer_id="offer-1", lease_token=RUN_LEASE_TOKEN, lease_duration_ms=300_000,
            event_id="evt-claim")).lease
        conn.close()
        assert _timeline(primary.dsn) == 1

        # Visible on the standby; writes there fail with 25006, mapped as retryable. A synchronous
        # commit waits for the standby's flush, not its replay: wait until it has replayed
        # everything the primary wrote (the schema included: the standby attached before it was
        # migrated), else a read there may run before the tables exist.
        with psycopg.connect(primary.dsn, autocommit=True) as admin:
            written = admin.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        with psycopg.connect(_dsn(standby, "postgres", "postgres"), autocommit=True) as on_replica:
            assert _until(lambda: on_replica.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                                     (written,)).fetchone()[0])
        replica = connect(_dsn(standby, "ql3_runtime"))
        on_standby = PostgresCancellationDispatchRepository(replica)
        assert _until(lambda: on_standby.find_by_run_id("run-1")) == dispatch
        with pytest.raises(RepositoryError, match="SQLSTATE 25006") as caught:
            on_standby.claim(ClaimCommand(run_id="run-1", attempt_id="att-1", requested_at_ms=REQUESTED,
                                          owner="worker-b", lease_token="other", lease_duration_ms=30_000))
        assert caught.value.retryable is True
        replica.close()

        # Crash the primary, promote the standby: timeline 1 -> 2.
        primary.stop("immediate")
        ha.promote()
        promoted_dsn = _dsn(standby, "ql3_runtime")
        assert _until(lambda: _timeline(standby.dsn) == 2)
        promoted = connect(promoted_dsn)
        repo = PostgresCancellationDispatchRepository(promoted)
        assert repo.find_by_run_id("run-1") == dispatch
        assert dispatch.status is DispatchStatus.LEASED
        # A new owner sees `leased`; a wrong token is fenced; the old token's result lands.
        assert repo.claim(ClaimCommand(run_id="run-1", attempt_id="att-1", requested_at_ms=REQUESTED,
                                       owner="worker-b", lease_token="token-b", lease_duration_ms=30_000)).status == "leased"
        result = dict(run_id="run-1", attempt_id="att-1", owner="worker-a", expected_version=dispatch.version,
                      result=DispatchResult.TERMINATION_REQUESTED)
        with pytest.raises(FenceRejectedError):
            repo.record_result(RecordResultCommand(**result, lease_token="not-the-token", event_id="evt-x"))
        landed = repo.record_result(RecordResultCommand(**result, lease_token=DISPATCH_TOKEN, event_id="evt-1"))
        assert landed.dispatch.status is DispatchStatus.DISPATCHED
        leases = PostgresWorkerLeaseRepository(promoted)
        assert leases.find_lease("att-2") == run_lease
        renew = dict(worker_id="worker-a", session_id="s1", session_generation=session.generation,
                     attempt_id="att-2", expected_version=run_lease.version, lease_duration_ms=300_000)
        with pytest.raises(WorkerLeaseFenceRejectedError):
            leases.renew(RenewRunLeaseCommand(**renew, lease_token="not-the-token"))
        assert leases.renew(RenewRunLeaseCommand(**renew, lease_token=RUN_LEASE_TOKEN)).version == run_lease.version + 1
        promoted.close()

        # Digest-only at rest: WAL segments and the statement log carry digests, never tokens.
        wal = ha.wal_bytes()
        log = primary.log.read_bytes()
        for raw, digest in ((DISPATCH_TOKEN, digest_lease_token(DISPATCH_TOKEN)),
                            (RUN_LEASE_TOKEN, digest_run_lease_token(RUN_LEASE_TOKEN))):
            assert raw.encode() not in wal and raw.encode() not in log
            assert digest.encode() in wal and digest.encode() in log  # so both were really searched
