-- 0010: why a worker paused a schedule, as the Local column schedules.pause_reason keeps it
-- (Local 0013; docs/schedules.md). A stored schedule that cannot fire (an expression or zone this
-- release does not read, written by another program or release, or one that never fires in its
-- zone) is paused by its fire with the reason instead of failing every worker's tick. NULL for a
-- schedule its user paused and for every active one: resume and a new expression clear it.
-- At most 1024 characters (the contract's PAUSE_REASON_MAX_LENGTH).
ALTER TABLE ql3.schedules
    ADD COLUMN pause_reason text
        CHECK (pause_reason IS NULL OR (paused AND length(pause_reason) BETWEEN 1 AND 1024));
