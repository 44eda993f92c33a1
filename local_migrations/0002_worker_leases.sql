-- 0002: Worker Session and Run Lease authority (spec §5, ADR-0057 in its Local Profile form).
-- Two fact tables: `worker_sessions` proves that a worker's current session may report capacity;
-- `run_dispatch_leases` proves that one session holds a fenced grant to execute one Attempt.
-- `run_attempts` only gains a nullable projection of the lease fence for aggregate reads; the
-- projection can never renew, release or prove anything on its own.
-- Bearer tokens are stored only as SHA-256 digests (64 lowercase hex); never as raw text.

CREATE TABLE worker_sessions (
    worker_id TEXT PRIMARY KEY NOT NULL CHECK (length(worker_id) BETWEEN 1 AND 128),
    session_id TEXT NOT NULL CHECK (length(session_id) BETWEEN 1 AND 64),
    generation INTEGER NOT NULL CHECK (generation BETWEEN 1 AND 2147483647),
    status TEXT NOT NULL CHECK (status IN ('online', 'draining', 'offline')),
    -- First registration is generation 1 / version 0, and every replacement bumps both, so the
    -- version can never fall behind the generation.
    version INTEGER NOT NULL CHECK (version BETWEEN 0 AND 2147483647 AND version >= generation - 1),
    capabilities TEXT NOT NULL CHECK (json_valid(capabilities) AND length(capabilities) <= 4096),
    capabilities_hash TEXT NOT NULL
        CHECK (length(capabilities_hash) = 64 AND capabilities_hash NOT GLOB '*[^0-9a-f]*'),
    max_concurrent_runs INTEGER NOT NULL CHECK (max_concurrent_runs BETWEEN 1 AND 64),
    available_slots INTEGER NOT NULL CHECK (available_slots BETWEEN 0 AND max_concurrent_runs),
    heartbeat_at_ms INTEGER NOT NULL CHECK (heartbeat_at_ms >= 0),
    lease_expires_at_ms INTEGER NOT NULL CHECK (lease_expires_at_ms >= heartbeat_at_ms),
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0),
    updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= created_at_ms),
    -- Draining and offline sessions report no capacity.
    CHECK (status = 'online' OR available_slots = 0)
) STRICT;

CREATE TABLE run_dispatch_leases (
    attempt_id TEXT PRIMARY KEY NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs (id),
    worker_id TEXT NOT NULL REFERENCES worker_sessions (worker_id),
    session_id TEXT NOT NULL CHECK (length(session_id) BETWEEN 1 AND 64),
    session_generation INTEGER NOT NULL CHECK (session_generation BETWEEN 1 AND 2147483647),
    -- lease_generation counts grants of this Attempt (takeover or re-claim after release); version
    -- counts every change and never resets, so a CAS on it is safe across grants.
    lease_generation INTEGER NOT NULL CHECK (lease_generation >= 1),
    version INTEGER NOT NULL CHECK (version BETWEEN 1 AND 2147483647 AND version >= lease_generation),
    token_digest TEXT NOT NULL CHECK (length(token_digest) = 64 AND token_digest NOT GLOB '*[^0-9a-f]*'),
    offer_id TEXT NOT NULL CHECK (length(offer_id) BETWEEN 1 AND 64),
    status TEXT NOT NULL CHECK (status IN ('leased', 'released', 'completed')),
    expires_at_ms INTEGER NOT NULL,
    acquired_at_ms INTEGER NOT NULL CHECK (acquired_at_ms >= 0),
    renewed_at_ms INTEGER CHECK (renewed_at_ms >= acquired_at_ms),
    started_at_ms INTEGER CHECK (started_at_ms >= acquired_at_ms),
    released_at_ms INTEGER CHECK (released_at_ms >= acquired_at_ms),
    release_reason TEXT CHECK (release_reason IS NULL OR release_reason IN ('declined', 'draining', 'shutdown')),
    completed_at_ms INTEGER CHECK (completed_at_ms >= acquired_at_ms),
    updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= acquired_at_ms),
    FOREIGN KEY (attempt_id, run_id) REFERENCES run_attempts (id, run_id),
    CHECK (expires_at_ms > acquired_at_ms),
    -- Terminal shape: exactly the metadata of the status, nothing else.
    CHECK (status <> 'leased' OR (released_at_ms IS NULL AND release_reason IS NULL AND completed_at_ms IS NULL)),
    CHECK (status <> 'released'
           OR (released_at_ms IS NOT NULL AND release_reason IS NOT NULL AND completed_at_ms IS NULL)),
    -- Release is refused after the start barrier, so a released grant was never started.
    CHECK (status <> 'released' OR started_at_ms IS NULL),
    CHECK (status <> 'completed'
           OR (completed_at_ms IS NOT NULL AND released_at_ms IS NULL AND release_reason IS NULL))
) STRICT;

