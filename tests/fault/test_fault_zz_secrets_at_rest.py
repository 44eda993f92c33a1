"""Secrets at rest, after the whole campaign (this module sorts last): the raw bytes of every
lease token issued (by the workloads, and by every ``serve`` process through its token log) appear
in no file the runtime wrote: database, ``-wal``, ``-shm``, journals, Attempt logs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import fault_secrets
import fault_stats
from fault_workloads import record

pytestmark = pytest.mark.fault


def test_no_raw_lease_token_in_any_file_the_runtime_wrote(tmp_path: Path) -> None:
    if not fault_secrets.ISSUED_TOKENS:
        # Run alone: produce a campaign's worth of files first, so the scan is never vacuous.
        recording = record("dispatch", tmp_path / "live", random.Random(fault_stats.SEED), 30)
        fault_secrets.register(recording.tokens, tmp_path)
    files = fault_secrets.files_under(fault_secrets.RUNTIME_DIRS)
    names = {path.name for path in files}
    assert fault_secrets.ISSUED_TOKENS and files
    # The scan covers the database itself (and the WAL where one was left behind).
    assert any(name.endswith(".db") for name in names)
    leaks = fault_secrets.leaks_in_files(files, fault_secrets.ISSUED_TOKENS)
    assert leaks == {}, f"raw lease tokens found at rest: {leaks}"


def test_the_scan_finds_a_token_that_is_there(tmp_path: Path) -> None:
    """Self-test: a planted token is found, so an empty result above means something."""
    planted = tmp_path / "edge-runtime.db-wal"
    planted.write_bytes(b"\x00page\x00raw-lease-token-planted\x00")
    assert fault_secrets.leaks_in_files([planted], ["raw-lease-token-planted"]) != {}
