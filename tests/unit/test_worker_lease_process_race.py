"""Several OS processes race claims and releases on one database file; capacity is never oversold.

One worker session with ``max_concurrent_runs = K`` and last reported ``available_slots = S``;
every process acts as a dispatcher of that session and claims (and sometimes releases) the same
Attempts at the same time. A reader in the test process polls the committed state throughout.
Active grants must never exceed ``min(K, S)``, every grant of an Attempt must have its own
generation (no Attempt granted twice at once), and the event log must hold exactly one event per
successful claim and release. Repeated on fresh files; ``--fault-mode=long`` repeats more.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from edge_runtime.local.database import open_database
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from tests.support.worker_lease import heartbeat_cmd, register_cmd, seed_runs

PROCESSES = 4
ATTEMPTS = 10
ROUNDS_PER_PROCESS = 3

# The child: open its own connection, wait for "go" on stdin, then claim every Attempt in a
# shuffled order, release about a third of its grants, and report what it got as JSON lines.
CHILD = r"""
import json, random, sys
from edge_runtime.contract.run_lease import ClaimRunCommand, ReleaseRunLeaseCommand
from edge_runtime.contract.worker_lease import WorkerLeaseRepositoryError
from edge_runtime.local.database import open_database
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository

db_path, index, attempts, rounds, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed * 100 + index)
db = open_database(db_path)
repo = LocalWorkerLeaseRepository(db)
session = repo.find_session("worker-a")
print("ready", flush=True)
sys.stdin.readline()

def retrying(call):
    while True:
        try:
            return call()
        except WorkerLeaseRepositoryError as exc:
            if not exc.retryable:
                raise

serial = 0
for round_ in range(rounds):
    order = list(range(attempts))
    rng.shuffle(order)
    for i in order:
        serial += 1
        token = f"p{index}-{serial}-{rng.getrandbits(64):x}"
        cmd = ClaimRunCommand(worker_id="worker-a", session_id=session.session_id,
                              session_generation=session.generation, run_id=f"r{i}", attempt_id=f"r{i}-a",
                              offer_id=f"offer-{index}-{serial}", lease_token=token, lease_duration_ms=300000,
                              event_id=f"c{index}-{serial}")
        outcome = retrying(lambda: repo.claim_run(cmd))
        record = {"attempt": f"r{i}-a", "status": outcome.status}
        if outcome.status == "claimed":
            record["generation"] = outcome.lease.lease_generation
            if rng.random() < 0.35:
                lease = outcome.lease
                release = ReleaseRunLeaseCommand(worker_id="worker-a", session_id=lease.session_id,
                    session_generation=lease.session_generation, attempt_id=lease.attempt_id, lease_token=token,
                    expected_version=lease.version, reason="declined", event_id=f"x{index}-{serial}")
                retrying(lambda: repo.release(release))
                record["released"] = True
        print(json.dumps(record), flush=True)
db.close()
"""


def _race_once(db_path: Path, seed: int, max_runs: int, slots: int) -> None:
    db = open_database(db_path)
    repo = LocalWorkerLeaseRepository(db)
    session = repo.register(register_cmd(max_concurrent_runs=max_runs, lease_duration_ms=300_000)).session
    repo.heartbeat(heartbeat_cmd(session, available_slots=slots, lease_duration_ms=300_000))
    seed_runs(db.connection, ATTEMPTS)
    limit = min(max_runs, slots)

    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(db_path), str(i), str(ATTEMPTS), str(ROUNDS_PER_PROCESS), str(seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(PROCESSES)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        # Poll the committed state while the children race.
        polls = []
        while any(child.poll() is None for child in children):
            polls.append(db.connection.execute(
                "SELECT count(*) FROM run_dispatch_leases WHERE status = 'leased'").fetchone()[0])
        results = []
        for child in children:
            out, err = child.communicate(timeout=60)
            assert child.returncode == 0, err
            results += [json.loads(line) for line in out.splitlines() if line.strip()]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()

    assert polls and max(polls) <= limit
    claims = [r for r in results if r["status"] == "claimed"]
    releases = [r for r in results if r.get("released")]
    statuses = Counter(r["status"] for r in results)
    assert set(statuses) <= {"claimed", "leased", "no_capacity"}, statuses
    assert statuses["no_capacity"] > 0  # the capacity check was really contended

    leased = db.connection.execute("SELECT count(*) FROM run_dispatch_leases WHERE status = 'leased'").fetchone()[0]
    assert leased == len(claims) - len(releases) <= limit
    assert repo.count_active_leases("worker-a") == leased
    # Each grant of an Attempt has its own generation: no Attempt was ever granted twice at once.
    by_attempt: dict[str, list[int]] = {}
    for claim in claims:
        by_attempt.setdefault(claim["attempt"], []).append(claim["generation"])
    for attempt, generations in by_attempt.items():
        assert sorted(generations) == list(range(1, len(generations) + 1)), attempt
        assert repo.find_lease(attempt).lease_generation == len(generations)
    events = db.connection.execute("SELECT count(*) FROM run_events").fetchone()[0]
    assert events == len(claims) + len(releases)
    db.close()


@pytest.mark.parametrize(("max_runs", "slots"), [(3, 2), (2, 2)])
def test_racing_processes_never_oversell_a_session(
    tmp_path: Path, request: pytest.FixtureRequest, max_runs: int, slots: int
) -> None:
    repeats = 8 if request.config.getoption("--fault-mode") == "long" else 2
    for seed in range(repeats):
        _race_once(tmp_path / f"race-{max_runs}-{slots}-{seed}.db", seed, max_runs, slots)
