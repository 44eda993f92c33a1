"""The opt-in legacy raw-token scrub: byte scans before and after, its backup, the rollback gate, the
drop, refusals that change nothing, and how the layout marker coexists with other migrations."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

import apsw
import pytest

from edge_runtime.cli.main import main
from edge_runtime.contract.cancellation_dispatch import digest_lease_token
from edge_runtime.local import legacy_token_scrub as scrub_module
from edge_runtime.local import migrations as migrations_module
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.errors import LocalStorageError, MigrationError, ScrubRefusedError, ScrubRollbackRefusedError
from edge_runtime.local.legacy_token_scrub import (
    SCRUB_COMMAND,
    SCRUB_MIGRATION_ID,
    backup_path_for,
    drop_scrub_backup,
    rollback_scrub,
    scrub_legacy_tokens,
    scrub_status,
)
from tests.support.dispatch import record_cmd
from tests.support.legacy_tokens import RAW_PREFIX, build_legacy_database, raw_token

NEEDLE = RAW_PREFIX.encode()
ROWS = 40


def _cli(db_path: Path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["--db", str(db_path), *args])
    return code, out.getvalue()


def _holders(directory: Path, needle: bytes = NEEDLE) -> set[str]:
    """Names of the files in ``directory`` whose bytes contain ``needle``."""
    return {path.name for path in directory.iterdir() if path.is_file() and needle in path.read_bytes()}


def _lease_tokens(db_path: Path) -> dict[str, str | None]:
    connection = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return dict(connection.execute("SELECT run_id, lease_token FROM run_cancellation_dispatches"))
    finally:
        connection.close()


def _applied(db_path: Path) -> set[str]:
    connection = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {row[0] for row in connection.execute("SELECT id FROM schema_migrations")}
    finally:
        connection.close()


def _status(db_path: Path):
    with open_database(db_path) as db:
        return scrub_status(db.connection, db.path)


def _legacy_result(index: int):
    """The holder of a legacy lease reports its result, proving the lease with its raw token."""
    return record_cmd(version=1, run_id=f"run-{index:06d}", attempt_id=f"att-{index:06d}", owner="legacy-worker",
                      lease_token=raw_token(index))


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir()) if path.is_file()}


@pytest.fixture
def legacy_db(db_path: Path) -> Path:
    build_legacy_database(str(db_path), ROWS, digest_every=5)
    return db_path


@pytest.fixture
def build_with(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], None]]:
    """Make this process a build whose migrations are the files of a given directory."""

    def use(directory: Path) -> None:
        monkeypatch.setattr(migrations_module, "migrations_dir", lambda: directory)
        migrations_module.known_migrations.cache_clear()
        migrations_module.opt_in_migrations.cache_clear()

    yield use
    migrations_module.known_migrations.cache_clear()
    migrations_module.opt_in_migrations.cache_clear()


# --------------------------------------------------------------------------- bytes at rest


def wal(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + "-wal")


def shm(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + "-shm")


def _scan_at_close(
    monkeypatch: pytest.MonkeyPatch, directory: Path, needles: tuple[bytes, ...]
) -> list[tuple[set[str], dict[bytes, set[str]]]]:
    """Scan ``directory`` each time the scrub's connection is about to close: the files present,
    and for each needle the names of the files holding it."""
    scans: list[tuple[set[str], dict[bytes, set[str]]]] = []
    real_open = scrub_module._open

    @contextmanager
    def scanned_before_close(*args, **kwargs) -> Iterator[LocalDatabase]:
        with real_open(*args, **kwargs) as db:
            yield db
            present = {path.name for path in directory.iterdir() if path.is_file()}
            scans.append((present, {needle: _holders(directory, needle) for needle in needles}))

    monkeypatch.setattr(scrub_module, "_open", scanned_before_close)
    return scans


def test_raw_tokens_are_only_in_the_backup_after_the_scrub_and_nowhere_after_the_drop(
    legacy_db: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = legacy_db.parent
    before = _lease_tokens(legacy_db)
    # A legacy lease completed through the adapter: the row no longer holds its raw token, but
    # its bytes stay in the page's free space until the scrub.
    with open_database(legacy_db, clock=clock) as db:
        repo = LocalCancellationDispatchRepository(db)
        repo.record_result(_legacy_result(1))
        live_wal = _holders(directory)
        assert live_wal >= {legacy_db.name}, live_wal
        digests = {r: repo.find_by_run_id(r).lease_token_digest for r in before if r != "run-000001"}
    completed = raw_token(1).encode()
    assert legacy_db.name in _holders(directory, completed)
    assert _status(legacy_db).raw_tokens == ROWS - ROWS // 5 - 1

    code, out = _cli(legacy_db, "check")
    assert code == 0 and f"legacy layout: {ROWS - ROWS // 5 - 1} of {ROWS} dispatch(es) store a raw lease token" in out
    assert "edge-runtime migrate --scrub-legacy-tokens" in out

    at_close = _scan_at_close(monkeypatch, directory, (NEEDLE, completed))
    code, out = _cli(legacy_db, "migrate", "--scrub-legacy-tokens")
    assert code == 0, out
    backup = Path(backup_path_for(str(legacy_db)))
    assert f"the backup {backup} is now the only place the old raw tokens remain" in out
    assert f"{ROWS - ROWS // 5 - 1} raw lease token(s) rewritten" in out
    assert os.stat(backup).st_mode & 0o777 == 0o600
    # The -wal and -shm as the scrub left them, just before its connection closed (closing the
    # last connection checkpoints and deletes them; a power cut right then would not): only the
    # backup holds raw bytes, not the database, its -wal or its -shm.
    (present, holders), = at_close
    assert {legacy_db.name, wal(legacy_db).name, shm(legacy_db).name} <= present, present
    assert holders == {NEEDLE: {backup.name}, completed: {backup.name}}
    assert _holders(directory) == {backup.name}
    assert _holders(directory, completed) == {backup.name}

    after = _lease_tokens(legacy_db)
    assert after.keys() == before.keys()
    for run_id, value in before.items():
        if run_id == "run-000001":
            assert after[run_id] is None
        elif value.startswith("sha256:"):
            assert after[run_id] == value
        else:
            assert after[run_id] == "sha256:" + digest_lease_token(value)
    with open_database(legacy_db, clock=clock) as db:
        repo = LocalCancellationDispatchRepository(db)
        assert {r: repo.find_by_run_id(r).lease_token_digest for r in digests} == digests
        # The holder of a legacy lease still proves it with its raw token after the scrub.
        outcome = repo.record_result(_legacy_result(2))
        assert outcome.dispatch.status == "dispatched"
    assert NEEDLE not in b"".join(p.read_bytes() for p in directory.iterdir() if p.name != backup.name)

    code, out = _cli(legacy_db, "check")
    assert code == 0
    assert f"legacy_tokens: scrubbed ({SCRUB_MIGRATION_ID}) at " in out
    assert f"the backup {backup} still holds the old raw tokens" in out

    # Hold the backup's inode open across the drop: what it holds after the unlink is what the
    # drop left in those blocks.
    size = backup.stat().st_size
    with open(backup, "rb") as held:
        code, out = _cli(legacy_db, "migrate", "--drop-scrub-backup")
        assert code == 0 and f"overwritten ({size:,} bytes) and deleted" in out
        assert not backup.exists()
        assert os.fstat(held.fileno()).st_nlink == 0
        assert held.read() == bytes(size)
    assert _holders(directory) == set()
    code, out = _cli(legacy_db, "check")
    assert code == 0 and "its backup was dropped" in out
    code, out = _cli(legacy_db, "migrate", "--drop-scrub-backup")
    assert code == 0 and "no scrub backup" in out


def test_the_scrub_is_idempotent(legacy_db: Path) -> None:
    scrub_legacy_tokens(str(legacy_db))
    files = _snapshot(legacy_db.parent)
    lines: list[str] = []
    status = scrub_legacy_tokens(str(legacy_db), progress=lines.append)
    assert lines == [f"{legacy_db}: already scrubbed ({SCRUB_MIGRATION_ID}); nothing to do"]
    assert status.scrubbed_at_ms is not None and status.cleaned and status.raw_tokens == 0
    assert _snapshot(legacy_db.parent) == files


def test_an_interrupted_cleanup_is_reported_and_finished_by_running_again(legacy_db: Path, monkeypatch) -> None:
    def no_vacuum(db, say):
        raise OSError("power cut before VACUUM")

    monkeypatch.setattr(scrub_module, "_clean", no_vacuum)
    with pytest.raises(LocalStorageError, match="never a mix; `edge-runtime check` says which"):
        scrub_legacy_tokens(str(legacy_db))
    monkeypatch.undo()
    code, out = _cli(legacy_db, "check")
    assert code == 1 and "its cleanup (VACUUM) did not finish: run `edge-runtime migrate --scrub-legacy-tokens` again" in out
    code, out = _cli(legacy_db, "migrate", "--scrub-legacy-tokens")
    assert code == 0 and "cleanup did not finish; finishing it" in out
    assert _holders(legacy_db.parent) == {Path(backup_path_for(str(legacy_db))).name}
    assert _cli(legacy_db, "check")[0] == 0


# --------------------------------------------------------------------------- rollback gate


def test_rollback_restores_the_backup_while_nothing_was_written(legacy_db: Path) -> None:
    before = _lease_tokens(legacy_db)
    scrub_legacy_tokens(str(legacy_db))
    code, out = _cli(legacy_db, "migrate", "--rollback-scrub")
    assert code == 0 and "holds the raw lease tokens again" in out
    assert _lease_tokens(legacy_db) == before
    assert SCRUB_MIGRATION_ID not in _applied(legacy_db)
    backup = Path(backup_path_for(str(legacy_db)))
    assert backup.exists()  # deleting it is a separate step
    code, out = _cli(legacy_db, "check")
    assert code == 0 and "legacy layout" in out and f"the backup {backup} still holds" in out
    # Scrubbing again replaces the superseded backup (overwritten first: it holds raw tokens).
    code, out = _cli(legacy_db, "migrate", "--scrub-legacy-tokens")
    assert code == 0 and f"overwrote and removed {backup}" in out
    assert _holders(legacy_db.parent) == {backup.name}


def _submit(db_path: Path) -> None:
    assert _cli(db_path, "submit", "--", "true")[0] == 0


def _watermark(db_path: Path) -> None:
    with open_database(db_path) as db, db.write() as now_ms:
        db.connection.execute("INSERT INTO clock_watermark (id, watermark_ms, updated_at_ms) VALUES (1, ?, ?)", (now_ms, now_ms))


def _rewrite_one_dispatch(db_path: Path) -> None:
    with open_database(db_path) as db:
        LocalCancellationDispatchRepository(db).record_result(_legacy_result(3))


@pytest.mark.parametrize(
    ("write", "tables"),
    [
        pytest.param(_submit, "run_events, runs", id="submit"),
        pytest.param(_watermark, "clock_watermark", id="clock-watermark"),
        pytest.param(_rewrite_one_dispatch, "run_cancellation_dispatches, run_events, runs", id="dispatch-result"),
    ],
)
def test_rollback_is_refused_after_one_write(legacy_db: Path, write: Callable[[Path], None], tables: str) -> None:
    scrub_legacy_tokens(str(legacy_db))
    write(legacy_db)
    scrubbed = _lease_tokens(legacy_db)
    backup = Path(backup_path_for(str(legacy_db)))
    backup_bytes = backup.read_bytes()
    code = main(["--db", str(legacy_db), "migrate", "--rollback-scrub"])
    assert code == 1
    with pytest.raises(ScrubRollbackRefusedError, match=rf"was written after the scrub \({tables} changed\)"):
        rollback_scrub(str(legacy_db))
    assert _lease_tokens(legacy_db) == scrubbed
    assert SCRUB_MIGRATION_ID in _applied(legacy_db)
    assert backup.read_bytes() == backup_bytes


def test_rollback_is_refused_without_a_scrub_or_its_backup(legacy_db: Path) -> None:
    with pytest.raises(ScrubRollbackRefusedError, match="is not scrubbed; there is nothing to roll back"):
        rollback_scrub(str(legacy_db))
    scrub_legacy_tokens(str(legacy_db))
    backup = Path(backup_path_for(str(legacy_db)))
    original = backup.read_bytes()
    with apsw.Connection(str(backup)) as connection:
        connection.execute("UPDATE runs SET name = 'tampered' WHERE id = 'run-000000'")
    with pytest.raises(ScrubRollbackRefusedError, match="is not the backup the scrub wrote"):
        rollback_scrub(str(legacy_db))
    backup.write_bytes(original)
    drop_scrub_backup(str(legacy_db))
    with pytest.raises(ScrubRollbackRefusedError, match=r"backup .* is gone \(dropped\?\)"):
        rollback_scrub(str(legacy_db))
    assert _status(legacy_db).raw_tokens == 0
    with apsw.Connection(str(legacy_db)) as connection:  # a forged, newer record of the gate
        connection.execute(
            "INSERT INTO device_events (type, payload, created_at_ms) VALUES ('legacy_tokens.scrubbed', '[1]', 1)"
        )
    with pytest.raises(ScrubRollbackRefusedError, match="the scrub's record in .* is unreadable"):
        rollback_scrub(str(legacy_db))
    assert "legacy_tokens: scrubbed" in _cli(legacy_db, "check")[1]  # check never decodes the record


# --------------------------------------------------------------------------- refusals


def test_a_live_service_session_refuses_the_scrub_and_nothing_changes(legacy_db: Path) -> None:
    with open_database(legacy_db) as db, db.write() as now_ms:
        db.connection.execute(
            "INSERT INTO worker_sessions (worker_id, session_id, generation, status, version, capabilities, "
            "capabilities_hash, max_concurrent_runs, available_slots, heartbeat_at_ms, lease_expires_at_ms, "
            "created_at_ms, updated_at_ms) VALUES ('edge-router', 's1', 3, 'online', 2, '{}', ?, 2, 2, ?, ?, ?, ?)",
            ("0" * 64, now_ms, now_ms + 30_000, now_ms, now_ms),
        )
    files = _snapshot(legacy_db.parent)
    code = main(["--db", str(legacy_db), "migrate", "--scrub-legacy-tokens"])
    assert code == 1
    with pytest.raises(ScrubRefusedError, match=r"worker edge-router, session generation 3\) holds a live session"):
        scrub_legacy_tokens(str(legacy_db))
    assert _snapshot(legacy_db.parent) == files
    assert not Path(backup_path_for(str(legacy_db))).exists()


def test_another_process_with_the_file_open_refuses_the_scrub_after_waiting(legacy_db: Path) -> None:
    other = apsw.Connection(str(legacy_db))
    try:
        other.execute("SELECT count(*) FROM runs").fetchone()
        files = _snapshot(legacy_db.parent)
        with pytest.raises(ScrubRefusedError, match="another process has .* open .* nothing was changed"):
            scrub_legacy_tokens(str(legacy_db), busy_timeout_ms=50)
        assert _snapshot(legacy_db.parent) == files
        assert not Path(backup_path_for(str(legacy_db))).exists()
    finally:
        other.close()
    assert scrub_legacy_tokens(str(legacy_db)).cleaned


def test_short_free_space_refuses_the_scrub_with_the_figure(legacy_db: Path, monkeypatch) -> None:
    real = os.statvfs(legacy_db.parent)

    class Full:
        f_frsize = real.f_frsize
        f_bavail = 3

    monkeypatch.setattr(scrub_module.os, "statvfs", lambda path: Full)
    files = _snapshot(legacy_db.parent)
    with pytest.raises(ScrubRefusedError, match=rf"needs about [\d,]+ bytes .* {3 * real.f_frsize:,} are available"):
        scrub_legacy_tokens(str(legacy_db))
    assert _snapshot(legacy_db.parent) == files


def test_a_stored_token_that_is_not_a_valid_token_refuses_the_scrub(legacy_db: Path) -> None:
    connection = apsw.Connection(str(legacy_db))
    connection.execute("UPDATE run_cancellation_dispatches SET lease_token = 'bad token\n' WHERE run_id = 'run-000007'")
    connection.close()
    with pytest.raises(ScrubRefusedError, match=r"1 dispatch\(es\) store a lease token that is not a valid token .* run run-000007"):
        scrub_legacy_tokens(str(legacy_db))
    assert SCRUB_MIGRATION_ID not in _applied(legacy_db)
    assert not Path(backup_path_for(str(legacy_db))).exists()


def test_a_planted_link_at_the_backup_path_is_never_followed_or_overwritten(legacy_db: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    backup = Path(backup_path_for(str(legacy_db)))
    backup.symlink_to(victim)
    with pytest.raises(ScrubRefusedError, match="not a regular, singly linked file owned by this user"):
        scrub_legacy_tokens(str(legacy_db))
    with pytest.raises(ScrubRefusedError, match="not a regular, singly linked file"):
        drop_scrub_backup(str(legacy_db))
    backup.unlink()
    os.link(victim, backup)
    with pytest.raises(ScrubRefusedError, match="not a regular, singly linked file"):
        drop_scrub_backup(str(legacy_db))
    assert victim.read_bytes() == b"precious"
    assert SCRUB_MIGRATION_ID not in _applied(legacy_db)


# --------------------------------------------------------------------------- the layout marker among migrations


def _copy_migrations(tmp_path: Path, name: str, keep: Callable[[str], bool]) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    for path in migrations_module.migrations_dir().glob("*.sql"):
        if keep(path.stem):
            shutil.copy(path, directory / path.name)
    return directory


def test_an_older_build_refuses_a_scrubbed_file_with_its_existing_error(
    legacy_db: Path, tmp_path: Path, build_with: Callable[[Path], None]
) -> None:
    plain = tmp_path / "plain.db"
    build_legacy_database(str(plain), 3)
    scrub_legacy_tokens(str(legacy_db))
    files = _snapshot(legacy_db.parent)
    # A build from before the scrub step: every automatic migration of today, no opt-in step; the
    # runner refuses any applied id it does not know.
    automatic = [m.id for m in migrations_module.known_migrations()]
    build_with(_copy_migrations(tmp_path, "old-build", lambda stem: not migrations_module.is_opt_in(stem)))
    assert [m.id for m in migrations_module.known_migrations()] == automatic
    with pytest.raises(
        MigrationError,
        match=rf"has migration {SCRUB_MIGRATION_ID} applied, which this build does not know; "
        r"it was written by a newer release of edge-runtime",
    ):
        open_database(legacy_db)
    assert _snapshot(legacy_db.parent) == files
    code = main(["--db", str(legacy_db), "list"])
    assert code == 1
    # ... while it still opens an unscrubbed database, raw tokens and all.
    open_database(plain).close()


def test_later_migrations_apply_to_scrubbed_and_unscrubbed_databases(
    legacy_db: Path, tmp_path: Path, build_with: Callable[[Path], None]
) -> None:
    plain = tmp_path / "plain.db"
    build_legacy_database(str(plain), 3)
    scrub_legacy_tokens(str(legacy_db))
    # A later build: one more automatic migration after today's last (numbers below the opt-in range).
    automatic = {m.id for m in migrations_module.known_migrations()}
    new_id = f"{int(max(automatic)[:4]) + 1:04d}_later_step"
    later = _copy_migrations(tmp_path, "later-build", lambda stem: True)
    (later / f"{new_id}.sql").write_text("CREATE TABLE later_step (id INTEGER PRIMARY KEY) STRICT;\n")
    build_with(later)
    for path in (legacy_db, plain):
        open_database(path).close()
    assert _applied(plain) == automatic | {new_id}
    assert _applied(legacy_db) == _applied(plain) | {SCRUB_MIGRATION_ID}
    for path in (legacy_db, plain):
        code, out = _cli(path, "check")
        assert code == 0 and f"migrations: {len(automatic) + 1} applied, latest {new_id}" in out, out
    assert f"opt-in: {SCRUB_MIGRATION_ID}" in _cli(legacy_db, "check")[1]
    # The migration changed the scrubbed file: the gate now refuses the rollback.
    with pytest.raises(ScrubRollbackRefusedError, match=r"schema_migrations, sqlite_schema changed"):
        rollback_scrub(str(legacy_db))
    # A database scrubbed after the later migration keeps both.
    scrub_legacy_tokens(str(plain))
    assert _applied(plain) == _applied(legacy_db)


def test_the_scrub_step_is_never_pending(db_path: Path) -> None:
    open_database(db_path).close()
    assert SCRUB_MIGRATION_ID not in _applied(db_path)
    assert [m.id for m in migrations_module.opt_in_migrations()] == [SCRUB_MIGRATION_ID]
    assert SCRUB_MIGRATION_ID not in {m.id for m in migrations_module.known_migrations()}
    count = len(migrations_module.known_migrations())
    code, out = _cli(db_path, "migrate")
    assert code == 0 and f"{count}/{count} migrations applied" in out


def test_check_of_a_database_this_version_created_suggests_no_scrub(db_path: Path) -> None:
    assert _cli(db_path, "migrate")[0] == 0
    code, out = _cli(db_path, "check")
    assert code == 0 and "legacy_tokens: no dispatch stores a raw lease token: nothing to scrub\n" in out
    assert SCRUB_COMMAND not in out and "scrub-legacy-tokens" not in out
    build_legacy_database(str(db_path), 2)  # rows of the previous layout: the scrub is suggested
    code, out = _cli(db_path, "check")
    assert f"legacy layout: 2 of 2 dispatch(es) store a raw lease token; scrub them with `{SCRUB_COMMAND}`" in out
