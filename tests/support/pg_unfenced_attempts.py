"""Arrange an Attempt on PostgreSQL the way no current service can: created outside the fenced start.

The PostgreSQL counterpart of ``tests/support/unfenced_attempts.py``: the runtime creates an Attempt only
inside ``PostgresWorkerLeaseRepository.start_run`` (the start sequence: taking work is fenced by the worker
session, in the same transaction). Tests of races on a queued Run, of orphans and of lock waits seed
a ``claimed`` Attempt here, with the row ``start_run`` would write and the ``run.attempt_created``
event earlier versions appended.
"""

from __future__ import annotations

from typing import Any

from edge_runtime.contract.runs import AttemptRecord, RunStatus


def take_queued_run(runs: Any, run_id: str, *, actor_id: str) -> AttemptRecord | None:
    """Move a queued, runtime-owned Run without a cancel request to ``dispatching`` and give it its
    next Attempt as ``claimed``, unfenced, through ``runs`` (a ``PostgresRunRepository``: its
    connection, transaction and error mapping); None when the Run is not such a Run."""
    from cluster_postgres import runs as pg_runs
    from cluster_postgres.run_rows import run_from_row

    pg_runs._check_run_id(run_id)
    with runs._tx():
        cur = runs._cur
        row = cur.execute(pg_runs._LOCK_RUN, (run_id,)).fetchone()
        if row is None:
            return None
        run = run_from_row(row)
        if (run.status is not RunStatus.QUEUED or run.cancel_requested_at_ms is not pg_runs._UNSET
                or run.execution_owner != "runtime"):
            return None
        now = pg_runs.database_now(cur)
        cur.execute("UPDATE ql3.runs SET status = %s WHERE id = %s", (RunStatus.DISPATCHING.value, run_id))
        attempt_id = pg_runs._new_id()
        number = pg_runs.insert_attempt(cur, run_id, attempt_id, now=now)
        pg_runs._event(cur, [run.version, run.event_sequence], run_id, "run.attempt_created",
                       f"attempt-created:{attempt_id}", actor_id, {"attempt": number}, now, attempt_id=attempt_id)
        return runs._attempt_row(attempt_id)
