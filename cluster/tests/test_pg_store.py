"""The PostgreSQL ``Store`` (ports.py): database time, LISTEN/NOTIFY wake-up on commit, no
watermark to keep, and a ``where`` that never shows a password."""

from __future__ import annotations

import select
from typing import Any

from cluster_postgres.store import PostgresStore, describe_dsn
from edge_runtime.contract.runs import CancelRunCommand, SubmitRunCommand

START_MS = 1_700_000_000_000


def readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_the_store_reads_database_time_and_keeps_no_watermark(pg_database: Any, owner: Any) -> None:
    store = PostgresStore(pg_database.runtime_dsn)
    try:
        assert store.now_ms() == START_MS
        owner.execute("UPDATE ql3_test.clock SET now_ms = now_ms + 250")
        store.keep_time()
        store.keep_time(final=True)
        assert store.now_ms() == START_MS + 250
        assert owner.execute("SELECT count(*) FROM run_events").fetchone()[0] == 0
        run = store.runs.submit(SubmitRunCommand(argv=["true"]))
        assert run.created_at_ms == START_MS + 250  # the repositories share the store's time
    finally:
        store.close()


def test_a_committed_submit_or_cancel_wakes_a_listening_store_and_drain_clears_it(pg_database: Any, owner: Any) -> None:
    listener, writer = PostgresStore(pg_database.runtime_dsn), PostgresStore(pg_database.runtime_dsn)
    wake = listener.open_wake()
    try:
        assert not readable(wake.fileno(), 0.1)
        run = writer.runs.submit(SubmitRunCommand(argv=["true"]))
        assert readable(wake.fileno(), 5.0)
        assert wake.drain() >= 1
        assert not readable(wake.fileno(), 0.1)
        writer.runs.request_cancel(CancelRunCommand(run_id=run.id))
        assert readable(wake.fileno(), 5.0)
        assert wake.drain() >= 1
        assert wake.refused == [] and wake.where.startswith("LISTEN on the wake channel (host=")
    finally:
        wake.close()
        listener.close()
        writer.close()


def test_a_rolled_back_change_wakes_nobody(pg_database: Any, owner: Any) -> None:
    store = PostgresStore(pg_database.runtime_dsn)
    wake = store.open_wake()
    try:
        owner.execute("BEGIN")
        owner.execute("SELECT pg_notify(name, '') FROM ql3.wake_channel")
        owner.execute("ROLLBACK")
        assert not readable(wake.fileno(), 0.3)
        assert wake.drain() == 0
    finally:
        wake.close()
        store.close()


def test_where_never_shows_a_password() -> None:
    shown = describe_dsn("host=db.example port=5433 user=ql3_runtime password=s3cret dbname=qinglong sslmode=require")
    assert shown == "host=db.example port=5433 dbname=qinglong user=ql3_runtime"
    assert "s3cret" not in describe_dsn("postgresql://ql3_runtime:s3cret@db.example/qinglong")
