-- 0015: every schedule gets a number and may carry labels (docs/schedules.md).
--
-- number is a small whole number the store gives a schedule when it is added: 1, 2, 3, ... from
-- schedule_numbers, a one-row counter that only grows, so a removed schedule's number is never
-- given to another (QingLong's clients name crons by such numbers: docs/qinglong.md). Schedules
-- already stored are numbered here in the order `schedule list` shows them (creation time, then
-- insertion order). SQLite cannot add a NOT NULL column without a default to a table that has
-- rows, nor default one to a sequence: the triggers below give every inserted row the next number
-- (as PostgreSQL's identity column does), refuse a number written by hand and any change of one,
-- so a row's number is the counter's and unique; a row without one is refused when read.
--
-- labels is a JSON array of short texts (at most 32 of at most 64 characters, the contract's
-- MAX_LABELS and LABEL_MAX_LENGTH); NULL when the schedule has none.
ALTER TABLE schedules ADD COLUMN number INTEGER CHECK (number >= 1);
ALTER TABLE schedules ADD COLUMN labels TEXT
    CHECK (labels IS NULL OR (json_valid(labels) AND json_type(labels) = 'array'));

UPDATE schedules SET number = (
    SELECT count(*) FROM schedules AS earlier
    WHERE earlier.created_at_ms < schedules.created_at_ms
       OR (earlier.created_at_ms = schedules.created_at_ms AND earlier.rowid <= schedules.rowid));

CREATE UNIQUE INDEX schedules_number ON schedules (number);

CREATE TABLE schedule_numbers (
    id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    last_number INTEGER NOT NULL CHECK (last_number >= 0)
) STRICT;

INSERT INTO schedule_numbers (id, last_number) SELECT 1, coalesce(max(number), 0) FROM schedules;

CREATE TRIGGER schedules_number_given BEFORE INSERT ON schedules WHEN NEW.number IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'a schedule''s number is given by the store');
END;

CREATE TRIGGER schedules_number AFTER INSERT ON schedules WHEN NEW.number IS NULL
BEGIN
    UPDATE schedule_numbers SET last_number = last_number + 1 WHERE id = 1;
    UPDATE schedules SET number = (SELECT last_number FROM schedule_numbers WHERE id = 1) WHERE rowid = NEW.rowid;
END;

CREATE TRIGGER schedules_number_kept BEFORE UPDATE OF number ON schedules WHEN OLD.number IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'a schedule''s number never changes');
END;
