"""The outbox's sender against a local receiver: a Run's real end becomes one message with its
status, exit and masked log; a receiver that fails then recovers gets it after the backoff, under
the same idempotency key; a refusal is given up with the reason; a summary says how many."""

from __future__ import annotations

import io

import pytest

from edge_runtime.contract import notifications as rules
from edge_runtime.contract.env_entries import NewEnvEntry
from edge_runtime.contract.notifications import OutboxStatus, parse_rule
from edge_runtime.contract.runs import AttemptStatus, ProcessIdentity, SubmitRunCommand
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.store import LocalStore
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.journal import Journal
from edge_runtime.service.notify_sender import NotifySender
from edge_runtime.service.notify_transport import Transports
from edge_runtime.service.process_identity import read_boot_id
from edge_runtime.service.worker import WorkerSession
from tests.support.notify_receiver import Receiver

ENV_SECRET = "cookie-account-secret-0001"
HOOK_TOKEN = "hook-token-abcdef-123456"
BUILTIN = Transports(curl=None, curl_protocols=[], curl_tls=None, uclient_fetch=None, python_ssl=False)


@pytest.fixture
def store(tmp_path):
    clock = ManualClock(1_765_000_000_000)
    db = open_database(tmp_path / "e.db", clock=clock)
    store = LocalStore(db, str(tmp_path / "e.db"), clock)
    store.environment.add([NewEnvEntry(name="COOKIE", value=ENV_SECRET, secret=True)])
    yield store
    store.close()


def _failed_run(store: LocalStore, tmp_path, *, name: str = "nightly") -> str:
    """A Run whose one Attempt printed a secret and exited 3: ended as the service ends it."""
    run = store.runs.submit(SubmitRunCommand(argv=["sh", "-c", "exit 3"], name=name))
    worker = WorkerSession(LocalWorkerLeaseRepository(store.db), worker_id="w", slots=1, session_lease_ms=60_000,
                           run_lease_ms=60_000)
    worker.register()
    attempt_id = worker.start(run.id).lease.attempt_id
    log = tmp_path / f"{attempt_id}.log"
    log.write_text(f"starting\nusing cookie {ENV_SECRET}\nand the hook {HOOK_TOKEN}\nboom\n")
    store.runs.record_running(attempt_id, ProcessIdentity(4242, 4242, 777, read_boot_id()), log_path=str(log),
                              actor_id=worker.owner)
    store.clock.advance(65_000)
    store.runs.finish_attempt(attempt_id, AttemptStatus.FAILED, actor_id=worker.owner, exit_code=3)
    return run.id


def _sender(store, journal_out=None) -> NotifySender:
    return NotifySender(open_store=lambda: store, journal=Journal(journal_out or io.StringIO()), owner="w/1",
                        transports=BUILTIN)


def _hook(store, receiver) -> None:
    store.notifications.add_channel("hook", "webhook", {}, {"url": f"{receiver.url}/hook?token={HOOK_TOKEN}"})
    store.notifications.set_rules(None, [parse_rule("hook")])


def test_a_failed_run_arrives_once_with_its_status_exit_and_masked_log(store, tmp_path) -> None:
    journal = io.StringIO()
    with Receiver("webhook") as receiver:
        _hook(store, receiver)
        run_id = _failed_run(store, tmp_path)
        sender = _sender(store, journal)
        sender._pass(store)
        sender._pass(store)  # nothing left: nothing sent again
    [request] = receiver.received
    body = request.json()
    assert body["title"] == "nightly: failed" and body["status"] == "failed" and body["run"] == run_id
    content = body["content"]
    assert "Exit: 3" in content and "Duration: 1m05s" in content and content.endswith("boom\n")
    assert ENV_SECRET not in content and "using cookie ***" in content
    assert HOOK_TOKEN not in content and "and the hook ***" in content  # a channel's secret is masked too
    [row] = store.notifications.list_outbox(run_id=run_id)
    assert row.status is OutboxStatus.SENT and row.tries == 1
    assert HOOK_TOKEN not in journal.getvalue() and ENV_SECRET not in journal.getvalue()


def test_a_receiver_that_fails_then_recovers_gets_it_after_the_backoff(store, tmp_path) -> None:
    with Receiver("webhook") as receiver:
        _hook(store, receiver)
        receiver.answers = [(503, b"down"), (502, b"still down")]
        run_id = _failed_run(store, tmp_path)
        sender = _sender(store)
        sender._pass(store)
        [row] = store.notifications.list_outbox(run_id=run_id)
        assert (row.status, row.tries, row.last_error) == (OutboxStatus.PENDING, 1, "HTTP 503: down")
        assert row.next_at_ms == store.now_ms() + rules.retry_delay_ms(1)
        sender._pass(store)  # not due yet: nothing sent
        assert len(receiver.received) == 1
        store.clock.advance(rules.retry_delay_ms(1))
        sender._pass(store)
        store.clock.advance(rules.retry_delay_ms(2))
        sender._pass(store)
    keys = [r.headers["Idempotency-Key"] for r in receiver.received]
    assert len(keys) == 3 and len(set(keys)) == 1
    [row] = store.notifications.list_outbox(run_id=run_id)
    assert (row.status, row.tries) == (OutboxStatus.SENT, 3)


def test_a_refusal_is_given_up_with_the_reason_masked(store, tmp_path) -> None:
    with Receiver("webhook") as receiver:
        _hook(store, receiver)
        receiver.answers = [(401, f"bad token {HOOK_TOKEN}".encode())]
        run_id = _failed_run(store, tmp_path)
        _sender(store)._pass(store)
    [row] = store.notifications.list_outbox(run_id=run_id)
    assert row.status is OutboxStatus.GIVEN_UP and row.last_error == "HTTP 401: bad token ***"


def test_a_flapping_schedule_sends_the_first_then_one_summary(store, tmp_path) -> None:
    with Receiver("webhook") as receiver:
        _hook(store, receiver)
        sender = _sender(store)
        for _ in range(6):  # fails every minute
            _failed_run(store, tmp_path, name="flappy")
            sender._pass(store)
            store.clock.advance(60_000 - 65_000 + 60_000)
        store.clock.advance(rules.COALESCE_WINDOW_MS)
        sender._pass(store)
    titles = [r.json()["title"] for r in receiver.received]
    assert titles == ["flappy: failed", "flappy: 5 more notifications (failed)"]
    assert "5 more ends of flappy matched since" in receiver.received[1].json()["content"]


def test_a_removed_channel_gives_its_messages_up(store, tmp_path) -> None:
    with Receiver("webhook") as receiver:
        _hook(store, receiver)
        run_id = _failed_run(store, tmp_path)
        store.notifications.remove_channel("hook")
        _sender(store)._pass(store)
    [row] = store.notifications.list_outbox(run_id=run_id)
    assert row.status is OutboxStatus.GIVEN_UP and row.last_error == "channel hook was removed"
    assert receiver.received == []


def test_notify_send_queues_a_message_through_the_default_channels(store) -> None:
    with Receiver("webhook") as receiver:
        _hook(store, receiver)
        [queued] = store.notifications.enqueue_message("from a script", f"value {ENV_SECRET}", None)
        _sender(store)._pass(store)
    [request] = receiver.received
    assert request.json()["title"] == "from a script" and request.json()["content"] == "value ***"
    assert store.notifications.outbox_row(queued.id).status is OutboxStatus.SENT
