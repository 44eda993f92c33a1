-- 0015: every schedule gets a number and may carry labels (docs/schedules.md).
--
-- number is a small whole number the store gives a schedule when it is added: 1, 2, 3, ... from
-- schedule_numbers, a one-row counter that only grows, so a removed schedule's number is never
-- given to another (QingLong's clients name crons by such numbers: docs/qinglong.md). Schedules
-- already stored are numbered here in the order `schedule list` shows them (creation time, then
-- insertion order). SQLite cannot add a NOT NULL column without a default to a table that has
-- rows: the column is nullable, every stored row gets its number here and every add gives one,
-- and a row without one is refused when read (the contract's record requires it).
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
