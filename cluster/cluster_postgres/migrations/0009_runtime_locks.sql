-- 0009: the locks that serialise what no row lock can (a first registration of a worker, whose row
-- does not exist yet; the count of shared variables against its limit), as rows only the runtime
-- role may lock (`SELECT ... FOR NO KEY UPDATE` needs UPDATE on the table). They replace advisory
-- locks: any role that can connect may take any advisory key and hold it in an open transaction,
-- which made every `env set` and a named worker's registration fail with a lock timeout
-- (docs/threat-model.md). Each row is one lock; the code names it (cluster_postgres.errors).
CREATE TABLE ql3.runtime_locks (
    name text PRIMARY KEY CHECK (name ~ '^[a-z_]{1,64}$')
);
INSERT INTO ql3.runtime_locks VALUES ('worker_registration'), ('shared_env_set');

REVOKE ALL ON ql3.runtime_locks FROM PUBLIC;
GRANT SELECT, UPDATE ON ql3.runtime_locks TO ql3_runtime;
