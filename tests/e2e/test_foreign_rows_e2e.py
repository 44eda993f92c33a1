"""Rows another program wrote into the database, against a real ``serve``: one broken row is set
aside with its reason, every other Run starts and every other schedule fires, and ``check`` names it.

"Another program" writes with apsw directly (never stdlib ``sqlite3`` in this process: two SQLite
libraries in one process would share no locks), as any script may, without the runtime's rules:
an event appended without counting it in its Run's ``event_sequence``, a schedule whose stored
command is no list of strings, a NUL byte in a shared variable or a Run's stored command.
"""

from __future__ import annotations

import time
from typing import Any

import apsw
import pytest

from edge_runtime.local.database import open_database
from tests.support.service_harness import Harness, decode_json, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _database(harness: Harness) -> None:
    harness.cli("migrate")


def _foreign_write(harness: Harness, sql: str, params: tuple[Any, ...] = ()) -> None:
    connection = apsw.Connection(str(harness.db_path))
    try:
        connection.execute(sql, params)
    finally:
        connection.close()


def _check(harness: Harness) -> tuple[int, dict[str, dict]]:
    result = harness.cli("check", "--json", check=False)
    report = decode_json(result.stdout)
    return result.returncode, {item["name"]: item for item in report["checks"]}


def _end_reason(harness: Harness, run_id: str) -> str:
    return harness.detail(run_id).attempts[-1].end_reason


def _run_ended_payload(harness: Harness, run_id: str) -> dict:
    [ended] = [event for event in harness.events(run_id) if event.type == "run.failed"]
    return ended.payload


# ------------------------------------------------------------------ an event the Run did not count

def _append_uncounted_event(harness: Harness, run_id: str) -> None:
    """What a script with the stdlib ``sqlite3`` might do: the next sequence, without bumping the Run's."""
    _foreign_write(
        harness,
        "INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, payload, created_at_ms) "
        "SELECT lower(hex(randomblob(16))), ?1, event_sequence + 1, 'note', 'a-note', 'script', 'notes.py', '{}', created_at_ms "
        "FROM runs WHERE id = ?1", (run_id,))


def test_a_run_whose_event_log_another_program_appended_to_fails_alone_and_the_others_start(harness: Harness) -> None:
    broken, *others = harness.submit_many([["true"], ["true"], ["true"]])  # the broken one is the oldest
    _append_uncounted_event(harness, broken)
    code, checks = _check(harness)
    assert code == 1 and not checks["run_event_logs"]["ok"]
    assert broken in checks["run_event_logs"]["detail"] and "another program" in checks["run_event_logs"]["detail"]
    service = harness.serve()
    for run_id in others:
        harness.wait_status(run_id, "succeeded")
    harness.wait_status(broken, "failed")
    ended = _run_ended_payload(harness, broken)
    assert ended["error"] == "RUN_EVENT_LOG_MISMATCH" and ended["reason"].endswith("[RUN_EVENT_LOG_MISMATCH]")
    assert "another program" in ended["reason"] and harness.detail(broken).attempts == []  # nothing ever ran
    types = harness.event_types(broken)
    assert types.count("note") == 1  # the foreign row stays: the log is append-only
    # Later Runs start as well: nothing is stuck behind it.
    later = harness.submit("true")
    harness.wait_status(later, "succeeded")
    assert service.process.poll() is None and "service.tick_failed" not in service.log()
    assert f"run.set_aside run={broken}" in service.log()
    # Ended, with its log counted again: ready, and the Run still named as set aside for it.
    code, checks = _check(harness)
    assert code == 0 and checks["run_event_logs"]["ok"], checks
    assert f"set aside (failed) for it earlier: {broken}" in checks["run_event_logs"]["detail"]


def test_a_run_waiting_for_its_retry_with_an_uncounted_event_fails_alone(harness: Harness) -> None:
    service = harness.serve()
    waiting = harness.cli("submit", "--retries", "1", "--retry-delay", "2s", "--", "false").stdout.strip()
    harness.wait_status(waiting, "retry_wait")
    _append_uncounted_event(harness, waiting)
    harness.wait_status(waiting, "failed")  # when its wait is over: set aside, not queued again
    assert _run_ended_payload(harness, waiting)["error"] == "RUN_EVENT_LOG_MISMATCH"
    assert len(harness.detail(waiting).attempts) == 1
    later = harness.submit("true")
    harness.wait_status(later, "succeeded")
    assert service.process.poll() is None and "service.tick_failed" not in service.log()


