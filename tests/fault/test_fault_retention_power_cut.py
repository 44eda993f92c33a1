"""Power cuts in the middle of retention: cut a recorded prune at every sync boundary (and at
torn writes), reopen, and require an intact database where every Run is whole or entirely gone,
and the Runs deleted are exactly an oldest-first prefix (docs/storage.md, storage bounds)."""

from __future__ import annotations

import random
from pathlib import Path

import apsw
import pytest

from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.retention import LocalRetention, RetentionPolicy
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.worker import WorkerSession
from tests.support.vfs_shim import RecordingVFS

from tests.support.retention import finished_run, start_run

pytestmark = pytest.mark.fault

_WHOLE = """
SELECT
  (SELECT count(*) FROM run_events e WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = e.run_id)),
  (SELECT count(*) FROM run_attempts a WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = a.run_id)),
  (SELECT count(*) FROM run_dispatch_leases l WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = l.run_id)),
  (SELECT count(*) FROM runs r WHERE r.event_sequence <> (SELECT count(*) FROM run_events e WHERE e.run_id = r.id)),
  (SELECT count(*) FROM runs r WHERE NOT EXISTS (SELECT 1 FROM run_attempts a WHERE a.run_id = r.id)
                                 AND r.status <> 'queued')
"""


def test_a_power_cut_during_a_prune_leaves_only_whole_runs(tmp_path: Path, rng: random.Random, long_mode: bool) -> None:
    live = tmp_path / "live"
    live.mkdir()
    clock = ManualClock(1_700_000_000_000)
    with open_database(live / "edge-runtime.db", clock=clock) as db:
        runs = LocalRunRepository(db)
        worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=2, session_lease_ms=120_000, run_lease_ms=60_000)
        worker.register()
        order = [finished_run(runs, worker, clock=clock)[0] for _ in range(70)]
        running, _ = start_run(runs, worker)
    vfs = RecordingVFS()
    try:
        db = open_database(live / "edge-runtime.db", clock=clock, vfs=vfs.name)
        start = vfs.position()
        retention = LocalRetention(db, RetentionPolicy(retain_runs=3, retain_days=7, log_total_max_bytes=1 << 20), None)
        while retention.prune_step():
            pass
        assert db.connection.execute("SELECT count(*) FROM runs").fetchone()[0] == 4
        db.close()
    finally:
        vfs.unregister()
    syncs = [p for p in vfs.sync_positions() if p > start]
    writes = [p for p in vfs.write_positions() if p > start]
    if not long_mode:
        syncs = sorted(rng.sample(syncs, min(30, len(syncs))))
    cuts = [(p, None) for p in syncs] + [(p, rng) for p in rng.sample(writes, min(20 if not long_mode else 100, len(writes)))]
    assert len(cuts) >= 20
    for index, (position, torn) in enumerate(cuts):
        copy = vfs.materialise(position, tmp_path / f"cut{index}", torn)[str(live / "edge-runtime.db")]
        connection = apsw.Connection(str(copy))
        try:
            assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok", position
            assert connection.execute(_WHOLE).fetchone() == (0, 0, 0, 0, 0), position
            kept = {row[0] for row in connection.execute("SELECT id FROM runs")}
            assert running in kept, position
            gone = [run_id for run_id in order if run_id not in kept]
            assert gone == order[: len(gone)], position  # oldest first, no gaps
        finally:
            connection.close()
