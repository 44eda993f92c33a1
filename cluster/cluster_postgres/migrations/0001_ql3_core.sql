-- 0001: the Cluster Profile schema `ql3` (cluster-profile.md §3): the same columns as the Local
-- tables of the same names, in PostgreSQL types. The schema and `ql3.schema_migrations` are
-- created by migrate() itself, under the same advisory lock, before this file runs.
--
-- CHECKs are written NULL-safe: a CHECK passes when its expression is NULL, so a shape rule is a
-- CASE whose every branch is a non-NULL boolean, or uses num_nulls/num_nonnulls/coalesce.
-- Bearer tokens never reach this schema: only 64-hex SHA-256 digests, computed by the client.

-- Database time in ms. Repositories read it once per transaction, in the first statement after
-- the blocking row lock (statement_timestamp(), not transaction_timestamp(): see §4).
CREATE FUNCTION ql3.now_ms() RETURNS bigint LANGUAGE sql STABLE
    AS $$ SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint $$;

CREATE TABLE ql3.runs (
    id text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 36),
    execution_owner text NOT NULL DEFAULT 'runtime' CHECK (execution_owner IN ('runtime', 'legacy')),
    status text NOT NULL CHECK (status IN (
        'created', 'queued', 'dispatching', 'running', 'waiting_approval', 'retry_wait', 'lost',
        'succeeded', 'failed', 'cancelled')),
    version integer NOT NULL DEFAULT 0 CHECK (version >= 0),
    event_sequence bigint NOT NULL DEFAULT 0 CHECK (event_sequence >= 0),
    cancel_requested_at_ms bigint CHECK (cancel_requested_at_ms >= 0),
    cancel_reason text,
    created_at_ms bigint NOT NULL CHECK (created_at_ms >= 0),
    updated_at_ms bigint CHECK (updated_at_ms >= 0),
    finished_at_ms bigint CHECK (finished_at_ms >= 0),
    name text,
    command jsonb
);

CREATE TABLE ql3.run_attempts (
    id text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 36),
    run_id text NOT NULL REFERENCES ql3.runs (id),
    attempt integer NOT NULL CHECK (attempt >= 1),
    status text NOT NULL CHECK (status IN (
        'claimed', 'starting', 'running', 'succeeded', 'failed', 'cancelled', 'lost')),
    executor_type text NOT NULL DEFAULT 'local_process',
    created_at_ms bigint NOT NULL CHECK (created_at_ms >= 0),
    updated_at_ms bigint CHECK (updated_at_ms >= 0),
    finished_at_ms bigint CHECK (finished_at_ms >= 0),
    -- Process identity and kill deadline (Local 0003).
    pid integer CHECK (pid > 0),
    pgid integer CHECK (pgid > 0),
    process_start_ticks bigint CHECK (process_start_ticks >= 0),
    boot_id text CHECK (length(boot_id) BETWEEN 1 AND 64),
    exit_code integer,
    end_reason text,
    log_path text,
    started_at_ms bigint CHECK (started_at_ms >= 0),
    term_sent_at_ms bigint CHECK (term_sent_at_ms >= 0),
    kill_deadline_at_ms bigint CHECK (kill_deadline_at_ms >= 0),
    killed_at_ms bigint CHECK (killed_at_ms >= 0),
    -- Fence projection of the Attempt's Run Lease (ADR-0057 §1): aggregate reads only, never authority.
    lease_worker_id text CHECK (length(lease_worker_id) BETWEEN 1 AND 128),
    lease_session_id text CHECK (length(lease_session_id) BETWEEN 1 AND 64),
    lease_session_generation integer CHECK (lease_session_generation >= 1),
    lease_generation integer CHECK (lease_generation >= 1),
    lease_version integer CHECK (lease_version >= 1),
    lease_token_digest text CHECK (lease_token_digest ~ '^[0-9a-f]{64}$'),
    lease_offer_id text CHECK (length(lease_offer_id) BETWEEN 1 AND 64),
    lease_expires_at_ms bigint CHECK (lease_expires_at_ms >= 0),
    UNIQUE (run_id, attempt),
    -- Target of the composite FKs: an Attempt of that very Run.
    UNIQUE (id, run_id),
    CONSTRAINT run_attempts_lease_projection_shape CHECK (num_nulls(
        lease_worker_id, lease_session_id, lease_session_generation, lease_generation, lease_version,
        lease_token_digest, lease_offer_id, lease_expires_at_ms) IN (0, 8))
);

