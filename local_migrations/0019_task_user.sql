-- 0019: the user a task runs as (docs/operating.md, "Task user").
--
-- A Run keeps the user its Attempts run as, and a schedule the user of the Runs it fires (a
-- subscription's own task_user, 0018, is given to the schedules it makes for its scripts). NULL:
-- the service's task_user setting, else the service's own user. A name as the contract takes it
-- (TASK_USER_PATTERN); whether it exists is the device's, checked when the Attempt starts.
ALTER TABLE runs ADD COLUMN task_user TEXT CHECK (task_user IS NULL OR length(task_user) BETWEEN 1 AND 32);
ALTER TABLE schedules ADD COLUMN task_user TEXT CHECK (task_user IS NULL OR length(task_user) BETWEEN 1 AND 32);
