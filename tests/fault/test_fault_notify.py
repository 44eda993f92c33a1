"""The notification outbox under ``kill -9`` of a real ``edge-runtime serve``: killed right after a
Run's end was committed, after a row was claimed, and after the provider took the message. After
the restart the message arrives, exactly once where nothing was sent before, and under the same
idempotency key where the provider took it but the service died before recording it (a webhook
receiver that keeps the key shows it once)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from edge_runtime.contract.notifications import OUTBOX_LEASE_MS, OutboxStatus, parse_rule
from edge_runtime.contract.runs import SubmitRunCommand
from edge_runtime.local.database import open_database
from edge_runtime.local.notifications import LocalNotificationRepository
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.wake import poke
from tests.support.fault_service import ServiceCampaign
from tests.support.notify_receiver import Receiver
from tests.support.service_harness import wait_for

pytestmark = pytest.mark.fault

WAIT_S = 60.0


def _outbox(db_path: Path):
    with open_database(db_path, create=False) as db:
        return LocalNotificationRepository(db).list_outbox()


@pytest.mark.parametrize("kill_at, sent_before_restart", [
    ("notify_after_end", 0), ("notify_before_send", 0), ("notify_after_send", 1)])
def test_a_kill_between_the_end_and_the_send_loses_nothing_and_repeats_only_under_one_key(
        tmp_path: Path, kill_at: str, sent_before_restart: int) -> None:
    campaign = ServiceCampaign(tmp_path, random.Random(0), clock_offset_ms=0,
                               env={"FAULT_KILL_AT": kill_at, "FAULT_KILL_MARK": str(tmp_path / "killed")})
    try:
        with Receiver("webhook") as receiver:
            with open_database(campaign.db_path) as db:
                notifications = LocalNotificationRepository(db)
                notifications.add_channel("hook", "webhook", {}, {"url": f"{receiver.url}/hook"})
                notifications.set_rules(None, [parse_rule("hook:on=failed")])
            first = campaign.serve()
            assert campaign.wait_serving(first)
            with open_database(campaign.db_path, create=False) as db:
                run_id = LocalRunRepository(db).submit(SubmitRunCommand(argv=["sh", "-c", "exit 3"], name="x")).id
            poke(campaign.db_path)
            first.wait(WAIT_S)  # it SIGKILLed itself at the step
            assert first.returncode == -9, campaign.log_tail(0)
            with open_database(campaign.db_path, create=False) as db:
                assert LocalRunRepository(db).get(run_id).status.value == "failed"
            [row] = _outbox(campaign.db_path)
            expected = OutboxStatus.PENDING if kill_at == "notify_after_end" else OutboxStatus.SENDING
            assert (row.run_id, row.status) == (run_id, expected)
            assert len(receiver.received) == sent_before_restart
            # The next service, after the dead one's lease expired (its clock moved on that far).
            campaign.set_clock_offset(OUTBOX_LEASE_MS + 5_000)
            second = campaign.serve()
            assert campaign.wait_serving(second)
            wait_for(lambda: _outbox(campaign.db_path)[0].status is OutboxStatus.SENT, "the message to be sent",
                     timeout=WAIT_S, interval=0.05)
            time.sleep(0.5)  # nothing more arrives
            keys = [request.headers["Idempotency-Key"] for request in receiver.received]
    finally:
        campaign.cleanup()
    assert len(keys) == sent_before_restart + 1
    assert len(set(keys)) == 1  # the same message: a receiver that keeps the key shows it once
    [row] = _outbox(campaign.db_path)
    assert row.tries == (1 if kill_at == "notify_after_end" else 2)
