"""Script headers read as QingLong's subscriptions read them (docs/qinglong.md, "Scripts and their
headers"): the three schedule rules and the name rules, where this reading departs from
QingLong's shell on purpose, the reproducible random time, and a corpus of 1148 real headers
(tests/data/qinglong_script_headers.jsonl: header lines of four public QingLong script
repositories, each with what QingLong 2.21's own shell made of it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_runtime.contract.cron import parse_schedule
from edge_runtime.qinglong.script_headers import MAX_HEADER_LINE, random_daily_expression, read_header
from edge_runtime.qinglong.script_scan import scanned_script

CORPUS = Path(__file__).resolve().parents[1] / "data" / "qinglong_script_headers.jsonl"


def _cron(text: str, file_name: str = "f.js") -> tuple[str, str] | None:
    found = read_header(text, file_name).schedule
    return None if found is None else (found.expression, found.rule)


# What QingLong's own pipeline gives for these lines (verified by running it), and the same here.
@pytest.mark.parametrize(("line", "file_name", "expected"), [
    ("15 8 * * * jd_bean.js", "jd_bean.js", ("15 8 * * *", "quantumult-x")),
    ("// 0 9 * * * jd_a.js, tag=测试, enabled=true", "jd_a.js", ("0 9 * * *", "quantumult-x")),
    ("# cron: 23 11,13,21 * * * jd_x.py", "jd_x.py", ("23 11,13,21 * * *", "quantumult-x")),
    ("0 9 * * * python3 x.py", "x.py", ("0 9 * * *", "quantumult-x")),
    ("10 0 0 * * * six.js", "six.js", ("10 0 0 * * *", "quantumult-x")),
    ("*/5 * * * * f.js", "f.js", ("*/5 * * * *", "quantumult-x")),
    ("0 */2 * * * f.js", "f.js", ("0 */2 * * *", "quantumult-x")),
    ("0 9 * * 1-5 f.js", "f.js", ("0 9 * * 1-5", "quantumult-x")),
    ("cron: 0 9 * * *", "f.js", ("0 9 * * *", "cron:")),
    ("// cron: 0 0 9 * * *", "f.js", ("0 0 9 * * *", "cron:")),
    ('cron "5 0 * * *" script-path=https://x/f.js, tag=x', "f.js", ("5 0 * * *", "quantumult-x")),
    ("0 9 ? * * f.js", "f.js", None),
    ("0 9 L * * f.js", "f.js", None),
    ("@daily f.js", "f.js", None),
    ("0 9 * * * other.js", "f.js", None),  # the line names another file
    ("", "f.js", None),
])
def test_the_rules_read_what_qinglong_reads(line: str, file_name: str, expected: tuple[str, str] | None) -> None:
    assert _cron(line, file_name) == expected


# Where QingLong's shell is wrong (a defect), the reading here is the one the header means.
@pytest.mark.parametrize(("text", "file_name", "expected", "qinglong_gives"), [
    ("0 9 * * * dir/x.js", "dir/x.js", ("0 9 * * *", "quantumult-x"), "nothing: a nested file never matches"),
    ("15 8 * * * f.js\n0 9 * * * f.js", "f.js", ("15 8 * * *", "quantumult-x"), "0 9 * * * (the smallest bytes)"),
    (" * 0 9 * * * f.js", "f.js", ("0 9 * * *", "quantumult-x"), "* 0 9 * * * (the JSDoc star as a field)"),
    ("cron: 0 9 * * * other.js", "f.js", ("0 9 * * *", "cron:"), "0 9 * * * other.js (invalid)"),
    ('x = cron "0 8 * * *"', "f.js", ("0 8 * * *", "loon"), "0 8 * * (the closing quote ends the line)"),
    ("22 10  * * * f.js", "f.js", ("22 10 * * *", "quantumult-x"), "nothing: two blanks between fields"),
    ("建议cron: 2 8,15 * * *  python3 jd_OpenCard.py", "jd_openCard.py", ("2 8,15 * * *", "cron:"),
     "2 8,15 * * * python3 jd_OpenCard.py (invalid)"),
    ("* * * * * f.js", "f.js", ("* * * * *", "quantumult-x"), "the same: every minute"),
])
def test_the_rules_depart_from_qinglongs_defects(text: str, file_name: str, expected: tuple[str, str],
                                                 qinglong_gives: str) -> None:
    assert _cron(text, file_name) == expected, qinglong_gives


def test_what_follows_the_expression_is_never_read_as_a_field() -> None:
    assert _cron("// cron: 0 9 * * * 2 python3 x.py") == ("0 9 * * * 2", "cron:")  # 6 fields: all six
    assert _cron("cron: 0 9 * * *, tag=x") == ("0 9 * * *", "cron:")
    assert _cron("cron：0 9 * * * x.js") == ("0 9 * * *", "cron:")  # a full-width colon
    assert _cron("cron: @daily f.js") == ("@daily", "cron:")
    assert _cron("cron: 0 9 * *") is None  # four fields: no schedule


def test_rule_1_wins_over_cron_colon_and_the_first_matching_line_wins() -> None:
    text = "cron: 1 1 * * *\n// 2 2 * * * f.js\n// 3 3 * * * f.js\ncron \"4 4 * * *\""
    found = read_header(text, "f.js").schedule
    assert (found.expression, found.rule, found.line) == ("2 2 * * *", "quantumult-x", 2)


def test_a_minified_line_is_not_a_header_line() -> None:
    long_line = "x" * MAX_HEADER_LINE + " cron: 0 9 * * *"
    assert _cron(long_line) is None
    assert read_header(long_line + "\nvar $ = new Env('名字');", "f.js").name == "名字"  # new Env is found anywhere


@pytest.mark.parametrize(("text", "name", "rule"), [
    ("const $ = new Env('京豆变动');", "京豆变动", "new Env"),
    ('const $ = new Env("双", {a: 1});', "双", "new Env"),
    ("const $ = new Env('A(B)C');", "A(B)C", "new Env"),  # QingLong: A
    ("const $ = new Env(`模板`);", "模板", "new Env"),  # QingLong keeps the backticks
    ("/**\n * @name: 活动名\n */", "活动名", "name:"),
    ("/*\nname: a:b\n*/", "a:b", "name:"),  # QingLong: a
    ("# name: 健康种植", "健康种植", "name:"),
    ("const cfg = {name: 'x'};", "f.js", "file name"),  # code, not a comment: not a name line
    ("", "f.js", "file name"),
    ("new Env('\x1b[31m红\x07')", "[31m红", "new Env"),  # control characters never reach a name
])
def test_the_name_rules(text: str, name: str, rule: str) -> None:
    header = read_header(text, "dir/f.js")
    assert (header.name, header.name_rule) == (name, rule)


def test_a_name_is_at_most_128_characters() -> None:
    assert len(read_header(f"new Env('{'长' * 300}')", "f.js").name) == 128


def test_the_random_time_is_daily_reproducible_and_per_script() -> None:
    first = random_daily_expression("seed", "a.js")
    assert first == random_daily_expression("seed", "a.js")
    assert parse_schedule(first).text == first and first.endswith(" * * *")
    times = {random_daily_expression("seed", f"s{i}.js") for i in range(50)}
    assert len(times) > 40  # QingLong gives one pull's scripts all the same time
    assert random_daily_expression("other", "a.js") != first or random_daily_expression("other", "b.js") != \
        random_daily_expression("seed", "b.js")


def test_a_scan_validates_the_expression_and_offers_a_random_time_only_when_asked() -> None:
    bad = scanned_script("0 9 L * 1#9 f.js\ncron: 61 9 * * *", "f.js", ["task", "f.js"])
    assert bad.expression is None and "is not valid" in bad.problem and "'61 9 * * *'" in bad.problem
    none = scanned_script("console.log(1)", "g.js", ["task", "g.js"])
    assert (none.expression, none.problem) == (None, "no schedule in its header")
    drawn = scanned_script("console.log(1)", "g.js", ["task", "g.js"], random_seed="s")
    assert (drawn.expression, drawn.rule) == (random_daily_expression("s", "g.js"), "random")
    good = scanned_script("// 0 0 9 * * * g.js", "g.js", ["task", "g.js"], random_seed="s")
    assert (good.expression, good.rule, good.line) == ("0 9 * * *", "quantumult-x", 1)


def _corpus() -> tuple[dict, list[dict]]:
    lines = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    return lines[0], lines[1:]


def test_the_corpus_records_its_sources() -> None:
    meta, entries = _corpus()
    assert set(meta["sources"]) == {e["repo"] for e in entries}
    assert all(len(commit) == 40 for commit in meta["sources"].values())
    assert len(entries) > 1000 and all("qinglong" in e for e in entries)


def test_on_real_headers_the_reading_is_qinglongs_but_for_its_defects() -> None:
    """Every script of the corpus gets QingLong's cron and name, except where QingLong's shell is
    wrong on purpose-documented grounds: a nested file (its rule 1 never matches there), fields
    with two blanks between them, names cut at an inner parenthesis or with blanks at an end."""
    _, entries = _corpus()
    departures = {"nested": 0, "blanks": 0, "name": 0}
    valid = 0
    for entry in entries:
        header = read_header(entry["header"], entry["path"])
        ours = header.schedule.expression if header.schedule else ""
        theirs = entry["qinglong"]["cron"]
        if ours:
            parse_schedule(ours)  # every expression found here is one the parser takes...
            valid += 1
        if ours != theirs:
            if "/" in entry["path"]:
                departures["nested"] += 1
            else:
                line = entry["header"].splitlines()[header.schedule.line - 1]
                assert "  " in line and not theirs, (entry["path"], ours, theirs)
                departures["blanks"] += 1
        if header.name != entry["qinglong"]["name"]:
            theirs_name = entry["qinglong"]["name"]
            assert header.name.startswith(theirs_name.strip()) and (
                "(" in header.name or theirs_name != theirs_name.strip()), (entry["path"], header.name, theirs_name)
            departures["name"] += 1
    assert valid >= 800  # ...and there are the corpus's 802 of them
    assert departures == {"nested": 117, "blanks": 1, "name": 2}
