-- 0010: a task's environment and working directory (docs/environment.md).
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
