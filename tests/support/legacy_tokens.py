"""A database as the previous Local layout left it: leased cancellation dispatches holding their raw
lease tokens in ``lease_token``. Shared by the scrub's unit tests, its power-cut campaign and its
benchmark. Rows are written with plain SQL, as the legacy adapter (or any external tool) would."""

from __future__ import annotations

import apsw

from edge_runtime.contract.cancellation_dispatch import digest_lease_token
from edge_runtime.local.database import open_database

#: Every raw token starts with this, so a byte scan finds any of them with one needle.
RAW_PREFIX = "LEGACY-RAW-TOKEN-"
CREATED_AT_MS = 1_600_000_000_000
#: Far in the future, so the legacy leases are still live when a test reads them.
EXPIRES_AT_MS = 4_000_000_000_000


def raw_token(index: int) -> str:
    return f"{RAW_PREFIX}{index:06d}-7f3a9c"


def build_legacy_database(path: str, rows: int, *, digest_every: int = 0, vfs: str | None = None) -> list[str]:
    """``rows`` Runs, each with one Attempt, one event and one leased dispatch; every
    ``digest_every``-th dispatch (0: none) already stores the new ``sha256:`` form, the others their
    raw token. Returns the raw tokens stored."""
    db = open_database(path, vfs=vfs)
    stored = []
    try:
        connection: apsw.Connection = db.connection
        with db.write():
            for index in range(rows):
                run_id, attempt_id = f"run-{index:06d}", f"att-{index:06d}"
                token = raw_token(index)
                if digest_every and index % digest_every == 0:
                    value = "sha256:" + digest_lease_token(token)
                else:
                    value = token
                    stored.append(token)
                connection.execute(
                    "INSERT INTO runs (id, status, version, event_sequence, cancel_requested_at_ms, created_at_ms, "
                    "name, command) VALUES (?, 'running', 1, 1, ?, ?, ?, ?)",
                    (run_id, CREATED_AT_MS, CREATED_AT_MS, f"job {index}", '["sh", "-c", "sleep 60"]'),
                )
                connection.execute(
                    "INSERT INTO run_attempts (id, run_id, attempt, status, created_at_ms) "
                    "VALUES (?, ?, 1, 'running', ?)",
                    (attempt_id, run_id, CREATED_AT_MS),
                )
                connection.execute(
                    "INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, "
                    "attempt_id, payload, created_at_ms) VALUES (?, ?, 1, 'run.cancel_requested', ?, 'user', "
                    "'cli', ?, '{}', ?)",
                    (f"evt-{index:06d}", run_id, f"cancel:{index}", attempt_id, CREATED_AT_MS),
                )
                connection.execute(
                    "INSERT INTO run_cancellation_dispatches (run_id, attempt_id, status, version, dispatch_count, "
                    "lease_owner, lease_token, lease_expires_at_ms, created_at_ms, updated_at_ms) "
                    "VALUES (?, ?, 'leased', 1, 1, 'legacy-worker', ?, ?, ?, ?)",
                    (run_id, attempt_id, value, EXPIRES_AT_MS, CREATED_AT_MS, CREATED_AT_MS),
                )
    finally:
        db.close()
    return stored
