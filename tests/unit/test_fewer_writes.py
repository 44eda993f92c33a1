"""Fewer flash writes: the Attempt's end and its grant's in one commit; the heartbeat cadence
of a busy and an idle session; the watermark's slack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.worker_lease import WorkerLeaseFenceRejectedError, WorkerSessionRejectedError

from edge_runtime.contract.run_lease import LeaseStatus
from edge_runtime.contract.runs import AttemptStatus, RunStatus, SubmitRunCommand
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import NEW_FILE_PAGE_SIZE, open_database
from edge_runtime.local.guarded_clock import DEFAULT_PERSIST_INTERVAL_MS, GuardedClock, restore_floor
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.worker import IDLE_SESSION_LEASE_MS, WorkerSession

T0 = 1_700_000_000_000
SESSION_LEASE_MS = 30_000


class _CountingVFS(apsw.VFS):
    """Counts syncs of the WAL: one per committed write transaction."""

    def __init__(self) -> None:
        self.base = apsw.vfs_names()[0]
        self.wal_syncs = 0
        self.name = f"count-syncs-{id(self)}"
        super().__init__(self.name, base=self.base)

    def xOpen(self, name, flags):  # noqa: ANN001 - apsw's signature
        return _CountingFile(self, name, flags)


class _CountingFile(apsw.VFSFile):
    def __init__(self, vfs: _CountingVFS, name, flags) -> None:  # noqa: ANN001
        self._vfs = vfs
        path = name.filename() if isinstance(name, apsw.URIFilename) else str(name or "")
        self._wal = path.endswith("-wal")
        super().__init__(vfs.base, name, flags)

    def xSync(self, flags) -> None:  # noqa: ANN001
        super().xSync(flags)
        self._vfs.wal_syncs += self._wal


def _worker(db, **kwargs) -> WorkerSession:
    worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w1", slots=2,
                           session_lease_ms=SESSION_LEASE_MS, run_lease_ms=60_000, **kwargs)
    worker.register()
    return worker


def test_finishing_an_attempt_completes_its_grant_in_the_same_commit(tmp_path: Path) -> None:
    vfs = _CountingVFS()
    clock = ManualClock(T0)
    with open_database(tmp_path / "e.db", clock=clock, vfs=vfs.name) as db:
        runs = LocalRunRepository(db)
        worker = _worker(db)
        run = runs.submit(SubmitRunCommand(argv=["true"]))
        grant = worker.start(run.id)
        attempt_id = grant.lease.attempt_id
        clock.advance(5)
        before = vfs.wal_syncs
        runs.finish_attempt(attempt_id, AttemptStatus.SUCCEEDED, actor_id=worker.owner, exit_code=0)
        assert vfs.wal_syncs - before == 1  # one commit for both ends
        lease = worker.lease_of(attempt_id)
        assert lease.status is LeaseStatus.COMPLETED and lease.completed_at_ms == T0 + 5
        assert worker.complete(attempt_id) is False  # nothing left for the service's own call
        assert vfs.wal_syncs - before == 1
        attempt = runs.get_attempt(attempt_id)
        assert attempt.status is AttemptStatus.SUCCEEDED
        projection = db.connection.execute(
            "SELECT lease_worker_id, lease_token_digest FROM run_attempts WHERE id = ?", (attempt_id,)).fetchone()
        assert projection == (None, None)  # the fence projection went with the grant
        # One event for both ends: the Run's end names the grant it completed.
        events = runs.events(run.id)
        assert [e.type for e in events] == ["run.created", "run.attempt_starting", "run.succeeded"]
        assert events[-1].payload == {"status": "succeeded", "attempt_status": "succeeded", "exit_code": 0,
                                      "lease_generation": 1, "lease_version": lease.version}
        assert events[-1].attempt_id == attempt_id
        assert runs.get(run.id).status is RunStatus.SUCCEEDED


def _started(db: Any) -> tuple[LocalRunRepository, Any, Any, str]:
    """A Run of ``true`` past its start barrier: the store, the worker, the Run and its Attempt."""
    runs = LocalRunRepository(db)
    worker = _worker(db)
    run = runs.submit(SubmitRunCommand(argv=["true"]))
    return runs, worker, run, worker.start(run.id).lease.attempt_id


def test_a_grant_completed_after_its_run_ended_has_an_event_of_its_own(tmp_path: Path) -> None:
    with open_database(tmp_path / "e.db", clock=ManualClock(T0)) as db:
        runs, worker, run, attempt_id = _started(db)
        # A Run ended by another writer while its Attempt still ran (a store another tool wrote).
        db.connection.execute("UPDATE runs SET status = 'failed', finished_at_ms = ? WHERE id = ?", (T0, run.id))
        runs.finish_attempt(attempt_id, AttemptStatus.SUCCEEDED, actor_id=worker.owner, exit_code=0)
        last = runs.events(run.id)[-1]
        assert (last.type, last.attempt_id, last.payload["attempt_status"]) == (
            "run.lease_completed", attempt_id, "succeeded")
        assert worker.lease_of(attempt_id).status is LeaseStatus.COMPLETED
        assert runs.get(run.id).status is RunStatus.FAILED


def test_a_failed_lease_completion_rolls_the_attempts_end_back(tmp_path: Path) -> None:
    with open_database(tmp_path / "e.db", clock=ManualClock(T0)) as db:
        runs, worker, run, attempt_id = _started(db)
        db.connection.execute(
            "CREATE TEMP TRIGGER refuse BEFORE UPDATE OF status ON run_dispatch_leases "
            "BEGIN SELECT RAISE(ABORT, 'refused'); END")
        with pytest.raises(EdgeRuntimeError, match="refused"):
            runs.finish_attempt(attempt_id, AttemptStatus.SUCCEEDED, actor_id=worker.owner, exit_code=0)
        assert runs.get_attempt(attempt_id).status is AttemptStatus.STARTING
        assert runs.get(run.id).status is RunStatus.DISPATCHING
        assert worker.lease_of(attempt_id).status is LeaseStatus.LEASED


def test_an_idle_session_takes_the_long_lease_and_renews_it_near_its_end(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with open_database(tmp_path / "e.db", clock=clock) as db:
        worker = _worker(db)
        session = worker.heartbeat(2, idle=True)
        assert session.lease_expires_at_ms == T0 + IDLE_SESSION_LEASE_MS
        # Idle: renewed when two thirds of the busy lease (20 s) are left, ~13 times an hour.
        assert worker.next_heartbeat_at_ms() == T0 + IDLE_SESSION_LEASE_MS - 20_000
        # Busy since now: a third of the busy lease later, so a lost session is noticed in 10 s.
        assert worker.next_heartbeat_at_ms(busy_since_ms=T0 + 50_000) == T0 + 60_000
        clock.advance(60_000)
        session = worker.heartbeat(2)
        assert session.lease_expires_at_ms == T0 + 60_000 + SESSION_LEASE_MS
        assert worker.next_heartbeat_at_ms(busy_since_ms=T0 + 50_000) == T0 + 70_000
        # Gone idle with a busy lease: renewed before less than 20 s of it are left.
        assert worker.next_heartbeat_at_ms() == T0 + 70_000


def test_an_idle_session_takes_the_busy_lease_before_it_starts_a_run(tmp_path: Path) -> None:
    """A service killed while it spawns leaves its Attempt ``starting``; the orphan sweep may end
    it only once the session's lease is over, so that lease must be the busy one by then."""
    clock = ManualClock(T0)
    with open_database(tmp_path / "e.db", clock=clock) as db:
        runs = LocalRunRepository(db)
        worker = _worker(db)
        worker.heartbeat(2, idle=True)
        clock.advance(1_000)
        run = runs.submit(SubmitRunCommand(argv=["true"]))
        grant = worker.start(run.id)
        assert grant is not None
        assert worker.session.lease_expires_at_ms == T0 + 1_000 + SESSION_LEASE_MS
        stored = LocalWorkerLeaseRepository(db).find_session("w1")
        assert stored.lease_expires_at_ms == T0 + 1_000 + SESSION_LEASE_MS
        # Already on the busy lease: no further heartbeat for the next start.
        version = worker.session.version
        second = runs.submit(SubmitRunCommand(argv=["true"]))
        assert worker.start(second.id) is not None
        assert worker.session.version == version