def test_cancelling_a_run_with_an_uncounted_event_says_why(harness: Harness) -> None:
    [broken] = harness.submit_many([["true"]])
    _append_uncounted_event(harness, broken)
    refused = harness.cli("cancel", broken, check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "[RUN_EVENT_LOG_MISMATCH]" in refused.stderr and "edge-runtime check" in refused.stderr


# ------------------------------------------------------------------ a schedule row that makes no schedule

def test_a_malformed_schedule_row_is_paused_with_its_reason_and_the_others_fire(harness: Harness) -> None:
    ticker = harness.cli("schedule", "add", "@every 1s", "--", "true").stdout.strip()
    now = time.time_ns() // 1_000_000
    # Valid JSON (the table's CHECK holds), but no list of strings: no Run can be made of it.
    _foreign_write(
        harness,
        "INSERT INTO schedules (id, expression, command, overlap, next_fire_at_ms, created_at_ms, updated_at_ms) "
        "VALUES ('hostile', '* * * * *', '{\"not\": \"argv\"}', 'skip', ?, ?, ?)", (now - 1000, now, now))
    code, checks = _check(harness)
    assert code == 1 and "hostile" in checks["schedules"]["detail"] and not checks["schedules"]["ok"]
    service = harness.serve()
    service.wait_log("schedule.paused_unfireable schedule=hostile")
    started = time.time_ns() // 1_000_000

    def fired_since() -> int:
        runs = decode_json(harness.cli("list", "--json").stdout)
        return len([r for r in runs if r.get("scheduleId") == ticker and r["status"] == "succeeded"
                    and r["createdAtMs"] > started])

    wait_for(lambda: fired_since() >= 2, "the other schedule to fire")
    assert service.process.poll() is None and "service.tick_failed" not in service.log()
    with open_database(harness.db_path, create=False) as db:
        paused, reason = db.connection.execute(
            "SELECT paused, pause_reason FROM schedules WHERE id = 'hostile'").fetchone()
    assert paused == 1 and reason.endswith("[SCHEDULE_STORED_MALFORMED]") and "malformed" in reason
    code, checks = _check(harness)
    assert code == 1 and "hostile" in checks["schedules"]["detail"]


# ------------------------------------------------------------------ a NUL byte in stored data

def test_a_nul_byte_in_a_shared_variable_fails_the_attempt_and_the_service_lives(harness: Harness) -> None:
    _foreign_write(
        harness,
        "INSERT INTO env_entries (name, value, secret, remarks, enabled, position, pinned, labels, created_at_ms, "
        "updated_at_ms) VALUES ('NOTES', 'a' || char(0) || 'b', 0, '', 1, 1, 0, '[]', 0, 0)")
    code, checks = _check(harness)
    assert code == 1 and not checks["stored_values"]["ok"] and "NOTES" in checks["stored_values"]["detail"]
    service = harness.serve()
    run_id = harness.submit("true")
    harness.wait_status(run_id, "failed")
    reason = _end_reason(harness, run_id)
    assert "NOTES" in reason and "[SPAWN_VALUE_REFUSED]" in reason
    assert service.process.poll() is None
    # Once the variable is mended, Runs start again: the service never stopped.
    harness.cli("env", "remove", "NOTES")
    again = harness.submit("true")
    harness.wait_status(again, "succeeded")
    assert service.process.poll() is None


def test_a_nul_byte_in_a_stored_command_fails_that_run_alone(harness: Harness) -> None:
    broken, task, other = harness.submit_many([["true"], ["true"], ["true"]])
    _foreign_write(harness, "UPDATE runs SET command = ? WHERE id = ?", ('["echo", "a\\u0000b"]', broken))
    _foreign_write(harness, "UPDATE runs SET command = ? WHERE id = ?", ('["task", "x\\u0000.js"]', task))
    code, checks = _check(harness)
    assert code == 1 and broken in checks["stored_values"]["detail"] and task in checks["stored_values"]["detail"]
    service = harness.serve()
    harness.wait_status(other, "succeeded")
    for run_id in (broken, task):
        harness.wait_status(run_id, "failed")
        assert "[SPAWN_VALUE_REFUSED]" in _end_reason(harness, run_id)
    later = harness.submit("true")
    harness.wait_status(later, "succeeded")
    assert service.process.poll() is None
