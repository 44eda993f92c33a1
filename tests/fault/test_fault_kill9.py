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
import time
from pathlib import Path

import pytest

from tests.support import fault_secrets
from tests.support import fault_stats
from tests.support.fault_service import ServiceCampaign, lines

pytestmark = pytest.mark.fault

CAMPAIGN = "kill-9"
CAMPAIGN_TAKEOVER = "kill-9-takeover"


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


def test_kill_9_across_takeovers_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path, rng: random.Random, long_mode: bool
) -> None:
    """The takeover case of "every queued Run runs once": while work is in flight, a second
    ``serve`` starts on the same database, mostly with the same worker id (it replaces the
    first, which must take nothing more
    and exit once its own children ended), sometimes with another one (they share the queue).
    Both are then killed at random moments. Between lives: no Attempt ran twice, no Run failed
    without crossing the start barrier, no session held more grants than its slots; at the end
    every cancel is delivered and every queued Run was taken."""
    rounds = 60 if long_mode else 4
    campaign = ServiceCampaign(tmp_path, rng)
    takeovers = 0
    try:
        for round_number in range(rounds):
            first = campaign.serve()
            if campaign.wait_serving(first):
                campaign.act(rng.uniform(0.1, 0.8))
            same = rng.random() < 0.75
            takeovers += same
            second = campaign.serve("fault-worker" if same else "fault-other")
            campaign.act(rng.uniform(0.0, 1.2 if long_mode else 0.8))
            for index, process in ((len(campaign.services) - 2, first), (len(campaign.services) - 1, second)):
                if process.poll() is None:
                    continue
                replaced = same and process is first and process.returncode == 1 \
                    and "SERVICE_SESSION_LOST" in campaign.log_tail(index, 5)
                if not replaced:  # only a replaced service may leave by itself, and only that way
                    campaign.violations.append(f"round {round_number + 1}: service {index} exited by itself "
                                               f"({process.returncode}): {campaign.log_tail(index)}")
            order = [first, second]
            rng.shuffle(order)
            for process in order:
                campaign.kill(process)
                time.sleep(rng.uniform(0.0, 0.3))
            campaign.check(f"after round {round_number + 1}")
        campaign.drain()
        campaign.settle()
    finally:
        campaign.cleanup()
        fault_stats.add(fault_stats.KILLS, campaign.kills, campaign=CAMPAIGN_TAKEOVER)
        fault_stats.add(fault_stats.ACKED_LOST, campaign.lost, campaign=CAMPAIGN_TAKEOVER)
        fault_stats.add(fault_stats.INVARIANT_VIOLATIONS, len(campaign.violations), campaign=CAMPAIGN_TAKEOVER)
    assert campaign.lost_problems == []
    assert campaign.violations == []
    assert takeovers >= 1 and lines(campaign.starts), "no takeover with work in flight was exercised"
