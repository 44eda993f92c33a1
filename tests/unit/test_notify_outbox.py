"""The notification outbox: written in the transaction that ends a Run, coalesced per rule and
source, claimed under a lease, retried with backoff and given up with the reason."""

from __future__ import annotations

import pytest

from edge_runtime.contract import notifications as rules
from edge_runtime.contract.notifications import (
    InvalidNotifyChannelError,
    InvalidNotifyRuleError,
    NotifyChannelExistsError,
    NotifyRule,
    OutboxStatus,
    Outcome,
    parse_rule,
)
from edge_runtime.contract.redaction import store_redactor
from edge_runtime.contract.runs import CancelRunCommand, RunStatus, SubmitRunCommand
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.runs import end_run
from edge_runtime.local.store import LocalStore

TOKEN = "tg-token-0123456789-secret"


@pytest.fixture
def store(tmp_path):
    clock = ManualClock(1_700_000_000_000)
    db = open_database(tmp_path / "e.db", clock=clock)
    store = LocalStore(db, str(tmp_path / "e.db"), clock)
    yield store
    store.close()


def _end(store: LocalStore, status: RunStatus, *, name: str = "nightly") -> str:
    run = store.runs.submit(SubmitRunCommand(argv=["true"], name=name))
    with store.db.write() as now:
        end_run(store.db.connection, run.id, status, now, "test", attempt_id=None, extra={})
    return run.id


def _channel(store: LocalStore, name: str = "phone") -> None:
    store.notifications.add_channel(name, "telegram", {"chat_id": "42"}, {"token": TOKEN})


def test_rules_parse_and_refuse() -> None:
    assert parse_rule("phone") == NotifyRule(channel="phone", on=[Outcome.FAILED, Outcome.TIMEOUT, Outcome.LOST])
    assert parse_rule("phone:on=all").on == list(Outcome)
    assert parse_rule("phone:on=timeout,failed").on == [Outcome.FAILED, Outcome.TIMEOUT]
    for bad in ("phone:on=", "phone:off=failed", "phone:on=exploded", "-x", ""):
        with pytest.raises(InvalidNotifyRuleError):
            parse_rule(bad)


def test_channels_check_their_declared_params(store) -> None:
    with pytest.raises(InvalidNotifyChannelError, match="needs token"):
        store.notifications.add_channel("x", "telegram", {"chat_id": "1"}, {})
    with pytest.raises(InvalidNotifyChannelError, match="no parameter 'tokn'"):
        store.notifications.add_channel("x", "telegram", {"chat_id": "1", "tokn": "a"}, {"token": "b"})
    with pytest.raises(InvalidNotifyChannelError, match="unknown channel kind"):
        store.notifications.add_channel("x", "pager", {}, {})
    # a parameter declared secret stays secret even when given with --param
    shown = store.notifications.add_channel("x", "telegram", {"chat_id": "1", "token": TOKEN}, {})
    assert shown.secret_params == ["token"] and "token" not in shown.params
    with pytest.raises(NotifyChannelExistsError):
        _channel(store, "x")
    assert TOKEN in store.notifications.secret_values()
    assert store_redactor(store).text(f"url /bot{TOKEN}/send") == "url /bot***/send"


def test_a_run_end_writes_its_outbox_row_in_the_same_transaction(store) -> None:
    _channel(store)
    store.notifications.set_rules(None, [parse_rule("phone")])
    ok = _end(store, RunStatus.SUCCEEDED, name="a")
    failed = _end(store, RunStatus.FAILED, name="b")
    assert store.notifications.list_outbox(run_id=ok) == []
    [row] = store.notifications.list_outbox(run_id=failed)
    assert (row.status, row.outcome, row.channel, row.tries) == (OutboxStatus.PENDING, Outcome.FAILED, "phone", 0)


