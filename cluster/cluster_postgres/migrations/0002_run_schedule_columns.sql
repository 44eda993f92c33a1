-- 0002: the Run columns the Local tables gained with schedules and timeouts (Local 0007), so a Run
-- reads the same on both profiles. Table privileges are per table: the matrix of 0001 still holds.
ALTER TABLE ql3.runs
    ADD COLUMN schedule_id text CHECK (length(schedule_id) BETWEEN 1 AND 36),
    ADD COLUMN scheduled_for_ms bigint CHECK (scheduled_for_ms >= 0),
    -- Cancel the Run (reason 'timeout') once its Attempt has run this long.
    ADD COLUMN timeout_ms bigint CHECK (timeout_ms > 0);

-- One Run per schedule slot, as on Local.
CREATE UNIQUE INDEX runs_schedule_slot ON ql3.runs (schedule_id, scheduled_for_ms) WHERE schedule_id IS NOT NULL;
-- The service's scans: the queue, and the active Attempts (watching, kill deadlines).
CREATE INDEX runs_queued ON ql3.runs (created_at_ms) WHERE status = 'queued';
CREATE INDEX run_attempts_active ON ql3.run_attempts (created_at_ms)
    WHERE status IN ('claimed', 'starting', 'running');
