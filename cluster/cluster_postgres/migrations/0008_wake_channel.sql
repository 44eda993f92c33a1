-- 0008: the wake channel's name, a secret only the runtime role may read (docs/cluster.md,
-- "Wake-up"; docs/threat-model.md). PostgreSQL has no privilege for NOTIFY: any role that can
-- connect may notify any channel it can name, and every notification on a worker's channel costs
-- that worker a read. The name is drawn here, once per database, from the server's strong random
-- source (gen_random_uuid: 122 random bits). A worker reads it and LISTENs on it (a statement
-- another role sees only as "<insufficient privilege>" in pg_stat_activity); every change a worker
-- should act on notifies it with pg_notify reading this row in the same statement, so no
-- notifying statement carries the name. A role that cannot read this row cannot reach a worker.
CREATE TABLE ql3.wake_channel (
    id integer PRIMARY KEY CHECK (id = 1),
    name text NOT NULL CHECK (name ~ '^ql3_wake_[0-9a-f]{32}$')
);
INSERT INTO ql3.wake_channel VALUES (1, 'ql3_wake_' || replace(gen_random_uuid()::text, '-', ''));

REVOKE ALL ON ql3.wake_channel FROM PUBLIC;
GRANT SELECT ON ql3.wake_channel TO ql3_runtime;
