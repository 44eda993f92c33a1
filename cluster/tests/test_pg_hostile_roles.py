"""What any role that can connect may do beyond the privilege matrix, and why it gains nothing.

- **Locks.** PostgreSQL lets every role take any advisory lock, so no operation of the runtime may
  wait on one: ``env set`` and a worker's registration serialise on rows of
  ``ql3.runtime_locks`` (migration 0009), which only a role that may UPDATE it can lock (the
  runtime role); the admin role can take no lock a runtime write waits for.
- **The wake channel.** ``NOTIFY`` needs no privilege, so the channel is named by a secret only the
  runtime role may read (``ql3.wake_channel``, migration 0008): a flood on any other channel never
  reaches a worker's connection; the runtime's own notifications are coalesced.
- **Large objects** (``lo_from_bytea``, executable by PUBLIC unless revoked): bootstrap revokes
  them and ``check`` fails closed while any role still has one.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import cluster_postgres
from cluster_postgres.environment import PostgresEnvironment
from cluster_postgres.readiness import readiness
from cluster_postgres.store import WAKE_MIN_INTERVAL_S, PostgresStore, PostgresWake, WakeCoalescer
from cluster_postgres.worker_lease import PostgresWorkerLeaseRepository
from edge_runtime.contract.env_entries import NewEnvEntry
from edge_runtime.contract.environment import MAX_VARIABLES, InvalidVariableError
from edge_runtime.contract.runs import SubmitRunCommand
from edge_runtime.contract.worker_session import RegisterWorkerCommand


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------------------- the coalescer


def test_a_burst_of_notifications_is_one_wake_up_at_once_and_one_trailing() -> None:
    clock = FakeClock()
    coalescer = WakeCoalescer(0.25, clock=clock)  # (times that are exact in binary)
    assert not coalescer.take() and coalescer.wait_s() is None  # nothing received: nothing to pass on
    coalescer.notify(5000)
    assert coalescer.take()  # the first after a quiet interval: at once
    assert not coalescer.take()
    coalescer.notify(3)  # more within the interval: kept, due at its end
    clock.now += 0.125
    assert not coalescer.take() and coalescer.wait_s() == 0.125
    clock.now += 0.125
    assert coalescer.take() and not coalescer.take()  # the trailing one: nothing received is lost
    clock.now += 5
    assert not coalescer.take() and (coalescer.notified, coalescer.wakeups) == (5003, 2)


def test_a_flood_is_at_most_one_wake_up_per_interval_and_its_last_notification_is_passed_on() -> None:
    clock = FakeClock()
    interval, step, count = 0.125, 1 / 1024, 10_240  # ten seconds of one notification a millisecond
    coalescer = WakeCoalescer(interval, clock=clock)
    for _ in range(count):
        coalescer.notify()
        coalescer.take()
        clock.now += step
    assert coalescer.wakeups == count * step / interval  # one at each interval's start: 80, not 10,240
    clock.now += interval
    assert coalescer.take()  # the flood's end is not lost
    assert coalescer.notified == count


def test_a_new_connection_wakes_at_once_though_a_wake_up_was_just_passed_on() -> None:
    clock = FakeClock()
    coalescer = WakeCoalescer(0.125, clock=clock)
    coalescer.notify()
    assert coalescer.take()
    coalescer.wake_now()  # notifications sent while not listening are lost: look now
    assert coalescer.wait_s() == 0.0 and coalescer.take()


# --------------------------------------------------------------------------- a flood on the server


def _wait(predicate: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _wake_channel(owner: Any) -> str:
    return owner.execute("SELECT name FROM ql3.wake_channel").fetchone()[0]


@pytest.mark.parametrize("role_dsn", ["runtime_dsn", "owner_dsn"])
def test_a_flood_on_the_wake_channel_is_one_wake_up_per_interval(pg_database: Any, owner: Any, role_dsn: str) -> None:
    """The roles that may read the channel's name (the workers' own, the owner): however many
    notifications arrive while the listener's clock stands still, one wake-up is passed on at
    once and the rest wait for the interval's end; then exactly one more. Counted, not timed."""
    channel = _wake_channel(owner)
    clock = FakeClock()
    wake = PostgresWake(pg_database.runtime_dsn, coalescer=WakeCoalescer(WAKE_MIN_INTERVAL_S, clock=clock))
    try:
        with psycopg.connect(getattr(pg_database, role_dsn), autocommit=True) as flooder:
            for _ in range(500):  # one transaction each: each is a notification of its own
                flooder.execute("SELECT pg_notify(%s, '')", (channel,))
            with flooder.transaction():  # and 5000 in one transaction (distinct payloads are not folded)
                flooder.execute("SELECT pg_notify(%s, n::text) FROM generate_series(1, 5000) AS n", (channel,))
        _wait(lambda: wake.coalescer.notified == 5500, "the listener to receive every notification")
        assert wake.coalescer.wakeups == 1
        _wait(lambda: wake.drain() > 0, "the first wake-up on the socket")
        clock.now += 2 * WAKE_MIN_INTERVAL_S
        _wait(lambda: wake.coalescer.wakeups == 2, "the trailing wake-up")
        _wait(lambda: wake.drain() > 0, "the trailing wake-up on the socket")
        clock.now += 10 * WAKE_MIN_INTERVAL_S
        time.sleep(2 * WAKE_MIN_INTERVAL_S)  # a bug would wake again here; nothing was received since
        assert (wake.coalescer.wakeups, wake.drain()) == (2, 0)
    finally:
        wake.close()


