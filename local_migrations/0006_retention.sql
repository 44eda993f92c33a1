-- 0006: retention (edge_runtime/local/retention.py) may delete a whole finished Run, nothing else.
--
-- The event log stays append-only while its Run lives: an event can be deleted only once its Run
-- row is gone in the same transaction. The Run row can be deleted only when the Run is finished
-- and no Attempt of it is still active. Retention deletes the Run row first with
-- `PRAGMA defer_foreign_keys = ON`, so the foreign keys of run_events, run_attempts,
-- run_cancellation_dispatches and run_dispatch_leases are checked at COMMIT: a transaction that
-- leaves any row of the deleted Run behind cannot commit. A half-deleted Run never exists.

DROP TRIGGER run_events_append_only_delete;

CREATE TRIGGER run_events_append_only_delete BEFORE DELETE ON run_events
WHEN EXISTS (SELECT 1 FROM runs WHERE id = OLD.run_id)
BEGIN
    SELECT RAISE(ABORT, 'run_events is append-only while its run exists');
END;

CREATE TRIGGER runs_delete_only_finished BEFORE DELETE ON runs
WHEN OLD.status NOT IN ('succeeded', 'failed', 'cancelled') OR OLD.finished_at_ms IS NULL
    OR EXISTS (SELECT 1 FROM run_attempts WHERE run_id = OLD.id AND status IN ('claimed', 'starting', 'running'))
BEGIN
    SELECT RAISE(ABORT, 'only a finished run may be deleted');
END;
