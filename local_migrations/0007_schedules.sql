-- 0007: schedules (issue 14) and Run timeouts.
--
-- A schedule stores its canonical expression (edge_runtime/contract/cron.py) and its next fire
-- time. The service fires a due schedule in one transaction that moves next_fire_at_ms forward
-- with a compare-and-set on its old value and creates the Run of that slot; the Run records the
-- schedule and the slot (scheduled_for_ms), unique together, so a crash or a second service never
-- fires one slot twice. A slot that waits for the previous Run (overlap queue/replace) is held in
-- waiting_fire_at_ms: at most one per schedule, later slots coalesce into it.

CREATE TABLE schedules (
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 36),
    name TEXT CHECK (name IS NULL OR length(name) BETWEEN 1 AND 128),
    expression TEXT NOT NULL CHECK (length(expression) BETWEEN 1 AND 256),
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
    updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= 0)
) STRICT;

-- The tick reads only due schedules (O(due), not O(all)), and the sleep only the earliest one.
CREATE INDEX schedules_due ON schedules (next_fire_at_ms) WHERE paused = 0;
CREATE INDEX schedules_waiting ON schedules (waiting_fire_at_ms) WHERE waiting_fire_at_ms IS NOT NULL;

ALTER TABLE runs ADD COLUMN schedule_id TEXT CHECK (schedule_id IS NULL OR length(schedule_id) BETWEEN 1 AND 36);
ALTER TABLE runs ADD COLUMN scheduled_for_ms INTEGER CHECK (scheduled_for_ms >= 0);
-- Cancel the Run (reason 'timeout') once its Attempt has run this long.
ALTER TABLE runs ADD COLUMN timeout_ms INTEGER CHECK (timeout_ms > 0);

CREATE UNIQUE INDEX runs_schedule_slot ON runs (schedule_id, scheduled_for_ms) WHERE schedule_id IS NOT NULL;
CREATE INDEX runs_schedule_active ON runs (schedule_id)
    WHERE schedule_id IS NOT NULL
      AND status IN ('created', 'queued', 'dispatching', 'running', 'waiting_approval', 'retry_wait', 'lost');
