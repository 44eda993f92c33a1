"""A Run's own options on every store (docs/runs.md, docs/environment.md): its variables and
working directory are kept with it, and its retries put it in ``retry_wait`` after a failed or
lost Attempt, then back in the queue once the delay (doubling, capped) is over; never after a
cancel (a timeout is one)."""

from __future__ import annotations

from typing import Any

import pytest

from edge_runtime.contract.runs import (
    MAX_RETRY_DELAY_MS,
    AttemptStatus,
    CancelRunCommand,
    InvalidRunCommandError,
    ProcessIdentity,
    RunStatus,
    SubmitRunCommand,
    retry_wait_ms,
)

IDENTITY = ProcessIdentity(pid=4242, pgid=4242, start_ticks=777, boot_id="boot-a")


@pytest.fixture
def runs(backend: Any) -> Any:
    return backend.runs


def _start(backend: Any, runs: Any, run_id: str) -> str:
    attempt = backend.take_queued_run(run_id, actor_id="w1")
    backend.set_attempt_status(attempt.id, "starting")
    runs.record_running(attempt.id, IDENTITY, log_path="/tmp/a.log", actor_id="w1")
    return attempt.id


def test_a_runs_own_variables_and_directory_are_kept_with_it(runs) -> None:
    run = runs.submit(SubmitRunCommand(argv=["env"], env={"A": "1", "B_2": "x y"}, cwd="/srv/tasks"))
    again = runs.get(run.id)
    assert (again.env, again.cwd) == ({"A": "1", "B_2": "x y"}, "/srv/tasks")


@pytest.mark.parametrize("env, cwd, problem", [
    ({"1A": "x"}, "/", "variable name"),
    ({"EDGE_RUNTIME_RUN_ID": "x"}, "/", "set by the service"),
    ({"A": "a\x00b"}, "/", "NUL"),
    ({"A": "x"}, "relative/dir", "absolute path"),
])
def test_invalid_variables_or_directory_are_refused_before_anything_is_stored(runs, env, cwd, problem) -> None:
    with pytest.raises(InvalidRunCommandError, match=problem):
        runs.submit(SubmitRunCommand(argv=["true"], env=env, cwd=cwd))
    assert runs.list_runs(limit=10) == []


def test_a_failed_attempt_with_retries_left_waits_then_is_queued_for_the_next_attempt(backend, runs) -> None:
    run = runs.submit(SubmitRunCommand(argv=["false"], retries=2, retry_delay_ms=2_000))
    first = _start(backend, runs, run.id)
    runs.finish_attempt(first, AttemptStatus.FAILED, actor_id="w1", exit_code=1)
    waiting = runs.get(run.id)
    assert waiting.status is RunStatus.RETRY_WAIT
    assert waiting.retry_at_ms == backend.now() + 2_000
    assert runs.next_due_at_ms() == waiting.retry_at_ms
    assert runs.release_due_retries(actor_id="w1") == 0  # not yet
    assert runs.queued_run_ids(10) == []
    backend.advance(2_000)
    assert runs.release_due_retries(actor_id="w1") == 1
    assert runs.get(run.id).status is RunStatus.QUEUED
    second = _start(backend, runs, run.id)
    runs.finish_attempt(second, AttemptStatus.LOST, actor_id="w1", reason="worker gone")
    assert runs.get(run.id).retry_at_ms == backend.now() + 4_000  # doubled
    backend.advance(4_000)
    runs.release_due_retries(actor_id="w1")
    third = _start(backend, runs, run.id)
    runs.finish_attempt(third, AttemptStatus.FAILED, actor_id="w1", exit_code=2)
    done = runs.detail(run.id)
    # Retries spent: the Run's status is its last Attempt's; every Attempt is listed.
    assert done.status is RunStatus.FAILED
    assert [(a.attempt, a.status) for a in done.attempts] == [
        (1, AttemptStatus.FAILED), (2, AttemptStatus.LOST), (3, AttemptStatus.FAILED)]
    types = [e.type for e in runs.events(run.id)]
    assert types.count("run.retry_scheduled") == 2 and types.count("run.retry_queued") == 2
    assert types[-1] == "run.failed"


