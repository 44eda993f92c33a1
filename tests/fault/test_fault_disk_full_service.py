"""A full disk under a running ``serve``: while the WAL cannot grow, the service's writes fail
with a clear error in its journal, it stays up, nothing partial is stored, and once space
returns it starts the queued Run and delivers the pending cancel."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from tests.support import fault_secrets
from tests.support import fault_stats
from edge_runtime.contract.runs import CancelRunCommand, SubmitRunCommand
from edge_runtime.local.database import open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.wake import poke
from tests.support.fault_service import ServiceCampaign, lines
from tests.support.fault_workloads import stored_problems

pytestmark = pytest.mark.fault

CAMPAIGN = "resource-faults"
WAIT_S = 20.0


def _status(campaign: ServiceCampaign, run_id: str) -> str:
    with open_database(campaign.db_path, create=False) as db:
        return LocalRunRepository(db).get(run_id).status.value


def _wait_status(campaign: ServiceCampaign, run_id: str, *statuses: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while _status(campaign, run_id) not in statuses:
        assert time.monotonic() < deadline, f"run never reached {statuses}: {_status(campaign, run_id)}"
        poke(campaign.db_path)
        time.sleep(0.05)


def test_service_survives_a_full_disk_and_recovers(tmp_path: Path, rng: random.Random) -> None:
    control = tmp_path / "harness-disk-full"
    # Default leases: the full-disk window is shorter than the session lease, so the session
    # survives it (a longer one costs the session and a supervisor restart, as documented).
    campaign = ServiceCampaign(tmp_path, rng, env={
        "FAULT_DISK_FULL_FILE": str(control), "EDGE_RUNTIME_RUN_LEASE_MS": "60000",
        "EDGE_RUNTIME_SESSION_LEASE_MS": "30000",
    })
    try:
        process = campaign.serve()
        assert campaign.wait_serving(process)
        with open_database(campaign.db_path) as db:
            running = LocalRunRepository(db).submit(SubmitRunCommand(argv=["/bin/sh", "-c", "exec sleep 30"]))
        _wait_status(campaign, running.id, "running")

        control.write_text("")  # the disk is full from now on, for the service
        with open_database(campaign.db_path) as db:
            repo = LocalRunRepository(db)
            queued = repo.submit(SubmitRunCommand(argv=["/bin/sh", "-c", "exec sleep 0.2"]))
            repo.request_cancel(CancelRunCommand(run_id=running.id, reason="disk full campaign"))
            before = {row[0]: row[1:] for row in db.connection.execute("SELECT id, status, version FROM runs")}
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            poke(campaign.db_path)
            time.sleep(0.1)
        hits = len(lines(control))
        control.unlink()  # space returns
        assert hits > 0, "the disk-full fault point was never hit"
        fault_stats.add(fault_stats.FAULTS, hits, campaign=CAMPAIGN)
        assert process.poll() is None, "the service died of a full disk"
        journal = (campaign.device / "serve-0.log").read_text()
        assert "database or disk is full" in journal
        assert "Traceback" not in journal
        with open_database(campaign.db_path, create=False) as db:
            after = {row[0]: row[1:] for row in db.connection.execute("SELECT id, status, version FROM runs")}
            assert stored_problems(db) == []
        assert after == before, "the service wrote while the disk was full"

        _wait_status(campaign, running.id, "cancelled")
        _wait_status(campaign, queued.id, "succeeded")
        with open_database(campaign.db_path, create=False) as db:
            assert stored_problems(db) == []
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        campaign.cleanup()
        fault_secrets.register(lines(campaign.tokens), campaign.device)
