"""Recording a started process's identity fails (a database failover during that COMMIT, docs/cluster.md).

A retryable failure keeps the process (our own child, watched by its pidfd) and records the
identity later from the service loop; a retry that finds the earlier COMMIT did commit counts as
recorded. The process is killed (and its Attempt ends ``lost``) only when the failure is not
retryable, when the bound set by its Run Lease passes, or when the service stops: an unrecorded
process must never outlive the service. Real processes, the Local adapter, in-process.
"""

from __future__ import annotations

import io
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from edge_runtime.contract.runs import AttemptStatus, ProcessIdentity, RunRepositoryError, SubmitRunCommand
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.attempts import REASON_STOPPED_UNRECORDED, start
from edge_runtime.service.config import load_config
from edge_runtime.service.journal import Journal
from edge_runtime.service.process_identity import read_stat
from tests.support.monitor import status_file, wait_for_monitor_end
from tests.support.supervisor_rig import SupervisorRig

LOST_CONNECTION = "connection lost during COMMIT: the outcome is unknown"


class Rig(SupervisorRig):
    def __init__(self, db: LocalDatabase, tmp_path: Path, *, run_lease_ms: int = 60_000) -> None:
        super().__init__(db, tmp_path, slots=1, run_lease_ms=run_lease_ms)


@pytest.fixture
def rig(db: LocalDatabase, tmp_path: Path) -> Iterator[Rig]:
    r = Rig(db, tmp_path)
    yield r
    r.close()


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[ProcessIdentity]:
    """The identities of the processes the supervisor spawns, in order."""
    seen: list[ProcessIdentity] = []
    real = start.spawn

    def spawn(*args: Any, **kwargs: Any) -> ProcessIdentity:
        identity = real(*args, **kwargs)
        seen.append(identity)
        return identity

    monkeypatch.setattr(start, "spawn", spawn)
    return seen


