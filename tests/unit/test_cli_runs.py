"""The run-management CLI in-process: output formats, exit codes, and bad input writing nothing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import apsw
import pytest

from edge_runtime.cli.main import main
from edge_runtime.cli.parser import COMMANDS, build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def _cli(capsys: pytest.CaptureFixture[str], db_path: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--db", str(db_path), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _fingerprint(db_path: Path) -> dict[str, str]:
    """Hashes of the database and its WAL, to prove a refused command wrote nothing. An empty
    ``-wal`` counts as none: a read-only open of a WAL database may create one (README)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(db_path.parent.glob(db_path.name + "*"))
        if not p.name.endswith("-shm") and not (p.name.endswith("-wal") and p.stat().st_size == 0)
    }


def _row_count(db_path: Path, table: str) -> int:
    connection = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        connection.close()


def test_submit_prints_only_the_run_id_and_show_json_has_the_documented_shape(capsys, db_path) -> None:
    code, out, err = _cli(capsys, db_path, "submit", "--name", "demo", "--", "sh", "-c", "echo hi")
    # No service runs for this database: the Run waits, and stderr says so (still exit 0).
    assert (code, err) == (0, "Note: no service is running for this database; the Run will wait until one starts\n")
    run_id = out.strip()
    assert len(run_id) == 36 and "\n" not in run_id

    code, out, _ = _cli(capsys, db_path, "show", run_id, "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["id"] == run_id
    assert shown["status"] == "queued"
    assert shown["command"] == ["sh", "-c", "echo hi"]
    assert shown["attempts"] == []
    assert "dispatch" not in shown  # absent, not null
    assert "cancelRequestedAtMs" not in shown  # absent, not null


def test_cancel_of_a_queued_run_cancels_it_and_logs_the_events(capsys, db_path) -> None:
    _, out, _ = _cli(capsys, db_path, "submit", "--", "true")
    run_id = out.strip()
    code, out, err = _cli(capsys, db_path, "cancel", run_id, "--reason", "not needed")
    assert (code, err) == (0, "")
    assert out == f"run {run_id} cancelled (it had not started)\n"

    _, out, _ = _cli(capsys, db_path, "show", run_id, "--json")
    shown = json.loads(out)
    assert shown["status"] == "cancelled"
    assert shown["cancelReason"] == "not needed"
    assert isinstance(shown["cancelRequestedAtMs"], int)

    _, out, _ = _cli(capsys, db_path, "events", run_id, "--json")
    events = json.loads(out)
    assert [e["type"] for e in events] == ["run.created", "run.cancel_requested", "run.cancelled"]
    assert [e["sequence"] for e in events] == [1, 2, 3]


def test_events_text_names_the_attempt_of_an_attempt_event(capsys, db_path) -> None:
    from edge_runtime.local.database import open_database
    from tests.support.unfenced_attempts import take_queued_run

    run_id = _cli(capsys, db_path, "submit", "--", "true")[1].strip()
    with open_database(db_path, create=False) as db:
        attempt = take_queued_run(db, run_id, actor_id="w")
    _, out, _ = _cli(capsys, db_path, "events", run_id)
    created, taken = out.splitlines()
    assert "run.created" in created and "attempt" not in created.split("{")[0]  # a Run-level event
    assert f"worker:w  attempt {attempt.id}  {{\"attempt\":1}}" in taken  # the column, not the payload


def test_list_json_returns_newest_first_and_filters_by_status(capsys, db_path) -> None:
    ids = [_cli(capsys, db_path, "submit", "--", "true")[1].strip() for _ in range(3)]
    _cli(capsys, db_path, "cancel", ids[0])
    _, out, _ = _cli(capsys, db_path, "list", "--json")
    assert [r["id"] for r in json.loads(out)] == list(reversed(ids))
    _, out, _ = _cli(capsys, db_path, "list", "--status", "cancelled", "--json")
    assert [r["id"] for r in json.loads(out)] == [ids[0]]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "00000000-0000-0000-0000-000000000000"], "Error: no run with id '00000000-0000-0000-0000-000000000000' [RUN_NOT_FOUND]\n"),
        (["cancel", "00000000-0000-0000-0000-000000000000"], "Error: no run with id '00000000-0000-0000-0000-000000000000' [RUN_NOT_FOUND]\n"),
        (["events", "x" * 37], "Error: run_id must be at most 36 characters, got 37 [INVALID_RUN_COMMAND]\n"),
        (["cancel", "bad\x01id"], "Error: run_id must not contain control characters [INVALID_RUN_COMMAND]\n"),
        (["submit", "--"], "Error: the command must be a non-empty list of arguments [INVALID_RUN_COMMAND]\n"),
        (["submit", "--", "sh", "a\x00b"], "Error: argument 1 contains a NUL character [INVALID_RUN_COMMAND]\n"),
        (["dispatch", "rearm", "00000000-0000-0000-0000-000000000000", "--expected-version", "1"],
         "Error: no cancellation dispatch exists for run '00000000-0000-0000-0000-000000000000' "
         "[CANCELLATION_DISPATCH_FENCE_REJECTED]\n"),
    ],
)
def test_bad_input_is_one_error_line_and_writes_nothing(capsys, db_path, argv, message) -> None:
    _cli(capsys, db_path, "migrate")
    before = _fingerprint(db_path)
    code, out, err = _cli(capsys, db_path, *argv)
    assert code == 1
    assert out == ""
    assert err == message
    assert _fingerprint(db_path) == before
    assert _row_count(db_path, "runs") == 0