def test_the_idle_lease_is_a_setting_never_shorter_than_the_busy_one(tmp_path: Path) -> None:
    from edge_runtime.service.config import load_config

    assert load_config(None, env={}).resolved_idle_session_lease_ms(IDLE_SESSION_LEASE_MS) == IDLE_SESSION_LEASE_MS
    config = load_config(None, env={"EDGE_RUNTIME_IDLE_SESSION_LEASE_MS": "40000"})
    assert config.resolved_idle_session_lease_ms(IDLE_SESSION_LEASE_MS) == 40_000
    clock = ManualClock(T0)
    with open_database(tmp_path / "e.db", clock=clock) as db:
        worker = _worker(db, idle_session_lease_ms=40_000)
        assert worker.heartbeat(2, idle=True).lease_expires_at_ms == T0 + 40_000
        # An idle lease below the busy one would let an idle session lapse between heartbeats.
        short = _worker(db, idle_session_lease_ms=1_000)
        assert short.heartbeat(2, idle=True).lease_expires_at_ms == T0 + SESSION_LEASE_MS


def test_the_watermark_is_written_once_per_slack_not_every_loop(tmp_path: Path) -> None:
    wall = ManualClock(T0)
    mono = ManualClock(0)
    clock = GuardedClock(wall, monotonic_ms=mono.now_ms)
    with open_database(tmp_path / "e.db", clock=clock) as db:
        restore_floor(clock, db)
        written = 0
        for _ in range(3600):  # an hour, one loop pass a second
            wall.advance(1_000)
            mono.advance(1_000)
            clock.now_ms()
            written += clock.maybe_persist(db)
        assert written == 3_600_000 // DEFAULT_PERSIST_INTERVAL_MS == 12  # was 120 at a 30 s interval


