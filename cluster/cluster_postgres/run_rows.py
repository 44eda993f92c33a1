"""Row mapping for Runs and Attempts in ``ql3``: column lists and row -> record projection.

Kept apart from :mod:`cluster_postgres.runs` (as :mod:`edge_runtime.local.run_rows` is from the
Local run store) so the repository module holds only the transactions; every read of ``runs`` /
``run_attempts`` projects through these functions, so a malformed stored row fails the same way
everywhere.
"""

from __future__ import annotations

from typing import Any

import msgspec

from edge_runtime.contract.runs import AttemptRecord, AttemptStatus, RunRecord, RunRepositoryError, RunStatus
from edge_runtime.contract.stored_records import stored_record

_UNSET = msgspec.UNSET

RUN_COLUMNS = (
    "id, execution_owner, status, version, event_sequence, name, command, cancel_requested_at_ms, "
    "cancel_reason, created_at_ms, updated_at_ms, finished_at_ms, schedule_id, scheduled_for_ms, timeout_ms, "
    "env, cwd, retries, retry_delay_ms, retry_at_ms, task_user"
)
ATTEMPT_COLUMNS = (
    "id, run_id, attempt, status, executor_type, pid, pgid, process_start_ticks, boot_id, exit_code, end_reason, "
    "log_path, started_at_ms, term_sent_at_ms, kill_deadline_at_ms, killed_at_ms, finished_at_ms, created_at_ms"
)


def absent(value: Any) -> Any:
    """A NULL column is an absent field."""
    return _UNSET if value is None else value


def run_from_row(row: tuple[Any, ...]) -> RunRecord:
    (run_id, owner, status, version, sequence, name, command, requested, reason, created, updated, finished,
     schedule_id, scheduled_for, timeout, env, cwd, retries, retry_delay, retry_at, task_user) = row
    def build() -> RunRecord:
        if command is not None and not (isinstance(command, list) and all(type(a) is str for a in command)):
            raise ValueError("command is not a list of strings")
        if env is not None and not (isinstance(env, dict) and all(type(v) is str for v in env.values())):
            raise ValueError("env is not an object of strings")
        return RunRecord(
            id=run_id, execution_owner=owner, status=RunStatus(status), version=version, event_sequence=sequence,
            name=absent(name), command=absent(command), cancel_requested_at_ms=absent(requested),
            cancel_reason=absent(reason), created_at_ms=created, updated_at_ms=absent(updated),
            finished_at_ms=absent(finished), schedule_id=absent(schedule_id),
            scheduled_for_ms=absent(scheduled_for), timeout_ms=absent(timeout), env=absent(env),
            cwd=absent(cwd), retries=absent(retries), retry_delay_ms=absent(retry_delay),
            retry_at_ms=absent(retry_at), task_user=absent(task_user),
        )

    return stored_record(build, "run", run_id, RunRepositoryError)


def attempt_from_row(row: tuple[Any, ...]) -> AttemptRecord:
    (attempt_id, run_id, number, status, executor, pid, pgid, ticks, boot_id, exit_code, reason, log_path,
     started, term_sent, deadline, killed, finished, created) = row
    try:
        status = AttemptStatus(status)
    except ValueError:
        raise RunRepositoryError(f"stored attempt {attempt_id!r} has unknown status {status!r}") from None
    if len({pid is None, pgid is None, ticks is None, boot_id is None}) != 1:
        raise RunRepositoryError(f"stored attempt {attempt_id!r} has a partial process identity")
    return AttemptRecord(
        id=attempt_id, run_id=run_id, attempt=number, status=status, executor_type=executor, pid=absent(pid),
        pgid=absent(pgid), process_start_ticks=absent(ticks), boot_id=absent(boot_id),
        exit_code=absent(exit_code), end_reason=absent(reason), log_path=absent(log_path),
        started_at_ms=absent(started), term_sent_at_ms=absent(term_sent), kill_deadline_at_ms=absent(deadline),
        killed_at_ms=absent(killed), finished_at_ms=absent(finished), created_at_ms=created,
    )
