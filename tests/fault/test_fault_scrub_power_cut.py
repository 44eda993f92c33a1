"""Power cuts during ``migrate --scrub-legacy-tokens``: the whole scrub (backup, rewrite, VACUUM) is
recorded through the VFS shim, then cut at every sync and at random writes (torn). Each cut must
leave either the old layout with every row and every raw token, or the new layout with every row,
only digests and a backup that restores the old one; never a mix, and ``check`` says which.
A full disk during the backup or the VACUUM stops the scrub with one clear error, in one of the
two layouts, and running it again finishes it."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import apsw
import pytest

from tests.support import fault_stats
from edge_runtime.contract.cancellation_dispatch import digest_lease_token
from edge_runtime.local.database import open_database
from edge_runtime.local.errors import LocalStorageError
from edge_runtime.local.health import check_health
from edge_runtime.local.legacy_token_scrub import (
    BACKUP_SUFFIX,
    SCRUB_MIGRATION_ID,
    rollback_scrub,
    scrub_legacy_tokens,
    table_fingerprints,
)
from tests.support.legacy_tokens import RAW_PREFIX, build_legacy_database
from tests.support.vfs_shim import Fault, RecordingVFS

pytestmark = pytest.mark.fault

CAMPAIGN = "scrub-power-cut"
DB_NAME = "edge-runtime.db"
RAW_NEEDLE = RAW_PREFIX.encode()


def _state(path: Path) -> tuple[dict[str, str | None], dict[str, list], bool]:
    """(lease_token by run, fingerprints of every other table, marker present)."""
    connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        tokens = dict(connection.execute("SELECT run_id, lease_token FROM run_cancellation_dispatches"))
        prints = table_fingerprints(connection)
        marker = connection.execute("SELECT 1 FROM schema_migrations WHERE id = ?", (SCRUB_MIGRATION_ID,)).fetchone()
    finally:
        connection.close()
    for name in ("run_cancellation_dispatches", "schema_migrations", "sqlite_schema", "device_events"):
        prints.pop(name)
    return tokens, prints, marker is not None


def _judge(cut_dir: Path, original: tuple[dict, dict, bool]) -> tuple[str, list[str]]:
    """('old' | 'new', problems) for one materialised cut."""
    path = cut_dir / DB_NAME
    tokens, others, _ = original
    digested = {
        run: v if v is None or v.startswith("sha256:") else "sha256:" + digest_lease_token(v) for run, v in tokens.items()
    }
    problems = []
    try:
        with open_database(path) as db:
            report = check_health(db)
    except Exception as exc:  # noqa: BLE001 - a cut that cannot be reopened is the finding itself
        return "unopenable", [f"reopen failed: {type(exc).__name__}: {exc}"]
    line = {check.name: check for check in report.checks}["legacy_tokens"]
    now_tokens, now_others, marker = _state(path)
    if now_others != others:
        problems.append("rows of other tables differ from the original")
    if not marker:
        layout = "old"
        if now_tokens != tokens:
            problems.append("no marker, but lease tokens changed (a mix)")
        if not (line.ok and line.detail.startswith("legacy layout:")):
            problems.append(f"check does not say legacy layout: {line.detail}")
        return layout, problems
    layout = "new"
    if now_tokens != digested:
        problems.append("marker recorded, but not every lease token is its digest (a mix)")
    if not line.detail.startswith(f"scrubbed ({SCRUB_MIGRATION_ID})"):
        problems.append(f"check does not say scrubbed: {line.detail}")
    # The backup promised by the new layout is there, complete, and restores the old layout.
    if not (cut_dir / (DB_NAME + BACKUP_SUFFIX)).exists():
        problems.append("scrubbed, but the backup is missing")
        return layout, problems
    rollback_scrub(str(path))
    if _state(path)[:2] != original[:2]:
        problems.append("the rollback of the cut did not restore the original rows")
    return layout, problems


@pytest.mark.parametrize("rows", [30])
def test_power_cut_at_every_sync_of_the_scrub(tmp_path: Path, rng: random.Random, long_mode: bool, rows: int) -> None:
    live = tmp_path / "live"
    live.mkdir()
    path = live / DB_NAME
    build_legacy_database(str(path), rows * (4 if long_mode else 1), digest_every=4)
    original = _state(path)
    vfs = RecordingVFS()
    try:
        scrub_legacy_tokens(str(path), vfs=vfs.name)
    finally:
        vfs.unregister()
    synced = {op.path.rsplit("/", 1)[-1] for op in vfs.ops if op.kind == "sync"}
    # The cuts must land in the backup's writes, the rewrite's WAL commit and VACUUM's checkpoint.
    assert {DB_NAME, DB_NAME + "-wal", DB_NAME + BACKUP_SUFFIX} <= synced, synced

    cuts = [(position, None) for position in [0, *vfs.sync_positions()]]
    writes = vfs.write_positions()
    torn = 60 if long_mode else 12
    cuts += [(position, rng) for position in rng.sample(writes, min(torn, len(writes)))]
    layouts: dict[str, int] = {}
    failures = []
    for position, torn_rng in cuts:
        cut_dir = tmp_path / "cut"
        shutil.rmtree(cut_dir, ignore_errors=True)
        vfs.materialise(position, cut_dir, torn_rng)
        layout, problems = _judge(cut_dir, original)
        layouts[layout] = layouts.get(layout, 0) + 1
        if problems:
            failures.append(f"cut at {position}{' (torn)' if torn_rng else ''}: {layout}: {problems}")

    fault_stats.add(fault_stats.CUT_POINTS, len(cuts), campaign=CAMPAIGN)
    fault_stats.add(fault_stats.INVARIANT_VIOLATIONS, len(failures), campaign=CAMPAIGN)
    assert not failures, f"{len(failures)} of {len(cuts)} cuts failed; first: {failures[:3]}"
    # Both outcomes were reached, so the campaign cut on both sides of the rewrite's commit.
    print(f"layouts after {len(cuts)} cuts: {layouts}")
    assert layouts.get("old", 0) > 0 and layouts.get("new", 0) > 0, layouts


def test_detector_catches_a_rewrite_split_over_two_commits(tmp_path: Path) -> None:
    """Self-test: a scrub that rewrote the tokens in two transactions must be caught as a mix at
    some cut, or the campaign above could not fail."""
    live = tmp_path / "live"
    live.mkdir()
    path = live / DB_NAME
    build_legacy_database(str(path), 10)
    original = _state(path)
    vfs = RecordingVFS()
    try:
        with open_database(path, vfs=vfs.name) as db:
            rows = db.connection.execute("SELECT run_id, lease_token FROM run_cancellation_dispatches").fetchall()
            for half in (rows[:5], rows[5:]):
                with db.write():
                    for run_id, token in half:
                        db.connection.execute(
                            "UPDATE run_cancellation_dispatches SET lease_token = ? WHERE run_id = ?",
                            ("sha256:" + digest_lease_token(token), run_id),
                        )
    finally:
        vfs.unregister()
    problems = []
    for position in vfs.sync_positions():
        cut_dir = tmp_path / "cut"
        shutil.rmtree(cut_dir, ignore_errors=True)
        vfs.materialise(position, cut_dir)
        problems += _judge(cut_dir, original)[1]
    assert "no marker, but lease tokens changed (a mix)" in problems


@pytest.mark.parametrize(
    ("suffix", "from_end", "layout"),
    [
        pytest.param(BACKUP_SUFFIX, None, "old", id="backup-write"),
        pytest.param("-wal", 2, "new", id="vacuum-write"),
    ],
)
def test_a_full_disk_stops_the_scrub_cleanly_and_running_it_again_finishes(
    tmp_path: Path, suffix: str, from_end: int | None, layout: str
) -> None:
    def fresh(name: str) -> Path:
        directory = tmp_path / name
        directory.mkdir()
        build_legacy_database(str(directory / DB_NAME), 30, digest_every=4)
        return directory / DB_NAME

    # A dry run counts the writes to the file, so the fault lands near the end of the scrub.
    dry = RecordingVFS()
    try:
        scrub_legacy_tokens(str(fresh("dry")), vfs=dry.name)
    finally:
        dry.unregister()
    writes = sum(1 for op in dry.ops if op.kind == "write" and op.path.endswith(suffix))
    path = fresh("live")
    original = _state(path)
    vfs = RecordingVFS()
    fault = vfs.inject(Fault("scrub-disk-full", "write", apsw.SQLITE_FULL, suffix=suffix,
                             skip=1 if from_end is None else writes - from_end))
    try:
        with pytest.raises(LocalStorageError, match="database or disk is full.*never a mix"):
            scrub_legacy_tokens(str(path), vfs=vfs.name)
    finally:
        vfs.unregister()
    assert vfs.hits["scrub-disk-full"] == 1, fault
    fault_stats.add(fault_stats.FAULTS, 1, campaign=CAMPAIGN)
    now = _state(path)
    assert now[1] == original[1]
    assert now[2] is (layout == "new")
    with open_database(path) as db:
        line = {c.name: c for c in check_health(db).checks}["legacy_tokens"]
    if layout == "old":
        assert now[0] == original[0] and line.ok and line.detail.startswith("legacy layout:")
    else:
        assert not line.ok and "cleanup (VACUUM) did not finish" in line.detail
    scrub_legacy_tokens(str(path))
    with open_database(path) as db:
        line = {c.name: c for c in check_health(db).checks}["legacy_tokens"]
    assert line.ok and line.detail.startswith(f"scrubbed ({SCRUB_MIGRATION_ID})"), line.detail
    assert RAW_NEEDLE not in path.read_bytes()


def test_power_cut_at_every_sync_of_the_rollback(tmp_path: Path) -> None:
    """The restore is one transaction too: each cut leaves the scrubbed database or the restored one."""
    live = tmp_path / "live"
    live.mkdir()
    path = live / DB_NAME
    build_legacy_database(str(path), 30, digest_every=4)
    original = _state(path)
    scrub_legacy_tokens(str(path))
    scrubbed = _state(path)
    vfs = RecordingVFS()
    try:
        rollback_scrub(str(path), vfs=vfs.name)
    finally:
        vfs.unregister()
    seen, failures = set(), []
    positions = [0, *vfs.sync_positions()]
    for position in positions:
        cut_dir = tmp_path / "cut"
        shutil.rmtree(cut_dir, ignore_errors=True)
        vfs.materialise(position, cut_dir)
        state = _state(cut_dir / DB_NAME)
        if state[:2] == original[:2] and not state[2]:
            seen.add("restored")
        elif state == scrubbed:
            seen.add("scrubbed")
        else:
            failures.append(position)
    fault_stats.add(fault_stats.CUT_POINTS, len(positions), campaign=CAMPAIGN)
    fault_stats.add(fault_stats.INVARIANT_VIOLATIONS, len(failures), campaign=CAMPAIGN)
    assert not failures, f"cuts at {failures} left neither the scrubbed nor the restored database"
    assert seen == {"restored", "scrubbed"}
