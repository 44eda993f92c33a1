"""Resource faults: a full disk and I/O errors injected through the VFS shim during writes and
syncs, and files that must be refused at open (truncated, corrupt, from a newer release).

A failed operation must raise the repository's own error with a clear message (never an apsw
traceback), leave nothing partial visible (neither on the same connection nor after a power cut),
and the same connection must work again once the fault is gone.
"""

from __future__ import annotations

import hashlib
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from tests.support import fault_secrets
from tests.support import fault_stats
from edge_runtime.contract.cancellation_dispatch import (
    ClaimCommand,
    ClaimedOutcome,
    DispatchResult,
    RecordResultCommand,
    RepositoryError,
)
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.runs import CancelRunCommand, RunRepositoryError, SubmitRunCommand
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.errors import DatabaseUnusableError, LocalStorageError, MigrationError
from edge_runtime.local.health import check_health
from edge_runtime.local.runs import LocalRunRepository
from tests.support.unfenced_attempts import take_queued_run
from tests.support.fault_workloads import DB_NAME, T0_MS, Recording, check_cut, dump
from tests.support.vfs_shim import Fault, RecordingVFS

pytestmark = pytest.mark.fault

CAMPAIGN = "resource-faults"

#: Named fault points: (point, op, SQLite code, file suffix, matching ops to let through first).
WRITE_FAULTS = [
    ("wal-write-full", "write", apsw.SQLITE_FULL, "-wal", 0),
    ("wal-write-full-after-first-frame", "write", apsw.SQLITE_FULL, "-wal", 1),
    ("wal-write-ioerr", "write", apsw.SQLITE_IOERR_WRITE, "-wal", 0),
    ("wal-sync-ioerr", "sync", apsw.SQLITE_IOERR_FSYNC, "-wal", 0),
]


