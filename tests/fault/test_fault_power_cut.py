"""Power cuts: cut a recorded repository workload at every sync boundary and at random write
offsets (with the unsynced tail torn), reopen with plain apsw, and require an intact database
holding every acknowledged operation and only states that satisfy the contract."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.support import fault_secrets
from tests.support import fault_stats
from tests.support.fault_workloads import WORKLOADS, check_cut, record

pytestmark = pytest.mark.fault

CAMPAIGN = "power-cut"


#: Steps per workload. A worker-lease step is a whole Run's lease cycle (about eight operations).
_SCALE = {"worker_lease": 4}


def _sizes(workload: str, long_mode: bool) -> tuple[int, int, int | None]:
    """(steps, torn cuts, cap on sync cuts) for one workload; long mode cuts at every sync."""
    steps, torn, cap = (160, 300, None) if long_mode else (30, 12, 45)
    return max(4, steps // _SCALE.get(workload, 1)), torn, cap


@pytest.mark.parametrize("checkpoint_pages", [None, 8], ids=["wal-only", "checkpointing"])
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_power_cut_at_every_sync_and_torn_writes(
    workload: str, checkpoint_pages: int | None, tmp_path: Path, rng: random.Random, long_mode: bool
) -> None:
    size, torn_cuts, cap = _sizes(workload, long_mode)
    recording = record(workload, tmp_path / "live", rng, size, checkpoint_pages=checkpoint_pages)
    fault_secrets.register(recording.tokens, tmp_path)
    vfs = recording.vfs
    synced_files = {op.path.rsplit("/", 1)[-1] for op in vfs.ops if op.kind == "sync"}
    # Named fault points: the cuts must land inside WAL commits and, when checkpointing, inside
    # checkpoints of the main file; a campaign that never reached them proved nothing.
    assert "edge-runtime.db-wal" in synced_files
    if checkpoint_pages is not None:
        assert "edge-runtime.db" in synced_files

    syncs = vfs.sync_positions()
    if cap is not None and len(syncs) > cap:
        syncs = sorted(rng.sample(syncs, cap))  # short mode: a seeded sample of the boundaries
    cuts = [(position, None) for position in syncs]
    writes = vfs.write_positions()
    cuts += [(position, rng) for position in rng.sample(writes, min(torn_cuts, len(writes)))]
    results = [check_cut(recording, position, tmp_path / "cut", torn) for position, torn in cuts]

    lost = sum(result.lost for result in results)
    violations = sum(1 for result in results if result.problems and not result.lost)
    fault_stats.add(fault_stats.CUT_POINTS, len(results), campaign=CAMPAIGN)
    fault_stats.add(fault_stats.ACKED_LOST, lost, campaign=CAMPAIGN)
    fault_stats.add(fault_stats.INVARIANT_VIOLATIONS, violations, campaign=CAMPAIGN)

    failures = [f"cut at {r.position}{' (torn)' if r.torn else ''}: {r.problems}" for r in results if r.problems]
    assert not failures, f"{len(failures)} of {len(results)} cuts failed; first: {failures[:3]}"
    assert fault_secrets.leaks_in_chunks(vfs.written_bytes(), recording.tokens) == []
    assert len(results) >= 20


def test_detector_catches_lost_acknowledgements(tmp_path: Path, rng: random.Random) -> None:
    """Self-test: with commits that do not sync (synchronous=OFF) the same check must report
    acknowledged operations lost, or the campaign above could not fail."""
    recording = record("dispatch", tmp_path / "live", rng, 20, pragmas=("PRAGMA synchronous = OFF",))
    fault_secrets.register(recording.tokens, tmp_path)
    # Only the open's migrations and the final close sync; cut just before the close's checkpoint.
    last_op = recording.acks[-2]
    results = [check_cut(recording, position, tmp_path / "cut") for position in range(last_op, last_op + 1)]
    assert results[0].lost > 0, results[0].problems