def test_the_admin_role_cannot_learn_the_wake_channel(pg_database: Any, owner: Any) -> None:
    with psycopg.connect(pg_database.cluster_admin_dsn, autocommit=True) as admin:
        with pytest.raises(psycopg.Error) as caught:
            admin.execute("SELECT name FROM ql3.wake_channel")
        assert caught.value.sqlstate == "42501"
        # Nor from what the workers' sessions run: their statements are hidden from another role.
        store = PostgresStore(pg_database.runtime_dsn)
        wake = store.open_wake()
        try:
            shown = [row[0] for row in admin.execute(
                "SELECT query FROM pg_stat_activity WHERE usename = 'ql3_runtime' AND datname = current_database()")]
            assert shown and set(shown) == {"<insufficient privilege>"}
        finally:
            wake.close()
            store.close()
    channel = _wake_channel(owner)
    assert channel.startswith("ql3_wake_") and channel not in wake.where


def test_a_flood_from_the_admin_role_never_reaches_an_idle_worker(pg_database: Any, owner: Any) -> None:
    """The read-only role floods every channel it can name (the old fixed one among them): the
    worker's listener reads nothing of it. Its notifications are committed before a submit's,
    and PostgreSQL delivers in commit order, so when the submit's wake-up has arrived, anything
    of the flood that reached the worker would have been read and counted before it."""
    store = PostgresStore(pg_database.runtime_dsn)
    wake = store.open_wake()
    try:
        with psycopg.connect(pg_database.cluster_admin_dsn, autocommit=True) as flooder:
            for _ in range(500):
                flooder.execute("NOTIFY ql3_wake")
            with flooder.transaction():
                flooder.execute("SELECT pg_notify(c, n::text) FROM unnest(ARRAY['ql3_wake', 'ql3_wake_', "
                                "'ql3_wake_00000000000000000000000000000000']) AS c, generate_series(1, 2000) AS n")
        store.runs.submit(SubmitRunCommand(argv=["true"]))
        _wait(lambda: wake.coalescer.notified >= 1, "the submit's wake-up")
        assert (wake.coalescer.notified, wake.reads) == (1, 1)
    finally:
        wake.close()
        store.close()


# --------------------------------------------------------------------------- locks another role can hold


def _held_by_admin(pg_database: Any, statement: str, params: tuple[Any, ...] = ()) -> psycopg.Connection[Any]:
    """An admin-role connection inside a transaction that holds what ``statement`` takes."""
    admin = psycopg.connect(pg_database.cluster_admin_dsn, autocommit=True)
    admin.execute("BEGIN")
    admin.execute(statement, params)
    return admin


