"""kill -9 of a real ``serve`` between the steps of the start sequence (issue 9): after the start
transaction (Attempt + Run Lease + barrier), just before the spawn, just after it (a process
exists, its identity not recorded), and after the identity was recorded. A new service then
finds what was left within one Run Lease; the Run ends exactly once, its command runs at most
once, the database keeps every invariant, and the slot is free again (the next Run succeeds).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

import fault_stats
from fault_service import _COMMANDS, ServiceCampaign, lines

from edge_runtime.contract.runs import SubmitRunCommand
from edge_runtime.local.database import open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.wake import poke

pytestmark = pytest.mark.fault

CAMPAIGN = "start-sequence"
TERMINAL = ("succeeded", "failed", "cancelled")


def _submit(campaign: ServiceCampaign, label: str) -> str:
    with open_database(campaign.db_path) as db:
        run = LocalRunRepository(db).submit(SubmitRunCommand(argv=["/bin/sh", "-c", _COMMANDS["quick"], label]))
    campaign.labels[run.id] = label
    poke(campaign.db_path)
    return run.id


def _wait_status(campaign: ServiceCampaign, run_id: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        with open_database(campaign.db_path, create=False) as db:
            status = LocalRunRepository(db).get(run_id).status.value
        if status in TERMINAL or time.monotonic() > deadline:
            return status
        time.sleep(0.1)


@pytest.mark.parametrize("step", ["after_start", "before_spawn", "after_spawn", "after_record"])
def test_kill_9_between_the_steps_of_the_start_sequence(tmp_path: Path, rng: random.Random, step: str) -> None:
    mark = tmp_path / "killed"
    campaign = ServiceCampaign(tmp_path, rng, env={"FAULT_KILL_AT": step, "FAULT_KILL_MARK": str(mark)})
    try:
        doomed = campaign.serve()
        assert campaign.wait_serving(doomed)
        run_id = _submit(campaign, "quick-0")
        assert doomed.wait(15) == -9 and mark.exists(), campaign.log_tail(0)
        campaign.kills += 1
        campaign.check(f"after the kill at {step}")
        survivor = campaign.serve()
        assert campaign.wait_serving(survivor)
        status = _wait_status(campaign, run_id)
        assert status in TERMINAL, f"the run was stranded {status}: {campaign.log_tail(1, 8)}"
        with open_database(campaign.db_path, create=False) as db:
            runs = LocalRunRepository(db)
            ends = [e for e in runs.events(run_id) if e.type in {f"run.{s}" for s in TERMINAL}]
            attempts = runs.attempts(run_id)
        assert len(ends) == 1 and len(attempts) == 1  # ended once; no Attempt churn
        starts = [line for line in lines(campaign.starts) if line.startswith("quick-0 ")]
        if step in ("after_start", "before_spawn"):
            assert starts == []
        assert len(starts) <= 1  # never twice, whatever the step
        # A process may have started past the barrier, so the Run fails rather than runs again.
        assert status == "failed"
        nxt = _submit(campaign, "quick-1")
        assert _wait_status(campaign, nxt) == "succeeded"  # the slot is free again
        campaign.check(f"after recovery from {step}")
    finally:
        campaign.cleanup()
        fault_stats.add(fault_stats.KILLS, campaign.kills, campaign=CAMPAIGN)
        fault_stats.add(fault_stats.INVARIANT_VIOLATIONS, len(campaign.violations), campaign=CAMPAIGN)
    assert campaign.violations == []
