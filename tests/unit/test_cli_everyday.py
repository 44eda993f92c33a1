"""The CLI's everyday points in-process: short id forms, --db after the command, JSON errors,
list filters and columns, local times with their offset, the no-service note, and wording."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_runtime.cli.common import format_ms
from edge_runtime.cli.main import main


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _submit(capsys, db: Path, *extra: str) -> str:
    code, out, _ = _cli(capsys, "--db", str(db), "submit", *extra, "--", "true")
    assert code == 0
    return out.strip()


def test_a_unique_suffix_or_prefix_names_a_run_and_an_ambiguous_one_is_an_error(capsys, tmp_path) -> None:
    db = tmp_path / "e.db"
    first, second = _submit(capsys, db), _submit(capsys, db)
    code, out, _ = _cli(capsys, "--db", str(db), "show", first[-8:], "--json")
    assert code == 0 and json.loads(out)["id"] == first
    code, out, _ = _cli(capsys, "--db", str(db), "list")
    assert out.splitlines()[1].split()[0] == second[-8:]  # the first column is a form every command takes
    shared_prefix = first[:4]
    assert second.startswith(shared_prefix)  # UUIDv7: made in the same instant
    code, _, err = _cli(capsys, "--db", str(db), "show", shared_prefix)
    assert code == 1 and "RUN_ID_AMBIGUOUS" in err and first in err and second in err
    code, _, err = _cli(capsys, "--db", str(db), "cancel", "zzzz")
    assert code == 1 and "RUN_NOT_FOUND" in err


def test_a_unique_suffix_or_prefix_names_a_schedule_and_an_ambiguous_one_is_an_error(capsys, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    # 17 random ids over 16 hex digits: at least two begin with the same one.
    ids = [_cli(capsys, "--db", db, "schedule", "add", "--name", f"s{n}", "@daily", "--", "true")[1].strip()
           for n in range(17)]
    first = ids[0]
    listed = _cli(capsys, "--db", db, "schedule", "list")[1].splitlines()
    assert [line.split()[0] for line in listed] == [i[-8:] for i in ids]  # the form every command takes
    code, out, _ = _cli(capsys, "--db", db, "schedule", "show", first[-8:], "--json")
    assert code == 0 and json.loads(out)["id"] == first
    code, out, _ = _cli(capsys, "--db", db, "schedule", "edit", first[:10], "--name", "renamed", "--json")
    assert code == 0 and json.loads(out)["name"] == "renamed"
    assert _cli(capsys, "--db", db, "schedule", "pause", first[-12:]) == (0, f"schedule {first} paused\n", "")
    assert _cli(capsys, "--db", db, "schedule", "resume", first[:8])[1] == f"schedule {first} resumed\n"
    code, run_id, _ = _cli(capsys, "--db", db, "schedule", "run", first[-8:])
    assert code == 0
    code, out, _ = _cli(capsys, "--db", db, "list", "--schedule", first[-8:], "--json")
    assert [r["id"] for r in json.loads(out)] == [run_id.strip()]
    shared = next(i[0] for i in ids if sum(other[0] == i[0] for other in ids) > 1)
    named = [i for i in ids if i.startswith(shared) or i.endswith(shared)]
    for argv in (("schedule", "show", shared), ("schedule", "remove", shared), ("list", "--schedule", shared)):
        code, _, err = _cli(capsys, "--db", db, *argv)
        assert code == 1 and err.endswith("[SCHEDULE_ID_AMBIGUOUS]\n"), argv
        assert all(i in err for i in named[-5:]), err  # the candidates, newest first
    code, _, err = _cli(capsys, "--db", db, "schedule", "show", "zzzz")
    assert (code, err) == (1, "Error: no schedule with id 'zzzz' (nor one whose id begins or ends with it) "
                              "[SCHEDULE_NOT_FOUND]\n")
    assert _cli(capsys, "--db", db, "schedule", "remove", first[:9])[0] == 0
    assert _cli(capsys, "--db", db, "schedule", "show", first[:9])[0] == 1


def test_db_is_accepted_after_the_command(capsys, tmp_path) -> None:
    db = tmp_path / "after.db"
    code, out, _ = _cli(capsys, "submit", "--db", str(db), "--", "true")
    assert code == 0 and db.exists()
    code, listed, _ = _cli(capsys, "list", "--json", "--db", str(db))
    assert code == 0 and [r["id"] for r in json.loads(listed)] == [out.strip()]
    code, _, _ = _cli(capsys, "schedule", "list", "--db", str(db))
    assert code == 0


def test_with_json_an_error_is_one_json_object_on_stderr(capsys, tmp_path) -> None:
    db = tmp_path / "e.db"
    _submit(capsys, db)
    code, out, err = _cli(capsys, "--db", str(db), "show", "no-such-run-id-at-all", "--json")
    assert (code, out) == (1, "")
    assert json.loads(err) == {"error": {"code": "RUN_NOT_FOUND", "message": "no run with id 'no-such-run-id-at-all'"}}
    code, _, err = _cli(capsys, "--db", str(db), "show", "no-such-run-id-at-all")
    assert err.startswith("Error: ")


def test_list_filters_by_name_and_schedule_and_shows_exit_and_command(capsys, tmp_path) -> None:
    db = tmp_path / "e.db"
    named = _submit(capsys, db, "--name", "nightly")
    _submit(capsys, db)
    code, out, _ = _cli(capsys, "--db", str(db), "list", "--name", "nightly", "--json")
    assert [r["id"] for r in json.loads(out)] == [named]
    code, _, err = _cli(capsys, "--db", str(db), "list", "--schedule", "none-such", "--json")
    assert code == 1 and json.loads(err)["error"]["code"] == "SCHEDULE_NOT_FOUND"  # never an empty table
    header = _cli(capsys, "--db", str(db), "list")[1].splitlines()[0].split()
    assert header == ["RUN", "STATUS", "NAME", "COMMAND", "EXIT", "TOOK", "CREATED"]


def test_times_are_local_with_their_offset(monkeypatch) -> None:
    import time

    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    try:
        assert format_ms(1_796_256_000_000) == "2026-12-03 08:00:00 +08:00"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert format_ms(None) == "-"


def test_submit_without_a_service_says_so_on_stderr_and_succeeds(capsys, tmp_path) -> None:
    code, out, err = _cli(capsys, "--db", str(tmp_path / "e.db"), "submit", "--", "true")
    assert code == 0 and len(out.strip()) == 36
    assert err == "Note: no service is running for this database; the Run will wait until one starts\n"


def test_wording_of_bad_input(capsys, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    with pytest.raises(SystemExit) as usage:
        main(["--db", db, "list", "--limit", "abc"])
    err = capsys.readouterr().err
    assert usage.value.code == 2 and "_positive" not in err and "whole number" in err
    code, _, err = _cli(capsys, "--db", db, "submit", "--timeout", "0s", "--", "true")
    assert code == 1 and "zero part" not in err and "between 1s" in err
    code, _, err = _cli(capsys, "--db", db, "schedule", "add", "*", "--", "true")
    assert code == 1 and "quote" in err
    code, _, err = _cli(capsys, "--db", db, "submit", "--cwd", str(tmp_path / "missing"), "--", "true")
    assert code == 1 and err.startswith("Error: --cwd") and not (tmp_path / "e.db").exists()


def test_schedule_remove_json_prints_json(capsys, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    code, out, _ = _cli(capsys, "--db", db, "schedule", "add", "@daily", "--", "true")
    schedule_id = out.strip()
    code, out, _ = _cli(capsys, "--db", db, "schedule", "remove", schedule_id, "--json")
    assert code == 0 and json.loads(out) == {"removed": schedule_id}


# --------------------------------------------------------------------------- the wording defects, one test each


def test_list_limit_that_is_not_a_number_says_what_it_expects(capsys, tmp_path) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["--db", str(tmp_path / "e.db"), "list", "--limit", "abc"])
    err = capsys.readouterr().err
    assert usage.value.code == 2
    assert err == ("Error: argument --limit: expected a whole number between 1 and 10000, got 'abc' "
                   "(try: edge-runtime list --help)\n")


def test_a_zero_timeout_says_its_range(capsys, tmp_path) -> None:
    code, _, err = _cli(capsys, "--db", str(tmp_path / "e.db"), "submit", "--timeout", "0s", "--", "true")
    assert code == 1
    assert err == "Error: duration '0s' is out of range: it must be between 1s and 365d [INVALID_DURATION]\n"
    assert not (tmp_path / "e.db").exists()


@pytest.mark.parametrize("argv", [
    ["submit", "--name", "a\x01b", "--", "true"],
    ["submit", "--name", "two\nlines", "--", "true"],
    ["schedule", "add", "--name", "a\x1b[2Jb", "@daily", "--", "true"],
    ["schedule", "add", "@daily", "--name", "tab\there", "--", "true"],
], ids=["submit-soh", "submit-newline", "schedule-escape", "schedule-name-after-cron"])
def test_a_control_character_in_a_name_has_its_own_code_and_says_what_is_wrong(capsys, tmp_path, argv) -> None:
    code, out, err = _cli(capsys, "--db", str(tmp_path / "e.db"), *argv)
    assert (code, out) == (1, "")
    assert err == "Error: name must not contain control characters [INVALID_NAME]\n"
    assert "INVALID_RUN_COMMAND" not in err and not (tmp_path / "e.db").exists()  # nothing stored


def test_a_control_character_in_a_schedule_edit_name_is_invalid_name(capsys, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    schedule_id = _cli(capsys, "--db", db, "schedule", "add", "@daily", "--", "true")[1].strip()
    code, _, err = _cli(capsys, "--db", db, "schedule", "edit", schedule_id, "--name", "x\x07", "--json")
    assert code == 1 and json.loads(err)["error"]["code"] == "INVALID_NAME"


def test_an_unquoted_cron_as_the_shell_splits_it_says_to_quote_it(capsys, tmp_path) -> None:
    # `schedule add */5 * * * * -- true` in a shell: the expression arrives as one field, the rest
    # as file names the shell expanded `*` to.
    code, _, err = _cli(capsys, "--db", str(tmp_path / "e.db"), "schedule", "add", "*/5", "a.txt", "b.txt",
                        "c.txt", "d.txt", "--", "true")
    assert code == 1 and "[INVALID_CRON_EXPRESSION]" in err
    assert "got 1" in err and "quote the whole expression, e.g. '*/5 * * * *'" in err
    assert not (tmp_path / "e.db").exists()


def test_options_after_the_cron_expression_are_options_not_part_of_the_command(capsys, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    code, out, _ = _cli(capsys, "--db", db, "schedule", "add", "@daily", "--name", "nightly", "--json", "--",
                        "echo", "--name")
    shown = json.loads(out)
    assert code == 0 and (shown["name"], shown["command"]) == ("nightly", ["echo", "--name"])


def test_serve_slots_zero_names_the_setting(tmp_path) -> None:
    import subprocess
    import sys

    (tmp_path / "state").mkdir(mode=0o700)
    done = subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(tmp_path / "state" / "e.db"), "serve",
                           "--slots", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("Error: invalid configuration: setting slots (--slots, $EDGE_RUNTIME_SLOTS or "
                                  "the config file's slots): ")
    assert done.stderr.rstrip().endswith("[CONFIG_INVALID]") and ">= 1" in done.stderr


def test_a_paused_schedule_shows_no_next_fire(capsys, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    schedule_id = _cli(capsys, "--db", db, "schedule", "add", "* * * * *", "--", "true")[1].strip()
    assert "next fire  - (paused)" not in _cli(capsys, "--db", db, "schedule", "show", schedule_id)[1]
    _cli(capsys, "--db", db, "schedule", "pause", schedule_id)
    shown = _cli(capsys, "--db", db, "schedule", "show", schedule_id)[1]
    assert "state      paused\nnext fire  - (paused)\n" in shown
    assert f"{schedule_id[-8:]}  paused next=-  " in _cli(capsys, "--db", db, "schedule", "list")[1]
    _cli(capsys, "--db", db, "schedule", "resume", schedule_id)
    resumed = _cli(capsys, "--db", db, "schedule", "show", schedule_id)[1]
    assert "state      active\nnext fire  20" in resumed  # a time again, from the next slot


def test_a_ctrl_c_while_the_cli_loads_ends_it_with_130_and_no_traceback(capfd, monkeypatch, tmp_path) -> None:
    import sys

    import edge_runtime.cli

    import edge_runtime.cli.parser as cli_parser

    def interrupted(load=None):
        raise KeyboardInterrupt  # as if Ctrl-C came while argparse or a command's module loads

    monkeypatch.setattr(cli_parser, "build_parser", interrupted)
    assert callable(edge_runtime.cli.main)
    try:
        code = edge_runtime.cli.main(["--db", str(tmp_path / "e.db"), "list"])
    except KeyboardInterrupt:  # escaping, it would stop the whole pytest session
        pytest.fail("the interrupt escaped the CLI's entry point")
    assert code == 130
    out, err = capfd.readouterr()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def _command_paths() -> list[tuple[str, ...]]:
    """Every command line that runs a command: each command, and each action of those that have them."""
    import argparse

    from edge_runtime.cli.parser import build_parser

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not nested:
            return [path]
        return [leaf for action in nested for name, sub in action.choices.items() for leaf in walk(sub, (*path, name))]

    return walk(build_parser(), ())


@pytest.mark.parametrize("path", _command_paths(), ids=" ".join)
def test_a_usage_error_names_the_help_of_the_subcommand_it_is_about(capsys, tmp_path, path) -> None:
    for extra in (("--no-such-option",), ("--json", "--no-such-option")):
        with pytest.raises(SystemExit) as usage:
            main(["--db", str(tmp_path / "e.db"), *path, *extra])
        err = capsys.readouterr().err
        assert usage.value.code == 2
        hint = f"(try: edge-runtime {' '.join(path)} --help)"
        assert (json.loads(err)["error"]["message"] if "--json" in extra else err).rstrip().endswith(hint), err


def test_schedule_labels_are_given_replaced_and_removed_and_the_number_is_shown(capsys, tmp_path) -> None:
    db = str(tmp_path / "e.db")
    first = _cli(capsys, "--db", db, "schedule", "add", "--label", "jd", "--label", "京东", "@daily", "--", "true")[1].strip()
    second = _cli(capsys, "--db", db, "schedule", "add", "@daily", "--", "true")[1].strip()
    record = json.loads(_cli(capsys, "--db", db, "schedule", "show", first, "--json")[1])
    assert (record["number"], record["labels"]) == (1, ["jd", "京东"])
    assert json.loads(_cli(capsys, "--db", db, "schedule", "show", second, "--json")[1])["labels"] == []
    listed = _cli(capsys, "--db", db, "schedule", "list")[1].splitlines()
    assert listed[0].endswith("  number=1  labels=jd,京东") and listed[1].endswith("  number=2")
    shown = _cli(capsys, "--db", db, "schedule", "show", first)[1]
    assert "\nnumber     1\n" in shown and "\nlabels     jd, 京东\n" in shown
    _cli(capsys, "--db", db, "schedule", "edit", first, "--label", "other")
    assert json.loads(_cli(capsys, "--db", db, "schedule", "show", first, "--json")[1])["labels"] == ["other"]
    _cli(capsys, "--db", db, "schedule", "edit", first, "--no-labels")
    assert json.loads(_cli(capsys, "--db", db, "schedule", "show", first, "--json")[1])["labels"] == []
    code, _, err = _cli(capsys, "--db", db, "schedule", "add", "--label", "a", "--label", "a", "@daily", "--", "true")
    assert code == 1 and "a label is given twice" in err and "[INVALID_SCHEDULE_COMMAND]" in err
    with pytest.raises(SystemExit) as usage:
        _cli(capsys, "--db", db, "schedule", "edit", first, "--label", "a", "--no-labels")
    assert usage.value.code == 2 and "not allowed with" in capsys.readouterr().err
