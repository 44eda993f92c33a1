"""Appending to the Run event log: the one way any repository records a fact about a Run.

An append bumps the Run's ``version`` by compare-and-set, allocates ``event_sequence + 1`` and
inserts the ``run_events`` row, inside the caller's write transaction. Any failure (duplicate
event id or dedupe key, CAS miss) raises, and the caller's transaction rolls everything back.
"""

from __future__ import annotations

from typing import Any

import apsw
import msgspec

from edge_runtime.contract.errors import RunEventLogMismatchError
from edge_runtime.contract.run_events import RunEvent
from edge_runtime.local.errors import RunVersionConflict

_SELECT_RUN_VERSION = "SELECT version, event_sequence FROM runs WHERE id = ?"
_HIGHEST_SEQUENCE = "SELECT max(sequence) FROM run_events WHERE run_id = ?"
# updated_at_ms never goes down (a writer whose clock is behind another's leaves it): it stays
# at least the newest event time of the Run, which lets the clock floor read the event log's
# newest time from the runs index instead of indexing every event (guarded_clock.DOMINATED_BY).
_CAS_RUN = (
    "UPDATE runs SET version = version + 1, event_sequence = event_sequence + 1, "
    "updated_at_ms = max(coalesce(updated_at_ms, 0), ?) WHERE id = ? AND version = ? AND event_sequence = ?"
)
# The event's fields are named after its columns: rows are read and written by these names.
_EVENT_NAMES = RunEvent.__struct_fields__
EVENT_COLUMNS = ", ".join(_EVENT_NAMES)
_INSERT_EVENT = f"INSERT INTO run_events ({EVENT_COLUMNS}) VALUES ({', '.join('?' * len(_EVENT_NAMES))})"
# The two fields stored in another form than the record holds them: NULL for absent, JSON text.
_ATTEMPT_ID_AT = _EVENT_NAMES.index("attempt_id")
_PAYLOAD_AT = _EVENT_NAMES.index("payload")

_encode_json = msgspec.json.Encoder().encode
_decode_payload = msgspec.json.Decoder(dict[str, Any]).decode


def read_run_version(connection: apsw.Connection, run_id: str) -> tuple[int, int] | None:
    """The Run's ``(version, event_sequence)``, or None when it does not exist."""
    return connection.execute(_SELECT_RUN_VERSION, (run_id,)).fetchone()


def append_run_event(
    connection: apsw.Connection,
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
    run_version: tuple[int, int] | None = None,
) -> RunEvent:
    """CAS the Run's version, allocate the next sequence and append one event.

    Args:
        run_version: the ``(version, event_sequence)`` the caller already read in this
            transaction; read here when omitted.

    Raises:
        RunVersionConflict: the Run is missing or its version moved.
        RunEventLogMismatchError: the log already holds the next sequence: another program
            appended to it without counting it in the Run (the caller sets the Run aside).
        apsw.ConstraintError: duplicate event id or dedupe key.
    """
    current = run_version if run_version is not None else read_run_version(connection, run_id)
    if current is None:
        raise RunVersionConflict(f"run {run_id!r} does not exist")
    version, sequence = current
    connection.execute(_CAS_RUN, (now_ms, run_id, version, sequence))
    if connection.changes() != 1:
        raise RunVersionConflict(f"run {run_id!r} changed concurrently (version CAS missed)")
    event = RunEvent(
        id=event_id,
        run_id=run_id,
        sequence=sequence + 1,
        type=event_type,
        dedupe_key=dedupe_key,
        actor_type=actor_type,
        actor_id=actor_id,
        attempt_id=msgspec.UNSET if attempt_id is None else attempt_id,
        payload=payload,
        created_at_ms=now_ms,
    )
    stored = list(msgspec.structs.astuple(event))
    stored[_ATTEMPT_ID_AT], stored[_PAYLOAD_AT] = attempt_id, _encode_json(payload).decode()
    try:
        connection.execute(_INSERT_EVENT, stored)
    except apsw.ConstraintError:
        # Looked at only when the insert failed: the runtime's own appends always count their row.
        highest = connection.execute(_HIGHEST_SEQUENCE, (run_id,)).fetchone()[0]
        if highest is not None and highest > sequence:
            raise RunEventLogMismatchError.of(run_id, sequence, highest) from None
        raise
    return event


def count_foreign_events(connection: apsw.Connection, run_id: str) -> int:
    """Bring the Run's ``event_sequence`` level with the highest sequence its log holds (rows
    another program appended without counting them), inside the caller's write transaction, so
    that the Run's next event can be appended after them; the sequence it was brought to. The
    rows stay: the log is append-only. Only a Run being set aside for them is brought level."""
    highest = connection.execute(_HIGHEST_SEQUENCE, (run_id,)).fetchone()[0] or 0
    connection.execute("UPDATE runs SET event_sequence = ?1 WHERE id = ?2 AND event_sequence < ?1", (highest, run_id))
    return highest


def event_from_row(row: tuple[Any, ...]) -> RunEvent:
    """Project one ``run_events`` row selected with :data:`EVENT_COLUMNS`."""
    fields = dict(zip(_EVENT_NAMES, row))
    if fields["attempt_id"] is None:
        del fields["attempt_id"]  # a Run-level event: absent, not null
    fields["payload"] = _decode_payload(fields["payload"])
    return RunEvent(**fields)


def list_run_events(connection: apsw.Connection, run_id: str) -> list[RunEvent]:
    """All events of a Run in sequence order."""
    rows = connection.execute(
        f"SELECT {EVENT_COLUMNS} FROM run_events WHERE run_id = ? ORDER BY sequence", (run_id,)
    ).fetchall()
    return [event_from_row(row) for row in rows]