def test_a_replaced_or_offline_session_is_noticed_by_a_read(tmp_path: Path) -> None:
    vfs = _CountingVFS()
    clock = ManualClock(T0)
    with open_database(tmp_path / "e.db", clock=clock, vfs=vfs.name) as db:
        first = _worker(db)
        before = vfs.wal_syncs
        first.check_current()  # still current: nothing raised, nothing written
        assert vfs.wal_syncs == before
        second = _worker(db)  # the same worker id: generation 2 replaces the first
        with pytest.raises(WorkerLeaseFenceRejectedError, match="generation 2"):
            first.check_current()
        second.check_current()
        second.offline()
        with pytest.raises(WorkerSessionRejectedError):
            second.check_current()


# 4 KiB: SQLite's default, which the first releases gave a file; 1 KiB: the releases after them
# until 512-byte pages.
@pytest.mark.parametrize("old_page_size", [4096, 1024])
def test_a_new_file_gets_small_pages_and_an_existing_file_keeps_its_own(tmp_path: Path, old_page_size: int) -> None:
    with open_database(tmp_path / "new.db") as db:
        assert db.connection.execute("PRAGMA page_size").fetchone()[0] == NEW_FILE_PAGE_SIZE == 512
        assert db.connection.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # still INCREMENTAL
    old = tmp_path / "old.db"
    connection = apsw.Connection(str(old))
    connection.execute(f"PRAGMA page_size = {old_page_size}; PRAGMA auto_vacuum = INCREMENTAL; "
                       "PRAGMA journal_mode = WAL")
    connection.close()
    with open_database(old) as db:
        runs = LocalRunRepository(db)
        run = runs.submit(SubmitRunCommand(argv=["true"]))
        assert db.connection.execute("PRAGMA page_size").fetchone()[0] == old_page_size
    with open_database(old) as db:
        assert LocalRunRepository(db).get(run.id).status is RunStatus.QUEUED


def test_generated_ids_are_time_ordered_uuids(monkeypatch) -> None:
    import time
    import uuid

    from edge_runtime.contract.ids import new_id

    now = [1_700_000_000_000_000_000]
    monkeypatch.setattr(time, "time_ns", lambda: now[0])
    first = [new_id() for _ in range(100)]
    now[0] += 1_000_000  # one millisecond later
    later = new_id()
    assert len(set(first)) == 100  # the random bits tell ids of one millisecond apart
    assert all(uuid.UUID(i).version == 7 and len(i) == 36 and str(uuid.UUID(i)) == i for i in first)
    assert all(i < later for i in first)  # ordered by their millisecond, as text too
    assert int(later.replace("-", "")[:12], 16) == 1_700_000_000_001


def test_a_run_and_its_attempt_and_events_get_time_ordered_ids(tmp_path: Path) -> None:
    import uuid

    with open_database(tmp_path / "e.db", clock=ManualClock(T0)) as db:
        runs = LocalRunRepository(db)
        worker = _worker(db)
        run = runs.submit(SubmitRunCommand(argv=["true"]))
        grant = worker.start(run.id)
        ids = [run.id, grant.lease.attempt_id, *(e.id for e in runs.events(run.id))]
        assert [uuid.UUID(i).version for i in ids] == [7] * len(ids)
