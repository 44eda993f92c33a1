"""Two real services on one database, with different worker ids and with the same one (each Run once):
every queued Run ends ``succeeded``, its command executed exactly once, no session ever runs more
processes than its capacity, and the queue drains right after the takeover, not at the fallback
poll (set to a minute here, longer than every wait below).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from tests.support.service_harness import Harness, wait_for

from edge_runtime.local.database import open_database

RUNS = 14
SLOTS = 2
SLOW_POLL = ("--poll-interval-ms", "60000", "--slots", str(SLOTS))
QUICK_S = 15.0  # far below the fallback poll: the queue must drain on wake-ups and exits alone


def _command(log: Path) -> list[str]:
    # Start and end lines bracket the process inside its Run Lease (granted before the spawn,
    # completed after the exit), so overlapping brackets of one session bound its concurrency.
    return ["sh", "-c",
            f'echo "start $EDGE_RUNTIME_RUN_ID $EDGE_RUNTIME_ATTEMPT_ID $(date +%s%N)" >> {log}; sleep 0.3; '
            f'echo "end $EDGE_RUNTIME_RUN_ID $EDGE_RUNTIME_ATTEMPT_ID $(date +%s%N)" >> {log}']


def _check(harness: Harness, run_ids: list[str], log: Path) -> dict[tuple[str, int], int]:
    """Every Run succeeded with one Attempt and one execution; the peak concurrency per session."""
    for run_id in run_ids:
        detail = harness.wait_status(run_id, "succeeded", "failed", "cancelled", timeout=QUICK_S)
        assert detail.status.value == "succeeded", (detail, harness.services[-1].log()[-3000:])
        assert len(detail.attempts) == 1
    lines = [line.split() for line in log.read_text().splitlines()]
    starts = [fields[1] for fields in lines if fields[0] == "start"]
    assert sorted(starts) == sorted(run_ids)  # each command executed exactly once
    with open_database(harness.db_path, create=False) as db:
        owner = {attempt: (worker, generation) for attempt, worker, generation in db.connection.execute(
            "SELECT attempt_id, worker_id, session_generation FROM run_dispatch_leases")}
    moments = sorted((int(f[3]), 1 if f[0] == "start" else -1, owner[f[2]]) for f in lines)
    running: dict[tuple[str, int], int] = defaultdict(int)
    peak: dict[tuple[str, int], int] = defaultdict(int)
    for _, step, session in moments:
        running[session] += step
        peak[session] = max(peak[session], running[session])
    assert all(count <= SLOTS for count in peak.values()), peak  # no session above its capacity
    return peak


def test_two_workers_share_the_queue_each_run_once(harness: Harness) -> None:
    log = harness.tmp / "executions"
    harness.serve(*SLOW_POLL, worker_id="device-a")
    harness.serve(*SLOW_POLL, worker_id="device-b")
    run_ids = harness.submit_many([_command(log)] * RUNS)
    peak = _check(harness, run_ids, log)
    assert {worker for worker, _ in peak} <= {"device-a", "device-b"}


def test_a_takeover_by_the_same_worker_id_runs_each_run_once(harness: Harness) -> None:
    """The takeover case: a second ``serve`` with the same worker id while Runs are queued and
    running. The first is fenced out at once (it takes nothing more, creates no Attempt), records
    the end of its own children, and exits; the second runs the rest."""
    log = harness.tmp / "executions"
    fast = {"EDGE_RUNTIME_SESSION_LEASE_MS": "3000"}
    first = harness.serve(*SLOW_POLL, env=fast)
    run_ids = harness.submit_many([_command(log)] * RUNS)
    wait_for(lambda: log.exists(), "the first service to start a Run")
    second = harness.serve(*SLOW_POLL, env=fast)  # same worker id: generation + 1
    peak = _check(harness, run_ids, log)
    assert first.process.wait(QUICK_S) == 1 and "[SERVICE_SESSION_LOST]" in first.log()
    assert second.process.poll() is None
    assert ("e2e-worker", 2) in peak  # the second did run some of them
    with open_database(harness.db_path, create=False) as db:
        # No churn: no Attempt was created and given up (a fenced-out service takes nothing).
        lost = db.connection.execute("SELECT count(*) FROM run_attempts WHERE status = 'lost'").fetchone()[0]
        active = db.connection.execute("SELECT count(*) FROM run_dispatch_leases WHERE status = 'leased'").fetchone()[0]
    assert (lost, active) == (0, 0)


def test_repeated_takeovers_by_the_same_worker_id_run_each_run_once(harness: Harness) -> None:
    """A careless init script: three services of one worker id started one after the other."""
    log = harness.tmp / "executions"
    fast = {"EDGE_RUNTIME_SESSION_LEASE_MS": "3000"}
    services = [harness.serve(*SLOW_POLL, env=fast)]
    run_ids = harness.submit_many([_command(log)] * RUNS)
    for _ in range(2):
        wait_for(lambda: log.exists(), "a Run to start")
        services.append(harness.serve(*SLOW_POLL, env=fast))
    _check(harness, run_ids, log)
    for service in services[:-1]:
        assert service.process.wait(QUICK_S) == 1
