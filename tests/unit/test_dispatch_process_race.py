"""Several OS processes claim the same dispatch at the same instant: exactly one gets ``claimed``."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from pathlib import Path

from tests.support.dispatch import RACE_REQUESTED_AT_MS, race_claims, seed
from edge_runtime.contract.cancellation_dispatch import DispatchStatus, digest_lease_token
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.database import open_database

PROCESSES = 4
ROUNDS = 5


def test_exactly_one_of_several_processes_claims_each_dispatch(tmp_path: Path) -> None:
    db_path = tmp_path / "race.db"
    run_ids = [f"race-{index}" for index in range(ROUNDS)]
    db = open_database(db_path)
    try:
        for run_id in run_ids:
            # Requested long ago, so every claim is due at once on the system clock.
            seed(db.connection, run_id, f"att-{run_id}", cancel_requested_at_ms=RACE_REQUESTED_AT_MS)
    finally:
        db.close()

    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    owners = [f"worker-{index}" for index in range(PROCESSES)]
    processes = [
        context.Process(target=race_claims, args=(str(db_path), owner, run_ids, barrier, results))
        for owner in owners
    ]
    for process in processes:
        process.start()
    try:
        outcomes = [results.get(timeout=120) for _ in range(PROCESSES * ROUNDS)]
    finally:
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
                process.join()
    assert [p.exitcode for p in processes] == [0] * PROCESSES

    db = open_database(db_path)
    try:
        repo = LocalCancellationDispatchRepository(db)
        for index, run_id in enumerate(run_ids):
            statuses = Counter(status for round_, _, status in outcomes if round_ == index)
            assert statuses == Counter({"claimed": 1, "leased": PROCESSES - 1}), (run_id, statuses)
            (winner,) = [owner for round_, owner, status in outcomes if round_ == index and status == "claimed"]
            record = repo.find_by_run_id(run_id)
            assert record is not None and record.status is DispatchStatus.LEASED
            assert (record.version, record.dispatch_count, record.lease_owner) == (1, 1, winner)
            assert record.lease_token_digest == digest_lease_token(f"token-{winner}-{index}")
    finally:
        db.close()
