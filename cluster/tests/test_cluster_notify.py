"""Notifications on the Cluster Profile (docs/notifications.md): the outbox rows of a Run's end
written in its transaction on PostgreSQL, and every worker's sender delivering the same outbox
under leases, so that each message is sent once however many workers race for it."""

from __future__ import annotations

import io
import threading
from typing import Any

import psycopg
import pytest

from cluster_postgres.store import PostgresStore
from edge_runtime.contract.notifications import OutboxStatus, parse_rule
from edge_runtime.contract.runs import CancelRunCommand, SubmitRunCommand
from edge_runtime.service.journal import Journal
from edge_runtime.service.notify_sender import NotifySender
from edge_runtime.service.notify_transport import Transports
from tests.support.cluster_serve_harness import Worker, private_root, wait_for
from tests.support.notify_receiver import Receiver

BUILTIN = Transports(curl=None, curl_protocols=[], curl_tls=None, uclient_fetch=None, python_ssl=False)
TOKEN = "cluster-hook-token-0123456789"


@pytest.fixture
def stores(pg_database: Any, owner: Any):
    made: list[PostgresStore] = []

    def open_one() -> PostgresStore:
        made.append(PostgresStore(pg_database.runtime_dsn))
        return made[-1]

    yield open_one
    for store in made:
        store.close()


def test_a_runs_end_writes_its_outbox_row_in_its_transaction(stores, owner: Any) -> None:
    store = stores()
    with Receiver("webhook") as receiver:
        store.notifications.add_channel("hook", "webhook", {}, {"url": f"{receiver.url}/hook?token={TOKEN}"})
    store.notifications.set_rules(None, [parse_rule("hook:on=cancelled")])
    run = store.runs.submit(SubmitRunCommand(argv=["true"], name="c"))
    store.runs.request_cancel(CancelRunCommand(run_id=run.id))
    [row] = store.notifications.list_outbox(run_id=run.id)
    assert (row.status, row.outcome, row.channel) == (OutboxStatus.PENDING, "cancelled", "hook")
    assert TOKEN in store.notifications.secret_values()
    # Removed: marked, its secrets cleared (no role deletes), its rules no longer match.
    store.notifications.remove_channel("hook")
    assert owner.execute("SELECT secret_params, removed_at_ms IS NOT NULL FROM ql3.notify_channels").fetchone() \
        == ({}, True)
    assert store.notifications.rules_of(None) == [] and TOKEN not in store.notifications.secret_values()


def test_the_admin_role_reads_nothing_of_the_notifications(pg_database: Any, owner: Any) -> None:
    with psycopg.connect(pg_database.cluster_admin_dsn, autocommit=True) as conn:
        for table in ("notify_channels", "notify_rules", "notify_outbox"):
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(f"SELECT 1 FROM ql3.{table}")
            assert caught.value.sqlstate == "42501"


def test_two_workers_senders_racing_send_each_message_once(stores, owner: Any) -> None:
    first, second = stores(), stores()
    with Receiver("webhook") as receiver:
        first.notifications.add_channel("hook", "webhook", {}, {"url": f"{receiver.url}/hook"})
        queued = {r.id for _ in range(30) for r in first.notifications.enqueue_message("t", "b", ["hook"])}
        senders = [NotifySender(open_store=lambda s=s: s, journal=Journal(io.StringIO()), owner=f"worker-{i}/1",
                                transports=BUILTIN) for i, s in enumerate((first, second))]
        barrier = threading.Barrier(2)

        def drain(sender: NotifySender, store: PostgresStore) -> None:
            barrier.wait()
            sender._pass(store)

        threads = [threading.Thread(target=drain, args=(sender, store)) for sender, store in zip(senders, (first, second))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    keys = [request.headers["Idempotency-Key"] for request in receiver.received]
    assert len(keys) == 30 and len(set(keys)) == 30
    rows = owner.execute("SELECT status, tries, last_error, count(*) FROM ql3.notify_outbox GROUP BY 1, 2, 3").fetchall()
    assert rows == [("sent", 1, None, 30)]
    assert {row.id for row in first.notifications.list_outbox(limit=100)} == queued


@pytest.fixture
def root():
    with private_root() as made:
        yield made


def test_two_real_workers_send_each_failed_runs_message_once(pg_database: Any, owner: Any, stores, root) -> None:
    pg_database.reset(owner, None)  # real database time: workers run
    store = stores()
    workers = [Worker(root, f"w{i}", pg_database.runtime_dsn, slots=2,
                      env={"EDGE_RUNTIME_POLL_INTERVAL_MS": "500"}) for i in (1, 2)]
    with Receiver("webhook") as receiver:
        store.notifications.add_channel("hook", "webhook", {}, {"url": f"{receiver.url}/hook"})
        store.notifications.set_rules(None, [parse_rule("hook:on=failed")])
        try:
            for worker in workers:
                worker.start()
            wait_for(lambda: all("notify.transports" in w.log_text() for w in workers), 60, "both senders")
            runs = [store.runs.submit(SubmitRunCommand(argv=["sh", "-c", "exit 2"], name=f"r{i}")).id
                    for i in range(6)]
            wait_for(lambda: len(receiver.received) >= 6 and all(
                r.status is OutboxStatus.SENT for r in store.notifications.list_outbox()), 90, "six messages sent")
        finally:
            for worker in workers:
                worker.stop()
    keys = [request.headers["Idempotency-Key"] for request in receiver.received]
    assert len(keys) == 6 and len(set(keys)) == 6
    assert sorted(r.json()["run"] for r in receiver.received) == sorted(runs)
    senders = {row.lease_owner for row in store.notifications.list_outbox()}  # cleared once sent
    assert senders == {None}
