-- 0005: a Run's own options, as the Local tables keep them (Local 0010): its variables (a JSON
-- object over the worker's base environment), its working directory, and its retries: a failed
-- or lost Attempt of a Run with retries left puts the Run in retry_wait until retry_at_ms, after
-- which a worker queues it again. Numbered 0005: 0004 is left to the schedules of the cluster.
ALTER TABLE ql3.runs
    ADD COLUMN env jsonb CHECK (env IS NULL OR jsonb_typeof(env) = 'object'),
    ADD COLUMN cwd text CHECK (length(cwd) BETWEEN 1 AND 4096),
    ADD COLUMN retries integer CHECK (retries BETWEEN 0 AND 100),
    ADD COLUMN retry_delay_ms bigint CHECK (retry_delay_ms >= 0),
    ADD COLUMN retry_at_ms bigint CHECK (retry_at_ms >= 0);

CREATE INDEX runs_retry_due ON ql3.runs (retry_at_ms) WHERE status = 'retry_wait';