class _Harness:
    """A database on the recording VFS with seeded Runs, and an acknowledgement log for cuts."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.vfs = RecordingVFS()
        self.clock = ManualClock(T0_MS)
        self.db: LocalDatabase = open_database(directory / DB_NAME, clock=self.clock, vfs=self.vfs.name)
        self.acks: list[int] = []
        self.snapshots: list[dict] = []
        self.tokens: set[str] = set()
        self.ack()
        self.dispatch = LocalCancellationDispatchRepository(self.db)
        self.runs = LocalRunRepository(self.db)

    def ack(self) -> None:
        self.acks.append(self.vfs.position())
        self.snapshots.append(dump(self.db))

    def close(self) -> Recording:
        self.db.close()
        self.vfs.unregister()
        self.acks.append(self.vfs.position())
        self.snapshots.append(self.snapshots[-1])
        return Recording(self.vfs, self.directory, self.acks, self.snapshots, self.tokens)

    def cancel_requested_run(self) -> tuple[str, str, int]:
        run = self.runs.submit(SubmitRunCommand(argv=["/bin/true"]))
        self.ack()
        attempt = take_queued_run(self.db, run.id, actor_id="service")
        self.ack()
        run = self.runs.request_cancel(CancelRunCommand(run_id=run.id))
        self.ack()
        return run.id, attempt.id, run.cancel_requested_at_ms

    def operations(self) -> list[tuple[str, Callable[[], object]]]:
        """One fresh operation of each kind (built now, run later, retried unchanged)."""
        run_id, attempt_id, requested = self.cancel_requested_run()
        claim_token = f"raw-resource-token-{len(self.tokens)}-{self.clock.now_ms()}"
        self.tokens.add(claim_token)
        claim = ClaimCommand(run_id, attempt_id, requested, "worker-a", claim_token, 30_000)
        run2, attempt2, requested2 = self.cancel_requested_run()
        leased_token = f"raw-resource-token-{len(self.tokens)}-{self.clock.now_ms()}"
        self.tokens.add(leased_token)
        leased = self.dispatch.claim(ClaimCommand(run2, attempt2, requested2, "worker-b", leased_token, 30_000))
        assert isinstance(leased, ClaimedOutcome)
        self.ack()
        record = RecordResultCommand(
            run2, attempt2, "worker-b", leased_token, leased.dispatch.version,
            DispatchResult.TERMINATION_REQUESTED, f"evt-{self.clock.now_ms()}",
        )
        run3 = self.runs.submit(SubmitRunCommand(argv=["/bin/true"]))
        self.ack()
        return [
            ("claim", lambda: self.dispatch.claim(claim)),
            ("record_result", lambda: self.dispatch.record_result(record)),
            ("submit", lambda: self.runs.submit(SubmitRunCommand(argv=["/bin/echo", "x"]))),
            ("request_cancel", lambda: self.runs.request_cancel(CancelRunCommand(run_id=run3.id))),
        ]


def _cut_everywhere(recording: Recording, workdir: Path) -> list[str]:
    results = [check_cut(recording, position, workdir) for position in recording.vfs.sync_positions()]
    fault_stats.add(fault_stats.CUT_POINTS, len(results), campaign=CAMPAIGN)
    fault_stats.add(fault_stats.ACKED_LOST, sum(r.lost for r in results), campaign=CAMPAIGN)
    fault_stats.add(
        fault_stats.INVARIANT_VIOLATIONS, sum(1 for r in results if r.problems and not r.lost), campaign=CAMPAIGN
    )
    return [f"cut at {r.position}: {r.problems}" for r in results if r.problems]


@pytest.mark.parametrize("point,op,code,suffix,skip", WRITE_FAULTS, ids=[f[0] for f in WRITE_FAULTS])
def test_write_fault_fails_cleanly_and_the_connection_recovers(
    point: str, op: str, code: int, suffix: str, skip: int, tmp_path: Path
) -> None:
    harness = _Harness(tmp_path / "live")
    for name, operation in harness.operations():
        before = dump(harness.db)
        harness.vfs.inject(Fault(point, op, code, suffix, skip=skip))
        hits = harness.vfs.hits[point]
        with pytest.raises(EdgeRuntimeError) as failure:
            operation()
        harness.vfs.clear_faults()
        # The named fault point was reached by this very operation.
        assert harness.vfs.hits[point] == hits + 1, f"{point} never hit during {name}"
        fault_stats.add(fault_stats.FAULTS, campaign=CAMPAIGN)
        error = failure.value
        assert isinstance(error, (RepositoryError, RunRepositoryError)), repr(error)
        expected = "database or disk is full" if code == apsw.SQLITE_FULL else "disk I/O error"
        assert str(error) == f"database operation failed: {expected}"
        assert error.retryable is False
        assert not harness.db.connection.in_transaction
        assert dump(harness.db) == before, f"{name}: a failed operation left something visible"
        harness.ack()
        operation()  # the same connection works again, and the unchanged retry succeeds
        assert dump(harness.db) != before
        harness.ack()
    recording = harness.close()
    fault_secrets.register(recording.tokens, tmp_path)
    # Nothing partial may resurface after a power cut either, wherever it falls.
    assert _cut_everywhere(recording, tmp_path / "cut") == []


@pytest.mark.parametrize(
    "op,code,skip",
    [("write", apsw.SQLITE_FULL, 0), ("write", apsw.SQLITE_FULL, 2), ("sync", apsw.SQLITE_IOERR_FSYNC, 0)],
    ids=["first-page-full", "full-after-two-pages", "main-file-sync-ioerr"],
)
def test_checkpoint_fault_loses_nothing(op: str, code: int, skip: int, tmp_path: Path) -> None:
    """A checkpoint that fails part-way (main file full, or its sync failing) reports the error,
    loses nothing, never resets the WAL over frames the main file does not durably hold, and the
    next checkpoint after the fault completes.

    The checkpoint is explicit here: apsw re-raises an exception from a Python VFS method when
    control returns to Python even where SQLite itself ignores the error (as it does for an
    automatic checkpoint after a commit), which would misreport a committed operation.
    """
    harness = _Harness(tmp_path / "live")
    point = f"checkpoint-main-file-{op}"
    try:
        operations = harness.operations()
        for name, operation in operations[:2]:
            operation()
            harness.ack()
        harness.vfs.inject(Fault(point, op, code, ".db", skip=skip))
        with pytest.raises(apsw.Error):
            harness.db.connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        assert harness.vfs.hits[point] == 1, f"{point} never hit"
        fault_stats.add(fault_stats.FAULTS, campaign=CAMPAIGN)
        harness.vfs.clear_faults()
        assert dump(harness.db) == harness.snapshots[-1]
        for name, operation in operations[2:]:
            operation()
            harness.ack()
        log_frames, checkpointed = harness.db.connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        assert log_frames == checkpointed > 0, "the checkpoint did not complete once the fault was gone"
    finally:
        harness.vfs.clear_faults()
    recording = harness.close()
    fault_secrets.register(recording.tokens, tmp_path)
    assert _cut_everywhere(recording, tmp_path / "cut") == []


def test_full_disk_while_creating_the_database_is_a_clear_error(tmp_path: Path) -> None:
    vfs = RecordingVFS()
    try:
        vfs.inject(Fault("create-full", "write", apsw.SQLITE_FULL, ""))
        with pytest.raises(LocalStorageError) as failure:
            open_database(tmp_path / DB_NAME, clock=ManualClock(T0_MS), vfs=vfs.name)
        assert vfs.hits["create-full"] == 1
        fault_stats.add(fault_stats.FAULTS, campaign=CAMPAIGN)
        assert "database or disk is full" in str(failure.value)
        assert str(tmp_path / DB_NAME) in str(failure.value)
        vfs.clear_faults()
        db = open_database(tmp_path / DB_NAME, clock=ManualClock(T0_MS), vfs=vfs.name)
        db.close()
    finally:
        vfs.unregister()


# --------------------------------------------------------------------------- refused files


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _populated(directory: Path, *, keep_wal: bool) -> Path:
    """A real database with Runs in it; with ``keep_wal`` a copy taken while the WAL was live."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / DB_NAME
    db = open_database(path, clock=ManualClock(T0_MS))
    runs = LocalRunRepository(db)
    for index in range(25):
        runs.submit(SubmitRunCommand(argv=["/bin/echo", str(index)]))
    if not keep_wal:
        db.close()
        return path
    db.connection.execute("PRAGMA wal_autocheckpoint = 0")
    runs.submit(SubmitRunCommand(argv=["/bin/echo", "in the wal"]))
    crashed = directory / "crashed"
    crashed.mkdir()
    for suffix in ("", "-wal"):
        shutil.copy(f"{path}{suffix}", f"{crashed / DB_NAME}{suffix}")
    db.close()
    return crashed / DB_NAME


