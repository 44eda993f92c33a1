-- 0010: schedules keep their time zone, fire once per boot (@reboot), and take longer expressions.
--
-- time_zone is the zone the schedule's fire times are computed in (a POSIX TZ string or an IANA
-- name, normalised by edge_runtime/contract/time_zones.py); NULL for a schedule added before
-- this migration, which fires in the device's zone as `serve` reads it. boot_id is the boot of
-- the device an @reboot schedule last fired for (or was added in): the service arms it once per
-- new boot id, never on a mere restart. Expressions may now be 1 KiB long (the contract's
-- MAX_EXPRESSION_LENGTH; a 60-value minute list is legal cron).
--
-- SQLite cannot change a CHECK in place, so the table is rebuilt with the same rows, and its
-- indexes made again (the Runs refer to schedules by id only, with no foreign key).

CREATE TABLE schedules_0010 (
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 36),
    name TEXT CHECK (name IS NULL OR length(name) BETWEEN 1 AND 128),
    expression TEXT NOT NULL CHECK (length(expression) BETWEEN 1 AND 1024),
    command TEXT NOT NULL CHECK (json_valid(command)),
    overlap TEXT NOT NULL CHECK (overlap IN ('skip', 'queue', 'replace')),
    timeout_ms INTEGER CHECK (timeout_ms > 0),
    paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    next_fire_at_ms INTEGER NOT NULL CHECK (next_fire_at_ms >= 0),
    waiting_fire_at_ms INTEGER CHECK (waiting_fire_at_ms >= 0),
    last_fire_at_ms INTEGER CHECK (last_fire_at_ms >= 0),
    last_outcome TEXT CHECK (last_outcome IS NULL OR last_outcome IN ('started', 'skipped', 'waiting')),
    last_run_id TEXT,
    fired_count INTEGER NOT NULL DEFAULT 0 CHECK (fired_count >= 0),
    skipped_count INTEGER NOT NULL DEFAULT 0 CHECK (skipped_count >= 0),
    coalesced_count INTEGER NOT NULL DEFAULT 0 CHECK (coalesced_count >= 0),
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0),
    updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= 0),
    time_zone TEXT CHECK (time_zone IS NULL OR length(time_zone) BETWEEN 1 AND 64),
    boot_id TEXT CHECK (boot_id IS NULL OR length(boot_id) BETWEEN 1 AND 64)
) STRICT;

INSERT INTO schedules_0010 (id, name, expression, command, overlap, timeout_ms, paused, next_fire_at_ms,
    waiting_fire_at_ms, last_fire_at_ms, last_outcome, last_run_id, fired_count, skipped_count, coalesced_count,
    created_at_ms, updated_at_ms)
SELECT id, name, expression, command, overlap, timeout_ms, paused, next_fire_at_ms, waiting_fire_at_ms,
    last_fire_at_ms, last_outcome, last_run_id, fired_count, skipped_count, coalesced_count, created_at_ms,
    updated_at_ms
FROM schedules;

DROP TABLE schedules;
ALTER TABLE schedules_0010 RENAME TO schedules;

-- As in 0007: the tick reads only due schedules, and the sleep only the earliest one.
CREATE INDEX schedules_due ON schedules (next_fire_at_ms) WHERE paused = 0;
CREATE INDEX schedules_waiting ON schedules (waiting_fire_at_ms) WHERE waiting_fire_at_ms IS NOT NULL;
