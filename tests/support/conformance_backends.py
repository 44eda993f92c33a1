"""The two backends of the conformance suite, with one set-up API (cluster-profile.md §7).

Test bodies arrange state only through these methods (never raw SQL), read time with ``now()``
and move it with ``advance(ms)``: the injected ManualClock on Local; on PostgreSQL a test-only
``ql3.now_ms()`` installed only in the private test database (:mod:`pg_test_database`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from edge_runtime.contract.run_events import RunEvent

START_MS = 1_700_000_000_000
CREATED_AT_MS = 1_600_000_000_000
#: The zone a schedule added without one gets (the device's on Local, the CLI host's on PostgreSQL).
HOST_ZONE = "CST-8"
TABLES = ("runs", "run_attempts", "run_events", "worker_sessions", "run_dispatch_leases", "run_cancellation_dispatches")
PROJECTION = ("lease_worker_id, lease_session_id, lease_session_generation, lease_generation, lease_version, "
              "lease_token_digest, lease_offer_id, lease_expires_at_ms")
_EVENT_COLUMNS = "id, run_id, sequence, type, dedupe_key, actor_type, actor_id, attempt_id, payload, created_at_ms"
_decode_payload = msgspec.json.Decoder(dict[str, Any]).decode


def _event(row: tuple[Any, ...]) -> RunEvent:
    payload = row[8] if isinstance(row[8], dict) else _decode_payload(row[8])
    return RunEvent(id=row[0], run_id=row[1], sequence=row[2], type=row[3], dedupe_key=row[4], actor_type=row[5],
                    actor_id=row[6], attempt_id=msgspec.UNSET if row[7] is None else row[7], payload=payload,
                    created_at_ms=row[9])


class _SetUp:
    """The set-up API; subclasses provide ``_exec(sql, params)`` and ``_rows(sql, params)``.

    SQL here is written once for both engines: ``?`` placeholders (translated for psycopg) and
    the unqualified table names (``ql3`` is on the PostgreSQL search path).
    """

    name: str
    dispatch: Any
    leases: Any
    #: The run store (``RunStore`` and the CLI's operations).
    runs: Any
    #: The env entries (``EnvironmentStore``).
    environment: Any
    #: The schedule store (``ScheduleAdmin`` and the service's ``ScheduleStore``).
    schedules: Any

    def _exec(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        raise NotImplementedError

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    # ----------------------------------------------------------------- arrange

    #: An entry's empty labels, as each engine keeps them (JSON text on Local, text[] on PostgreSQL).
    EMPTY_LABELS = "'[]'"

    def store_entry_as_is(self, name: str, value: str, *, secret: bool = False, enabled: bool = True) -> None:
        """An entry another writer stored, past the rules a store applies: a secret as an earlier
        release (no minimum length) may have stored it, or entries whose join is beyond the limit."""
        self._exec("INSERT INTO env_entries (name, value, secret, remarks, enabled, position, pinned, labels, "
                   f"created_at_ms, updated_at_ms) SELECT ?, ?, ?, '', ?, coalesce(max(position), 0) + 1, ?, "
                   f"{self.EMPTY_LABELS}, ?, ? FROM env_entries", (name, value, secret, enabled, False, self.now(),
                                                                  self.now()))

    def create_run(self, run_id: str, *, status: str = "running", execution_owner: str = "runtime",
                   cancel_requested_at_ms: int | None = None) -> None:
        self._exec("INSERT INTO runs (id, execution_owner, status, version, event_sequence, cancel_requested_at_ms, "
                   "created_at_ms) VALUES (?, ?, ?, 0, 0, ?, ?)",
                   (run_id, execution_owner, status, cancel_requested_at_ms, CREATED_AT_MS))

    def create_attempt(self, attempt_id: str, run_id: str, *, attempt: int = 1, status: str = "running") -> None:
        self._exec("INSERT INTO run_attempts (id, run_id, attempt, status, executor_type, created_at_ms) "
                   "VALUES (?, ?, ?, ?, 'local_process', ?)", (attempt_id, run_id, attempt, status, CREATED_AT_MS))

    def take_queued_run(self, run_id: str, *, actor_id: str) -> Any:
        """A queued Run's next Attempt as ``claimed``, unfenced: what the separate steps of an
        earlier version left (the runtime creates Attempts only in the fenced ``start_run``).
        The AttemptRecord, or None when the Run is not startable."""
        raise NotImplementedError

    def request_cancel(self, run_id: str, at_ms: int) -> None:
        self._exec("UPDATE runs SET cancel_requested_at_ms = ? WHERE id = ?", (at_ms, run_id))

    def set_run_status(self, run_id: str, status: str) -> None:
        self._exec("UPDATE runs SET status = ? WHERE id = ?", (status, run_id))

    def set_attempt_status(self, attempt_id: str, status: str) -> None:
        self._exec("UPDATE run_attempts SET status = ? WHERE id = ?", (status, attempt_id))

    def tamper_projection_version(self, attempt_id: str, version: int) -> None:
        """What a foreign writer might do: move the Attempt's projection away from its lease."""
        self._exec("UPDATE run_attempts SET lease_version = ? WHERE id = ?", (version, attempt_id))

    def append_foreign_event(self, run_id: str, dedupe_key: str) -> None:
        """An event another writer appended without moving the Run's version (a duplicate key)."""
        self._exec("INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, payload, "
                   "created_at_ms) VALUES ('evt-foreign', ?, 1, 't', ?, 'tool', 'x', '{}', 0)", (run_id, dedupe_key))

    def store_foreign_schedule(self, schedule_id: str, expression: str, time_zone: str, next_fire_at_ms: int) -> None:
        """A schedule row another program (or another version) wrote, its text taken as it is: an
        expression or zone this version may not read, or that never fires."""
        self._exec("INSERT INTO schedules (id, expression, command, overlap, next_fire_at_ms, created_at_ms, "
                   "updated_at_ms, time_zone) VALUES (?, ?, '[\"true\"]', 'skip', ?, ?, ?, ?)",
                   (schedule_id, expression, next_fire_at_ms, CREATED_AT_MS, CREATED_AT_MS, time_zone))

    # ----------------------------------------------------------------- observe

    def run_version(self, run_id: str) -> tuple[int, int]:
        return tuple(self._rows("SELECT version, event_sequence FROM runs WHERE id = ?", (run_id,))[0])  # type: ignore[return-value]

    def events(self, run_id: str) -> list[RunEvent]:
        return [_event(r) for r in self._rows(f"SELECT {_EVENT_COLUMNS} FROM run_events WHERE run_id = ? "
                                              "ORDER BY sequence", (run_id,))]

    def count(self, table: str) -> int:
        assert table in TABLES
        return self._rows(f"SELECT count(*) FROM {table}")[0][0]

    def projection(self, attempt_id: str) -> tuple[Any, ...]:
        return tuple(self._rows(f"SELECT {PROJECTION} FROM run_attempts WHERE id = ?", (attempt_id,))[0])

    def attempt_status(self, attempt_id: str) -> str:
        return self._rows("SELECT status FROM run_attempts WHERE id = ?", (attempt_id,))[0][0]

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table of the contract, for "nothing changed" assertions."""
        return {t: [tuple(r) for r in self._rows(f"SELECT * FROM {t} ORDER BY 1")] for t in TABLES}


class LocalBackend(_SetUp):
    """The apsw adapter on a fresh file, with an injected ManualClock."""

    name = "local"

    def __init__(self, path: Path) -> None:
        from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
        from edge_runtime.local.clock import ManualClock
        from edge_runtime.local.database import open_database
        from edge_runtime.local.environment import LocalEnvironmentRepository
        from edge_runtime.local.runs import LocalRunRepository
        from edge_runtime.local.schedules import LocalScheduleRepository
        from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository

        self.clock = ManualClock(START_MS)
        self.db = open_database(path, clock=self.clock)
        self.dispatch = LocalCancellationDispatchRepository(self.db)
        self.leases = LocalWorkerLeaseRepository(self.db)
        self.runs = LocalRunRepository(self.db)
        self.environment = LocalEnvironmentRepository(self.db)
        self.schedules = LocalScheduleRepository(self.db, device_zone=HOST_ZONE, boot_id="boot-conformance")

    def now(self) -> int:
        return self.clock.now_ms()

    def take_queued_run(self, run_id: str, *, actor_id: str) -> Any:
        from tests.support.unfenced_attempts import take_queued_run

        return take_queued_run(self.db, run_id, actor_id=actor_id)

    def advance(self, ms: int) -> int:
        return self.clock.advance(ms)

    def _exec(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self.db.connection.execute(sql, params)

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self.db.connection.execute(sql, params).fetchall()

    def close(self) -> None:
        self.db.close()


class PostgresBackend(_SetUp):
    """The PostgreSQL adapter: repositories on a ``ql3_runtime`` connection; set-up as the owner."""

    name = "postgres"
    EMPTY_LABELS = "'{}'"

    def __init__(self, database: Any) -> None:
        from cluster_postgres.cancellation_dispatch import PostgresCancellationDispatchRepository
        from cluster_postgres.connection import connect
        from cluster_postgres.environment import PostgresEnvironment
        from cluster_postgres.runs import PostgresRunRepository
        from cluster_postgres.schedules import PostgresScheduleRepository
        from cluster_postgres.worker_lease import PostgresWorkerLeaseRepository

        self.database = database
        self.owner = database.owner_connection()
        self.owner.execute("SET search_path = ql3")
        database.reset(self.owner, START_MS)
        self.conn = connect(database.runtime_dsn)
        self.dispatch = PostgresCancellationDispatchRepository(self.conn)
        self.leases = PostgresWorkerLeaseRepository(self.conn)
        self.runs = PostgresRunRepository(self.conn)
        self.environment = PostgresEnvironment(self.conn)
        self.schedules = PostgresScheduleRepository(self.conn, self.runs, host_zone=lambda: HOST_ZONE)

    def now(self) -> int:
        return self.owner.execute("SELECT ql3.now_ms()").fetchone()[0]

    def take_queued_run(self, run_id: str, *, actor_id: str) -> Any:
        from tests.support.pg_unfenced_attempts import take_queued_run

        return take_queued_run(self.runs, run_id, actor_id=actor_id)

    def advance(self, ms: int) -> int:
        return self.owner.execute("UPDATE ql3_test.clock SET now_ms = now_ms + %s RETURNING now_ms", (ms,)).fetchone()[0]

    def _exec(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self.owner.execute(sql.replace("?", "%s"), params)

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self.owner.execute(sql.replace("?", "%s"), params).fetchall()

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        return {t: [r[0] for r in self._rows(f"SELECT row_to_json(x)::text FROM {t} x ORDER BY 1")] for t in TABLES}

    def close(self) -> None:
        self.conn.close()
        self.owner.close()
