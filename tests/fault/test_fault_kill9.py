"""kill -9 campaign against a real ``edge-runtime serve``: work and cancels in flight, SIGKILL at
random moments (startup included), restart, and check after every kill:

* the database is intact and every stored record satisfies the contract;
* every event ever seen committed is still there (nothing acknowledged is lost);
* no Attempt ran twice (each process start is logged by the command itself, by Run label);

and at the end, with a last service left to settle: every cancel request ended delivered (the
Run ended or the dispatch is ``dispatched``) or recorded as ``blocked``, and no process group
outlived its SIGKILL deadline. Every process spawned is cleaned up whatever happens.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import fault_secrets
import fault_stats
from fault_service import ServiceCampaign, lines

pytestmark = pytest.mark.fault

CAMPAIGN = "kill-9"


def test_kill_9_at_random_moments_loses_nothing(tmp_path: Path, rng: random.Random, long_mode: bool) -> None:
    kills = 200 if long_mode else 6
    campaign = ServiceCampaign(tmp_path, rng)
    try:
        for round_number in range(kills):
            process = campaign.serve()
            if rng.random() < 0.25:
                # Kill during start-up: interpreter, open and migrate, session, recovery.
                campaign.act(rng.uniform(0.0, 1.0))
            elif campaign.wait_serving(process):
                campaign.act(rng.uniform(0.0, 1.5 if long_mode else 1.0))
            if process.poll() is not None:
                # A service must only ever die of our SIGKILL, never of what an earlier one left.
                campaign.violations.append(
                    f"round {round_number + 1}: the service exited by itself ({process.returncode}): "
                    f"{campaign.log_tail(len(campaign.services) - 1)}"
                )
            campaign.kill(process)
            campaign.check(f"after kill {round_number + 1}")
        campaign.settle()
    finally:
        campaign.cleanup()
        tokens = lines(campaign.tokens)
        fault_secrets.register(tokens, campaign.device)
        fault_stats.add(fault_stats.KILLS, campaign.kills, campaign=CAMPAIGN)
        fault_stats.add(fault_stats.ACKED_LOST, campaign.lost, campaign=CAMPAIGN)
        fault_stats.add(fault_stats.INVARIANT_VIOLATIONS, len(campaign.violations), campaign=CAMPAIGN)
    assert campaign.lost_problems == []
    assert campaign.violations == []
    assert campaign.kills >= kills // 2, "most kills must hit a live service"
    # Named fault points: work was started, cancels were delivered, tokens were drawn.
    assert lines(campaign.starts), "no Run ever started: the campaign exercised nothing"
    assert tokens, "no lease token was ever drawn"
    assert fault_secrets.leaks_in_files(fault_secrets.files_under([campaign.device]), tokens) == {}
