"""The Local schedules and retention map storage failures through the one mapper of every Local
repository (:class:`edge_runtime.local.errors.StorageErrors`), as the Run, dispatch and lease
repositories do: the caller sees the repository's ``EdgeRuntimeError`` with its stable code,
``retryable`` exactly when the database was busy, and the same words for the same failure."""

from __future__ import annotations

from typing import Any

import apsw
import pytest

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.schedules import AddScheduleCommand, ScheduleRepositoryError
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.errors import StorageErrors
from edge_runtime.local.retention import LocalRetention, RetentionError, RetentionPolicy
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.schedules import LocalScheduleRepository
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.worker import WorkerSession

from tests.support.retention import finished_run

ERRORS = {"busy": apsw.BusyError, "locked": apsw.LockedError, "io": apsw.IOError, "full": apsw.FullError,
          "corrupt": apsw.CorruptError}


def mapped(target: type[EdgeRuntimeError], error: BaseException) -> EdgeRuntimeError:
    """What the one mapper makes of ``error`` for a repository whose error class is ``target``."""
    try:
        with StorageErrors(target)():
            raise error
    except target as exc:
        return exc
    raise AssertionError("the mapper let the error pass")


def assert_same(caught: EdgeRuntimeError, expected: EdgeRuntimeError) -> None:
    assert (type(caught), caught.code, str(caught), caught.retryable) == (
        type(expected), expected.code, str(expected), expected.retryable)


@pytest.mark.parametrize("name", ERRORS)
def test_a_failed_schedule_write_surfaces_as_the_mapped_repository_error(
    db: LocalDatabase, fail_next_commit: Any, name: str
) -> None:
    repo = LocalScheduleRepository(db)
    fail_next_commit(ERRORS[name])
    with pytest.raises(ScheduleRepositoryError) as caught:
        repo.add(AddScheduleCommand(expression="* * * * *", argv=["true"]))
    assert_same(caught.value, mapped(ScheduleRepositoryError, ERRORS[name]("injected")))
    assert caught.value.code == "SCHEDULE_REPOSITORY_FAILED"
    assert caught.value.retryable is (name in ("busy", "locked"))
    assert repo.list() == []  # rolled back whole
    assert repo.add(AddScheduleCommand(expression="* * * * *", argv=["true"])).id  # and the retry succeeds


@pytest.mark.parametrize("scan", ["due_schedule_ids", "timed_out_run_ids"])
def test_a_bad_clock_in_a_schedule_scan_is_the_repository_error(db: LocalDatabase, clock: ManualClock,
                                                                scan: str) -> None:
    clock.set(-1)
    with pytest.raises(ScheduleRepositoryError) as caught:
        getattr(LocalScheduleRepository(db), scan)()
    assert caught.value.code == "SCHEDULE_REPOSITORY_FAILED" and "invalid time" in str(caught.value)


@pytest.fixture
def retention_due(db: LocalDatabase, clock: ManualClock) -> LocalRetention:
    """A retention with one finished Run beyond its policy (retain_runs=0)."""
    worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=1, session_lease_ms=120_000,
                           run_lease_ms=60_000)
    worker.register()
    finished_run(LocalRunRepository(db), worker, clock=clock)
    return LocalRetention(db, RetentionPolicy(retain_runs=0, retain_days=7, log_total_max_bytes=1 << 20), None)


def _runs(db: LocalDatabase) -> int:
    return db.connection.execute("SELECT count(*) FROM runs").fetchone()[0]


@pytest.mark.parametrize("name", ["io", "full", "corrupt"])
def test_a_failed_retention_step_surfaces_as_the_mapped_retention_error(
    db: LocalDatabase, retention_due: LocalRetention, fail_next_commit: Any, name: str
) -> None:
    fail_next_commit(ERRORS[name])
    with pytest.raises(RetentionError) as caught:
        retention_due.prune_step()
    assert_same(caught.value, mapped(RetentionError, ERRORS[name]("injected")))
    assert caught.value.code == "LOCAL_RETENTION_FAILED"
    assert _runs(db) == 1
    assert retention_due.prune_step() is True and _runs(db) == 0


@pytest.mark.parametrize("name", ["busy", "locked"])
def test_a_busy_retention_step_is_tried_again_soon(
    db: LocalDatabase, retention_due: LocalRetention, fail_next_commit: Any, name: str
) -> None:
    fail_next_commit(ERRORS[name])
    assert retention_due.prune_step() is True  # more to do: call again soon
    assert _runs(db) == 1
    assert retention_due.prune_step() is True and _runs(db) == 0


def test_a_bad_clock_in_a_retention_step_is_the_retention_error(
    db: LocalDatabase, retention_due: LocalRetention, clock: ManualClock
) -> None:
    clock.set(-1)
    with pytest.raises(RetentionError) as caught:
        retention_due.prune_step()
    assert caught.value.code == "LOCAL_RETENTION_FAILED" and "invalid time" in str(caught.value)