-- The one query shape that scans leases: a worker's active leases (capacity count per session
-- generation, and restart recovery of every generation's active leases).
CREATE INDEX run_dispatch_leases_active ON run_dispatch_leases (worker_id, session_generation)
    WHERE status = 'leased';

-- The Attempt's fence projection: all present while a grant is held, all absent otherwise.
ALTER TABLE run_attempts ADD COLUMN lease_worker_id TEXT
    CHECK (lease_worker_id IS NULL OR length(lease_worker_id) BETWEEN 1 AND 128);
ALTER TABLE run_attempts ADD COLUMN lease_session_id TEXT
    CHECK (lease_session_id IS NULL OR length(lease_session_id) BETWEEN 1 AND 64);
ALTER TABLE run_attempts ADD COLUMN lease_session_generation INTEGER CHECK (lease_session_generation >= 1);
ALTER TABLE run_attempts ADD COLUMN lease_generation INTEGER CHECK (lease_generation >= 1);
ALTER TABLE run_attempts ADD COLUMN lease_version INTEGER CHECK (lease_version >= 1);
ALTER TABLE run_attempts ADD COLUMN lease_token_digest TEXT
    CHECK (lease_token_digest IS NULL OR (length(lease_token_digest) = 64 AND lease_token_digest NOT GLOB '*[^0-9a-f]*'));
ALTER TABLE run_attempts ADD COLUMN lease_offer_id TEXT
    CHECK (lease_offer_id IS NULL OR length(lease_offer_id) BETWEEN 1 AND 64);
ALTER TABLE run_attempts ADD COLUMN lease_expires_at_ms INTEGER CHECK (lease_expires_at_ms >= 0);

-- ALTER TABLE cannot add a table CHECK spanning columns, so triggers enforce the all-or-nothing
-- projection shape.
CREATE TRIGGER run_attempts_lease_projection_shape_insert BEFORE INSERT ON run_attempts
WHEN NOT (
    (NEW.lease_worker_id IS NULL AND NEW.lease_session_id IS NULL AND NEW.lease_session_generation IS NULL
     AND NEW.lease_generation IS NULL AND NEW.lease_version IS NULL AND NEW.lease_token_digest IS NULL
     AND NEW.lease_offer_id IS NULL AND NEW.lease_expires_at_ms IS NULL)
    OR (NEW.lease_worker_id IS NOT NULL AND NEW.lease_session_id IS NOT NULL
        AND NEW.lease_session_generation IS NOT NULL AND NEW.lease_generation IS NOT NULL
        AND NEW.lease_version IS NOT NULL AND NEW.lease_token_digest IS NOT NULL
        AND NEW.lease_offer_id IS NOT NULL AND NEW.lease_expires_at_ms IS NOT NULL))
BEGIN
    SELECT RAISE(ABORT, 'run_attempts lease projection must be all present or all absent');
END;

CREATE TRIGGER run_attempts_lease_projection_shape_update BEFORE UPDATE OF
    lease_worker_id, lease_session_id, lease_session_generation, lease_generation, lease_version,
    lease_token_digest, lease_offer_id, lease_expires_at_ms ON run_attempts
WHEN NOT (
    (NEW.lease_worker_id IS NULL AND NEW.lease_session_id IS NULL AND NEW.lease_session_generation IS NULL
     AND NEW.lease_generation IS NULL AND NEW.lease_version IS NULL AND NEW.lease_token_digest IS NULL
     AND NEW.lease_offer_id IS NULL AND NEW.lease_expires_at_ms IS NULL)
    OR (NEW.lease_worker_id IS NOT NULL AND NEW.lease_session_id IS NOT NULL
        AND NEW.lease_session_generation IS NOT NULL AND NEW.lease_generation IS NOT NULL
        AND NEW.lease_version IS NOT NULL AND NEW.lease_token_digest IS NOT NULL
        AND NEW.lease_offer_id IS NOT NULL AND NEW.lease_expires_at_ms IS NOT NULL))
BEGIN
    SELECT RAISE(ABORT, 'run_attempts lease projection must be all present or all absent');
END;
