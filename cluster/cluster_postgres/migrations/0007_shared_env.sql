-- 0007: the shared variables every Run's Attempts get (`edge-runtime-cluster env set`), as the
-- Local table shared_env keeps them (Local 0011; docs/environment.md). A secret's value is kept
-- here and never printed; the limits are those of edge_runtime/contract/environment.py.
-- The runtime role may not DELETE (no role of the profile deletes): `env remove` clears the row
-- instead (value NULL), so a removed secret's value is gone from the table at once; `env set`
-- fills it again. The admin role reads nothing of it (secrets).
CREATE TABLE ql3.shared_env (
    name text PRIMARY KEY CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_]*$' AND length(name) <= 128),
    value text CHECK (length(value) <= 32768),
    secret boolean NOT NULL,
    updated_at_ms bigint NOT NULL CHECK (updated_at_ms >= 0),
    CHECK (value IS NOT NULL OR NOT secret)
);

REVOKE ALL ON ql3.shared_env FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON ql3.shared_env TO ql3_runtime;