@pytest.mark.parametrize(
    "argv",
    [["list", "--limit", "0"], ["list", "--status", "sleeping"], ["frobnicate"], ["dispatch", "rearm", "r"],
     ["show"], ["--bogus", "list"]],
)
def test_bad_flags_exit_2_with_one_line_and_touch_no_database(capsys, db_path, argv) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--db", str(db_path), *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and err.count("\n") == 1 and "(try: edge-runtime" in err
    assert not db_path.exists()


def test_read_commands_refuse_a_missing_database_instead_of_creating_it(capsys, db_path) -> None:
    code, out, err = _cli(capsys, db_path, "list")
    assert code == 1 and out == ""
    assert err.startswith(f"Error: database {db_path} does not exist")
    assert not db_path.exists()


def test_every_command_has_help_text_and_is_documented_in_the_readme() -> None:
    readme = README.read_text()
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    names = {choice.dest for choice in subparsers._choices_actions}
    assert len(names) == len(COMMANDS)
    for action in subparsers._choices_actions:
        assert action.help, f"{action.dest} has no help text"
        assert f"edge-runtime {action.dest}" in readme, f"README does not document `edge-runtime {action.dest}`"


def test_version_and_help_load_no_command_module_nor_storage_libraries() -> None:
    """Start-up on a router: --version/--help must not import apsw, msgspec or the service."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from edge_runtime.cli.main import main\n"
        "for argv in (['--version'], ['--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('apsw', 'msgspec')\n"
        "                or m.startswith(('edge_runtime.service', 'edge_runtime.local', 'edge_runtime.cli.')))\n"
        "print(loaded)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == (
        "['edge_runtime.cli.db_path', 'edge_runtime.cli.main', 'edge_runtime.cli.parser', 'edge_runtime.cli.reporting']")


def test_running_one_command_imports_only_that_command_module(db_path) -> None:
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from edge_runtime.cli.main import main\n"
        f"assert main(['--db', {str(db_path)!r}, 'migrate']) == 0\n"
        "print(sorted(m for m in sys.modules if m.startswith(('edge_runtime.cli.', 'edge_runtime.service'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    # A writing command applies serve's trusted-directory check (the one module of the service it loads).
    assert result.stdout.strip().splitlines()[-1] == (
        "['edge_runtime.cli.db_path', 'edge_runtime.cli.main', 'edge_runtime.cli.migrate', 'edge_runtime.cli.parser', "
        "'edge_runtime.cli.reporting', 'edge_runtime.service', "
        "'edge_runtime.service.errors', 'edge_runtime.service.trusted_paths']"
    )


def test_cli_writes_never_take_a_time_below_the_persisted_clock_watermark(capsys, db_path) -> None:
    """A router booted at 1970: the CLI's timestamps stay at or above what the service persisted."""
    _cli(capsys, db_path, "migrate")
    future_ms = 4_102_444_800_000  # 2100-01-01, far above the test machine's wall clock
    connection = apsw.Connection(str(db_path))
    connection.execute(
        "INSERT INTO clock_watermark (id, watermark_ms, updated_at_ms) VALUES (1, ?1, ?1)", (future_ms,)
    )
    connection.close()
    _, out, _ = _cli(capsys, db_path, "submit", "--", "true")
    run_id = out.strip()
    _cli(capsys, db_path, "cancel", run_id)
    _, out, _ = _cli(capsys, db_path, "show", run_id, "--json")
    shown = json.loads(out)
    assert shown["createdAtMs"] >= future_ms
    assert shown["cancelRequestedAtMs"] >= shown["createdAtMs"]


def test_check_holds_stored_sessions_and_leases_to_the_contract(capsys, db_path: Path) -> None:
    """`check` reads worker sessions and run leases through the adapter's checked projection too."""
    import apsw

    assert _cli(capsys, db_path, "submit", "--", "true")[0] == 0
    connection = apsw.Connection(str(db_path))
    connection.execute(
        "INSERT INTO worker_sessions (worker_id, session_id, generation, status, version, capabilities, "
        "capabilities_hash, max_concurrent_runs, available_slots, heartbeat_at_ms, lease_expires_at_ms, "
        "created_at_ms, updated_at_ms) VALUES ('w', 's', 1, 'online', 0, '{}', ?, 1, 1, 1, 2, 1, 1)", ("0" * 64,))
    connection.close()
    code, out, _ = _cli(capsys, db_path, "check")
    assert code != 0
    assert "FAIL session_invariants: 1 of 1 broken; first: stored session of worker 'w' breaks an invariant" in out
    assert "ok   lease_invariants: 0 run lease records satisfy the contract" in out
