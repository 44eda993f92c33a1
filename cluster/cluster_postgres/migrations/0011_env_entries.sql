-- 0011: env entries, as QingLong keeps its envs, as the Local table env_entries keeps them
-- (Local 0014; docs/environment.md). Several entries may share a name (one account each); a task
-- gets each name once, the values of its enabled entries joined with & in list order (pinned
-- first, then position, then id: ENTRY_ORDER_SQL in edge_runtime/contract/env_entries.py, where
-- every limit below is declared).
-- The runtime role may not DELETE (no role of the profile deletes): a removed entry is marked
-- (removed_at_ms) and its value, remarks and labels are cleared at once; its id stays taken, so an
-- identity value is never given again. The admin role reads nothing of it (secrets).
CREATE TABLE ql3.env_entries (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_]*$' AND length(name) <= 128),
    value text CHECK (octet_length(value) <= 131072),
    secret boolean NOT NULL,
    remarks text NOT NULL CHECK (char_length(remarks) <= 1024),
    enabled boolean NOT NULL,
    position bigint NOT NULL CHECK (position >= 0),
    pinned boolean NOT NULL,
    labels text[] NOT NULL CHECK (cardinality(labels) <= 16),
    created_at_ms bigint NOT NULL CHECK (created_at_ms >= 0),
    updated_at_ms bigint NOT NULL CHECK (updated_at_ms >= 0),
    removed_at_ms bigint CHECK (removed_at_ms >= 0),
    CHECK ((removed_at_ms IS NULL) = (value IS NOT NULL)),
    CHECK (removed_at_ms IS NULL OR (NOT secret AND remarks = '' AND cardinality(labels) = 0))
);

-- Each shared variable (one value per name) becomes one enabled entry, in name order (ids and
-- positions 1, 2, ...), its secret flag kept; a removed one (value NULL) is left behind.
INSERT INTO ql3.env_entries (id, name, value, secret, remarks, enabled, position, pinned, labels, created_at_ms,
                             updated_at_ms)
OVERRIDING SYSTEM VALUE
SELECT row_number() OVER w, name, value, secret, '', true, row_number() OVER w, false, '{}', updated_at_ms,
       updated_at_ms
FROM ql3.shared_env WHERE value IS NOT NULL
WINDOW w AS (ORDER BY name COLLATE "C");
SELECT setval(pg_get_serial_sequence('ql3.env_entries', 'id'), coalesce(max(id), 1), max(id) IS NOT NULL)
FROM ql3.env_entries;

DROP TABLE ql3.shared_env;

REVOKE ALL ON ql3.env_entries FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON ql3.env_entries TO ql3_runtime;
