-- 0011: a task's options: environment, working directory (docs/environment.md) and retries.
--
-- Shared variables are what every Run's Attempts get (`env set`); a secret one's value is kept
-- here, in the 0600 database, and never printed. A Run (and a schedule, for the Runs it fires)
-- keeps its own variables (a JSON object) and its working directory.
CREATE TABLE shared_env (
    name TEXT PRIMARY KEY NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    value TEXT NOT NULL CHECK (length(value) <= 32768),
    secret INTEGER NOT NULL CHECK (secret IN (0, 1)),
    updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= 0)
) STRICT;

ALTER TABLE runs ADD COLUMN env TEXT CHECK (env IS NULL OR json_valid(env));
ALTER TABLE runs ADD COLUMN cwd TEXT CHECK (cwd IS NULL OR length(cwd) BETWEEN 1 AND 4096);
ALTER TABLE schedules ADD COLUMN env TEXT CHECK (env IS NULL OR json_valid(env));
ALTER TABLE schedules ADD COLUMN cwd TEXT CHECK (cwd IS NULL OR length(cwd) BETWEEN 1 AND 4096);

-- Retries (docs/runs.md): a failed or lost Attempt of a Run with retries left puts the Run in
-- retry_wait until retry_at_ms (the delay doubling per Attempt, capped); the service then queues
-- it again for its next Attempt. Never after a cancel (a timeout is one).
ALTER TABLE runs ADD COLUMN retries INTEGER CHECK (retries BETWEEN 0 AND 100);
ALTER TABLE runs ADD COLUMN retry_delay_ms INTEGER CHECK (retry_delay_ms >= 0);
ALTER TABLE runs ADD COLUMN retry_at_ms INTEGER CHECK (retry_at_ms >= 0);
ALTER TABLE schedules ADD COLUMN retries INTEGER CHECK (retries BETWEEN 0 AND 100);
ALTER TABLE schedules ADD COLUMN retry_delay_ms INTEGER CHECK (retry_delay_ms >= 0);
CREATE INDEX runs_retry_due ON runs (retry_at_ms) WHERE status = 'retry_wait';
