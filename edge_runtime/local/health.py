"""Read-only health checks of an open database: integrity, migrations, pragmas, stored invariants."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import msgspec

from edge_runtime.contract.cancellation_dispatch import RepositoryError
from edge_runtime.contract.worker_lease import WorkerLeaseRepositoryError
from edge_runtime.local.cancellation_dispatch import DISPATCH_COLUMNS, record_from_row
from edge_runtime.local.clock import read_now_ms
from edge_runtime.contract.environment import EnvironmentRepositoryError
from edge_runtime.contract.errors import RunEventLogMismatchError
from edge_runtime.contract.redaction import MIN_SECRET_LENGTH
from edge_runtime.contract.runs import RunStatus, run_ended_event
from edge_runtime.contract.sql_vocabulary import ACTIVE_RUN_SQL
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.environment import LocalEnvironmentRepository
from edge_runtime.local.errors import LocalStorageError
from edge_runtime.local.guarded_clock import full_observed_floor_ms, observed_floor_ms
from edge_runtime.local.retention import RetentionPolicy, log_dir_contents, plan
from edge_runtime.local.schedules import broken_schedules
from edge_runtime.local.legacy_token_scrub import describe, scrub_status
from edge_runtime.local.migrations import applied_migrations, known_migrations
from edge_runtime.local.worker_lease_rows import LEASE_COLUMNS, SESSION_COLUMNS, lease_from_row, session_from_row


class HealthCheck(msgspec.Struct, rename="camel", frozen=True):
    name: str
    ok: bool
    detail: str


class HealthReport(msgspec.Struct, rename="camel", frozen=True):
    database: str
    ok: bool
    checks: list[HealthCheck]


def _integrity(db: LocalDatabase) -> HealthCheck:
    rows = [row[0] for row in db.connection.execute("PRAGMA integrity_check").fetchall()]
    return HealthCheck("integrity", rows == ["ok"], "ok" if rows == ["ok"] else "; ".join(rows[:5]))


def _migrations(db: LocalDatabase) -> HealthCheck:
    applied = applied_migrations(db.connection)
    known = [m.id for m in known_migrations()]
    missing = [m for m in known if m not in applied]
    if missing:
        return HealthCheck("migrations", False, f"pending: {', '.join(missing)} (run `edge-runtime migrate`)")
    opt_in = sorted(applied - set(known))  # opt-in layout steps (verified at open)
    extra = f"; opt-in: {', '.join(opt_in)}" if opt_in else ""
    return HealthCheck("migrations", True, f"{len(known)} applied, latest {known[-1]}{extra}")


def _pragmas(db: LocalDatabase) -> HealthCheck:
    connection = db.connection
    mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
    sync = connection.execute("PRAGMA synchronous").fetchone()[0]
    fks = connection.execute("PRAGMA foreign_keys").fetchone()[0]
    ok = mode == "wal" and sync == 2 and fks == 1
    return HealthCheck("durability", ok, f"journal_mode={mode} synchronous={sync} (2=FULL) foreign_keys={fks}")


#: The stored records ``check`` holds to the contract: (check name, what, columns, table, projection).
_STORED_RECORDS = (
    ("dispatch_invariants", "dispatch", DISPATCH_COLUMNS, "run_cancellation_dispatches", record_from_row),
    ("session_invariants", "worker session", SESSION_COLUMNS, "worker_sessions", session_from_row),
    ("lease_invariants", "run lease", LEASE_COLUMNS, "run_dispatch_leases", lease_from_row),
)


def _invariants(db: LocalDatabase, name: str, what: str, columns: str, table: str,
                project: Callable[[tuple[Any, ...]], object]) -> HealthCheck:
    """Project every stored row through the adapter's own reader, which checks the contract."""
    broken = []
    total = 0
    for row in db.connection.execute(f"SELECT {columns} FROM {table}"):
        total += 1
        try:
            project(row)
        except (RepositoryError, WorkerLeaseRepositoryError) as exc:
            broken.append(str(exc))
    if broken:
        return HealthCheck(name, False, f"{len(broken)} of {total} broken; first: {broken[0]}")
    return HealthCheck(name, True, f"{total} {what} records satisfy the contract")


def _clock_floor(db: LocalDatabase) -> HealthCheck:
    """The floor ``serve`` restores at start reads one index per table (and the event log through
    its Runs); here every observed column of every row is read, to prove it misses nothing."""
    fast, full = observed_floor_ms(db), full_observed_floor_ms(db)
    if fast < full:
        return HealthCheck("clock_floor", False, f"the indexed clock floor {fast} is below a stored time {full}")
    return HealthCheck("clock_floor", True, f"{fast} ms, no stored time above it")