def test_the_admin_role_holding_the_old_env_lock_blocks_no_env_set(pg_database: Any, owner: Any, runtime: Any) -> None:
    # The advisory key env set once took: any role may hold it, and every set then timed out.
    admin = _held_by_admin(pg_database, "SELECT pg_advisory_xact_lock(%s)", (0x716C_3300_0006,))
    try:
        env = PostgresEnvironment(runtime())
        assert env.set("HELD", "1", secret=False).name == "HELD"
        assert env.set("HELD", "held-secret-2", secret=True).secret
        env.remove_name("HELD")
    finally:
        admin.close()


def test_the_admin_role_holding_a_worker_s_old_registration_lock_blocks_no_registration(
        pg_database: Any, owner: Any, runtime: Any) -> None:
    admin = _held_by_admin(pg_database, "SELECT pg_advisory_xact_lock(hashtextextended('ql3.worker:' || %s, 0))",
                           ("edge-host-1",))
    try:
        repo = PostgresWorkerLeaseRepository(runtime())
        for session in ("s-1", "s-2"):  # a first registration, then a replacement
            outcome = repo.register(RegisterWorkerCommand(worker_id="edge-host-1", session_id=session, capabilities={},
                                                          max_concurrent_runs=1, lease_duration_ms=60_000))
            assert outcome.session.session_id == session
    finally:
        admin.close()


@pytest.mark.parametrize("statement", [
    "SELECT 1 FROM ql3.runtime_locks FOR KEY SHARE",
    "LOCK TABLE ql3.runtime_locks IN ACCESS SHARE MODE",
    "LOCK TABLE ql3.env_entries IN ACCESS SHARE MODE",
    "LOCK TABLE ql3.worker_sessions IN ACCESS SHARE MODE",
    "LOCK TABLE ql3.runs IN SHARE ROW EXCLUSIVE MODE",  # it may read runs: ACCESS SHARE only
    "SELECT 1 FROM ql3.runs FOR KEY SHARE",
    "SELECT 1 FROM ql3.env_entries FOR UPDATE",
])
def test_the_admin_role_may_take_no_lock_a_runtime_write_waits_for(pg_database: Any, statement: str) -> None:
    with psycopg.connect(pg_database.cluster_admin_dsn, autocommit=True) as admin:
        with pytest.raises(psycopg.Error) as caught, admin.transaction():
            admin.execute(statement)
    assert caught.value.sqlstate == "42501", caught.value


def test_no_operation_of_the_runtime_waits_on_an_advisory_lock() -> None:
    """Every role may take every advisory lock: only ``migrate`` (the owner's, at an operator's
    hand) still uses one; the runtime serialises on rows of ``ql3.runtime_locks``."""
    package = Path(cluster_postgres.__file__).parent
    users = sorted(str(path.relative_to(package)) for path in package.rglob("*.py")
                   if "pg_advisory" in path.read_text())
    assert users == ["migrations/__init__.py"]