def test_a_retry_that_succeeds_ends_the_run_succeeded(backend, runs) -> None:
    run = runs.submit(SubmitRunCommand(argv=["flaky"], retries=3, retry_delay_ms=1_000))
    runs.finish_attempt(_start(backend, runs, run.id), AttemptStatus.FAILED, actor_id="w1", exit_code=1)
    backend.advance(1_000)
    runs.release_due_retries(actor_id="w1")
    runs.finish_attempt(_start(backend, runs, run.id), AttemptStatus.SUCCEEDED, actor_id="w1", exit_code=0)
    assert runs.get(run.id).status is RunStatus.SUCCEEDED


def test_no_retry_after_a_cancel_or_a_timeout(backend, runs) -> None:
    for reason in ("user", "timeout"):
        run = runs.submit(SubmitRunCommand(argv=["sleep", "9"], retries=3, retry_delay_ms=1_000))
        attempt = _start(backend, runs, run.id)
        runs.request_cancel(CancelRunCommand(run_id=run.id, reason=reason))
        # The cancelled process often exits non-zero, or is found lost: still no retry.
        runs.finish_attempt(attempt, AttemptStatus.LOST, actor_id="w1", reason="killed")
        assert runs.get(run.id).status is RunStatus.CANCELLED


def test_a_run_waiting_for_its_retry_is_cancelled_at_once(backend, runs) -> None:
    run = runs.submit(SubmitRunCommand(argv=["false"], retries=1, retry_delay_ms=60_000))
    runs.finish_attempt(_start(backend, runs, run.id), AttemptStatus.FAILED, actor_id="w1", exit_code=1)
    assert runs.request_cancel(CancelRunCommand(run_id=run.id)).status is RunStatus.CANCELLED
    backend.advance(60_000)
    assert runs.release_due_retries(actor_id="w1") == 0


def test_a_run_without_retries_fails_with_its_first_failed_attempt(backend, runs) -> None:
    run = runs.submit(SubmitRunCommand(argv=["false"]))
    runs.finish_attempt(_start(backend, runs, run.id), AttemptStatus.FAILED, actor_id="w1", exit_code=1)
    assert runs.get(run.id).status is RunStatus.FAILED


def test_the_retry_delay_doubles_and_is_capped() -> None:
    assert [retry_wait_ms(4, 1_000, n) for n in (1, 2, 3, 4, 5)] == [1_000, 2_000, 4_000, 8_000, None]
    assert retry_wait_ms(100, 1_000_000, 90) == MAX_RETRY_DELAY_MS
    assert retry_wait_ms(None, None, 1) is None and retry_wait_ms(0, 1_000, 1) is None


def test_a_task_command_is_kept_as_written_and_one_that_asks_for_nothing_runnable_is_refused(backend, runs) -> None:
    from edge_runtime.contract.schedules import AddScheduleCommand, InvalidScheduleCommandError

    for argv in (["task", "jd/jd_bean.js", "conc", "JD_COOKIE", "1-3"], ["task jd_bean.js now"]):
        assert runs.get(runs.submit(SubmitRunCommand(argv=argv)).id).command == argv
    for argv in (["task"], ["task", "x.rb"], ["task", "x.js", "desi"], ["task x.js; reboot"]):
        with pytest.raises(InvalidRunCommandError, match="task"):
            runs.submit(SubmitRunCommand(argv=argv))
        with pytest.raises(InvalidScheduleCommandError, match="task"):
            backend.schedules.add(AddScheduleCommand(expression="@daily", argv=argv))
    assert len(runs.list_runs(limit=10)) == 2 and backend.schedules.list() == []
    schedule = backend.schedules.add(AddScheduleCommand(expression="@daily", argv=["task", "x.py", "desi", "CK", "2"]))
    assert backend.schedules.get(schedule.id).command == ["task", "x.py", "desi", "CK", "2"]