def _secrets(db: LocalDatabase) -> HealthCheck:
    """Secret entries stored before secrets had a minimum length and shorter than it: still given
    to tasks and masked whole wherever shown, but too short to mask safely (docs/environment.md)."""
    entries = LocalEnvironmentRepository(db).list()
    short = [f"{e.name} (id {e.id})" for e in entries if e.too_short is True]
    secrets = sum(e.secret for e in entries)
    if short:
        return HealthCheck("secrets", False, f"{len(short)} of {secrets} secrets shorter than {MIN_SECRET_LENGTH} "
                                             f"characters, too short to mask safely: {', '.join(short)} (give each "
                                             f"a longer value: `edge-runtime env edit ID --stdin`, or make it plain: "
                                             f"`edge-runtime env edit ID --no-secret`)")
    return HealthCheck("secrets", True, f"{secrets} secrets, each at least {MIN_SECRET_LENGTH} characters")


#: At most this many rows are named in one check's detail; the count says how many there are.
_NAMED_ROWS = 10

# Runs whose event log holds rows the Run does not count: another program appended them (the
# runtime's appends count each one), and no event can be appended to the Run until it is set aside.
_UNCOUNTED_EVENTS = """
SELECT r.id, r.event_sequence, max(e.sequence) FROM runs r JOIN run_events e ON e.run_id = r.id
GROUP BY r.id HAVING max(e.sequence) > r.event_sequence ORDER BY r.id"""
_SET_ASIDE = "SELECT run_id FROM run_events WHERE type = ? AND json_extract(payload, '$.error') = ? ORDER BY run_id"


def _named(rows: list[str]) -> str:
    return ", ".join(rows[:_NAMED_ROWS]) + (f", ... ({len(rows)} in all)" if len(rows) > _NAMED_ROWS else "")


def _run_event_logs(db: LocalDatabase) -> HealthCheck:
    """Runs whose event log another program appended to (each stalls at its next event: its start,
    its cancel), and those the service set aside for it (failed, the reason in their end)."""
    connection = db.connection
    uncounted = [f"{run_id} (counts {counted}, its log reaches {highest})"
                 for run_id, counted, highest in connection.execute(_UNCOUNTED_EVENTS)]
    set_aside = [row[0] for row in connection.execute(
        _SET_ASIDE, (run_ended_event(RunStatus.FAILED), RunEventLogMismatchError.code))]
    aside = f"; set aside (failed) for it earlier: {_named(set_aside)}" if set_aside else ""
    if uncounted:
        return HealthCheck("run_event_logs", False,
                           f"{len(uncounted)} Runs whose event log holds events another program wrote without "
                           f"counting them in the Run: {_named(uncounted)}; no event can be added to them (start, "
                           f"cancel): the service sets each aside, failed, when it takes it up{aside}")
    return HealthCheck("run_event_logs", True, f"every Run counts its event log{aside}")


def _schedules(db: LocalDatabase) -> HealthCheck:
    """Schedule rows no schedule record can be made of (another program's): the service pauses
    each with the reason when it is due; ``schedule remove ID`` removes one."""
    total, problems = broken_schedules(db.connection)
    if problems:
        return HealthCheck("schedules", False, f"{len(problems)} of {total} stored schedules cannot be read (paused "
                                               f"when due; `edge-runtime schedule remove ID`): {_named(problems)}")
    return HealthCheck("schedules", True, f"{total} schedules readable")


def _has_nul(column: str) -> str:
    return f"instr(CAST({column} AS BLOB), x'00') > 0"


def _json_has_nul(column: str) -> str:
    """A JSON column (a command's list, a variables' object) with a NUL in a key or a string."""
    return f"EXISTS (SELECT 1 FROM json_each({column}) WHERE {_has_nul('key')} OR {_has_nul('value')})"


# Values a process would be given that no process can be given (executor.refuse_unspawnable):
# what each start or fire of the row would fail on. Finished Runs are never started again.
_UNSPAWNABLE = (
    ("env entry", f"SELECT id || ' (' || replace(name, char(0), '\\0') || ')' FROM env_entries "
                  f"WHERE {_has_nul('value')} OR {_has_nul('name')} OR instr(name, '=') > 0 ORDER BY id"),
    ("Run", f"SELECT id FROM runs WHERE status IN {ACTIVE_RUN_SQL} AND ({_json_has_nul('command')} "
            f"OR (json_valid(env) AND {_json_has_nul('env')}) OR {_has_nul('cwd')}) ORDER BY id"),
    ("schedule", f"SELECT id FROM schedules WHERE json_valid(command) AND ({_json_has_nul('command')} "
                 f"OR (json_valid(env) AND {_json_has_nul('env')}) OR {_has_nul('cwd')}) ORDER BY id"),
)


