"""A schedule as QingLong's cron object, without a store: the command text and its argv both ways,
the fields read from the schedule's Runs (status, pid, log_path, the two times), search, paging,
the log names and the dates QingLong writes."""

from __future__ import annotations

import pytest

from edge_runtime.contract.runs import AttemptRecord, AttemptStatus, RunRecord, RunStatus
from edge_runtime.contract.schedules import Overlap, ScheduleRecord
from edge_runtime.qinglong import crons, logs

T0 = 1_784_333_700_000  # 2026-07-18 00:15:00 UTC


def _schedule(**fields) -> ScheduleRecord:
    values = {"id": "s1", "number": 12, "expression": "15 8 * * *", "command": ["task jd_bean.js"], "overlap": Overlap.SKIP,
              "paused": False, "next_fire_at_ms": T0 + 86_400_000, "fired_count": 0, "skipped_count": 0,
              "coalesced_count": 0, "created_at_ms": T0 - 1000, "updated_at_ms": T0 - 1000, **fields}
    return ScheduleRecord(**values)


def _run(run_id: str, status: RunStatus, created: int) -> RunRecord:
    return RunRecord(id=run_id, execution_owner="runtime", status=status, version=1, event_sequence=1,
                     created_at_ms=created, schedule_id="s1")


def _attempt(run_id: str, status: AttemptStatus, started: int | None, finished: int | None = None,
             pid: int | None = None) -> AttemptRecord:
    fields = {"id": f"a-{run_id}", "run_id": run_id, "attempt": 1, "status": status, "executor_type": "local_process",
              "created_at_ms": started or T0}
    if started is not None:
        fields |= {"started_at_ms": started, "log_path": f"/logs/a-{run_id}.log"}
    if finished is not None:
        fields["finished_at_ms"] = finished
    if pid is not None:
        fields["pid"] = pid
    return AttemptRecord(**fields)


@pytest.mark.parametrize(("text", "argv"), [
    ("task jd_bean.js", ["task", "jd_bean.js"]),  # words, as import and subscriptions make it
    ("task owner_repo/dir/x.py desi JD_COOKIE 1 3", ["task", "owner_repo/dir/x.py", "desi", "JD_COOKIE", "1", "3"]),
    ("task 'my dir/x.js'", ["task", "my dir/x.js"]),
    ("task x.js && rm -rf /", ["task x.js && rm -rf /"]),  # kept whole: the task runner refuses shell syntax
    ("task \"my dir/x.js\"", ["task \"my dir/x.js\""]),  # words that would read back otherwise: kept whole
    ("task 'x.js", ["task 'x.js"]),
    ("echo hi; sleep 1", ["sh", "-c", "echo hi; sleep 1"]),  # any other command, in a shell as QingLong
    ("python3 /ql/x.py", ["sh", "-c", "python3 /ql/x.py"]),
    ("  task x.js  ", ["task", "x.js"]),
])
def test_a_command_text_and_its_argv_round_trip(text, argv) -> None:
    assert crons.command_argv(text) == argv
    assert crons.command_text(argv) == text.strip()


def test_an_argv_the_cli_wrote_reads_as_a_shell_line() -> None:
    assert crons.command_text(["echo", "a b", "c'd"]) == "echo 'a b' 'c'\"'\"'d'"
    with pytest.raises(crons.OpenRequestError):
        crons.command_argv("   ")


def test_a_cron_that_never_ran_is_idle_with_empty_fields() -> None:
    record = _schedule()
    state = crons.cron_state(record, [], lambda run_id: [], lambda ms: 0)
    assert state == crons.CronState(crons.IDLE, None, "", 0, 0)
    cron = crons.cron_object(record, state, 8 * 3600)
    assert (cron["id"], cron["command"], cron["isDisabled"], cron["log_name"], cron["labels"]) == (
        12, "task jd_bean.js", 0, "jd_bean_12", [])
    assert cron["timestamp"] == "Sat Jul 18 2026 08:14:59 GMT+0800"
    assert cron["createdAt"] == "2026-07-18T00:14:59.000Z"
    paused_state = crons.cron_state(_schedule(paused=True), [], lambda run_id: [], lambda ms: 0)
    paused = crons.cron_object(_schedule(paused=True), paused_state, 0)
    assert (paused["isDisabled"], paused["status"]) == (1, crons.DISABLED) == (1, 2)


