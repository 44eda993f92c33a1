"""Secrets at rest: the raw bytes of every lease token issued (by the workloads, and by every
``serve`` process through its token log) appear in no file the runtime wrote: database, ``-wal``,
``-shm``, journals, Attempt logs. Each fault test is checked at its own end, by the autouse
fixture ``no_raw_lease_token_at_rest`` (tests/fault/conftest.py); these tests show that check
reads real files and finds a token that is there."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.support import fault_secrets
from tests.support import fault_stats
from tests.support.fault_workloads import record

pytestmark = pytest.mark.fault


def test_no_raw_lease_token_in_any_file_the_runtime_wrote(tmp_path: Path) -> None:
    recording = record("dispatch", tmp_path / "live", random.Random(fault_stats.SEED), 30)
    fault_secrets.register(recording.tokens, tmp_path)
    files = fault_secrets.files_under([tmp_path])
    assert recording.tokens and files
    # The scan covers the database itself (and the WAL where one was left behind).
    assert any(path.name.endswith(".db") for path in files)
    assert fault_secrets.leaks_at_rest([tmp_path]) == {}


def test_the_scan_finds_a_token_that_is_there(tmp_path: Path) -> None:
    """Self-test: a planted token is found, so an empty result above means something."""
    planted = tmp_path / "edge-runtime.db-wal"
    planted.write_bytes(b"\x00page\x00raw-lease-token-planted\x00")
    assert fault_secrets.leaks_in_files([planted], ["raw-lease-token-planted"]) != {}


def test_the_check_after_each_test_finds_a_token_a_test_left(tmp_path: Path) -> None:
    """Self-test of the fixture's check: a registered directory holding an issued token is a
    leak (the planted file is removed again, so this test's own check passes)."""
    first = len(fault_secrets.RUNTIME_DIRS)
    planted = tmp_path / "device" / "edge-runtime.db"
    planted.parent.mkdir()
    planted.write_bytes(b"\x00page\x00raw-lease-token-left-behind\x00")
    fault_secrets.register(["raw-lease-token-left-behind"], planted.parent)
    assert list(fault_secrets.leaks_at_rest(fault_secrets.RUNTIME_DIRS[first:])) == [str(planted)]
    planted.unlink()
    assert fault_secrets.leaks_at_rest(fault_secrets.RUNTIME_DIRS[first:]) == {}
