-- 0009: a Run's updated_at_ms covers the observed times of its Attempts and Run Leases (issue 13).
--
-- The guarded clock's floor at `serve` start reads the newest observed time of each table that
-- grows with history through an index (0008). The event log needs none: every append sets its
-- Run's updated_at_ms. These triggers extend that rule to the Attempts and the Run Leases, so
-- their indexes of 0008 can go: each cost a page at nearly every commit of a Run, while the Run's
-- row and runs_observed are written by those commits anyway (each appends the Run's event). The
-- floor reads them through runs_observed (edge_runtime/local/guarded_clock.py, DOMINATED_BY);
-- `check` still proves it against every stored time.
--
-- Each expression is the newest of the table's observed columns (OBSERVED_TIME_COLUMNS), and
-- tests/unit/test_runs_cover_attempts_and_leases.py moves each column alone: it fails when one is
-- missing here. The WHEN clause keeps a change that is already covered (the usual case: its
-- event is in the same commit) from writing the Run's row again.
CREATE TRIGGER run_attempts_covered_by_run_insert AFTER INSERT ON run_attempts
WHEN max(coalesce(NEW.created_at_ms, 0), coalesce(NEW.updated_at_ms, 0), coalesce(NEW.finished_at_ms, 0),
         coalesce(NEW.started_at_ms, 0), coalesce(NEW.term_sent_at_ms, 0), coalesce(NEW.killed_at_ms, 0))
     > (SELECT coalesce(updated_at_ms, 0) FROM runs WHERE id = NEW.run_id)
BEGIN
    UPDATE runs SET updated_at_ms = max(coalesce(NEW.created_at_ms, 0), coalesce(NEW.updated_at_ms, 0),
        coalesce(NEW.finished_at_ms, 0), coalesce(NEW.started_at_ms, 0), coalesce(NEW.term_sent_at_ms, 0),
        coalesce(NEW.killed_at_ms, 0))
    WHERE id = NEW.run_id;
END;

CREATE TRIGGER run_attempts_covered_by_run_update AFTER UPDATE ON run_attempts
WHEN max(coalesce(NEW.created_at_ms, 0), coalesce(NEW.updated_at_ms, 0), coalesce(NEW.finished_at_ms, 0),
         coalesce(NEW.started_at_ms, 0), coalesce(NEW.term_sent_at_ms, 0), coalesce(NEW.killed_at_ms, 0))
     > (SELECT coalesce(updated_at_ms, 0) FROM runs WHERE id = NEW.run_id)
BEGIN
    UPDATE runs SET updated_at_ms = max(coalesce(NEW.created_at_ms, 0), coalesce(NEW.updated_at_ms, 0),
        coalesce(NEW.finished_at_ms, 0), coalesce(NEW.started_at_ms, 0), coalesce(NEW.term_sent_at_ms, 0),
        coalesce(NEW.killed_at_ms, 0))
    WHERE id = NEW.run_id;
END;

CREATE TRIGGER run_dispatch_leases_covered_by_run_insert AFTER INSERT ON run_dispatch_leases
WHEN max(coalesce(NEW.acquired_at_ms, 0), coalesce(NEW.renewed_at_ms, 0), coalesce(NEW.started_at_ms, 0),
         coalesce(NEW.released_at_ms, 0), coalesce(NEW.completed_at_ms, 0), coalesce(NEW.updated_at_ms, 0))
     > (SELECT coalesce(updated_at_ms, 0) FROM runs WHERE id = NEW.run_id)
BEGIN
    UPDATE runs SET updated_at_ms = max(coalesce(NEW.acquired_at_ms, 0), coalesce(NEW.renewed_at_ms, 0),
        coalesce(NEW.started_at_ms, 0), coalesce(NEW.released_at_ms, 0), coalesce(NEW.completed_at_ms, 0),
        coalesce(NEW.updated_at_ms, 0))
    WHERE id = NEW.run_id;
END;

CREATE TRIGGER run_dispatch_leases_covered_by_run_update AFTER UPDATE ON run_dispatch_leases
WHEN max(coalesce(NEW.acquired_at_ms, 0), coalesce(NEW.renewed_at_ms, 0), coalesce(NEW.started_at_ms, 0),
         coalesce(NEW.released_at_ms, 0), coalesce(NEW.completed_at_ms, 0), coalesce(NEW.updated_at_ms, 0))
     > (SELECT coalesce(updated_at_ms, 0) FROM runs WHERE id = NEW.run_id)
BEGIN
    UPDATE runs SET updated_at_ms = max(coalesce(NEW.acquired_at_ms, 0), coalesce(NEW.renewed_at_ms, 0),
        coalesce(NEW.started_at_ms, 0), coalesce(NEW.released_at_ms, 0), coalesce(NEW.completed_at_ms, 0),
        coalesce(NEW.updated_at_ms, 0))
    WHERE id = NEW.run_id;
END;

-- Rows written before this migration are brought up to the rule once, then the indexes go.
UPDATE runs SET updated_at_ms = (SELECT max(max(coalesce(a.created_at_ms, 0), coalesce(a.updated_at_ms, 0),
        coalesce(a.finished_at_ms, 0), coalesce(a.started_at_ms, 0), coalesce(a.term_sent_at_ms, 0),
        coalesce(a.killed_at_ms, 0))) FROM run_attempts a WHERE a.run_id = runs.id)
WHERE (SELECT max(max(coalesce(a.created_at_ms, 0), coalesce(a.updated_at_ms, 0), coalesce(a.finished_at_ms, 0),
        coalesce(a.started_at_ms, 0), coalesce(a.term_sent_at_ms, 0), coalesce(a.killed_at_ms, 0)))
       FROM run_attempts a WHERE a.run_id = runs.id) > coalesce(updated_at_ms, 0);
UPDATE runs SET updated_at_ms = (SELECT max(max(coalesce(l.acquired_at_ms, 0), coalesce(l.renewed_at_ms, 0),
        coalesce(l.started_at_ms, 0), coalesce(l.released_at_ms, 0), coalesce(l.completed_at_ms, 0),
        coalesce(l.updated_at_ms, 0))) FROM run_dispatch_leases l WHERE l.run_id = runs.id)
WHERE (SELECT max(max(coalesce(l.acquired_at_ms, 0), coalesce(l.renewed_at_ms, 0), coalesce(l.started_at_ms, 0),
        coalesce(l.released_at_ms, 0), coalesce(l.completed_at_ms, 0), coalesce(l.updated_at_ms, 0)))
       FROM run_dispatch_leases l WHERE l.run_id = runs.id) > coalesce(updated_at_ms, 0);
DROP INDEX run_attempts_observed;
DROP INDEX run_dispatch_leases_observed;
