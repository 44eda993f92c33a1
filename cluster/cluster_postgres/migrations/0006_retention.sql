-- 0006: retention of the cluster's history by database time, configured once in the database so
-- every worker agrees (docs/cluster.md, "Retention"). The runtime role keeps no DELETE: it may only
-- call ql3.prune_history(batch), a SECURITY DEFINER function owned by ql3_retention, a NOLOGIN role
-- (made by `bootstrap`) that may read the history and delete only finished history (row-level
-- security below), in small batches that skip any Run another transaction holds.

-- One row: the policy. Its defaults are the device's (DEFAULT_RETAIN_RUNS, DEFAULT_RETAIN_DAYS of
-- edge_runtime/contract/retention.py; a test holds them equal).
CREATE TABLE ql3.retention_settings (
    id integer PRIMARY KEY CHECK (id = 1),
    retain_runs integer NOT NULL CHECK (retain_runs BETWEEN 1 AND 10000000),
    retain_days integer NOT NULL CHECK (retain_days BETWEEN 1 AND 36500),
    updated_at_ms bigint NOT NULL CHECK (updated_at_ms >= 0)
);
INSERT INTO ql3.retention_settings VALUES (1, 1000, 7, ql3.now_ms());

-- The prune's scan: finished Runs, oldest first.
CREATE INDEX runs_finished ON ql3.runs (finished_at_ms, id)
    WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at_ms IS NOT NULL;

-- Whether a Run is finished (a terminal status with its end time): the one test of "finished
-- history" that the retention role's delete policies use.
CREATE FUNCTION ql3.run_is_finished(run text) RETURNS boolean LANGUAGE sql STABLE
    AS $$ SELECT EXISTS (SELECT 1 FROM ql3.runs WHERE id = run
                         AND status IN ('succeeded', 'failed', 'cancelled') AND finished_at_ms IS NOT NULL) $$;

-- Row-level security on the history: the profile's roles keep exactly their table privileges
-- (a policy that admits every row); the retention role reads every row and deletes only those of
-- finished Runs. The owner (migrations, tests) is not subject to it.
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['runs', 'run_attempts', 'run_events', 'attempt_logs', 'run_dispatch_leases',
                             'run_cancellation_dispatches', 'schedule_fires'] LOOP
        EXECUTE format('ALTER TABLE ql3.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY profile_roles ON ql3.%I TO ql3_runtime, ql3_cluster_admin '
                       'USING (true) WITH CHECK (true)', t);
        EXECUTE format('CREATE POLICY retention_reads ON ql3.%I FOR SELECT TO ql3_retention USING (true)', t);
        EXECUTE format('GRANT SELECT, DELETE ON ql3.%I TO ql3_retention', t);
    END LOOP;
END $$;
CREATE POLICY retention_deletes_finished ON ql3.runs FOR DELETE TO ql3_retention
    USING (status IN ('succeeded', 'failed', 'cancelled') AND finished_at_ms IS NOT NULL);
-- `FOR UPDATE SKIP LOCKED` needs UPDATE on a column: the retention role may lock a finished Run
-- (never a live one), and any UPDATE it tried would fail its row check.
GRANT UPDATE (id) ON ql3.runs TO ql3_retention;
CREATE POLICY retention_locks_finished ON ql3.runs FOR UPDATE TO ql3_retention
    USING (status IN ('succeeded', 'failed', 'cancelled') AND finished_at_ms IS NOT NULL) WITH CHECK (false);
CREATE POLICY retention_deletes_finished ON ql3.run_attempts FOR DELETE TO ql3_retention
    USING (ql3.run_is_finished(run_id));
CREATE POLICY retention_deletes_finished ON ql3.run_events FOR DELETE TO ql3_retention
    USING (ql3.run_is_finished(run_id));
CREATE POLICY retention_deletes_finished ON ql3.run_dispatch_leases FOR DELETE TO ql3_retention
    USING (ql3.run_is_finished(run_id));
CREATE POLICY retention_deletes_finished ON ql3.run_cancellation_dispatches FOR DELETE TO ql3_retention
    USING (ql3.run_is_finished(run_id));
CREATE POLICY retention_deletes_finished ON ql3.schedule_fires FOR DELETE TO ql3_retention
    USING (run_id IS NOT NULL AND ql3.run_is_finished(run_id));
CREATE POLICY retention_deletes_finished ON ql3.attempt_logs FOR DELETE TO ql3_retention
    USING (ql3.run_is_finished((SELECT a.run_id FROM ql3.run_attempts a WHERE a.id = attempt_id)));

