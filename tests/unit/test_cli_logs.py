"""``edge-runtime logs``: following a Run through its retries (a header per Attempt, exit 0 only
when the Run succeeded), ``--json`` (one object per Attempt), and a Run whose command never started
(``COMMAND_NOT_STARTED``, saying why). In-process, with real processes: the supervisor rig stands
in for the service, and each of ``--follow``'s pauses drives it one pass, so a follow sees every
step of the Run, in order, without a timing."""

from __future__ import annotations

import json
import time
import types
from pathlib import Path

import pytest

import edge_runtime.cli.logs as logs_command
from edge_runtime.cli.main import main
from edge_runtime.contract.runs import CancelRunCommand, RunStatus, SubmitRunCommand
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase
from tests.support.supervisor_rig import SupervisorRig

RETRY_DELAY_MS = 1000


@pytest.fixture(autouse=True)
def _no_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDGE_RUNTIME_CONFIG", raising=False)
    monkeypatch.delenv("EDGE_RUNTIME_LOG_DIR", raising=False)


@pytest.fixture
def rig(db: LocalDatabase, tmp_path: Path):
    made = SupervisorRig(db, tmp_path, slots=1)
    yield made
    made.close()


@pytest.fixture
def service(rig: SupervisorRig, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each pause of ``logs --follow`` is one pass of the service (a due retry released first);
    the list counts the pauses."""
    pauses: list[int] = []

    def one_pass(_seconds: float) -> None:
        pauses.append(1)
        assert len(pauses) < 2000, "liveness guard: the follow never ended"
        clock.advance(RETRY_DELAY_MS)
        rig.runs.release_due_retries(actor_id="test")
        rig.step()

    monkeypatch.setattr(logs_command, "time", types.SimpleNamespace(sleep=one_pass, monotonic=time.monotonic))
    return pauses


def _cli(capsys: pytest.CaptureFixture[str], db_path: Path, tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--db", str(db_path), *argv, "--log-dir", str(tmp_path / "logs")])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _submit(rig: SupervisorRig, script: str, *, retries: int | None = None) -> str:
    options = {} if retries is None else {"retries": retries, "retry_delay_ms": RETRY_DELAY_MS}
    return rig.runs.submit(SubmitRunCommand(argv=["sh", "-c", script], **options)).id


def _nth_try(tmp_path: Path, succeed_at: int) -> str:
    """A command that prints which try it is and fails until try ``succeed_at``."""
    count = tmp_path / "tries"
    return (f"n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo $n > {count}; echo try $n; "
            f"[ $n -ge {succeed_at} ] || exit 3")


def test_follow_prints_every_attempt_after_its_header_and_exits_0_when_the_run_succeeded(
    capsys, db_path: Path, tmp_path: Path, rig: SupervisorRig, service: list[int]
) -> None:
    run_id = _submit(rig, _nth_try(tmp_path, 3), retries=2)  # queued: the follow waits for its first Attempt
    code, out, err = _cli(capsys, db_path, tmp_path, "logs", run_id, "--follow")
    assert (code, err) == (0, "")
    assert out == ("--- attempt 1 of 3 ---\ntry 1\n--- attempt 2 of 3 ---\ntry 2\n"
                   "--- attempt 3 of 3 ---\ntry 3\n")
    assert service, "the follow never paused: it did not wait for the retries"


def test_follow_exits_1_naming_the_status_when_the_run_did_not_succeed(
    capsys, db_path: Path, tmp_path: Path, rig: SupervisorRig, service: list[int]
) -> None:
    run_id = _submit(rig, _nth_try(tmp_path, 99), retries=1)
    code, out, err = _cli(capsys, db_path, tmp_path, "logs", run_id, "-f")
    assert code == 1
    assert out == "--- attempt 1 of 2 ---\ntry 1\n--- attempt 2 of 2 ---\ntry 2\n"
    assert err == f"Error: run {run_id} ended failed (attempt 2 failed, exit code 3) [RUN_NOT_SUCCEEDED]\n"


def test_follow_of_a_run_without_retries_prints_its_output_alone(
    capsys, db_path: Path, tmp_path: Path, rig: SupervisorRig, service: list[int]
) -> None:
    run_id = _submit(rig, "echo only")
    assert _cli(capsys, db_path, tmp_path, "logs", run_id, "--follow") == (0, "only\n", "")
    failed = _submit(rig, "echo bad; exit 4")
    code, out, err = _cli(capsys, db_path, tmp_path, "logs", failed, "--follow")
    assert (code, out) == (1, "bad\n") and err.endswith("(attempt 1 failed, exit code 4) [RUN_NOT_SUCCEEDED]\n")


def test_json_prints_one_object_per_attempt_and_one_a_line_when_following(
    capsys, db_path: Path, tmp_path: Path, rig: SupervisorRig, service: list[int]
) -> None:
    run_id = _submit(rig, _nth_try(tmp_path, 2), retries=3)
    code, out, err = _cli(capsys, db_path, tmp_path, "logs", run_id, "--follow", "--json")
    assert (code, err) == (0, "")
    assert [json.loads(line) for line in out.splitlines()] == [
        {"runId": run_id, "attempt": 1, "status": "failed", "text": "try 1\n"},
        {"runId": run_id, "attempt": 2, "status": "succeeded", "text": "try 2\n"},
    ]
    code, out, _ = _cli(capsys, db_path, tmp_path, "logs", run_id, "--json", "--attempt", "1")
    assert (code, json.loads(out)) == (0, {"runId": run_id, "attempt": 1, "status": "failed", "text": "try 1\n"})
    code, out, _ = _cli(capsys, db_path, tmp_path, "logs", run_id, "--json")  # the latest
    assert json.loads(out)["attempt"] == 2 and out.count("\n") == 1


def test_logs_of_a_run_whose_command_never_started_says_why_with_its_own_code(
    capsys, db_path: Path, tmp_path: Path, rig: SupervisorRig
) -> None:
    queued = _submit(rig, "true")
    code, _, err = _cli(capsys, db_path, tmp_path, "logs", queued)
    assert (code, err) == (1, f"Error: run {queued} is queued: its command has not started yet, so there is no log "
                              f"yet (it starts when a service for this database has a free slot) [COMMAND_NOT_STARTED]\n")
    rig.runs.request_cancel(CancelRunCommand(run_id=queued, reason="not today"))
    assert rig.runs.get(queued).status is RunStatus.CANCELLED
    for argv in (("logs", queued), ("logs", queued, "--follow"), ("logs", queued, "--json")):
        code, out, err = _cli(capsys, db_path, tmp_path, *argv)
        assert (code, out) == (1, "")
        assert (json.loads(err)["error"]["code"] if "--json" in argv else err) == (
            "COMMAND_NOT_STARTED" if "--json" in argv else
            f"Error: run {queued} ended cancelled (not today) before its command started; no log [COMMAND_NOT_STARTED]\n")
