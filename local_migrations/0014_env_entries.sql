-- 0014: env entries, as QingLong keeps its envs (docs/environment.md).
--
-- An entry is one value of a name; several may share a name (one account each). A task gets each
-- name once, the values of its enabled entries joined with & in list order (pinned first, then
-- position, then id: ENTRY_ORDER_SQL in edge_runtime/contract/env_entries.py, where every limit
-- below is declared). AUTOINCREMENT: an id is never given again, even after its entry and every
-- later one were removed (QingLong's clients keep integer ids). A secret's value is kept here, in
-- the 0600 database, and never shown.
CREATE TABLE env_entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    value TEXT NOT NULL CHECK (length(CAST(value AS BLOB)) <= 131072),
    secret INTEGER NOT NULL CHECK (secret IN (0, 1)),
    remarks TEXT NOT NULL CHECK (length(remarks) <= 1024),
    enabled INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    position INTEGER NOT NULL CHECK (position >= 0),
    pinned INTEGER NOT NULL CHECK (pinned IN (0, 1)),
    labels TEXT NOT NULL CHECK (json_valid(labels) AND json_type(labels) = 'array'),
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0),
    updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= 0)
) STRICT;

-- Each shared variable (one value per name) becomes one enabled entry, in name order (ids and
-- positions 1, 2, ...), its secret flag kept; its time is its creation and its last change.
INSERT INTO env_entries (name, value, secret, remarks, enabled, position, pinned, labels, created_at_ms,
                         updated_at_ms)
SELECT name, value, secret, '', 1, row_number() OVER (ORDER BY name), 0, '[]', updated_at_ms, updated_at_ms
FROM shared_env ORDER BY name;

DROP TABLE shared_env;
