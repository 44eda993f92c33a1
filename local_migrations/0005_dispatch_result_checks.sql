-- 0005: the terminal-shape CHECKs of run_cancellation_dispatches (0001) pass a NULL last_result:
-- `NULL IN (...)` is NULL, and SQLite accepts a CHECK that is NULL. So a `dispatched`, `blocked`
-- or `retry_wait` row without a result was accepted. SQLite cannot change a table's CHECKs
-- without rebuilding the table, so (as 0002 does for the lease projection) triggers refuse it.
-- Rows written before this migration are judged by `edge-runtime check`.

CREATE TRIGGER run_cancellation_dispatches_result_shape_insert BEFORE INSERT ON run_cancellation_dispatches
WHEN NEW.status IN ('dispatched', 'blocked', 'retry_wait') AND NEW.last_result IS NULL
BEGIN
    SELECT RAISE(ABORT, 'a dispatched, blocked or retry_wait cancellation dispatch needs its last_result');
END;

CREATE TRIGGER run_cancellation_dispatches_result_shape_update BEFORE UPDATE OF status, last_result
ON run_cancellation_dispatches
WHEN NEW.status IN ('dispatched', 'blocked', 'retry_wait') AND NEW.last_result IS NULL
BEGIN
    SELECT RAISE(ABORT, 'a dispatched, blocked or retry_wait cancellation dispatch needs its last_result');
END;