def test_status_pid_log_path_and_times_come_from_the_runs() -> None:
    record = _schedule()
    finished = _run("r-old-0000aaaa", RunStatus.SUCCEEDED, T0)
    running = _run("r-new-0000bbbb", RunStatus.RUNNING, T0 + 60_000)
    attempts = {finished.id: [_attempt(finished.id, AttemptStatus.SUCCEEDED, T0 + 100, T0 + 37_050)],
                running.id: [_attempt(running.id, AttemptStatus.RUNNING, T0 + 60_200, pid=4321)]}
    state = crons.cron_state(record, [running, finished], attempts.__getitem__, lambda ms: 8 * 3600)
    assert state.status == crons.RUNNING and state.pid == 4321
    assert state.log_path == "jd_bean_12/2026-07-18-08-16-00-000_0000bbbb.log"
    assert state.last_execution_time == (T0 + 60_200) // 1000
    assert state.last_running_time == 37  # 36.95 s, whole seconds up
    queued = _run("r-q-0000cccc", RunStatus.QUEUED, T0 + 120_000)
    attempts[queued.id] = []
    state = crons.cron_state(record, [queued, finished], attempts.__getitem__, lambda ms: 0)
    assert (state.status, state.pid, state.last_running_time) == (crons.QUEUED, None, 37)
    assert state.log_path.endswith("_0000aaaa.log")
    quick = _run("r-quick-0000dddd", RunStatus.FAILED, T0)
    attempts[quick.id] = [_attempt(quick.id, AttemptStatus.FAILED, T0 + 10, T0 + 20)]
    assert crons.cron_state(record, [quick], attempts.__getitem__, lambda ms: 0).last_running_time == 1  # at least 1
    waiting = crons.cron_state(_schedule(waiting_fire_at_ms=T0), [finished], attempts.__getitem__, lambda ms: 0)
    assert waiting.status == crons.QUEUED


def test_search_and_paging_as_qinglong() -> None:
    record = _schedule(name="京豆变动", labels=["jd", "daily"])
    for text in ("京豆", "JD_BEAN", "8 * *", "daily", "name:京豆", "command:jd_bean", "schedule:15 8", "label:dail"):
        assert crons.matches(record, text), text
    for text in ("name:jd_bean", "label:京豆", "command:15 8", "nothing"):
        assert not crons.matches(record, text), text
    items = list(range(10))
    assert crons.page_of(items, {}) == items and crons.page_of(items, {"page": "2"}) == items
    assert crons.page_of(items, {"page": "2", "size": "4"}) == [4, 5, 6, 7]
    assert crons.page_of(items, {"page": "4", "size": "4"}) == []
    for bad in ({"page": "0", "size": "4"}, {"page": "x", "size": "4"}, {"page": "1", "size": "-1"}):
        with pytest.raises(crons.OpenRequestError):
            crons.page_of(items, bad)


def test_ids_as_qinglong_takes_them() -> None:
    assert crons.parse_ids(b'[1, "2", 2]') == [1, 2]
    assert crons.parse_id("12") == 12
    for bad in (b"[]", b"[0]", b"[-1]", b"[true]", b"[1.0]", b'["x"]', b"{}", b"1", b"[9007199254740992]"):
        with pytest.raises(crons.OpenRequestError):
            crons.parse_ids(bad)
    with pytest.raises(crons.OpenRequestError):
        crons.parse_ids(b"[" + b",".join(b"1" for _ in range(crons.MAX_IDS + 1)) + b"]")


@pytest.mark.parametrize(("argv", "slug"), [
    (["task jd_bean.js"], "jd_bean"), (["task owner_repo/dir/x.js"], "dir_x"), (["task", "a/b.py"], "a_b"),
    (["task ../../etc/passwd"], "etc_passwd"), (["task 京东.js"], "cron"), (["sh", "-c", "echo"], "cron"),
    (["task .hidden"], "hidden"), (["task"], "cron"),
])
def test_log_directory_names_are_safe_and_name_the_schedule(argv, slug) -> None:
    assert logs.script_slug(argv) == slug
    name = logs.directory_name(_schedule(command=argv))
    assert name == f"{slug}_12" and logs.number_of_directory(name) == 12
    for bad in ("", "x", "jd_bean_0", "jd_bean_-1", "../1", "a/b_1"):
        assert logs.number_of_directory(bad) is None, bad


def test_log_file_names_and_ansi() -> None:
    run = _run("01a2383d-742d-744c-b1fd-ffc97f53c2cb", RunStatus.SUCCEEDED, T0 + 123)
    name = logs.file_name(run, 8 * 3600)
    assert name == "2026-07-18-08-15-00-123_7f53c2cb.log" and logs.short_id_of_file(name) == "7f53c2cb"
    assert logs.short_id_of_file("../x.log") is None
    assert logs.remove_ansi("\x1b[31mred\x1b[0m plain") == "red plain"