def _mutations(data: bytes, rng: random.Random) -> dict[str, bytes]:
    page = 4096
    pages = len(data) // page
    damaged = {}
    for length in (1, 50, 100, page, page + 100, len(data) // 2, len(data) - page):
        damaged[f"truncated-to-{length}"] = data[:length]
    header = bytearray(data)
    header[0:16] = b"not a database!!"
    damaged["bad-magic"] = bytes(header)
    for number in sorted({2, 3, pages // 2, pages - 1}):
        corrupt = bytearray(data)
        start = (number - 1) * page
        corrupt[start:start + 256] = rng.randbytes(256)
        damaged[f"page-{number}-garbage"] = bytes(corrupt)
    return damaged


def _assert_refused_unmodified(path: Path, error_type: type[Exception]) -> str:
    siblings = [Path(f"{path}{suffix}") for suffix in ("", "-wal", "-journal")]
    before = [_digest(p) for p in siblings]
    with pytest.raises(error_type) as failure:
        open_database(path, clock=ManualClock(T0_MS))
    assert [_digest(p) for p in siblings] == before, f"{path.name}: refused file was modified"
    message = str(failure.value)
    assert str(path) in message
    fault_stats.add(fault_stats.FAULTS, campaign=CAMPAIGN)
    return message


def test_truncated_or_corrupt_files_are_refused_unmodified(tmp_path: Path, rng: random.Random) -> None:
    """Opening costs the same at any size (docs/storage.md): a cut-short file or a damaged header is
    refused at open; garbage inside a page is refused at open when the open reads that page
    (the schema, the migrations), and otherwise left unmodified by the open, reported by the
    first query that meets it as a clear storage error naming `check`, and by `check` itself."""
    source = _populated(tmp_path / "source", keep_wal=False)
    cases = _mutations(source.read_bytes(), rng)
    for label, data in cases.items():
        directory = tmp_path / label
        directory.mkdir()
        path = directory / DB_NAME
        path.write_bytes(data)
        if not label.startswith("page-"):
            message = _assert_refused_unmodified(path, DatabaseUnusableError)
            assert "not a usable edge-runtime database" in message or "is corrupt" in message, (label, message)
            continue
        before = _digest(path)
        try:
            db = open_database(path, clock=ManualClock(T0_MS))
        except (DatabaseUnusableError, MigrationError) as refused:
            assert _digest(path) == before, f"{label}: refused file was modified"
            assert str(path) in str(refused)
            fault_stats.add(fault_stats.FAULTS, campaign=CAMPAIGN)
            continue
        with db:
            try:
                LocalRunRepository(db).list_runs(limit=10_000)
            except RunRepositoryError as met:  # the query that meets the damage says so, no traceback
                assert "damaged" in str(met) and "edge-runtime check" in str(met), (label, str(met))
        assert _digest(path) == before, f"{label}: opening a damaged file modified it"
        with open_database(path, create=False, read_only=True) as reader:
            report = check_health(reader)
        integrity = next(c for c in report.checks if c.name == "integrity")
        assert not report.ok and not integrity.ok, (label, report)
        fault_stats.add(fault_stats.FAULTS, campaign=CAMPAIGN)


@pytest.mark.parametrize("keep_wal", [False, True], ids=["checkpointed", "with-live-wal"])
def test_database_from_a_newer_release_is_refused_unmodified(tmp_path: Path, keep_wal: bool) -> None:
    path = _populated(tmp_path, keep_wal=keep_wal)
    connection = apsw.Connection(str(path))
    connection.execute("PRAGMA wal_autocheckpoint = 0")
    connection.execute(
        "INSERT INTO schema_migrations (id, checksum, applied_at_ms) VALUES ('9999_from_the_future', ?, ?)",
        ("0" * 64, T0_MS),
    )
    if keep_wal:
        # Leave the WAL as a crashed newer release would: no checkpoint on close.
        connection.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    connection.close()
    assert Path(f"{path}-wal").exists() == keep_wal
    message = _assert_refused_unmodified(path, MigrationError)
    assert "9999_from_the_future" in message and "newer release" in message
