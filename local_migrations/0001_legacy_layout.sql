-- 0001: the layout inherited from the previous Local Profile, with the raw-token column name
-- `run_cancellation_dispatches.lease_token` kept for compatibility (spec §3, ADR-0456 §10).
-- Columns beyond those the spec lists are nullable or defaulted, so tools can insert a Run or
-- an Attempt with only the listed columns.

CREATE TABLE runs (
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 36),
    execution_owner TEXT NOT NULL DEFAULT 'runtime' CHECK (execution_owner IN ('runtime', 'legacy')),
    status TEXT NOT NULL CHECK (status IN (
        'created', 'queued', 'dispatching', 'running', 'waiting_approval', 'retry_wait', 'lost',
        'succeeded', 'failed', 'cancelled')),
    version INTEGER NOT NULL DEFAULT 0 CHECK (version BETWEEN 0 AND 2147483647),
    event_sequence INTEGER NOT NULL DEFAULT 0 CHECK (event_sequence >= 0),
    cancel_requested_at_ms INTEGER CHECK (cancel_requested_at_ms >= 0),
    cancel_reason TEXT,
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0),
    updated_at_ms INTEGER CHECK (updated_at_ms >= 0),
    finished_at_ms INTEGER CHECK (finished_at_ms >= 0),
    name TEXT,
    command TEXT CHECK (command IS NULL OR json_valid(command))
) STRICT;

CREATE TABLE run_attempts (
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 36),
    run_id TEXT NOT NULL REFERENCES runs (id),
    attempt INTEGER NOT NULL CHECK (attempt >= 1),
    status TEXT NOT NULL CHECK (status IN (
        'claimed', 'starting', 'running', 'succeeded', 'failed', 'cancelled', 'lost')),
    executor_type TEXT NOT NULL DEFAULT 'local_process',
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0),
    updated_at_ms INTEGER CHECK (updated_at_ms >= 0),
    finished_at_ms INTEGER CHECK (finished_at_ms >= 0),
    UNIQUE (run_id, attempt),
    -- Target of the dispatch's composite reference: an Attempt of that very Run.
    UNIQUE (id, run_id)
) STRICT;

CREATE TABLE run_events (
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 36),
    run_id TEXT NOT NULL REFERENCES runs (id),
    sequence INTEGER NOT NULL CHECK (sequence >= 1),
    type TEXT NOT NULL,
    dedupe_key TEXT NOT NULL,
    actor_type TEXT NOT NULL,
    actor_id TEXT NOT NULL,
    attempt_id TEXT,
    payload TEXT NOT NULL CHECK (json_valid(payload)),
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0),
    UNIQUE (run_id, sequence),
    UNIQUE (run_id, dedupe_key)
) STRICT;

-- The event log is append-only: history is never rewritten, only added to.
CREATE TRIGGER run_events_append_only_update BEFORE UPDATE ON run_events
BEGIN
    SELECT RAISE(ABORT, 'run_events is append-only');
END;

CREATE TRIGGER run_events_append_only_delete BEFORE DELETE ON run_events
BEGIN
    SELECT RAISE(ABORT, 'run_events is append-only');
END;

CREATE TABLE run_cancellation_dispatches (
    run_id TEXT PRIMARY KEY NOT NULL REFERENCES runs (id),
    attempt_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'leased', 'retry_wait', 'dispatched', 'blocked')),
    version INTEGER NOT NULL CHECK (version BETWEEN 0 AND 2147483647),
    dispatch_count INTEGER NOT NULL CHECK (dispatch_count >= 0 AND dispatch_count <= version),
    next_attempt_at_ms INTEGER CHECK (next_attempt_at_ms >= 0),
    lease_owner TEXT CHECK (lease_owner IS NULL OR length(lease_owner) BETWEEN 1 AND 128),
    -- Legacy name. New writes store only 'sha256:<64 hex>'; older rows may hold a raw token,
    -- which the adapter projects to its digest at the record boundary.
    lease_token TEXT,
    lease_expires_at_ms INTEGER CHECK (lease_expires_at_ms >= 0),
    last_result TEXT CHECK (last_result IS NULL OR last_result IN (
        'termination_requested', 'already_exited', 'identity_mismatch', 'pid_mismatch', 'unsupported',
        'invalid', 'controller_missing', 'handle_missing', 'dispatch_error')),
    last_dispatched_at_ms INTEGER CHECK (last_dispatched_at_ms >= 0),
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0),
    updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= created_at_ms),
    FOREIGN KEY (attempt_id, run_id) REFERENCES run_attempts (id, run_id),
    -- Lease shape: leased <=> owner, token and expiry all present.
    CHECK ((status = 'leased') = (lease_owner IS NOT NULL AND lease_token IS NOT NULL AND lease_expires_at_ms IS NOT NULL)),
    CHECK (status = 'leased' OR (lease_owner IS NULL AND lease_token IS NULL AND lease_expires_at_ms IS NULL)),
    -- Retry shape: only waiting rows have a due time.
    CHECK ((status IN ('pending', 'retry_wait')) = (next_attempt_at_ms IS NOT NULL)),
    -- Counters: a pending row was never dispatched; every other row was, at least once.
    CHECK (status <> 'pending' OR (version = 0 AND dispatch_count = 0 AND last_result IS NULL)),
    CHECK (status = 'pending' OR dispatch_count >= 1),
    -- Terminal shape.
    CHECK (status <> 'dispatched' OR last_result IN ('termination_requested', 'already_exited')),
    CHECK (status <> 'blocked' OR last_result IN ('identity_mismatch', 'pid_mismatch', 'unsupported', 'invalid')),
    CHECK (status <> 'retry_wait' OR last_result IN (
        'identity_mismatch', 'pid_mismatch', 'unsupported', 'invalid',
        'controller_missing', 'handle_missing', 'dispatch_error')),
    CHECK (status <> 'leased' OR last_result IS NULL OR last_result IN (
        'identity_mismatch', 'pid_mismatch', 'unsupported', 'invalid',
        'controller_missing', 'handle_missing', 'dispatch_error'))
) STRICT;

-- Only two indexes: bounded due scans, and expired-lease recovery.
CREATE INDEX run_cancellation_dispatches_due ON run_cancellation_dispatches (status, next_attempt_at_ms);
CREATE INDEX run_cancellation_dispatches_lease_expiry ON run_cancellation_dispatches (lease_expires_at_ms);
