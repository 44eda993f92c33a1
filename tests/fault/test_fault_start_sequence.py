"""kill -9 of a real ``serve`` between the steps of the start sequence (docs/operating.md): after the start
transaction (Attempt + Run Lease + barrier), just before the spawn, just after it (a process
exists, its identity not recorded), and after the identity was recorded. A new service then
finds what was left within one Run Lease; the Run ends exactly once, its command runs at most
once, the database keeps every invariant, and the slot is free again (the next Run succeeds).
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from tests.support import fault_stats
from tests.support.fault_service import _COMMANDS, ServiceCampaign, lines

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
        if step == "after_record":
            # Its identity was recorded: re-adopted, its monitor kept its true end.
            assert status == "succeeded"
        else:
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


def _wait_log(campaign: ServiceCampaign, index: int, needle: str, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in (campaign.device / f"serve-{index}.log").read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("failure", ["transient", "lasting"])
def test_a_stop_retries_the_pending_undo_of_a_failed_start(tmp_path: Path, rng: random.Random, failure: str) -> None:
    """A compensation is never forgotten: the spawn fails (no process), its undo fails (the
    database busy) and is pending when ``serve`` gets SIGTERM. The stop retries it (bounded)
    before it exits: a ``transient`` failure clears during the stop and the Run is back in the
    queue when the service is gone; a ``lasting`` one is logged as left, and the next service
    settles it within one Run Lease. Either way the Run then ends once, its command run at most
    once (exactly once once it was requeued), and the slot is free."""
    undo_fails = tmp_path / "undo-fails"
    undo_fails.touch()
    campaign = ServiceCampaign(tmp_path, rng, env={"FAULT_UNDO_FAIL_FILE": str(undo_fails)})
    try:
        stopping = campaign.serve()
        assert campaign.wait_serving(stopping)
        run_id = _submit(campaign, "quick-0")
        assert _wait_log(campaign, 0, "attempt.requeue_failed"), campaign.log_tail(0, 8)
        stopping.send_signal(signal.SIGTERM)
        if failure == "transient":
            time.sleep(0.5)  # the stop is retrying it now (UNDO_AT_STOP_S: 3 s)
            undo_fails.unlink()
        assert stopping.wait(30) == 0, campaign.log_tail(0, 8)
        log = (campaign.device / "serve-0.log").read_text()
        with open_database(campaign.db_path, create=False) as db:
            status_after_stop = LocalRunRepository(db).get(run_id).status.value
        print(f"{failure}: run {status_after_stop} when the stopped service was gone")
        if failure == "transient":
            assert status_after_stop == "queued" and "attempt.undo_left" not in log
        else:
            assert status_after_stop == "dispatching" and "attempt.undo_left" in log
            undo_fails.unlink()
        campaign.check("after the stop")
        del campaign.env["FAULT_UNDO_FAIL_FILE"]  # the next service has no injected fault
        survivor = campaign.serve()
        assert campaign.wait_serving(survivor)
        started = time.monotonic()
        status = _wait_status(campaign, run_id)
        print(f"{failure}: run {status} {time.monotonic() - started:.1f} s after the next service served "
              f"(run_lease_ms {campaign.env['EDGE_RUNTIME_RUN_LEASE_MS']})")
        with open_database(campaign.db_path, create=False) as db:
            runs = LocalRunRepository(db)
            ends = [e for e in runs.events(run_id) if e.type in {f"run.{s}" for s in TERMINAL}]
            attempts = runs.attempts(run_id)
        executions = [line for line in lines(campaign.starts) if line.startswith("quick-0 ")]
        assert len(ends) == 1, [e.type for e in runs.events(run_id)]
        if status == "succeeded":
            assert len(executions) == 1 and len(attempts) == 2  # the failed start, then one run
        else:
            assert failure == "lasting" and executions == []
        nxt = _submit(campaign, "quick-1")
        assert _wait_status(campaign, nxt) == "succeeded"  # the slot is free again
        campaign.check("after the next service settled it")
    finally:
        campaign.cleanup()
    assert campaign.violations == []