-- Append-only by privilege: the runtime role has SELECT and INSERT only.
CREATE TABLE ql3.run_events (
    id text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 36),
    run_id text NOT NULL REFERENCES ql3.runs (id),
    sequence bigint NOT NULL CHECK (sequence >= 1),
    type text NOT NULL,
    dedupe_key text NOT NULL,
    actor_type text NOT NULL,
    actor_id text NOT NULL,
    attempt_id text,
    payload jsonb NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    created_at_ms bigint NOT NULL CHECK (created_at_ms >= 0),
    UNIQUE (run_id, sequence),
    UNIQUE (run_id, dedupe_key)
);

CREATE TABLE ql3.worker_sessions (
    worker_id text PRIMARY KEY CHECK (length(worker_id) BETWEEN 1 AND 128),
    session_id text NOT NULL CHECK (length(session_id) BETWEEN 1 AND 64),
    generation integer NOT NULL CHECK (generation >= 1),
    status text NOT NULL CHECK (status IN ('online', 'draining', 'offline')),
    version integer NOT NULL CHECK (version >= 0 AND version >= generation - 1),
    -- Canonical JSON text (its SHA-256 is capabilities_hash), so it is kept as text, not jsonb.
    capabilities text NOT NULL CHECK (length(capabilities) <= 4096 AND jsonb_typeof(capabilities::jsonb) = 'object'),
    capabilities_hash text NOT NULL CHECK (capabilities_hash ~ '^[0-9a-f]{64}$'),
    max_concurrent_runs integer NOT NULL CHECK (max_concurrent_runs BETWEEN 1 AND 64),
    available_slots integer NOT NULL CHECK (available_slots BETWEEN 0 AND max_concurrent_runs),
    heartbeat_at_ms bigint NOT NULL CHECK (heartbeat_at_ms >= 0),
    lease_expires_at_ms bigint NOT NULL CHECK (lease_expires_at_ms >= heartbeat_at_ms),
    created_at_ms bigint NOT NULL CHECK (created_at_ms >= 0),
    updated_at_ms bigint NOT NULL CHECK (updated_at_ms >= created_at_ms),
    CHECK (status = 'online' OR available_slots = 0)
);

CREATE TABLE ql3.run_dispatch_leases (
    attempt_id text PRIMARY KEY,
    run_id text NOT NULL REFERENCES ql3.runs (id),
    worker_id text NOT NULL REFERENCES ql3.worker_sessions (worker_id),
    session_id text NOT NULL CHECK (length(session_id) BETWEEN 1 AND 64),
    session_generation integer NOT NULL CHECK (session_generation >= 1),
    lease_generation integer NOT NULL CHECK (lease_generation >= 1),
    version integer NOT NULL CHECK (version >= lease_generation),
    token_digest text NOT NULL CHECK (token_digest ~ '^[0-9a-f]{64}$'),
    offer_id text NOT NULL CHECK (length(offer_id) BETWEEN 1 AND 64),
    status text NOT NULL CHECK (status IN ('leased', 'released', 'completed')),
    expires_at_ms bigint NOT NULL,
    acquired_at_ms bigint NOT NULL CHECK (acquired_at_ms >= 0),
    renewed_at_ms bigint CHECK (renewed_at_ms >= acquired_at_ms),
    started_at_ms bigint CHECK (started_at_ms >= acquired_at_ms),
    released_at_ms bigint CHECK (released_at_ms >= acquired_at_ms),
    release_reason text CHECK (release_reason IN ('declined', 'draining', 'shutdown')),
    completed_at_ms bigint CHECK (completed_at_ms >= acquired_at_ms),
    updated_at_ms bigint NOT NULL CHECK (updated_at_ms >= acquired_at_ms),
    FOREIGN KEY (attempt_id, run_id) REFERENCES ql3.run_attempts (id, run_id),
    CHECK (expires_at_ms > acquired_at_ms),
    -- Terminal shape: exactly the metadata of the status (a released grant was never started).
    CONSTRAINT run_dispatch_leases_terminal_shape CHECK (CASE status
        WHEN 'leased' THEN num_nonnulls(released_at_ms, release_reason, completed_at_ms) = 0
        WHEN 'released' THEN num_nulls(released_at_ms, release_reason) = 0
                             AND num_nonnulls(completed_at_ms, started_at_ms) = 0
        WHEN 'completed' THEN completed_at_ms IS NOT NULL AND num_nonnulls(released_at_ms, release_reason) = 0
        ELSE false END)
);

-- A worker's active leases: the capacity count under the Worker row lock, and restart recovery.
CREATE INDEX run_dispatch_leases_active ON ql3.run_dispatch_leases (worker_id, session_generation)
    WHERE status = 'leased';

