-- 0004: the clock discipline's durable state (edge_runtime/local/guarded_clock.py).
--
-- clock_watermark: one row, the highest time the guarded clock had handed out when it last
-- persisted. A device that reboots at 1970 (no RTC) or at its firmware build date never hands out
-- a time below max(watermark, the newest observation time stored in any table). Written at most
-- once per persist interval by the service loop, never on the hot path of an operation.
--
-- device_events: facts about the device rather than about one Run (run_events is per Run and
-- bumps the Run's version). Today: `clock.jump_detected` with the jump's direction and size in
-- its JSON payload. Append-only, like run_events.

CREATE TABLE clock_watermark (
    id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    watermark_ms INTEGER NOT NULL CHECK (watermark_ms >= 0),
    updated_at_ms INTEGER NOT NULL CHECK (updated_at_ms >= 0)
) STRICT;

CREATE TABLE device_events (
    id INTEGER PRIMARY KEY NOT NULL,
    type TEXT NOT NULL CHECK (length(type) BETWEEN 1 AND 64),
    payload TEXT NOT NULL CHECK (json_valid(payload)),
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0)
) STRICT;

CREATE TRIGGER device_events_append_only_update BEFORE UPDATE ON device_events
BEGIN
    SELECT RAISE(ABORT, 'device_events is append-only');
END;

CREATE TRIGGER device_events_append_only_delete BEFORE DELETE ON device_events
BEGIN
    SELECT RAISE(ABORT, 'device_events is append-only');
END;