def test_a_run_end_rolled_back_leaves_no_outbox_row(store, fail_next_commit) -> None:
    import apsw

    _channel(store)
    store.notifications.set_rules(None, [parse_rule("phone:on=all")])
    run = store.runs.submit(SubmitRunCommand(argv=["true"], name="x"))
    fail_next_commit(apsw.FullError)
    with pytest.raises(Exception):
        store.runs.request_cancel(CancelRunCommand(run_id=run.id))
    assert store.runs.get(run.id).status is RunStatus.QUEUED
    assert store.notifications.list_outbox() == []


def test_a_schedules_own_rules_replace_the_default(store) -> None:
    from edge_runtime.contract.schedules import AddScheduleCommand

    _channel(store, "phone")
    _channel(store, "mail")
    store.notifications.set_rules(None, [parse_rule("phone:on=all")])
    schedule = store.schedules.add(AddScheduleCommand(expression="@daily", argv=["true"], name="s"))
    store.notifications.set_rules(schedule.id, [parse_rule("mail:on=cancelled")])
    run = store.runs.submit(SubmitRunCommand(argv=["true"]))
    store.db.connection.execute("UPDATE runs SET schedule_id = ? WHERE id = ?", (schedule.id, run.id))
    store.runs.request_cancel(CancelRunCommand(run_id=run.id))
    assert [r.channel for r in store.notifications.list_outbox(run_id=run.id)] == ["mail"]


def test_coalescing_sends_the_first_then_one_summary_per_window(store) -> None:
    _channel(store)
    store.notifications.set_rules(None, [parse_rule("phone")])
    first = _end(store, RunStatus.FAILED)
    for _ in range(5):
        store.clock.advance(60_000)
        _end(store, RunStatus.FAILED)
    rows = store.notifications.list_outbox()
    assert len(rows) == 2
    summary, direct = rows
    assert direct.run_id == first and direct.coalesced == 0
    assert summary.coalesced == 5 and summary.status is OutboxStatus.PENDING
    assert summary.next_at_ms == direct.created_at_ms + rules.COALESCE_WINDOW_MS
    # the direct message goes at once, the summary when the window closes; the summary opens the next
    [direct_claim] = store.notifications.claim_due("s")
    assert direct_claim.coalesced == 0 and store.notifications.record_sent(direct_claim, "s")
    store.clock.set(summary.next_at_ms)
    [sending] = store.notifications.claim_due("s")
    assert sending.coalesced == 5 and store.notifications.record_sent(sending, "s")
    store.clock.advance(60_000)
    _end(store, RunStatus.FAILED)
    newest = store.notifications.list_outbox()[0]
    assert (len(store.notifications.list_outbox()), newest.coalesced) == (3, 1)
    # a failure after every window closed is sent at once again
    store.clock.advance(3 * rules.COALESCE_WINDOW_MS)
    _end(store, RunStatus.FAILED)
    newest = store.notifications.list_outbox()[0]
    assert (len(store.notifications.list_outbox()), newest.coalesced) == (4, 0)


def test_claim_lease_retry_backoff_and_give_up(store) -> None:
    _channel(store)
    store.notifications.set_rules(None, [parse_rule("phone")])
    _end(store, RunStatus.FAILED)
    [claimed] = store.notifications.claim_due("sender-a")
    assert store.notifications.claim_due("sender-b") == []  # leased
    assert store.notifications.record_failure(claimed, "sender-a", "HTTP 502", retryable=True) is OutboxStatus.PENDING
    assert store.notifications.claim_due("sender-a") == []  # backing off
    store.clock.advance(rules.retry_delay_ms(1))
    [again] = store.notifications.claim_due("sender-a")
    assert again.idempotency_key == claimed.idempotency_key and again.tries == 2
    # a sender killed mid-send: its lease expires and another sender takes the row, same key
    store.clock.advance(rules.OUTBOX_LEASE_MS)
    [taken] = store.notifications.claim_due("sender-b")
    assert taken.tries == 3
    assert store.notifications.record_sent(again, "sender-a") is False  # fenced: the lease moved on
    assert store.notifications.record_failure(taken, "sender-b", "HTTP 401 bad token", retryable=False) \
        is OutboxStatus.GIVEN_UP
    [row] = store.notifications.list_outbox()
    assert row.status is OutboxStatus.GIVEN_UP and row.last_error == "HTTP 401 bad token"