def fail_record_running(monkeypatch: pytest.MonkeyPatch, failures: int | None, *, commit_first: bool = False,
                        retryable: bool = True, on_call: Callable[[int], None] | None = None) -> list[int]:
    """Make ``record_running`` raise for its first ``failures`` calls (None: every call), after
    committing when ``commit_first`` (an ambiguous COMMIT that did commit); the call count."""
    real = LocalRunRepository.record_running
    calls: list[int] = []

    def record_running(self: LocalRunRepository, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if on_call is not None:
            on_call(len(calls))
        if failures is not None and len(calls) > failures:
            return real(self, *args, **kwargs)
        if commit_first:
            real(self, *args, **kwargs)
        raise RunRepositoryError(LOST_CONNECTION if retryable else "database disk image is malformed",
                                 retryable=retryable)

    monkeypatch.setattr(LocalRunRepository, "record_running", record_running)
    return calls


def leader_alive(identity: ProcessIdentity) -> bool:
    stat = read_stat(identity.pid)
    return stat is not None and stat.start_ticks == identity.start_ticks and not stat.is_zombie


def only_attempt(rig: Rig, run_id: str) -> Any:
    attempts = rig.runs.attempts(run_id)
    assert len(attempts) == 1
    return attempts[0]


# ----------------------------------------------------------------- kept and recorded later


@pytest.mark.parametrize("failures", [1, 2])
def test_a_retryable_failure_keeps_the_process_and_a_retry_records_it(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, spawned: list[ProcessIdentity], failures: int
) -> None:
    calls = fail_record_running(monkeypatch, failures)
    run_id = rig.submit(then="sleep 0.5")
    assert rig.supervisor.start_queued() == 1
    identity = spawned[0]
    assert leader_alive(identity)  # not killed
    assert only_attempt(rig, run_id).status.value == "starting"
    assert rig.supervisor.unrecorded_count == 1 and rig.supervisor.pending_retries
    assert "attempt.identity_pending" in rig.log.getvalue()

    assert rig.run_until_ended(run_id) == "succeeded"
    attempt = only_attempt(rig, run_id)
    assert attempt.status.value == "succeeded" and attempt.exit_code == 0
    assert attempt.identity == identity  # recorded, by a retry
    assert len(calls) == failures + 1
    assert rig.executions().count(run_id) == 1
    assert [e.type for e in rig.runs.events(run_id)].count("run.started") == 1
    assert rig.worker.free_slots() == 1


def test_a_retry_after_an_ambiguous_commit_that_did_commit_counts_as_recorded(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, spawned: list[ProcessIdentity]
) -> None:
    calls = fail_record_running(monkeypatch, 1, commit_first=True)
    run_id = rig.submit(then="sleep 0.5")
    rig.supervisor.start_queued()
    identity = spawned[0]
    assert leader_alive(identity)
    assert only_attempt(rig, run_id).status.value == "running"  # committed, though the caller saw an error
    assert rig.supervisor.unrecorded_count == 1

    rig.supervisor.retry_completions()  # the retry meets a running Attempt with this very identity
    assert rig.supervisor.unrecorded_count == 0
    assert leader_alive(identity)
    assert "attempt.identity_found" in rig.log.getvalue()
    assert "identity_not_recorded" not in rig.log.getvalue()

    assert rig.run_until_ended(run_id) == "succeeded"
    assert only_attempt(rig, run_id).identity == identity
    assert len(calls) == 2
    assert [e.type for e in rig.runs.events(run_id)].count("run.started") == 1  # recorded once
    assert rig.executions().count(run_id) == 1


def test_a_process_that_exits_before_its_identity_is_recorded_ends_with_its_real_status(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, spawned: list[ProcessIdentity]
) -> None:
    # Two failures: the one after the spawn, and the first retry (which may come at the exit).
    calls = fail_record_running(monkeypatch, 2)
    run_id = rig.submit(then="exit 3")
    rig.supervisor.start_queued()
    assert rig.run_until_ended(run_id) == "failed"
    attempt = only_attempt(rig, run_id)
    assert attempt.status.value == "failed" and attempt.exit_code == 3  # its own end, not `lost`
    assert attempt.identity == spawned[0]  # recorded before the end
    assert len(calls) == 3
    assert "attempt.running" in rig.log.getvalue() and "late=true" in rig.log.getvalue().lower()
    assert rig.executions().count(run_id) == 1


# ----------------------------------------------------------------- killed


def test_the_process_is_killed_and_lost_when_its_run_lease_bound_passes(
    db: LocalDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawned: list[ProcessIdentity]
) -> None:
    rig = Rig(db, tmp_path, run_lease_ms=1_500)  # the bound: two thirds of it, 1 s
    try:
        calls = fail_record_running(monkeypatch, None)  # the database never comes back
        run_id = rig.submit(then="sleep 30")
        rig.supervisor.start_queued()
        identity = spawned[0]
        rig.step()
        assert leader_alive(identity)  # kept while the bound has not passed
        assert rig.run_until_ended(run_id) == "failed"
        assert not leader_alive(identity)
        attempt = only_attempt(rig, run_id)
        assert attempt.status.value == "lost"
        assert "could not be recorded before its Run Lease could lapse" in attempt.end_reason
        assert LOST_CONNECTION in attempt.end_reason  # the last error, kept as the reason
        assert len(calls) >= 2  # retried before it was given up
        assert rig.worker.free_slots() == 1
    finally:
        rig.close()


def test_a_renewed_run_lease_moves_the_bound(
    db: LocalDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = Rig(db, tmp_path, run_lease_ms=3_000)
    try:
        fail_record_running(monkeypatch, None)
        rig.submit(then="sleep 30")
        rig.supervisor.start_queued()
        (running,) = rig.supervisor.running.values()
        first = running.record_by
        assert first is not None and first - time.monotonic() <= 2.0
        time.sleep(0.05)
        rig.supervisor.renew_due(10**15)  # due: the renewal succeeds (only record_running fails)
        assert running.record_by > first
    finally:
        rig.close()


def test_a_non_retryable_failure_still_kills_at_once(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, spawned: list[ProcessIdentity]
) -> None:
    calls = fail_record_running(monkeypatch, 1, retryable=False)
    run_id = rig.submit(then="sleep 30")
    rig.supervisor.start_queued()
    (running,) = rig.supervisor.running.values()
    assert running.failure is not None and running.record_by is None  # given up at once, no retry
    assert rig.run_until_ended(run_id) == "failed"
    assert not leader_alive(spawned[0])
    attempt = only_attempt(rig, run_id)
    assert attempt.status.value == "lost" and "malformed" in attempt.end_reason
    assert len(calls) == 1


def test_a_retry_that_finds_the_attempt_ended_kills_the_process(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, spawned: list[ProcessIdentity]
) -> None:
    fail_record_running(monkeypatch, 1)
    run_id = rig.submit(then="sleep 30")
    rig.supervisor.start_queued()
    (running,) = rig.supervisor.running.values()
    # Meanwhile someone else ended the Attempt (as the orphan sweep does once the lease lapsed).
    rig.runs.finish_attempt(running.attempt_id, AttemptStatus.LOST, actor_id="sweep",
                            reason="ended elsewhere")
    rig.supervisor.retry_completions()
    assert running.failure is not None and "not starting" in running.failure
    assert rig.run_until_ended(run_id) == "failed"
    assert not leader_alive(spawned[0])
    assert only_attempt(rig, run_id).end_reason == "ended elsewhere"  # the first end stands


def test_closing_the_supervisor_kills_an_unrecorded_process(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, spawned: list[ProcessIdentity]
) -> None:
    fail_record_running(monkeypatch, None)
    run_id = rig.submit(then="sleep 30")
    rig.supervisor.start_queued()
    identity = spawned[0]
    rig.supervisor.close()
    (attempt,) = rig.runs.attempts(run_id)
    assert wait_for_monitor_end(status_file(rig.tmp_path / "logs", attempt.id)).status == -signal.SIGKILL
    assert rig.runs.get(run_id).status.value == "dispatching"  # left to the orphan sweep
    assert REASON_STOPPED_UNRECORDED in rig.log.getvalue()


# ----------------------------------------------------------------- the whole service


def test_stopping_the_service_kills_an_unrecorded_process_and_ends_it_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawned: list[ProcessIdentity]
) -> None:
    from edge_runtime.cli.serve import build_service

    home = tmp_path / "state"
    home.mkdir(mode=0o700)
    db_path = home / "edge-runtime.db"
    database = open_database(db_path)
    try:
        run_id = LocalRunRepository(database).submit(SubmitRunCommand(argv=["sleep", "30"])).id
    finally:
        database.close()

    def stop_at_the_retry(call: int) -> None:
        if call == 2:  # the service loop retries: the process is kept, unrecorded; now stop
            os.kill(os.getpid(), signal.SIGTERM)

    fail_record_running(monkeypatch, None, on_call=stop_at_the_retry)
    stream = io.StringIO()
    config = load_config(env={}, overrides={"worker_id": "w", "slots": 1})
    assert build_service(str(db_path), config, journal=Journal(stream)).run() == 0

    identity = spawned[0]
    assert not leader_alive(identity)  # killed, and reaped by its monitor: not left behind
    database = open_database(db_path)
    try:
        runs = LocalRunRepository(database)
        (attempt,) = runs.attempts(run_id)
        assert attempt.status.value == "lost" and attempt.end_reason == REASON_STOPPED_UNRECORDED
        assert runs.get(run_id).status.value == "failed"
    finally:
        database.close()
    log = stream.getvalue()
    assert "attempt.identity_pending" in log and "attempt.identity_not_recorded" in log
    assert log.index("attempt.identity_not_recorded") > log.index("service.stopping")


def test_apsw_busy_on_the_identity_commit_is_retried_not_killed(
    rig: Rig, fail_next_commit: Any, monkeypatch: pytest.MonkeyPatch, spawned: list[ProcessIdentity]
) -> None:
    """The real Local error path (a busy database at COMMIT, rolled back), not a stand-in error."""
    real = LocalRunRepository.record_running
    fired: list[int] = []

    def record_running(self: LocalRunRepository, *args: Any, **kwargs: Any) -> Any:
        if not fired:
            fired.append(1)
            fail_next_commit(apsw.BusyError)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(LocalRunRepository, "record_running", record_running)
    run_id = rig.submit(then="sleep 0.3")
    rig.supervisor.start_queued()
    assert leader_alive(spawned[0]) and rig.supervisor.unrecorded_count == 1
    assert rig.run_until_ended(run_id) == "succeeded"
    assert only_attempt(rig, run_id).identity == spawned[0]
