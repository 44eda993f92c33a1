-- 0003: what the device service needs to run Attempts as local processes and to stop them.
-- The process identity (pid, process group, start time in clock ticks, boot id) is recorded
-- before an Attempt is reported running, so a recycled pid is never signalled. The SIGKILL
-- deadline is durable, so it is enforced even after a service restart.

ALTER TABLE run_attempts ADD COLUMN pid INTEGER CHECK (pid > 0);
ALTER TABLE run_attempts ADD COLUMN pgid INTEGER CHECK (pgid > 0);
ALTER TABLE run_attempts ADD COLUMN process_start_ticks INTEGER CHECK (process_start_ticks >= 0);
ALTER TABLE run_attempts ADD COLUMN boot_id TEXT CHECK (boot_id IS NULL OR length(boot_id) BETWEEN 1 AND 64);
ALTER TABLE run_attempts ADD COLUMN exit_code INTEGER;
ALTER TABLE run_attempts ADD COLUMN end_reason TEXT;
ALTER TABLE run_attempts ADD COLUMN log_path TEXT;
ALTER TABLE run_attempts ADD COLUMN started_at_ms INTEGER CHECK (started_at_ms >= 0);
ALTER TABLE run_attempts ADD COLUMN term_sent_at_ms INTEGER CHECK (term_sent_at_ms >= 0);
ALTER TABLE run_attempts ADD COLUMN kill_deadline_at_ms INTEGER CHECK (kill_deadline_at_ms >= 0);
ALTER TABLE run_attempts ADD COLUMN killed_at_ms INTEGER CHECK (killed_at_ms >= 0);

-- The service scans only live work: queued Runs to start, active Attempts to watch or recover,
-- cancel requests to dispatch and kill deadlines to enforce. Partial indexes keep them small.
CREATE INDEX runs_queued ON runs (created_at_ms) WHERE status = 'queued';
CREATE INDEX runs_cancel_requested ON runs (cancel_requested_at_ms)
    WHERE cancel_requested_at_ms IS NOT NULL
      AND status IN ('created', 'queued', 'dispatching', 'running', 'waiting_approval', 'retry_wait', 'lost');
CREATE INDEX run_attempts_active ON run_attempts (run_id) WHERE status IN ('claimed', 'starting', 'running');
CREATE INDEX run_attempts_kill_deadline ON run_attempts (kill_deadline_at_ms)
    WHERE kill_deadline_at_ms IS NOT NULL AND killed_at_ms IS NULL AND status IN ('claimed', 'starting', 'running');
