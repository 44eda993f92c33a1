-- 0004: schedules of the cluster (docs/schedules.md), the columns of the Local `schedules` table in
-- PostgreSQL types, fired by database time by whichever worker claims the slot first. Every
-- schedule stores its zone (the cluster has no single device whose zone a zoneless one could
-- follow). `remove` marks the row removed (removed_at_ms): the runtime role keeps no DELETE, and
-- a removed schedule is neither listed nor fired; its Runs and fire records keep its id.
CREATE TABLE ql3.schedules (
    id text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 36),
    name text,
    expression text NOT NULL CHECK (length(expression) BETWEEN 1 AND 1024),
    command jsonb NOT NULL CHECK (jsonb_typeof(command) = 'array'),
    overlap text NOT NULL CHECK (overlap IN ('skip', 'queue', 'replace')),
    timeout_ms bigint CHECK (timeout_ms > 0),
    paused boolean NOT NULL DEFAULT false,
    next_fire_at_ms bigint NOT NULL CHECK (next_fire_at_ms >= 0),
    waiting_fire_at_ms bigint CHECK (waiting_fire_at_ms >= 0),
    last_fire_at_ms bigint CHECK (last_fire_at_ms >= 0),
    last_outcome text CHECK (last_outcome IN ('started', 'skipped', 'waiting')),
    last_run_id text CHECK (length(last_run_id) BETWEEN 1 AND 36),
    fired_count bigint NOT NULL DEFAULT 0 CHECK (fired_count >= 0),
    skipped_count bigint NOT NULL DEFAULT 0 CHECK (skipped_count >= 0),
    coalesced_count bigint NOT NULL DEFAULT 0 CHECK (coalesced_count >= 0),
    created_at_ms bigint NOT NULL CHECK (created_at_ms >= 0),
    updated_at_ms bigint NOT NULL CHECK (updated_at_ms >= 0),
    time_zone text NOT NULL CHECK (length(time_zone) BETWEEN 1 AND 64),
    env jsonb CHECK (env IS NULL OR jsonb_typeof(env) = 'object'),
    cwd text CHECK (length(cwd) BETWEEN 1 AND 4096),
    retries integer CHECK (retries BETWEEN 0 AND 100),
    retry_delay_ms bigint CHECK (retry_delay_ms >= 0),
    removed_at_ms bigint CHECK (removed_at_ms >= 0)
);

-- The workers' due scan and their sleep: the earliest next fire of a live, unpaused schedule.
CREATE INDEX schedules_due ON ql3.schedules (next_fire_at_ms) WHERE NOT paused AND removed_at_ms IS NULL;
CREATE INDEX schedules_waiting ON ql3.schedules (waiting_fire_at_ms)
    WHERE waiting_fire_at_ms IS NOT NULL AND removed_at_ms IS NULL;

-- One record per fired slot: the (schedule, slot) key is what makes a slot fire once across every
-- worker; the fire's transaction inserts it with the Run and the schedule's compare-and-set, so a
-- worker killed mid-fire leaves no record and the slot still due. Append-only by privilege.
CREATE TABLE ql3.schedule_fires (
    schedule_id text NOT NULL REFERENCES ql3.schedules (id),
    slot_ms bigint NOT NULL CHECK (slot_ms >= 0),
    outcome text NOT NULL CHECK (outcome IN ('started', 'skipped', 'waiting')),
    run_id text REFERENCES ql3.runs (id),
    -- Later slots folded into this one fire (missed while every worker was away).
    coalesced_slots boolean NOT NULL,
    fired_at_ms bigint NOT NULL CHECK (fired_at_ms >= 0),
    actor_id text NOT NULL CHECK (length(actor_id) BETWEEN 1 AND 128),
    PRIMARY KEY (schedule_id, slot_ms),
    CONSTRAINT schedule_fires_run_shape CHECK (CASE WHEN outcome = 'started' THEN run_id IS NOT NULL
                                                    ELSE run_id IS NULL END)
);

-- A schedule's active Runs (the overlap rule) are found by the runs_schedule_slot index of 0002.
REVOKE ALL ON ql3.schedules, ql3.schedule_fires FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON ql3.schedules TO ql3_runtime;
GRANT SELECT, INSERT ON ql3.schedule_fires TO ql3_runtime;
