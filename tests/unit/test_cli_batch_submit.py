"""``submit --batch FILE|-``: many Runs from one process, every line checked first, one transaction."""

from __future__ import annotations

import io
import json
from pathlib import Path

import apsw
import pytest

from edge_runtime.cli.main import main
from edge_runtime.contract.runs import MAX_BATCH_RUNS


def _cli(capsys, db_path: Path, *argv: str, stdin: bytes | None = None,
         monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(["--db", str(db_path), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _runs(db_path: Path) -> list[tuple]:
    connection = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return connection.execute(
            "SELECT id, status, name, command, timeout_ms, retries, created_at_ms, "
            "(SELECT count(*) FROM run_events e WHERE e.run_id = runs.id AND e.type = 'run.created') "
            "FROM runs ORDER BY rowid").fetchall()
    finally:
        connection.close()


def _migrated(capsys, db_path: Path) -> None:
    assert main(["--db", str(db_path), "migrate"]) == 0
    capsys.readouterr()


def test_a_batch_file_queues_one_run_per_line_in_order_with_the_options_of_every_run(capsys, db_path, tmp_path) -> None:
    batch = tmp_path / "jobs.txt"
    batch.write_text('["true"]\n\n  ["echo", "a b"]  \n["sh", "-c", "exit 3"]\n')
    code, out, err = _cli(capsys, db_path, "submit", "--batch", str(batch), "--name", "nightly", "--timeout", "5m",
                          "--retries", "2")
    assert code == 0, err
    ids = out.splitlines()
    rows = _runs(db_path)
    assert ids == [row[0] for row in rows] and len(ids) == 3
    assert [json.loads(row[3]) for row in rows] == [["true"], ["echo", "a b"], ["sh", "-c", "exit 3"]]
    assert {(row[1], row[2], row[4], row[5], row[7]) for row in rows} == {("queued", "nightly", 300_000, 2, 1)}
    assert len({row[6] for row in rows}) == 1  # one transaction: one time for all


def test_shell_lines_from_stdin_run_under_sh_and_json_prints_the_ids(capsys, db_path, monkeypatch) -> None:
    code, out, err = _cli(capsys, db_path, "submit", "--batch", "-", "--shell", "--json",
                          stdin=b"echo hi | tr a-z A-Z\n\nsleep 1 && true\n", monkeypatch=monkeypatch)
    assert code == 0, err
    ids = json.loads(out)
    rows = _runs(db_path)
    assert ids == [row[0] for row in rows]
    assert [json.loads(row[3]) for row in rows] == [["sh", "-c", "echo hi | tr a-z A-Z"], ["sh", "-c", "sleep 1 && true"]]


@pytest.mark.parametrize(("lines", "line", "says"), [
    (b'["true"]\n["true"]\n{"argv": ["x"]}\n', 3, "Expected `array`, got `object`"),
    (b'["true"]\n[]\n', 2, "the command must be a non-empty list of arguments"),
    (b'["true"]\n\n["ok"]\n[1]\n', 4, "Expected `str`, got `int`"),
    (b'["true"]\nnot json\n', 2, "JSON array of strings"),
    (b'["true"]\n["a\\u0000b"]\n', 2, "NUL character"),
    (b'["true"]\n\xff\n', 2, "not valid UTF-8"),
])
def test_one_bad_line_stores_nothing_and_is_named_by_its_number(capsys, db_path, monkeypatch, lines, line,
                                                                 says) -> None:
    _migrated(capsys, db_path)
    code, out, err = _cli(capsys, db_path, "submit", "--batch", "-", stdin=lines, monkeypatch=monkeypatch)
    assert (code, out) == (1, "")
    assert err.startswith(f"Error: --batch -, line {line}: ") and says in err and err.endswith("[INVALID_RUN_COMMAND]\n")
    assert _runs(db_path) == []


def test_a_bad_line_is_refused_before_the_database_is_even_created(capsys, db_path, tmp_path) -> None:
    batch = tmp_path / "jobs.txt"
    batch.write_text('["true"]\n["x", 2]\n')
    code, _, err = _cli(capsys, db_path, "submit", "--batch", str(batch))
    assert code == 1 and f"--batch {batch}, line 2" in err
    assert not db_path.exists()


def test_with_json_an_error_is_one_json_object(capsys, db_path, monkeypatch) -> None:
    code, out, err = _cli(capsys, db_path, "submit", "--batch", "-", "--json", stdin=b'["true"]\n[]\n',
                          monkeypatch=monkeypatch)
    assert (code, out) == (1, "")
    error = json.loads(err)["error"]
    assert error["code"] == "INVALID_RUN_COMMAND" and error["message"].startswith("--batch -, line 2: ")


def test_a_batch_over_the_limit_is_refused_whole(capsys, db_path, monkeypatch) -> None:
    _migrated(capsys, db_path)
    code, _, err = _cli(capsys, db_path, "submit", "--batch", "-", stdin=b'["true"]\n' * (MAX_BATCH_RUNS + 1),
                        monkeypatch=monkeypatch)
    assert code == 1
    assert f"more than {MAX_BATCH_RUNS} commands" in err and f"line {MAX_BATCH_RUNS + 1} is the first one over" in err
    assert _runs(db_path) == []
    code, out, _ = _cli(capsys, db_path, "submit", "--batch", "-", stdin=b'["true"]\n' * MAX_BATCH_RUNS,
                        monkeypatch=monkeypatch)
    assert code == 0 and len(out.splitlines()) == MAX_BATCH_RUNS == len(_runs(db_path))


def test_an_empty_or_unreadable_batch_is_an_error(capsys, db_path, monkeypatch, tmp_path) -> None:
    code, _, err = _cli(capsys, db_path, "submit", "--batch", "-", stdin=b"\n  \n", monkeypatch=monkeypatch)
    assert code == 1 and "no command in it" in err
    code, _, err = _cli(capsys, db_path, "submit", "--batch", str(tmp_path / "missing.txt"))
    assert code == 1 and "cannot read it: No such file or directory" in err
    assert not db_path.exists()


@pytest.mark.parametrize(("argv", "says"), [
    (["submit", "--batch", "-", "--", "true"], "give either --batch FILE or -- CMD ARGS, not both"),
    (["submit", "--shell", "--", "true"], "--shell applies to the lines of --batch"),
])
def test_mixing_batch_and_one_command_is_bad_usage(capsys, db_path, argv, says) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--db", str(db_path), *argv])
    assert exited.value.code == 2
    assert says in capsys.readouterr().err
    assert not db_path.exists()


def test_a_bad_option_refuses_the_whole_batch(capsys, db_path, monkeypatch, tmp_path) -> None:
    code, _, err = _cli(capsys, db_path, "submit", "--batch", "-", "--cwd", str(tmp_path / "nowhere"),
                        stdin=b'["true"]\n', monkeypatch=monkeypatch)
    assert code == 1 and "no such directory" in err
    assert not db_path.exists()
