"""Appending to ``ql3.run_events`` and reading database time, inside the caller's transaction.

An append is one statement: the Run's version/sequence compare-and-set and the event insert in
one CTE, so a CAS miss inserts nothing (row count 0) and a duplicate id or dedupe key fails the
whole transaction (23505).
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import psycopg

from edge_runtime.contract.errors import RunEventLogMismatchError
from edge_runtime.contract.run_events import RunEvent
from cluster_postgres.errors import RunVersionConflict

EVENT_CLOCK_REGRESSED = "run.clock_regressed"

_APPEND = (
    "WITH cas AS (UPDATE ql3.runs SET version = version + 1, event_sequence = event_sequence + 1, updated_at_ms = %s"
    " WHERE id = %s AND version = %s AND event_sequence = %s RETURNING id, event_sequence)"
    " INSERT INTO ql3.run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, attempt_id, payload,"
    " created_at_ms) SELECT %s, cas.id, cas.event_sequence, %s, %s, %s, %s, %s, %s::jsonb, %s FROM cas"
)
#: The constraint a row at the next sequence trips: one another program appended uncounted.
_SEQUENCE_CONSTRAINT = "run_events_run_id_sequence_key"
_NOW = "SELECT ql3.now_ms()"
_encode = msgspec.json.Encoder().encode


def database_now(cur: psycopg.Cursor[Any]) -> int:
    """The one time observation of a transaction: call it right after the last blocking row lock."""
    return cur.execute(_NOW).fetchone()[0]


def append_run_event(
    cur: psycopg.Cursor[Any],
    run: list[int],
    *,
    run_id: str,
    event_id: str,
    event_type: str,
    dedupe_key: str,
    actor_type: str,
    actor_id: str,
    payload: dict[str, Any],
    now_ms: int,
    attempt_id: str | None = None,
) -> RunEvent:
    """CAS the Run (``run`` is its locked ``[version, event_sequence]``, advanced here) and append.

    Raises:
        RunVersionConflict: the CAS missed.
        RunEventLogMismatchError: the log already holds the next sequence: another program
            appended to it without counting it in the Run (the caller sets the Run aside).
        psycopg.Error: duplicate event id or dedupe key (23505), or any other failure.
    """
    version, sequence = run
    try:
        cur.execute(_APPEND, (now_ms, run_id, version, sequence, event_id, event_type, dedupe_key, actor_type,
                              actor_id, attempt_id, _encode(payload).decode(), now_ms))
    except psycopg.errors.UniqueViolation as exc:
        if exc.diag.constraint_name == _SEQUENCE_CONSTRAINT:
            raise RunEventLogMismatchError.of(run_id, sequence, sequence + 1) from None
        raise
    if cur.rowcount != 1:
        raise RunVersionConflict(f"run {run_id!r} changed concurrently (version CAS missed)")
    run[0], run[1] = version + 1, sequence + 1
    return RunEvent(
        id=event_id, run_id=run_id, sequence=sequence + 1, type=event_type, dedupe_key=dedupe_key,
        actor_type=actor_type, actor_id=actor_id, attempt_id=msgspec.UNSET if attempt_id is None else attempt_id,
        payload=payload, created_at_ms=now_ms,
    )


def clamp(cur: psycopg.Cursor[Any], db_now: int, row_updated_at_ms: int | None, run: list[int] | None,
          run_id: str, actor_id: str) -> int:
    """``max(db_now, row.updated_at_ms)`` (§4 deviation: never fail closed on a lagging clock).

    When the stored row is ahead of the database clock (a promotion to a host whose clock lags),
    the clamped time is used and, when the row belongs to a Run, a ``run.clock_regressed`` event
    records both times in the same transaction.
    """
    if row_updated_at_ms is None or row_updated_at_ms <= db_now:
        return db_now
    if run is not None:
        event_id = str(uuid.uuid4())
        append_run_event(
            cur, run, run_id=run_id, event_id=event_id, event_type=EVENT_CLOCK_REGRESSED,
            dedupe_key=f"clock-regressed:{event_id}", actor_type="worker", actor_id=actor_id,
            payload={"database_time_ms": db_now, "clamped_time_ms": row_updated_at_ms}, now_ms=row_updated_at_ms,
        )
    return row_updated_at_ms
