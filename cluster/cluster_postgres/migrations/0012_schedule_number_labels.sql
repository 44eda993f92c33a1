-- 0012: every schedule gets a number and may carry labels, as the Local table keeps them (Local
-- 0015; docs/schedules.md). number is given by an identity column when a schedule is added
-- (1, 2, 3, ...); a sequence never hands a value out twice, so a removed schedule's number is
-- never another's. Schedules already stored are numbered here in the order `schedule list` shows
-- them (creation time, then id), and the identity continues after the highest. labels is a JSON
-- array of short texts (the contract's MAX_LABELS and LABEL_MAX_LENGTH); NULL when none.
ALTER TABLE ql3.schedules ADD COLUMN number bigint;

UPDATE ql3.schedules AS s SET number = numbered.n
FROM (SELECT id, row_number() OVER (ORDER BY created_at_ms, id) AS n FROM ql3.schedules) AS numbered
WHERE s.id = numbered.id;

ALTER TABLE ql3.schedules
    ALTER COLUMN number SET NOT NULL,
    ADD CONSTRAINT schedules_number_positive CHECK (number >= 1),
    ADD CONSTRAINT schedules_number_key UNIQUE (number);
ALTER TABLE ql3.schedules ALTER COLUMN number ADD GENERATED ALWAYS AS IDENTITY;
SELECT setval(pg_get_serial_sequence('ql3.schedules', 'number'), coalesce(max(number), 0) + 1, false)
FROM ql3.schedules;

ALTER TABLE ql3.schedules ADD COLUMN labels jsonb CHECK (labels IS NULL OR jsonb_typeof(labels) = 'array');