-- One batch: at most `batch` whole finished Runs beyond the policy, oldest first, each settled (no
-- active Attempt, open dispatch or live Run Lease), locked FOR UPDATE SKIP LOCKED so a Run another
-- transaction holds is skipped, never waited for; a live Run is never read for update. Its cost is
-- that of retain_runs + batch index entries, not of the whole history. Returns how many Runs it
-- deleted, their Attempt ids (for the logs on the caller's host) and whether more may be due.
-- Time is the database's.
CREATE FUNCTION ql3.prune_history(batch integer)
    RETURNS TABLE (runs_deleted integer, attempt_ids text[], more boolean)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = ql3, pg_temp AS $$
DECLARE
    policy ql3.retention_settings%ROWTYPE;
    cutoff bigint;
    kept_at bigint;
    kept_id text;
    ids text[];
    attempts text[];
BEGIN
    IF batch IS NULL OR batch < 1 OR batch > 256 THEN
        RAISE EXCEPTION 'prune_history: batch must be 1..256' USING ERRCODE = '22023';
    END IF;
    SELECT * INTO STRICT policy FROM ql3.retention_settings WHERE id = 1;
    cutoff := ql3.now_ms() - policy.retain_days::bigint * 86400000;
    -- The oldest of the newest retain_runs finished Runs (read backwards on runs_finished): every
    -- finished Run before it is beyond the count, whatever the history's size.
    SELECT o.finished_at_ms, o.id INTO kept_at, kept_id FROM ql3.runs o
        WHERE o.status IN ('succeeded', 'failed', 'cancelled') AND o.finished_at_ms IS NOT NULL
        ORDER BY o.finished_at_ms DESC, o.id DESC OFFSET policy.retain_runs - 1 LIMIT 1;
    SELECT coalesce(array_agg(c.id), ARRAY[]::text[]) INTO ids FROM (
        SELECT r.id FROM ql3.runs r
        WHERE r.status IN ('succeeded', 'failed', 'cancelled') AND r.finished_at_ms IS NOT NULL
          AND (r.finished_at_ms < cutoff OR (kept_at IS NOT NULL AND (r.finished_at_ms, r.id) < (kept_at, kept_id)))
          AND NOT EXISTS (SELECT 1 FROM ql3.run_attempts a WHERE a.run_id = r.id
                          AND a.status IN ('claimed', 'starting', 'running'))
          AND NOT EXISTS (SELECT 1 FROM ql3.run_cancellation_dispatches d WHERE d.run_id = r.id
                          AND d.status IN ('pending', 'leased', 'retry_wait'))
          AND NOT EXISTS (SELECT 1 FROM ql3.run_dispatch_leases l WHERE l.run_id = r.id AND l.status = 'leased')
        ORDER BY r.finished_at_ms, r.id LIMIT batch
        FOR UPDATE OF r SKIP LOCKED) c;
    IF cardinality(ids) = 0 THEN
        RETURN QUERY SELECT 0, ARRAY[]::text[], false;
        RETURN;
    END IF;
    SELECT coalesce(array_agg(a.id), ARRAY[]::text[]) INTO attempts FROM ql3.run_attempts a WHERE a.run_id = ANY (ids);
    DELETE FROM ql3.attempt_logs WHERE attempt_id = ANY (attempts);
    DELETE FROM ql3.run_events WHERE run_id = ANY (ids);
    DELETE FROM ql3.run_cancellation_dispatches WHERE run_id = ANY (ids);
    DELETE FROM ql3.run_dispatch_leases WHERE run_id = ANY (ids);
    DELETE FROM ql3.schedule_fires WHERE run_id = ANY (ids);
    DELETE FROM ql3.run_attempts WHERE run_id = ANY (ids);
    DELETE FROM ql3.runs WHERE id = ANY (ids);
    -- A full batch: more may be due (the next batch finds out, cheaply).
    RETURN QUERY SELECT cardinality(ids), attempts, cardinality(ids) = batch;
END $$;

REVOKE ALL ON ql3.retention_settings FROM PUBLIC;
GRANT SELECT, UPDATE ON ql3.retention_settings TO ql3_runtime;
GRANT SELECT ON ql3.retention_settings TO ql3_retention;
GRANT USAGE ON SCHEMA ql3 TO ql3_retention;
GRANT EXECUTE ON FUNCTION ql3.now_ms() TO ql3_retention;
REVOKE ALL ON FUNCTION ql3.run_is_finished(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ql3.run_is_finished(text) TO ql3_retention;
-- A new owner needs CREATE on the schema at the moment it is given the function; only then.
GRANT CREATE ON SCHEMA ql3 TO ql3_retention;
ALTER FUNCTION ql3.prune_history(integer) OWNER TO ql3_retention;
REVOKE CREATE ON SCHEMA ql3 FROM ql3_retention;
REVOKE ALL ON FUNCTION ql3.prune_history(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ql3.prune_history(integer) TO ql3_runtime;