def test_the_last_try_gives_up_after_max_tries(store) -> None:
    _channel(store)
    store.notifications.set_rules(None, [parse_rule("phone")])
    _end(store, RunStatus.FAILED)
    for tries in range(1, rules.MAX_TRIES + 1):
        [claimed] = store.notifications.claim_due("s")
        assert claimed.tries == tries
        status = store.notifications.record_failure(claimed, "s", "connection refused", retryable=True)
        store.clock.advance(rules.RETRY_MAX_MS)
    assert status is OutboxStatus.GIVEN_UP
    assert store.notifications.claim_due("s") == []


def test_a_url_or_header_secret_is_masked_in_its_pieces_too(store) -> None:
    store.notifications.add_channel("hook", "webhook", {}, {
        "url": "https://hooks.example.com/services/T0001/B0002/XXXX1SECRETPATH?token=QUERYSECRET1&x=1",
        "headers": "Authorization: Bearer HEADERSECRET9"})
    redactor = store_redactor(store)
    text = "posted to XXXX1SECRETPATH with QUERYSECRET1 and HEADERSECRET9; x=1 services"
    assert redactor.text(text) == "posted to *** with *** and ***; x=1 services"


def test_a_database_migrated_past_it_gets_the_notifications_migration_later(tmp_path) -> None:
    """Devices migrated to 0018 before 0017 existed: 0017 is applied after it, and the schema it
    leaves is the one the migrations produce (verified when the database is opened again)."""
    import apsw

    from edge_runtime.local import migrations

    path = str(tmp_path / "old.db")
    connection = apsw.Connection(path)
    older = [m for m in migrations.known_migrations() if m.id != "0017_notifications"]
    migrations.apply_pending(connection, path, older, ManualClock(1))
    connection.close()
    for opening in (2, 3):
        db = open_database(path, clock=ManualClock(opening))
        try:
            applied = [row[0] for row in db.connection.execute("SELECT id FROM schema_migrations")]
            assert "0017_notifications" in applied
            assert db.connection.execute("SELECT count(*) FROM notify_outbox").fetchone() == (0,)
        finally:
            db.close()


def test_the_outcomes_a_rule_reads_timeout_and_lost_included(store) -> None:
    from edge_runtime.contract.notifications import run_outcome
    from edge_runtime.contract.runs import AttemptStatus
    from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
    from edge_runtime.service.worker import WorkerSession

    assert run_outcome("cancelled", cancel_reason="timeout", last_attempt_status="cancelled") is Outcome.TIMEOUT
    assert run_outcome("cancelled", cancel_reason="by hand", last_attempt_status="cancelled") is Outcome.CANCELLED
    assert run_outcome("failed", cancel_reason=None, last_attempt_status="lost") is Outcome.LOST
    assert run_outcome("failed", cancel_reason=None, last_attempt_status="failed") is Outcome.FAILED
    _channel(store)
    store.notifications.set_rules(None, [parse_rule("phone:on=lost")])
    worker = WorkerSession(LocalWorkerLeaseRepository(store.db), worker_id="w", slots=1, session_lease_ms=60_000,
                           run_lease_ms=60_000)
    worker.register()
    failed = _end(store, RunStatus.FAILED, name="plain failure")  # not on this rule
    run = store.runs.submit(SubmitRunCommand(argv=["true"], name="vanished"))
    attempt_id = worker.start(run.id).lease.attempt_id
    store.runs.finish_attempt(attempt_id, AttemptStatus.LOST, actor_id=worker.owner, reason="process vanished")
    assert store.notifications.list_outbox(run_id=failed) == []
    [row] = store.notifications.list_outbox(run_id=run.id)
    assert row.outcome is Outcome.LOST
