"""Schedules on the cluster: fired by database time, each slot once across every worker.

Real ``edge-runtime-cluster serve`` workers against a private database (real database time), and
the repository itself on two connections: a slot claimed by one transaction is claimed once; a
worker whose connection dies in the middle of a fire leaves nothing behind and the slot still
due; three workers firing ``@every 2s`` for 30 s with one of them SIGKILLed half-way fire every
slot once and none twice; slots missed while every worker was stopped fire as one coalesced fire;
a stored schedule that can never fire is paused by the worker, which fires the others and stops
on SIGTERM.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import psycopg
import pytest

from cluster_postgres.schedules import PostgresScheduleRepository
from cluster_postgres.store import PostgresStore
from edge_runtime.contract.schedules import AddScheduleCommand, FireOutcome, InvalidScheduleCommandError, Overlap
from tests.support.cluster_serve_harness import Worker, kill_attempt_groups, private_root, wait_for

SHORT_LEASES = {"EDGE_RUNTIME_SESSION_LEASE_MS": "2000", "EDGE_RUNTIME_RUN_LEASE_MS": "3000",
                "EDGE_RUNTIME_POLL_INTERVAL_MS": "1000"}
EVERY_MS = 2000


def _fires(db: Any, schedule_id: str) -> list[tuple[Any, ...]]:
    return db.execute("SELECT slot_ms, outcome, run_id, coalesced_slots, actor_id FROM ql3.schedule_fires "
                      "WHERE schedule_id = %s ORDER BY slot_ms", (schedule_id,)).fetchall()


def _repository(conn: Any) -> PostgresScheduleRepository:
    from cluster_postgres.runs import PostgresRunRepository

    return PostgresScheduleRepository(conn, PostgresRunRepository(conn), host_zone=lambda: "UTC0")


def _assert_every_slot_once(fires: list[tuple[Any, ...]], db: Any, schedule_id: str) -> None:
    """Each slot from the first fire to the last is fired once, or folded into the fire before it
    (marked coalesced); a started fire has exactly one Run, of that slot; any other Run is that of a
    slot that waited for the previous Run (overlap queue), one per such slot."""
    slots = [f[0] for f in fires]
    assert len(slots) == len(set(slots))  # the primary key already says so; the Runs too:
    assert all(slot % EVERY_MS == 0 for slot in slots)
    for (slot, _, _, coalesced, _), (following, *_rest) in zip(fires, fires[1:]):
        assert following - slot == EVERY_MS or coalesced, (slot, following)
    runs = db.execute("SELECT scheduled_for_ms, id FROM ql3.runs WHERE schedule_id = %s ORDER BY 1",
                      (schedule_id,)).fetchall()
    started = [(f[0], f[2]) for f in fires if f[1] == FireOutcome.STARTED.value]
    assert set(started) <= set(runs)
    waited = {f[0] for f in fires if f[1] == FireOutcome.WAITING.value}
    assert {slot for slot, _ in set(runs) - set(started)} <= waited
    assert len({slot for slot, _ in runs}) == len(runs)


def test_a_slot_is_claimed_by_one_transaction_and_a_locked_schedule_is_passed_by(
        pg_database: Any, owner: Any, runtime: Any) -> None:
    first, second = _repository(runtime()), _repository(runtime())
    record = first.add(AddScheduleCommand(expression="@every 1m", argv=["true"]))
    owner.execute("UPDATE ql3_test.clock SET now_ms = %s", (record.next_fire_at_ms,))
    # Another worker holds the schedule's row (firing it): this one passes it by, without waiting.
    holder = runtime()
    with holder.transaction():
        holder.execute("SELECT 1 FROM ql3.schedules WHERE id = %s FOR NO KEY UPDATE", (record.id,))
        assert second.fire(record.id, actor_id="w2") is None
    plans = [first.fire(record.id, actor_id="w1"), second.fire(record.id, actor_id="w2")]
    assert [p is not None for p in plans] == [True, False]
    assert [(f[0], f[1]) for f in _fires(owner, record.id)] == [(record.next_fire_at_ms, "started")]


def test_a_worker_whose_connection_dies_in_the_middle_of_a_fire_leaves_the_slot_due(
        pg_database: Any, owner: Any, runtime: Any) -> None:
    from cluster_postgres.runs import PostgresRunRepository

    doomed_conn = runtime()
    admin = psycopg.connect(pg_database.superuser_dsn, autocommit=True)

    class Doomed(PostgresScheduleRepository):
        def _start(self, *args: Any, **kwargs: Any) -> str:
            run_id = super()._start(*args, **kwargs)
            admin.execute("SELECT pg_terminate_backend(%s)", (doomed_conn.info.backend_pid,))  # its host is gone
            return run_id

    doomed = Doomed(doomed_conn, PostgresRunRepository(doomed_conn), host_zone=lambda: "UTC0")
    record = _repository(runtime()).add(AddScheduleCommand(expression="@every 1m", argv=["true"]))
    owner.execute("UPDATE ql3_test.clock SET now_ms = %s", (record.next_fire_at_ms,))
    with pytest.raises(Exception) as failure:
        doomed.fire(record.id, actor_id="doomed")
    admin.close()
    assert getattr(failure.value, "retryable", False)
    assert _fires(owner, record.id) == []
    assert owner.execute("SELECT count(*) FROM ql3.runs").fetchone()[0] == 0
    survivor = _repository(runtime())
    assert survivor.due_schedule_ids(64) == [record.id]
    assert survivor.fire(record.id, actor_id="w2") is not None
    assert survivor.fire(record.id, actor_id="w2") is None
    assert [f[1] for f in _fires(owner, record.id)] == ["started"]
    assert owner.execute("SELECT count(*) FROM ql3.runs WHERE schedule_id = %s", (record.id,)).fetchone()[0] == 1


def test_reboot_schedules_are_refused_on_the_cluster(pg_database: Any, owner: Any, runtime: Any) -> None:
    with pytest.raises(InvalidScheduleCommandError, match="no one boot"):
        _repository(runtime()).add(AddScheduleCommand(expression="@reboot", argv=["true"]))
    assert _repository(runtime()).arm_boot_schedules("any-boot") == []


def test_three_workers_fire_every_slot_of_a_2s_schedule_once_while_one_is_killed(
        pg_database: Any, owner: Any) -> None:
    pg_database.reset(owner, None)  # real database time
    db = owner
    store = PostgresStore(pg_database.runtime_dsn)
    with private_root() as root:
        workers = [Worker(root, name, pg_database.runtime_dsn, slots=2, env=SHORT_LEASES) for name in ("s1", "s2", "s3")]
        try:
            for worker in workers:
                worker.start()
            wait_for(lambda: db.execute("SELECT count(*) FROM ql3.worker_sessions WHERE status = 'online'")
                     .fetchone()[0] == 3, 60, "three workers registered")
            record = store.schedules.add(AddScheduleCommand(expression="@every 2s", argv=["true"],
                                                            overlap=Overlap.QUEUE))
            time.sleep(15)
            workers[0].kill9()  # a worker dies; whatever it was firing is committed or rolled back whole
            time.sleep(15)
            store.schedules.set_paused(record.id, True)
            wait_for(lambda: db.execute("SELECT count(*) FROM ql3.runs WHERE schedule_id = %s AND status IN "
                                        "('queued', 'dispatching', 'running')", (record.id,)).fetchone()[0] == 0,
                     60, "the fired runs ended")
            fires = _fires(db, record.id)
            assert len(fires) >= 5  # a liveness floor: the schedule did fire across the 30 s
            _assert_every_slot_once(fires, db, record.id)
            firers = {f[4] for f in fires}
            assert firers <= {"s1", "s2", "s3"}
            killed_at = db.execute("SELECT max(fired_at_ms) FROM ql3.schedule_fires WHERE actor_id = 's1'").fetchone()[0]
            after = [f for f in fires if killed_at is None or f[0] > killed_at + EVERY_MS]
            assert after and {f[4] for f in after} <= {"s2", "s3"}  # the survivors went on firing
        finally:
            for worker in workers:
                worker.stop()
            kill_attempt_groups(db)
            store.close()


def test_slots_missed_while_every_worker_was_stopped_fire_once_coalesced(pg_database: Any, owner: Any) -> None:
    pg_database.reset(owner, None)
    db = owner
    store = PostgresStore(pg_database.runtime_dsn)
    with private_root() as root:
        workers = [Worker(root, name, pg_database.runtime_dsn, slots=1, env=SHORT_LEASES) for name in ("c1", "c2")]
        try:
            for worker in workers:
                worker.start()
            record = store.schedules.add(AddScheduleCommand(expression="@every 2s", argv=["true"]))
            wait_for(lambda: len(_fires(db, record.id)) >= 2, 60, "the schedule fired on the workers")
            for worker in workers:
                worker.stop()  # a cluster-wide stop
            before = _fires(db, record.id)
            stopped_next = db.execute("SELECT next_fire_at_ms FROM ql3.schedules WHERE id = %s",
                                      (record.id,)).fetchone()[0]
            wait_for(lambda: db.execute("SELECT ql3.now_ms()").fetchone()[0] > stopped_next + 4 * EVERY_MS, 30,
                     "several slots passed with no worker")
            for worker in workers:
                worker.start()
            wait_for(lambda: len(_fires(db, record.id)) > len(before), 60, "the first fire after the stop")
            store.schedules.set_paused(record.id, True)
            fires = _fires(db, record.id)
            first_after = fires[len(before)]
            assert first_after[0] == stopped_next and first_after[3]  # the first missed slot, coalesced
            if len(fires) > len(before) + 1:  # the next fire is past every missed slot
                assert fires[len(before) + 1][0] > stopped_next + 4 * EVERY_MS
            assert db.execute("SELECT coalesced_count FROM ql3.schedules WHERE id = %s",
                              (record.id,)).fetchone()[0] >= 1
            _assert_every_slot_once(fires, db, record.id)
        finally:
            for worker in workers:
                worker.stop()
            kill_attempt_groups(db)
            store.close()


def test_overlap_replace_across_workers_cancels_the_previous_run_through_the_dispatch(
        pg_database: Any, owner: Any) -> None:
    pg_database.reset(owner, None)
    db = owner
    store = PostgresStore(pg_database.runtime_dsn)
    with private_root() as root:
        workers = [Worker(root, name, pg_database.runtime_dsn, slots=1, env=SHORT_LEASES, grace_ms=500)
                   for name in ("p1", "p2")]
        try:
            for worker in workers:
                worker.start()
            wait_for(lambda: db.execute("SELECT count(*) FROM ql3.worker_sessions WHERE status = 'online'")
                     .fetchone()[0] == 2, 60, "two workers registered")
            record = store.schedules.add(AddScheduleCommand(expression="@every 2s", argv=["sleep", "60"],
                                                            overlap=Overlap.REPLACE))
            wait_for(lambda: db.execute("SELECT count(*) FROM ql3.runs WHERE schedule_id = %s AND status = "
                                        "'cancelled'", (record.id,)).fetchone()[0] >= 2, 90,
                     "two runs of the schedule replaced")
            store.schedules.set_paused(record.id, True)
            replaced = db.execute(
                "SELECT r.id, r.cancel_reason FROM ql3.runs r WHERE r.schedule_id = %s AND r.status = 'cancelled' "
                "ORDER BY r.scheduled_for_ms", (record.id,)).fetchall()
            for run_id, reason in replaced:
                assert reason.startswith("replaced by")
                assert db.execute("SELECT count(*) FROM ql3.run_cancellation_dispatches WHERE run_id = %s",
                                  (run_id,)).fetchone()[0] == 1  # delivered through the dispatch
            # Never two Runs of the schedule executing at once, whichever worker ran them.
            spans = db.execute(
                "SELECT a.started_at_ms, a.finished_at_ms FROM ql3.run_attempts a JOIN ql3.runs r ON r.id = a.run_id "
                "WHERE r.schedule_id = %s AND a.started_at_ms IS NOT NULL AND a.finished_at_ms IS NOT NULL "
                "ORDER BY a.started_at_ms", (record.id,)).fetchall()
            assert len(spans) >= 2
            for (_, end), (start, _) in zip(spans, spans[1:]):
                assert start >= end
        finally:
            for worker in workers:
                worker.stop()
            kill_attempt_groups(db)
            store.close()


def test_a_worker_pauses_a_stored_schedule_that_cannot_fire_fires_the_others_and_stops_on_sigterm(
        pg_database: Any, owner: Any) -> None:
    pg_database.reset(owner, None)
    db = owner
    store = PostgresStore(pg_database.runtime_dsn)
    with private_root() as root:
        worker = Worker(root, "p1", pg_database.runtime_dsn, slots=1, env=SHORT_LEASES)
        try:
            ticker = store.schedules.add(AddScheduleCommand(expression="@every 2s", argv=["true"]))
            # Another program's row, due now: its zone's clock jumps over 10 April, every year.
            db.execute("INSERT INTO ql3.schedules (id, expression, command, overlap, next_fire_at_ms, created_at_ms, "
                       "updated_at_ms, time_zone) SELECT 'hostile', '0 * 10 4 *', '[\"true\"]', 'skip', n - 1, n, n, "
                       "'AAA-12BBB12,J1,J100/0' FROM ql3.now_ms() AS n")
            worker.start()
            wait_for(lambda: "schedule.paused_unfireable schedule=hostile" in worker.log_text(), 60,
                     "the worker to pause the schedule that cannot fire")
            wait_for(lambda: len(_fires(db, ticker.id)) >= 2, 60, "the other schedule to fire")
            worker.process.send_signal(signal.SIGTERM)
            assert worker.process.wait(timeout=30) == 0
            hostile = store.schedules.get("hostile")
            assert hostile.paused and hostile.pause_reason.endswith("[SCHEDULE_NEVER_FIRES]")
            assert _fires(db, "hostile") == []
            assert worker.log_text().count("schedule.paused_unfireable") == 1
        finally:
            worker.stop()
            kill_attempt_groups(db)
            store.close()


def test_the_migration_numbers_stored_schedules_in_list_order_and_the_identity_continues_after_them(
        owner: Any) -> None:
    """Migration 0012 on a table that holds schedules: run on a copy of the table as 0004 made it,
    in a scratch schema, inside a transaction rolled back (the session's database keeps its own)."""
    from cluster_postgres.migrations import known_migrations

    by_id = {m.id: m.sql for m in known_migrations()}
    text = by_id["0004_schedules"]
    start = text.index("CREATE TABLE ql3.schedules")
    create_table = text[start:text.index(";", start)].replace("ql3.", "scratch.")
    owner.execute("BEGIN")
    try:
        owner.execute("CREATE SCHEMA scratch")
        owner.execute(create_table)
        for schedule_id, created in (("c", 300), ("b", 100), ("a", 200), ("d", 100)):
            owner.execute("INSERT INTO scratch.schedules (id, expression, command, overlap, next_fire_at_ms, "
                          "created_at_ms, updated_at_ms, time_zone) VALUES (%s, '@daily', '[\"true\"]', 'skip', 0, %s, "
                          "%s, 'UTC0')", (schedule_id, created, created))
        owner.execute(by_id["0012_schedule_number_labels"].replace("ql3.", "scratch."))
        numbers = owner.execute("SELECT id, number FROM scratch.schedules ORDER BY number").fetchall()
        assert numbers == [("b", 1), ("d", 2), ("a", 3), ("c", 4)]  # creation time, then id: the list order
        added = owner.execute("INSERT INTO scratch.schedules (id, expression, command, overlap, next_fire_at_ms, "
                              "created_at_ms, updated_at_ms, time_zone) VALUES ('e', '@daily', '[\"true\"]', 'skip', "
                              "0, 400, 400, 'UTC0') RETURNING number").fetchone()[0]
        assert added == 5
        with pytest.raises(psycopg.errors.GeneratedAlways):  # never written by hand: the identity gives it
            owner.execute("INSERT INTO scratch.schedules (id, expression, command, overlap, next_fire_at_ms, "
                          "created_at_ms, updated_at_ms, time_zone, number) VALUES ('f', '@daily', '[\"true\"]', "
                          "'skip', 0, 400, 400, 'UTC0', 9)")
    finally:
        owner.execute("ROLLBACK")
