-- 0014: the user a task runs as, as the Local tables keep it (Local 0019; docs/operating.md,
-- "Task user"): a Run keeps the user its Attempts run as, a schedule the user of the Runs it fires.
-- NULL: the worker's task_user setting, else the worker's own user. The worker that starts an
-- Attempt checks the name against its own host's users.
ALTER TABLE ql3.runs ADD COLUMN task_user text CHECK (task_user IS NULL OR length(task_user) BETWEEN 1 AND 32);
ALTER TABLE ql3.schedules ADD COLUMN task_user text CHECK (task_user IS NULL OR length(task_user) BETWEEN 1 AND 32);
