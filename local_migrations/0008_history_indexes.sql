-- 0008: nothing the CLI or the start of `serve` does reads the whole history (issue 13).
--
-- `list` walks runs newest first (ORDER BY created_at_ms DESC, rowid DESC LIMIT n); without an
-- index SQLite scanned every Run and sorted them in a temporary B-tree. `list --status` walks the
-- Runs of one status in the same order.
CREATE INDEX runs_created ON runs (created_at_ms);
CREATE INDEX runs_status_created ON runs (status, created_at_ms);
-- The queue scan (status = 'queued', oldest first) walks runs_status_created too: the partial
-- index of 0003 that served it only cost a page per submit and per start.
DROP INDEX runs_queued;

-- The guarded clock's floor at `serve` start is the newest observed time stored in any table
-- (edge_runtime/local/guarded_clock.py, observed_floor_ms). On the tables that grow with history
-- one index per table holds the newest observed time of each row, so max() of it is one seek
-- instead of a scan per column. Each expression must stay exactly the one observed_floor_ms
-- builds from OBSERVED_TIME_COLUMNS (same columns, same order), or SQLite cannot use the index:
-- tests/unit/test_hot_path_plans.py fails when they drift apart.
--
-- The event log, the largest table, needs no such index (one more page written per commit):
-- every append sets its Run's updated_at_ms, which from now on never goes down
-- (edge_runtime/local/run_events.py), so runs_observed covers each event's time. Rows written
-- before this migration are brought up to that rule here, once.
UPDATE runs SET updated_at_ms = (SELECT max(e.created_at_ms) FROM run_events e WHERE e.run_id = runs.id)
WHERE (SELECT max(e.created_at_ms) FROM run_events e WHERE e.run_id = runs.id) > coalesce(updated_at_ms, 0);
CREATE INDEX runs_observed ON runs (max(coalesce(cancel_requested_at_ms, 0), coalesce(created_at_ms, 0),
    coalesce(updated_at_ms, 0), coalesce(finished_at_ms, 0)));
CREATE INDEX run_attempts_observed ON run_attempts (max(coalesce(created_at_ms, 0), coalesce(updated_at_ms, 0),
    coalesce(finished_at_ms, 0), coalesce(started_at_ms, 0), coalesce(term_sent_at_ms, 0),
    coalesce(killed_at_ms, 0)));
CREATE INDEX run_cancellation_dispatches_observed ON run_cancellation_dispatches (max(
    coalesce(last_dispatched_at_ms, 0), coalesce(created_at_ms, 0), coalesce(updated_at_ms, 0)));
CREATE INDEX run_dispatch_leases_observed ON run_dispatch_leases (max(coalesce(acquired_at_ms, 0),
    coalesce(renewed_at_ms, 0), coalesce(started_at_ms, 0), coalesce(released_at_ms, 0),
    coalesce(completed_at_ms, 0), coalesce(updated_at_ms, 0)));
CREATE INDEX device_events_observed ON device_events (created_at_ms);