def test_env_sets_of_new_names_racing_at_the_limit_store_exactly_one(pg_database: Any, owner: Any,
                                                                      runtime: Any) -> None:
    # What the lock is for: two writes of new names must not both pass the count below the limit.
    owner.execute("INSERT INTO ql3.env_entries (name, value, secret, remarks, enabled, position, pinned, labels, "
                  "created_at_ms, updated_at_ms) SELECT 'V' || n, 'x', false, '', true, n, false, '{}', 0, 0 "
                  "FROM generate_series(1, %s) AS n", (MAX_VARIABLES - 1,))
    racers = [PostgresEnvironment(runtime()) for _ in range(4)]
    barrier = threading.Barrier(len(racers))
    results: dict[int, str] = {}

    def race(index: int) -> None:
        barrier.wait(timeout=30)
        try:
            if index % 2:
                racers[index].set(f"NEW{index}", "1", secret=False)
            else:
                racers[index].add([NewEnvEntry(name=f"NEW{index}", value="1")])
            results[index] = "stored"
        except InvalidVariableError:
            results[index] = "refused"

    threads = [threading.Thread(target=race, args=(index,)) for index in range(len(racers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results.values()) == ["refused", "refused", "refused", "stored"]
    assert owner.execute("SELECT count(DISTINCT name) FROM ql3.env_entries WHERE removed_at_ms IS NULL"
                         ).fetchone()[0] == MAX_VARIABLES


# --------------------------------------------------------------------------- large objects


_LARGE_OBJECT_WRITES = (
    "SELECT lo_from_bytea(0, 'planted')",
    "SELECT lo_create(0)",
    "SELECT lo_creat(-1)",  # what a client's lo_import starts with
    "SELECT lo_put(1, 0, 'x')",
    "SELECT lowrite(0, 'x')",
    "SELECT lo_unlink(1)",
)


@pytest.mark.parametrize("role_dsn", ["cluster_admin_dsn", "runtime_dsn", "owner_dsn"])
@pytest.mark.parametrize("statement", _LARGE_OBJECT_WRITES)
def test_no_role_of_the_profile_may_write_a_large_object(pg_database: Any, role_dsn: str, statement: str) -> None:
    with psycopg.connect(getattr(pg_database, role_dsn), autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(statement)
    assert caught.value.sqlstate == "42501", caught.value
    with psycopg.connect(pg_database.superuser_dsn, autocommit=True) as admin:
        assert admin.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (0,)


@pytest.mark.parametrize("grant, reported", [
    ("GRANT EXECUTE ON FUNCTION lo_from_bytea(oid, bytea) TO PUBLIC",
     "PUBLIC (so every role) may execute the large-object functions lo_from_bytea(oid,bytea)"),
    ("GRANT EXECUTE ON FUNCTION lo_create(oid), lowrite(integer, bytea) TO ql3_cluster_admin",
     "ql3_cluster_admin may execute the large-object functions lo_create(oid), lowrite(integer,bytea)"),
])
def test_check_fails_closed_while_a_role_may_still_write_large_objects(pg_database: Any, owner: Any, grant: str,
                                                                        reported: str) -> None:
    assert all(c.ok for c in readiness(pg_database.runtime_dsn))
    revoke = grant.replace("GRANT", "REVOKE").replace(" TO ", " FROM ")
    with psycopg.connect(pg_database.superuser_dsn, autocommit=True) as admin:
        admin.execute(grant)
        try:
            failed = {c.name: c.detail for c in readiness(pg_database.runtime_dsn) if not c.ok}
            assert failed == {"privileges": reported}
        finally:
            admin.execute(revoke)
    assert all(c.ok for c in readiness(pg_database.runtime_dsn))


def test_check_reports_a_large_object_left_owned_by_a_role_and_lo_compat_privileges(pg_database: Any,
                                                                                     owner: Any) -> None:
    with psycopg.connect(pg_database.superuser_dsn, autocommit=True) as admin:
        oid = admin.execute("SELECT lo_from_bytea(0, 'left behind')").fetchone()[0]
        admin.execute(f"ALTER LARGE OBJECT {oid} OWNER TO ql3_runtime")
        try:
            failed = {c.name: c.detail for c in readiness(pg_database.runtime_dsn) if not c.ok}
            assert "1 large object(s) are owned by or granted to PUBLIC or" in failed["privileges"]
        finally:
            admin.execute("SELECT lo_unlink(%s)", (oid,))
    assert all(c.ok for c in readiness(pg_database.runtime_dsn))


def test_check_fails_while_the_admin_role_may_read_the_runtime_s_statements(pg_database: Any) -> None:
    # pg_read_all_stats shows every session's statement text, the workers' LISTEN among them.
    # Roles are global to the server: granted inside a transaction that is rolled back, so no
    # other session ever sees it.
    from cluster_postgres.readiness import _privileges

    with psycopg.connect(pg_database.superuser_dsn, autocommit=True) as admin:
        assert [c.ok for c in _privileges(admin)] == [True]
        with pytest.raises(_RolledBack), admin.transaction():
            admin.execute("GRANT pg_monitor TO ql3_cluster_admin")
            (check,) = _privileges(admin)
            raise _RolledBack
        assert not check.ok and check.detail == (
            "ql3_cluster_admin may read every session's statements (pg_read_all_stats), the workers' wake "
            "channel among them")
        assert [c.ok for c in _privileges(admin)] == [True]


class _RolledBack(Exception):
    """Leaves a transaction by rolling it back."""
