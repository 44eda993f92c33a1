"""Row mapping for Runs and Attempts: column lists, row -> record projection, error mapping.

Kept apart from :mod:`edge_runtime.local.runs` so the repository module holds only the
transactions; every read of ``runs`` / ``run_attempts`` projects through these functions, so a
malformed stored row fails the same way everywhere.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from edge_runtime.contract.runs import (
    AttemptRecord,
    AttemptStatus,
    RunRecord,
    RunRepositoryError,
    RunStatus,
)
from edge_runtime.contract.stored_records import stored_record
from edge_runtime.local.errors import StorageErrors

_UNSET = msgspec.UNSET
_decode_argv = msgspec.json.Decoder(list[str]).decode
_decode_env = msgspec.json.Decoder(dict[str, str]).decode

_RUN_NAMES = (
    "id", "execution_owner", "status", "version", "event_sequence", "name", "command", "cancel_requested_at_ms",
    "cancel_reason", "created_at_ms", "updated_at_ms", "finished_at_ms", "schedule_id", "scheduled_for_ms",
    "timeout_ms", "env", "cwd", "retries", "retry_delay_ms", "retry_at_ms", "task_user",
)
_ATTEMPT_NAMES = (
    "id", "run_id", "attempt", "status", "executor_type", "pid", "pgid", "process_start_ticks", "boot_id",
    "exit_code", "end_reason", "log_path", "started_at_ms", "term_sent_at_ms", "kill_deadline_at_ms",
    "killed_at_ms", "finished_at_ms", "created_at_ms",
)
# The records' fields are named after their columns; a NULL column is an absent field.
RUN_COLUMNS = ", ".join(_RUN_NAMES)
ATTEMPT_COLUMNS = ", ".join(_ATTEMPT_NAMES)



def _fields(names: tuple[str, ...], row: tuple[Any, ...]) -> dict[str, Any]:
    return {name: _UNSET if value is None else value for name, value in zip(names, row)}


def run_from_row(row: tuple[Any, ...]) -> RunRecord:
    fields = _fields(_RUN_NAMES, row)

    def build() -> RunRecord:
        fields["status"] = RunStatus(fields["status"])
        if fields["command"] is not _UNSET:
            fields["command"] = _decode_argv(fields["command"])
        if fields["env"] is not _UNSET:
            fields["env"] = _decode_env(fields["env"])
        return RunRecord(**fields)

    return stored_record(build, "run", fields["id"], RunRepositoryError)


_IDENTITY = ("pid", "pgid", "process_start_ticks", "boot_id")


def attempt_from_row(row: tuple[Any, ...]) -> AttemptRecord:
    fields = _fields(_ATTEMPT_NAMES, row)
    try:
        fields["status"] = AttemptStatus(fields["status"])
    except ValueError:
        raise RunRepositoryError(f"stored attempt {fields['id']!r} has unknown status {fields['status']!r}") from None
    if len({fields[name] is _UNSET for name in _IDENTITY}) != 1:
        raise RunRepositoryError(f"stored attempt {fields['id']!r} has a partial process identity")
    return AttemptRecord(**fields)


class RunFence(NamedTuple):
    """The columns of a Run that a lease or dispatch step is fenced on."""

    execution_owner: str
    status: str
    cancel_requested_at_ms: int | None
    version: int
    event_sequence: int


class AttemptFence(NamedTuple):
    run_id: str
    status: str


_SELECT_RUN_FENCE = f"SELECT {', '.join(RunFence._fields)} FROM runs WHERE id = ?"
_SELECT_ATTEMPT_FENCE = f"SELECT {', '.join(AttemptFence._fields)} FROM run_attempts WHERE id = ?"


def read_run_fence(connection: Any, run_id: str) -> RunFence | None:
    row = connection.execute(_SELECT_RUN_FENCE, (run_id,)).fetchone()
    return None if row is None else RunFence._make(row)


def read_attempt_fence(connection: Any, attempt_id: str) -> AttemptFence | None:
    row = connection.execute(_SELECT_ATTEMPT_FENCE, (attempt_id,)).fetchone()
    return None if row is None else AttemptFence._make(row)


#: Storage failures become :class:`RunRepositoryError`; contract errors pass through.
run_repository_errors = StorageErrors(RunRepositoryError)
