"""Row mapping for Runs and Attempts: column lists, row -> record projection, error mapping.

Kept apart from :mod:`edge_runtime.local.runs` so the repository module holds only the
transactions; every read of ``runs`` / ``run_attempts`` projects through these functions, so a
malformed stored row fails the same way everywhere.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from typing import Any

import msgspec

from edge_runtime.contract.runs import (
    ACTIVE_ATTEMPT_STATUSES,
    ACTIVE_RUN_STATUSES,
    AttemptRecord,
    AttemptStatus,
    RunRecord,
    RunRepositoryError,
    RunStatus,
)
from edge_runtime.local.errors import StorageErrors

_UNSET = msgspec.UNSET
_decode_argv = msgspec.json.Decoder(list[str]).decode

RUN_COLUMNS = (
    "id, execution_owner, status, version, event_sequence, name, command, cancel_requested_at_ms, "
    "cancel_reason, created_at_ms, updated_at_ms, finished_at_ms, schedule_id, scheduled_for_ms, timeout_ms"
)
ATTEMPT_COLUMNS = (
    "id, run_id, attempt, status, executor_type, pid, pgid, process_start_ticks, boot_id, exit_code, end_reason, "
    "log_path, started_at_ms, term_sent_at_ms, kill_deadline_at_ms, killed_at_ms, finished_at_ms, created_at_ms"
)
def sql_in(kind: type[enum.StrEnum], members: Collection[enum.StrEnum]) -> str:
    """An SQL ``IN`` list of the status names in ``members``, derived from the contract (never
    retyped), in the enum's declaration order: the partial indexes of migration 0003 list them in
    that order, and SQLite uses a partial index only for a query term written exactly like its own."""
    return "(" + ", ".join(f"'{status.value}'" for status in kind if status in members) + ")"


ACTIVE_RUN_SQL = sql_in(RunStatus, ACTIVE_RUN_STATUSES)
ACTIVE_ATTEMPT_SQL = sql_in(AttemptStatus, ACTIVE_ATTEMPT_STATUSES)

def _absent(value: Any) -> Any:
    return _UNSET if value is None else value


def run_from_row(row: tuple[Any, ...]) -> RunRecord:
    (run_id, owner, status, version, sequence, name, command, requested, reason, created, updated, finished,
     schedule_id, scheduled_for, timeout) = row
    try:
        return RunRecord(
            id=run_id,
            execution_owner=owner,
            status=RunStatus(status),
            version=version,
            event_sequence=sequence,
            name=_absent(name),
            command=_UNSET if command is None else _decode_argv(command),
            cancel_requested_at_ms=_absent(requested),
            cancel_reason=_absent(reason),
            created_at_ms=created,
            updated_at_ms=_absent(updated),
            finished_at_ms=_absent(finished),
            schedule_id=_absent(schedule_id),
            scheduled_for_ms=_absent(scheduled_for),
            timeout_ms=_absent(timeout),
        )
    except (ValueError, msgspec.DecodeError) as exc:
        raise RunRepositoryError(f"stored run {run_id!r} is malformed: {exc}") from None


def attempt_from_row(row: tuple[Any, ...]) -> AttemptRecord:
    (attempt_id, run_id, number, status, executor, pid, pgid, ticks, boot_id, exit_code, reason, log_path,
     started, term_sent, deadline, killed, finished, created) = row
    try:
        status = AttemptStatus(status)
    except ValueError:
        raise RunRepositoryError(f"stored attempt {attempt_id!r} has unknown status {status!r}") from None
    if (pid is None) != (pgid is None) or (pid is None) != (ticks is None) or (pid is None) != (boot_id is None):
        raise RunRepositoryError(f"stored attempt {attempt_id!r} has a partial process identity")
    return AttemptRecord(
        id=attempt_id,
        run_id=run_id,
        attempt=number,
        status=status,
        executor_type=executor,
        pid=_absent(pid),
        pgid=_absent(pgid),
        process_start_ticks=_absent(ticks),
        boot_id=_absent(boot_id),
        exit_code=_absent(exit_code),
        end_reason=_absent(reason),
        log_path=_absent(log_path),
        started_at_ms=_absent(started),
        term_sent_at_ms=_absent(term_sent),
        kill_deadline_at_ms=_absent(deadline),
        killed_at_ms=_absent(killed),
        finished_at_ms=_absent(finished),
        created_at_ms=created,
    )


#: Storage failures become :class:`RunRepositoryError`; contract errors pass through.
run_repository_errors = StorageErrors(RunRepositoryError)
