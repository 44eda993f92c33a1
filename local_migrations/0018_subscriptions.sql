-- 0018: subscriptions (docs/qinglong.md, "Subscriptions").
--
-- A subscription pulls a git repository or one file into its own folder of the scripts
-- directory, on its own pull schedule (a row of schedules whose command is this program's
-- `subscription pull ID`): removing that schedule by hand leaves the subscription without one.
-- subscription_scripts remembers, per script it brought, what the script's header said at the
-- last pull and the schedule it got: a pull compares the new headers with it, and a schedule
-- removed by hand (schedule_id set to NULL) is never made again. The Local store only: a pull
-- writes one host's scripts directory (docs/architecture.md).

CREATE TABLE subscriptions (
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 36),
    -- 1, 2, 3, ... from subscription_numbers, a counter that only grows: a removed subscription's
    -- number is never given to another (QingLong's clients name subscriptions by such numbers).
    number INTEGER NOT NULL UNIQUE CHECK (number >= 1),
    name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    kind TEXT NOT NULL CHECK (kind IN ('git', 'file')),
    url TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    folder TEXT NOT NULL UNIQUE CHECK (length(folder) BETWEEN 1 AND 64 AND folder NOT LIKE '.%'
                                       AND instr(folder, '/') = 0),
    scripts_dir TEXT NOT NULL CHECK (substr(scripts_dir, 1, 1) = '/' AND length(scripts_dir) <= 4096),
    branch TEXT CHECK (branch IS NULL OR length(branch) BETWEEN 1 AND 255),
    whitelist TEXT CHECK (whitelist IS NULL OR length(whitelist) BETWEEN 1 AND 1024),
    blacklist TEXT CHECK (blacklist IS NULL OR length(blacklist) BETWEEN 1 AND 1024),
    dependence TEXT CHECK (dependence IS NULL OR length(dependence) BETWEEN 1 AND 1024),
    extensions TEXT NOT NULL CHECK (json_valid(extensions) AND json_type(extensions) = 'array'),
    auto_add INTEGER NOT NULL CHECK (auto_add IN (0, 1)),
    auto_remove INTEGER NOT NULL CHECK (auto_remove IN (0, 1)),
    task_user TEXT CHECK (task_user IS NULL OR length(task_user) BETWEEN 1 AND 32),
    schedule_id TEXT REFERENCES schedules (id) ON DELETE SET NULL,
    revision TEXT CHECK (revision IS NULL OR length(revision) BETWEEN 1 AND 80),
    pulled_at_ms INTEGER CHECK (pulled_at_ms >= 0),
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0),
    updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= 0),
    CHECK ((revision IS NULL) = (pulled_at_ms IS NULL))
) STRICT;

CREATE TABLE subscription_numbers (
    id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    last_number INTEGER NOT NULL CHECK (last_number >= 0)
) STRICT;

INSERT INTO subscription_numbers (id, last_number) VALUES (1, 0);

-- Removing a schedule looks its subscription (if any) up by this index (ON DELETE SET NULL; a
-- partial index would not serve the foreign key's lookup).
CREATE INDEX subscriptions_schedule ON subscriptions (schedule_id);

CREATE TABLE subscription_scripts (
    subscription_id TEXT NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    path TEXT NOT NULL CHECK (length(path) BETWEEN 1 AND 1024),
    name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    expression TEXT CHECK (expression IS NULL OR length(expression) BETWEEN 1 AND 256),
    schedule_id TEXT REFERENCES schedules (id) ON DELETE SET NULL,
    PRIMARY KEY (subscription_id, path)
) STRICT;

-- A schedule belongs to one script at most (NULLs are distinct); also the foreign key's lookup.
CREATE UNIQUE INDEX subscription_scripts_schedule ON subscription_scripts (schedule_id);
