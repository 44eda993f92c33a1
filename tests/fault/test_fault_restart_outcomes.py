"""Restart campaign: services stopped by SIGTERM or SIGKILL at random moments while tasks end
(during a service's life and in the gaps between lives), restarted after a random gap; then one
last service settles. Judged at the end: every Run whose process identity was recorded ended with
exactly the outcome its command chose (``exit N`` or a signal death), never ``lost`` with an
unknown status, and its log holds the command's last line (written just before it ended). A
restart never changes a Run's outcome (docs/monitor.md). Every process is cleaned up.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from tests.support import fault_stats
from tests.support.fault_service import ServiceCampaign, lines

from edge_runtime.contract.runs import SubmitRunCommand
from edge_runtime.local.database import open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.wake import poke

pytestmark = pytest.mark.fault

CAMPAIGN = "restarts"
#: How each command ends: its exit code, or minus a signal it sends itself.
_ENDS = (0, 3, 7, -signal.SIGUSR1, -signal.SIGTERM)


def _command(end: int, sleep_s: float) -> str:
    finish = f"exit {end}" if end >= 0 else f"kill -{signal.Signals(-end).name.removeprefix('SIG')} $$; sleep 5"
    return (f'echo "$0 $EDGE_RUNTIME_ATTEMPT_ID $$" >> "$STARTS"; sleep {sleep_s:.2f}; '
            f'echo "last line of $0"; {finish}')


def test_restarts_while_tasks_end_never_change_an_outcome(tmp_path: Path, rng: random.Random,
                                                          long_mode: bool) -> None:
    rounds = 60 if long_mode else 5
    campaign = ServiceCampaign(tmp_path, rng)
    wanted: dict[str, int] = {}
    restarts = 0
    judged = 0
    try:
        for _ in range(rounds):
            process = campaign.serve()
            if campaign.wait_serving(process):
                with open_database(campaign.db_path) as db:
                    repo = LocalRunRepository(db)
                    for _ in range(rng.randint(1, 4)):
                        end = rng.choice(_ENDS)
                        label = f"ends{end}-{len(campaign.labels)}"
                        run = repo.submit(SubmitRunCommand(
                            argv=["/bin/sh", "-c", _command(end, rng.uniform(0.1, 1.5)), label], name=label))
                        campaign.labels[run.id] = label
                        wanted[run.id] = end
                poke(campaign.db_path)
                time.sleep(rng.uniform(0.2, 1.2))
            if rng.random() < 0.5:
                process.send_signal(signal.SIGTERM)
                process.wait(30)
            else:
                campaign.kill(process)
            restarts += 1
            time.sleep(rng.uniform(0.0, 1.0))  # tasks end in the gap, with no service running
        campaign.drain()
        with open_database(campaign.db_path, create=False) as db:
            runs = LocalRunRepository(db)
            for run_id, end in wanted.items():
                attempts = runs.attempts(run_id)
                final = attempts[-1] if attempts else None
                label = campaign.labels[run_id]
                if final is None or final.identity is None:
                    if final is not None and final.status.value in ("succeeded", "failed"):
                        campaign.violations.append(f"{label} ended {final.status.value} without a process")
                    continue  # killed before its identity was recorded: the orphan rules decide
                judged += 1
                want_status = "succeeded" if end == 0 else "failed"
                want_code = end if end >= 0 else 128 - end
                got = (final.status.value, getattr(final, "exit_code", None))
                if got != (want_status, want_code):
                    campaign.violations.append(f"{label} ended {got}, its command chose {(want_status, want_code)}: "
                                               f"{final.end_reason}")
                    continue
                log = Path(final.log_path).read_text(errors="replace") if final.log_path else ""
                if f"last line of {label}" not in log:
                    campaign.violations.append(f"{label}: its last line is missing from its log")
    finally:
        campaign.cleanup()
        fault_stats.add(fault_stats.KILLS, campaign.kills, campaign=CAMPAIGN)
        fault_stats.add(fault_stats.INVARIANT_VIOLATIONS, len(campaign.violations), campaign=CAMPAIGN)
    assert campaign.violations == []
    assert restarts == rounds
    assert lines(campaign.starts), "no task ever started: the campaign exercised nothing"
    assert judged, "no Run with a recorded process was judged: the campaign exercised nothing"
