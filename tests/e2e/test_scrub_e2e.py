"""The scrub against a real ``serve``: refused while the service runs, done once it stopped, and the
service runs on the scrubbed file (whose rollback its writes then close)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.legacy_tokens import RAW_PREFIX, build_legacy_database
from tests.support.service_harness import Harness

pytestmark = pytest.mark.e2e


def test_the_scrub_never_runs_under_a_live_service(harness: Harness) -> None:
    build_legacy_database(str(harness.db_path), 5)
    backup = Path(f"{harness.db_path}.scrub-backup")
    service = harness.serve()
    refused = harness.cli("migrate", "--scrub-legacy-tokens", check=False)
    assert refused.returncode == 1
    assert "holds a live session" in refused.stderr and "stop `serve` first" in refused.stderr
    assert "[LOCAL_SCRUB_REFUSED]" in refused.stderr
    assert not backup.exists()
    assert service.stop() == 0

    done = harness.cli("migrate", "--scrub-legacy-tokens")
    assert f"the backup {backup} is now the only place the old raw tokens remain" in done.stdout
    assert RAW_PREFIX.encode() not in harness.db_path.read_bytes()
    assert "legacy_tokens: scrubbed (9001_scrub_legacy_tokens)" in harness.cli("check").stdout

    service = harness.serve()
    run_id = harness.submit("true")
    harness.wait_status(run_id, "succeeded")
    assert service.stop() == 0
    refused = harness.cli("migrate", "--rollback-scrub", check=False)
    assert refused.returncode == 1 and "was written after the scrub" in refused.stderr
    assert "[LOCAL_SCRUB_ROLLBACK_REFUSED]" in refused.stderr
