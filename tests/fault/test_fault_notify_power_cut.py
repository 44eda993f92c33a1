"""Power cuts while Runs end and their notifications are claimed and recorded: cut the recorded
writes at every sync boundary (and at torn writes), reopen, and require an intact database where
a Run's end and its outbox row are both there or neither is (docs/notifications.md)."""

from __future__ import annotations

import random
from pathlib import Path

import apsw
import pytest

from edge_runtime.contract.notifications import parse_rule
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.notifications import LocalNotificationRepository
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.worker import WorkerSession
from tests.support.retention import finished_run
from tests.support.vfs_shim import RecordingVFS

pytestmark = pytest.mark.fault

#: Ended Runs without their row, rows of Runs that did not end, and rows in more than one state.
_TOGETHER = """
SELECT
  (SELECT count(*) FROM runs r WHERE r.finished_at_ms IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM notify_outbox o WHERE o.run_id = r.id)),
  (SELECT count(*) FROM notify_outbox o JOIN runs r ON r.id = o.run_id WHERE r.finished_at_ms IS NULL),
  (SELECT count(*) FROM (SELECT run_id FROM notify_outbox GROUP BY run_id HAVING count(*) > 1))
"""


def test_a_power_cut_never_keeps_an_end_without_its_notification(tmp_path: Path, rng: random.Random,
                                                                  long_mode: bool) -> None:
    live = tmp_path / "live"
    live.mkdir()
    clock = ManualClock(1_700_000_000_000)
    with open_database(live / "edge-runtime.db", clock=clock) as db:
        notifications = LocalNotificationRepository(db)
        notifications.add_channel("hook", "webhook", {}, {"url": "http://127.0.0.1:9/hook"})
        notifications.set_rules(None, [parse_rule("hook:on=all")])
    vfs = RecordingVFS()
    try:
        db = open_database(live / "edge-runtime.db", clock=clock, vfs=vfs.name)
        start = vfs.position()
        runs, notifications = LocalRunRepository(db), LocalNotificationRepository(db)
        worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=2, session_lease_ms=120_000,
                               run_lease_ms=60_000)
        worker.register()
        for index in range(12):  # Runs without a name: each its own source, one row each
            finished_run(runs, worker, clock=clock)
            for message in notifications.claim_due("sender"):
                if index % 3:
                    notifications.record_sent(message, "sender")
                else:
                    notifications.record_failure(message, "sender", "HTTP 502", retryable=True)
        db.close()
    finally:
        vfs.unregister()
    syncs = [p for p in vfs.sync_positions() if p > start]
    writes = [p for p in vfs.write_positions() if p > start]
    if not long_mode:
        syncs = sorted(rng.sample(syncs, min(30, len(syncs))))
    cuts = [(p, None) for p in syncs] + [(p, rng) for p in rng.sample(writes, min(20 if not long_mode else 100,
                                                                                   len(writes)))]
    assert len(cuts) >= 20
    ended_counts = set()
    for index, (position, torn) in enumerate(cuts):
        copy = vfs.materialise(position, tmp_path / f"cut{index}", torn)[str(live / "edge-runtime.db")]
        connection = apsw.Connection(str(copy))
        try:
            assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok", position
            assert connection.execute(_TOGETHER).fetchone() == (0, 0, 0), position
            ended_counts.add(connection.execute("SELECT count(*) FROM runs WHERE finished_at_ms IS NOT NULL")
                             .fetchone()[0])
        finally:
            connection.close()
    assert len(ended_counts) > 3  # the cuts fell between different ends, not all at one point
