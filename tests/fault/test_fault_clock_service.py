"""Clock jumps through a real ``serve``: its wall clock (shifted by the launcher, never the
machine's) jumps backward and forward by seconds, hours and decades while a Run is running, and
the device reboots at 1970. The cancel must still be delivered, every stored record must satisfy
the contract, the service's times never go below what it stored, and each jump is recorded as a
``clock.jump_detected`` device event with its size."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import fault_secrets
from tests.support import fault_stats
from edge_runtime.contract.runs import CancelRunCommand, SubmitRunCommand
from edge_runtime.local.database import open_database
from edge_runtime.local.guarded_clock import list_clock_jumps, observed_floor_ms
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.wake import poke
from tests.support.fault_service import ServiceCampaign, lines
from tests.support.fault_workloads import stored_problems

pytestmark = pytest.mark.fault

CAMPAIGN = "clock-jumps"
SECOND, HOUR, YEAR = 1_000, 3_600_000, 365 * 86_400_000
WAIT_S = 20.0

#: (direction, size) per case; short mode runs the two that matter most on a router.
CASES = {
    "back-seconds": -45 * SECOND,
    "back-hours": -3 * HOUR,
    "back-decades": -30 * YEAR,
    "forward-seconds": 45 * SECOND,
    "forward-hours": 3 * HOUR,
    "forward-decades": 30 * YEAR,
}
SHORT_CASES = ("back-decades", "forward-hours")


def _wait(condition, what: str, process: subprocess.Popen | None = None, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    state = "" if process is None else f" (service exit code {process.poll()})"
    raise AssertionError(f"timed out waiting for {what}{state}")


def _run_status(campaign: ServiceCampaign, run_id: str) -> str:
    with open_database(campaign.db_path, create=False) as db:
        return LocalRunRepository(db).get(run_id).status.value


def _submit_and_wait_running(campaign: ServiceCampaign, process: subprocess.Popen) -> str:
    with open_database(campaign.db_path) as db:
        run = LocalRunRepository(db).submit(SubmitRunCommand(argv=["/bin/sh", "-c", "exec sleep 30"], name="victim"))
    poke(campaign.db_path)
    _wait(lambda: _run_status(campaign, run.id) == "running", "the run to start", process)
    return run.id


def _cancel_and_wait(campaign: ServiceCampaign, run_id: str, process: subprocess.Popen) -> subprocess.Popen:
    """Cancel; if the jump cost the service its session (it exits with an error, as documented),
    restart it like a supervisor would. Returns the live service."""
    with open_database(campaign.db_path) as db:
        LocalRunRepository(db).request_cancel(CancelRunCommand(run_id=run_id, reason="clock campaign"))
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        poke(campaign.db_path)
        if _run_status(campaign, run_id) == "cancelled":
            return process
        if process.poll() is not None:
            process = campaign.serve()
        time.sleep(0.1)
    raise AssertionError(f"the cancel of {run_id} was never delivered after the clock jump")


def _jump_events(campaign: ServiceCampaign) -> list:
    with open_database(campaign.db_path, create=False) as db:
        return list_clock_jumps(db)


def _check_store(campaign: ServiceCampaign) -> list[str]:
    with open_database(campaign.db_path, create=False) as db:
        return stored_problems(db)


@pytest.mark.parametrize("case", sorted(CASES))
def test_clock_jump_through_the_service(case: str, tmp_path: Path, rng: random.Random, long_mode: bool) -> None:
    if not long_mode and case not in SHORT_CASES:
        pytest.skip("long mode only (make fault)")
    jump = CASES[case]
    campaign = ServiceCampaign(tmp_path, rng, clock_offset_ms=0)
    try:
        process = campaign.serve()
        assert campaign.wait_serving(process), "the service did not start"
        run_id = _submit_and_wait_running(campaign, process)
        with open_database(campaign.db_path, create=False) as db:
            floor_before = observed_floor_ms(db)

        offset = jump if jump > -(time.time_ns() // 1_000_000) else 5 * SECOND - time.time_ns() // 1_000_000
        campaign.set_clock_offset(offset)
        fault_stats.add(fault_stats.CLOCK_JUMPS, campaign=CAMPAIGN)
        process = _cancel_and_wait(campaign, run_id, process)

        with open_database(campaign.db_path, create=False) as db:
            dispatch = db.connection.execute(
                "SELECT status, created_at_ms, updated_at_ms FROM run_cancellation_dispatches WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            floor_after = observed_floor_ms(db)
        assert dispatch is not None and dispatch[0] == "dispatched", dispatch
        assert floor_after >= floor_before  # nothing the service stored went back in time
        if abs(jump) > 60 * SECOND or jump < -SECOND:
            events = _wait(lambda: _jump_events(campaign), "a clock.jump_detected event", process)
            direction = "backward" if jump < 0 else "forward"
            assert events[0].direction == direction
            # The size is measured against the monotonic clock: exact up to scheduling noise.
            assert abs(events[0].jump_ms - abs(offset)) < 5 * SECOND, (events[0], offset)
        assert _check_store(campaign) == []
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    finally:
        campaign.cleanup()
        fault_secrets.register(lines(campaign.tokens), campaign.device)


def test_reboot_at_1970_through_the_service(tmp_path: Path, rng: random.Random) -> None:
    campaign = ServiceCampaign(tmp_path, rng, clock_offset_ms=0)
    try:
        process = campaign.serve()
        assert campaign.wait_serving(process)
        first = _submit_and_wait_running(campaign, process)
        process = _cancel_and_wait(campaign, first, process)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        with open_database(campaign.db_path, create=False) as db:
            floor = observed_floor_ms(db)

        # Power cycle without an RTC: the wall clock restarts a few seconds after the epoch.
        campaign.set_clock_offset(5 * SECOND - time.time_ns() // 1_000_000)
        fault_stats.add(fault_stats.CLOCK_JUMPS, campaign=CAMPAIGN)
        process = campaign.serve()
        assert campaign.wait_serving(process)
        second = _submit_and_wait_running(campaign, process)
        process = _cancel_and_wait(campaign, second, process)

        events = _wait(lambda: _jump_events(campaign), "the boot-time jump event", process)
        assert (events[0].direction, events[0].at_boot) == ("backward", True)
        assert events[0].jump_ms > 50 * YEAR
        with open_database(campaign.db_path, create=False) as db:
            stamps = db.connection.execute(
                "SELECT min(created_at_ms) FROM run_cancellation_dispatches WHERE run_id = ?", (second,)
            ).fetchone()[0]
            sessions = db.connection.execute("SELECT generation FROM worker_sessions").fetchall()
        assert stamps >= floor, "the service handed out a time below what it had stored before the reboot"
        assert sessions == [(2,)]
        assert _check_store(campaign) == []
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    finally:
        campaign.cleanup()
        fault_secrets.register(lines(campaign.tokens), campaign.device)
