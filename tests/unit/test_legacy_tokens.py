"""The legacy raw-token column: projected to its digest on read, never written by this runtime."""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec
import pytest

from tests.support.dispatch import claim_cmd, record_cmd, seed, stored_dispatch
from edge_runtime.contract.cancellation_dispatch import DispatchStatus, FenceRejectedError, digest_lease_token, encode
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.run_events import list_run_events

LEGACY_TOKENS = [
    pytest.param("legacy-raw-token-7f3a", id="plain"),
    pytest.param("sha256:not-a-digest", id="sha256-prefix-but-not-a-digest"),
    pytest.param(hashlib.sha256(b"x").hexdigest(), id="bare-hex-is-a-raw-token"),
    pytest.param("sha256:" + hashlib.sha256(b"x").hexdigest().upper(), id="uppercase-digest-is-a-raw-token"),
    pytest.param("jeton-\u00e9t\u00e9-\u2603", id="non-ascii"),
]


def _insert_legacy_leased_row(db: LocalDatabase, raw_token: str, *, expires_at_ms: int) -> None:
    """A row as the previous layout wrote it: the raw token itself in ``lease_token``."""
    db.connection.execute(
        "INSERT INTO run_cancellation_dispatches (run_id, attempt_id, status, version, dispatch_count, "
        "lease_owner, lease_token, lease_expires_at_ms, created_at_ms, updated_at_ms) "
        "VALUES ('run-1', 'att-1', 'leased', 1, 1, 'legacy-worker', ?, ?, 1600000000000, 1600000000000)",
        (raw_token, expires_at_ms),
    )


@pytest.mark.parametrize("raw_token", LEGACY_TOKENS)
def test_a_legacy_raw_token_is_read_back_only_as_its_digest(
    db: LocalDatabase, clock: ManualClock, raw_token: str
) -> None:
    seed(db.connection)
    _insert_legacy_leased_row(db, raw_token, expires_at_ms=clock.now_ms() + 10_000)
    repo = LocalCancellationDispatchRepository(db)

    record = repo.find_by_run_id("run-1")
    assert record is not None and record.status is DispatchStatus.LEASED
    assert record.lease_token_digest == digest_lease_token(raw_token)
    assert raw_token not in repr(record)
    assert raw_token.encode() not in encode(record)
    assert raw_token not in msgspec.structs.asdict(record).values()

    # Another owner sees the legacy lease, again only by its digest.
    seen = repo.claim(claim_cmd(owner="worker-b", lease_token="token-b"))
    assert seen.status == "leased" and seen.dispatch == record


@pytest.mark.parametrize("raw_token", LEGACY_TOKENS)
def test_a_result_carrying_the_legacy_raw_token_is_accepted(
    db: LocalDatabase, clock: ManualClock, raw_token: str
) -> None:
    seed(db.connection)
    _insert_legacy_leased_row(db, raw_token, expires_at_ms=clock.now_ms() + 10_000)
    repo = LocalCancellationDispatchRepository(db)

    with pytest.raises(FenceRejectedError):
        repo.record_result(record_cmd(version=1, owner="legacy-worker", lease_token=raw_token + "x"))
    with pytest.raises(FenceRejectedError):
        repo.record_result(record_cmd(version=1, owner="legacy-worker", lease_token=digest_lease_token(raw_token)))

    outcome = repo.record_result(record_cmd(version=1, owner="legacy-worker", lease_token=raw_token))
    assert outcome.dispatch.status is DispatchStatus.DISPATCHED
    assert stored_dispatch(db.connection)["lease_token"] is None
    for event in list_run_events(db.connection, "run-1"):
        assert raw_token not in encode(event).decode()


def test_an_expired_legacy_lease_is_taken_over_and_the_new_claim_stores_only_a_digest(
    db: LocalDatabase, clock: ManualClock
) -> None:
    seed(db.connection)
    _insert_legacy_leased_row(db, "legacy-raw-token-7f3a", expires_at_ms=clock.now_ms())
    repo = LocalCancellationDispatchRepository(db)
    outcome = repo.claim(claim_cmd(owner="worker-b", lease_token="token-b"))
    assert outcome.status == "claimed" and outcome.dispatch.version == 2
    assert stored_dispatch(db.connection)["lease_token"] == "sha256:" + digest_lease_token("token-b")
    with pytest.raises(FenceRejectedError):
        repo.record_result(record_cmd(version=1, owner="legacy-worker", lease_token="legacy-raw-token-7f3a"))


def test_new_claims_store_only_the_sha256_form(db: LocalDatabase, clock: ManualClock) -> None:
    repo = LocalCancellationDispatchRepository(db)
    for index in range(5):
        run_id, attempt_id = f"run-{index}", f"att-{index}"
        seed(db.connection, run_id, attempt_id)
        token = f"fresh-token-{index}"
        repo.claim(claim_cmd(run_id=run_id, attempt_id=attempt_id, lease_token=token))
        stored = stored_dispatch(db.connection, run_id)["lease_token"]
        assert stored == "sha256:" + hashlib.sha256(
            b"qinglong.cancellation-dispatch-lease.v1\x00" + token.encode()
        ).hexdigest()


def _files(db_path: Path) -> list[Path]:
    return [p for p in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")) if p.exists()]


def _assert_absent(db_path: Path, needles: list[bytes]) -> list[Path]:
    files = _files(db_path)
    for path in files:
        data = path.read_bytes()
        for needle in needles:
            assert needle not in data, f"raw token {needle!r} found in {path.name}"
    return files


def test_raw_claim_tokens_appear_in_no_database_file_open_or_closed(db_path: Path, clock: ManualClock) -> None:
    db = open_database(db_path, clock=clock)
    repo = LocalCancellationDispatchRepository(db)
    tokens = [f"RAW-CLAIM-TOKEN-{index:04d}-\u00e9" for index in range(20)]
    for index, token in enumerate(tokens):
        run_id, attempt_id = f"run-{index}", f"att-{index}"
        seed(db.connection, run_id, attempt_id)
        lease = repo.claim(claim_cmd(run_id=run_id, attempt_id=attempt_id, lease_token=token))
        assert lease.status == "claimed" and lease.lease_token == token
        if index % 2:
            repo.record_result(record_cmd(version=1, run_id=run_id, attempt_id=attempt_id, lease_token=token))
        else:
            clock.advance(lease.dispatch.lease_expires_at_ms - clock.now_ms())
            taken = repo.claim(claim_cmd(run_id=run_id, attempt_id=attempt_id, owner="w2", lease_token=token + "2"))
            assert taken.status == "claimed"
    needles = [t.encode("utf-8") for t in tokens] + [(t + "2").encode("utf-8") for t in tokens]
    needles += [t.encode("utf-16-le") for t in tokens]

    # While the database is still open the WAL holds every committed page.
    files = _assert_absent(db_path, needles)
    assert Path(f"{db_path}-wal").exists() and Path(f"{db_path}-wal").stat().st_size > 0
    assert db_path in files
    db.close()
    _assert_absent(db_path, needles)
    # The digests, on the other hand, are there.
    reopened = open_database(db_path, clock=clock)
    try:
        assert stored_dispatch(reopened.connection, "run-0")["lease_token"] == "sha256:" + digest_lease_token(
            tokens[0] + "2"
        )
    finally:
        reopened.close()