def _stored_values(db: LocalDatabase) -> HealthCheck:
    """Stored values no process can be given (a NUL byte; a variable name holding ``=``), which
    only another program can store: each Attempt given one fails, saying which."""
    found = []
    for what, query in _UNSPAWNABLE:
        found += [f"{what} {row[0]}" for row in db.connection.execute(query)]
    if found:
        return HealthCheck("stored_values", False, f"{len(found)} rows hold a value no process can be given (a NUL "
                                                   f"byte, or a variable name with '='), stored by another program; "
                                                   f"every Attempt given it fails: {_named(found)}")
    return HealthCheck("stored_values", True, "no stored command, directory or variable holds a NUL byte")


def _legacy_tokens(db: LocalDatabase) -> HealthCheck:
    ok, detail = describe(scrub_status(db.connection, db.path))
    return HealthCheck("legacy_tokens", ok, detail)


def _storage(db: LocalDatabase) -> HealthCheck:
    """Sizes of the file, its WAL and free pages, and whether free pages are returned."""
    c = db.connection
    page, pages, free = (c.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_size", "page_count", "freelist_count"))
    vacuum = c.execute("PRAGMA auto_vacuum").fetchone()[0]
    try:
        wal = os.stat(f"{db.path}-wal").st_size
    except FileNotFoundError:
        wal = 0
    mode = {0: "NONE (run `edge-runtime migrate` or `serve` to convert)", 1: "FULL", 2: "INCREMENTAL"}.get(vacuum, vacuum)
    return HealthCheck("storage", True, f"database {page * pages:,} bytes ({free * page:,} free), WAL {wal:,} bytes, "
                                        f"auto_vacuum={mode}")


def _retention(db: LocalDatabase, policy: RetentionPolicy, log_dir: Path | None) -> HealthCheck:
    """What retention removes next, and the logs' total against their cap (reads only)."""
    due = plan(db, policy, read_now_ms(db.clock))
    contents = log_dir_contents(log_dir) if log_dir is not None else None
    log_text = ""
    if contents is not None:
        logs, others = contents
        log_text = f"; logs {logs:,} of {policy.log_total_max_bytes:,} bytes in {log_dir}"
        if others:
            shown = ", ".join((name if name.isprintable() else repr(name)) for name in others[:5]) + (", ..." if len(others) > 5 else "")
            log_text += (f"; {len(others)} other entries there are not Attempt logs, never counted or removed "
                         f"(another program's files? give serve its own log_dir): {shown}")
    return HealthCheck("retention", True, f"{due.finished_runs} finished runs kept (retain_runs={policy.retain_runs}, "
                                          f"retain_days={policy.retain_days}); next to remove: {due.runs_to_remove}{log_text}")


def _guarded(name: str, check: Callable[..., HealthCheck], *args: Any) -> HealthCheck:
    """One check; a damaged page it meets (or any other database error) fails that check with
    what SQLite said, and the report goes on with the others."""
    try:
        return check(*args)
    except (apsw.Error, LocalStorageError, EnvironmentRepositoryError) as exc:
        return HealthCheck(name, False, f"could not be read: {exc}")


def check_health(
    db: LocalDatabase, policy: RetentionPolicy | None = None, log_dir: Path | None = None,
    *, config_problem: str | None = None,
) -> HealthReport:
    """``policy`` (and ``log_dir``): report what retention removes next; ``config_problem``: the
    service configuration could not be read, reported as a failed check."""
    checks = [_guarded("integrity", _integrity, db), _guarded("migrations", _migrations, db),
              _guarded("durability", _pragmas, db), _guarded("storage", _storage, db)]
    if config_problem is not None:
        checks.append(HealthCheck("retention", False, f"not checked: {config_problem}"))
    elif policy is not None and not db.pending:
        checks.append(_guarded("retention", _retention, db, policy, log_dir))
    for name, *stored in _STORED_RECORDS:
        if db.pending:  # the stored records may predate the columns the contract reads
            checks.append(HealthCheck(name, False, "not checked: migrations pending"))
        else:
            checks.append(_guarded(name, _invariants, db, name, *stored))
    checks.append(_guarded("clock_floor", _clock_floor, db))
    for name, check in (("run_event_logs", _run_event_logs), ("schedules", _schedules),
                        ("stored_values", _stored_values)):
        # The columns they read may be newer than a database with pending migrations.
        checks.append(HealthCheck(name, False, "not checked: migrations pending") if db.pending
                      else _guarded(name, check, db))
    checks.append(HealthCheck("secrets", False, "not checked: migrations pending") if db.pending
                  else _guarded("secrets", _secrets, db))
    checks.append(_guarded("legacy_tokens", _legacy_tokens, db))
    return HealthReport(database=db.path, ok=all(c.ok for c in checks), checks=checks)