CREATE TABLE ql3.run_cancellation_dispatches (
    run_id text PRIMARY KEY REFERENCES ql3.runs (id),
    attempt_id text NOT NULL,
    status text NOT NULL CHECK (status IN ('pending', 'leased', 'retry_wait', 'dispatched', 'blocked')),
    version integer NOT NULL CHECK (version >= 0),
    dispatch_count integer NOT NULL CHECK (dispatch_count >= 0 AND dispatch_count <= version),
    next_attempt_at_ms bigint CHECK (next_attempt_at_ms >= 0),
    lease_owner text CHECK (length(lease_owner) BETWEEN 1 AND 128),
    -- Digest only: this profile has no raw-token column (ADR-0456 §4).
    lease_token_digest text CHECK (lease_token_digest ~ '^[0-9a-f]{64}$'),
    lease_expires_at_ms bigint CHECK (lease_expires_at_ms >= 0),
    last_result text CHECK (last_result IN (
        'termination_requested', 'already_exited', 'identity_mismatch', 'pid_mismatch', 'unsupported',
        'invalid', 'controller_missing', 'handle_missing', 'dispatch_error')),
    last_dispatched_at_ms bigint CHECK (last_dispatched_at_ms >= 0),
    created_at_ms bigint NOT NULL CHECK (created_at_ms >= 0),
    updated_at_ms bigint NOT NULL CHECK (updated_at_ms >= created_at_ms),
    FOREIGN KEY (attempt_id, run_id) REFERENCES ql3.run_attempts (id, run_id),
    -- Every invariant of local-profile.md §2, one status at a time; each branch is never NULL.
    CONSTRAINT run_cancellation_dispatches_shape CHECK (CASE status
        WHEN 'pending' THEN next_attempt_at_ms IS NOT NULL AND version = 0 AND dispatch_count = 0
            AND num_nonnulls(lease_owner, lease_token_digest, lease_expires_at_ms, last_result) = 0
        WHEN 'leased' THEN next_attempt_at_ms IS NULL AND dispatch_count >= 1
            AND num_nulls(lease_owner, lease_token_digest, lease_expires_at_ms) = 0
            AND coalesce(last_result IN ('identity_mismatch', 'pid_mismatch', 'unsupported', 'invalid',
                                         'controller_missing', 'handle_missing', 'dispatch_error'), true)
        WHEN 'retry_wait' THEN next_attempt_at_ms IS NOT NULL AND dispatch_count >= 1
            AND num_nonnulls(lease_owner, lease_token_digest, lease_expires_at_ms) = 0
            AND coalesce(last_result IN ('identity_mismatch', 'pid_mismatch', 'unsupported', 'invalid',
                                         'controller_missing', 'handle_missing', 'dispatch_error'), false)
        WHEN 'dispatched' THEN next_attempt_at_ms IS NULL AND dispatch_count >= 1
            AND num_nonnulls(lease_owner, lease_token_digest, lease_expires_at_ms) = 0
            AND coalesce(last_result IN ('termination_requested', 'already_exited'), false)
        WHEN 'blocked' THEN next_attempt_at_ms IS NULL AND dispatch_count >= 1
            AND num_nonnulls(lease_owner, lease_token_digest, lease_expires_at_ms) = 0
            AND coalesce(last_result IN ('identity_mismatch', 'pid_mismatch', 'unsupported', 'invalid'), false)
        ELSE false END)
);

-- Only two indexes: the bounded due scan and expired-lease recovery.
CREATE INDEX run_cancellation_dispatches_due ON ql3.run_cancellation_dispatches (next_attempt_at_ms)
    WHERE status IN ('pending', 'retry_wait');
CREATE INDEX run_cancellation_dispatches_lease_expiry ON ql3.run_cancellation_dispatches (lease_expires_at_ms)
    WHERE status = 'leased';

-- Privilege matrix (§2). Roles are created by `edge-runtime-cluster bootstrap`, not here.
REVOKE ALL ON ALL TABLES IN SCHEMA ql3 FROM PUBLIC;
REVOKE ALL ON FUNCTION ql3.now_ms() FROM PUBLIC;
GRANT USAGE ON SCHEMA ql3 TO ql3_runtime, ql3_cluster_admin;
GRANT EXECUTE ON FUNCTION ql3.now_ms() TO ql3_runtime;
GRANT SELECT, INSERT, UPDATE ON ql3.runs, ql3.run_attempts, ql3.worker_sessions, ql3.run_dispatch_leases,
    ql3.run_cancellation_dispatches TO ql3_runtime;
GRANT SELECT, INSERT ON ql3.run_events TO ql3_runtime;
GRANT SELECT ON ql3.schema_migrations TO ql3_runtime;
GRANT SELECT ON ql3.runs, ql3.run_events TO ql3_cluster_admin;
