"""Arrange an Attempt the way no current service can: created outside the fenced start.

The runtime creates an Attempt only inside ``start_run`` (the start sequence: taking work is fenced by the
worker session, in the same transaction). Tests of what the orphan sweep, recovery, the dispatcher
or a power cut do with a ``claimed`` Attempt (left by the separate steps of an earlier version,
or by another tool) seed one here, with the row ``start_run`` would write and the
``run.attempt_created`` event those earlier versions appended (``start_run`` now records the
Attempt in its one ``run.attempt_starting`` event, at the barrier).
"""

from __future__ import annotations

from edge_runtime.contract.ids import new_id
from edge_runtime.contract.runs import AttemptRecord
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.run_events import append_run_event
from edge_runtime.local.run_start import _insert_attempt
from edge_runtime.local.runs import LocalRunRepository


def take_queued_run(db: LocalDatabase, run_id: str, *, actor_id: str) -> AttemptRecord | None:
    """Move a queued, runtime-owned Run without a cancel request to ``dispatching`` and give it
    its next Attempt as ``claimed``, unfenced; None when the Run is not such a Run."""
    with db.write() as now:
        connection = db.connection
        connection.execute(
            "UPDATE runs SET status = 'dispatching' WHERE id = ? AND status = 'queued' "
            "AND cancel_requested_at_ms IS NULL AND execution_owner = 'runtime'",
            (run_id,),
        )
        if connection.changes() != 1:
            return None
        attempt_id = new_id()
        number = _insert_attempt(connection, run_id, attempt_id, now=now)
        append_run_event(connection, run_id=run_id, event_id=new_id(), event_type="run.attempt_created",
                         dedupe_key=f"attempt-created:{attempt_id}", actor_type="worker", actor_id=actor_id,
                         attempt_id=attempt_id, payload={"attempt": number}, now_ms=now)
    return LocalRunRepository(db).get_attempt(attempt_id)
