-- 0013: why the service paused a schedule.
--
-- A stored schedule that cannot fire (an expression or zone this version does not read, written
-- by another program or version, or one that never fires in its zone) is paused by its fire
-- instead of failing every tick, and pause_reason says why (docs/schedules.md). NULL for a
-- schedule its user paused, and for every active one: resume and a new expression clear it.
-- At most 1024 characters (the contract's PAUSE_REASON_MAX_LENGTH).
ALTER TABLE schedules ADD COLUMN pause_reason TEXT
    CHECK (pause_reason IS NULL OR (paused = 1 AND length(pause_reason) BETWEEN 1 AND 1024));
