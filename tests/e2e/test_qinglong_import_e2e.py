"""``edge-runtime import qinglong`` and ``scripts scan`` as real processes: a QingLong data folder
and its data.tgz (fixtures from QingLong's own models), a dry run that writes nothing, a second
import that creates nothing new, a hostile archive refused with nothing written, and an imported
schedule that a real ``serve`` fires (its script copied, its shared variable given to it)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from tests.support.qinglong_fixtures import make_data_folder, make_data_tgz, tar_member
from tests.support.service_harness import Harness, decode_json, wait_for

pytestmark = pytest.mark.e2e


def _import(harness: Harness, path: Path, *extra: str, check: bool = True):
    return harness.cli("import", "qinglong", str(path), *extra, check=check)


def _counts(result) -> dict:
    return json.loads(result.stdout)["counts"]


def test_a_data_folder_then_its_backup_import_once(harness: Harness) -> None:
    data = make_data_folder(harness.tmp / "ql", "2.21.0-upgraded", time_zone="Asia/Shanghai")
    archive = make_data_tgz(data, harness.tmp / "data.tgz")

    dry = _import(harness, archive, "--dry-run")
    assert "dry run: nothing written" in dry.stdout and dry.stderr == ""
    assert not harness.db_path.exists() and not (harness.tmp / "scripts").exists()

    first = _import(harness, archive, "--json")
    counts = _counts(first)
    assert counts["created"] == {"env": 9, "schedule": 16, "script": 9, "subscription": 1}
    schedules = decode_json(harness.cli("schedule", "list", "--json").stdout)  # the 16 crons and the pull's
    assert len(schedules) == 17 and sum(s["paused"] for s in schedules) == 2
    [subscription] = json.loads(harness.cli("subscription", "list", "--json").stdout)
    assert subscription["subscription"]["folder"] == "shufflewzc_faker2_main"
    assert (harness.tmp / "scripts" / "shufflewzc_faker2_main" / "jd_farm_help.js").exists()

    again = _import(harness, data, "--json")  # the same data, from the folder this time
    assert "created" not in _counts(again) and "create" not in _counts(again)
    assert _counts(again)["exists"] == counts["created"]
    assert len(decode_json(harness.cli("schedule", "list", "--json").stdout)) == 17


def test_a_hostile_archive_is_refused_and_nothing_is_written(harness: Harness) -> None:
    data = make_data_folder(harness.tmp / "ql")
    archive = make_data_tgz(data, harness.tmp / "evil.tgz", extra=[
        (tar_member("data/scripts/../../../../etc/cron.d/evil"), b"* * * * * root sh /tmp/x\n")])
    result = _import(harness, archive, check=False)
    assert result.returncode == 1
    assert result.stderr.startswith("Error: ") and "QINGLONG_SOURCE_REFUSED" in result.stderr
    assert "leaves the archive's folder" in result.stderr
    assert not harness.db_path.exists() and not (harness.tmp / "scripts").exists()
    json_result = _import(harness, archive, "--json", check=False)
    assert json.loads(json_result.stderr)["error"]["code"] == "QINGLONG_SOURCE_REFUSED"


def test_a_non_qinglong_database_is_refused_with_what_was_found(harness: Harness) -> None:
    harness.cli("env", "set", "X", "1")  # an edge-runtime database: SQLite, but not QingLong's
    folder = harness.tmp / "notql"
    (folder / "db").mkdir(parents=True)
    (folder / "db" / "database.sqlite").write_bytes(harness.db_path.read_bytes())
    result = _import(harness, folder, check=False)
    assert result.returncode == 1 and "QINGLONG_SCHEMA_UNKNOWN" in result.stderr
    assert "missing table Crontabs, table Envs" in result.stderr and "env_entries" in result.stderr


def test_progress_is_a_line_per_hundred_rows_on_stderr(harness: Harness) -> None:
    crons = [{"name": f"任务{i}", "command": f"task jd_{i}.js", "schedule": f"{i % 60} {i % 24} * * *",
              "createdAt": "t", "updatedAt": "t"} for i in range(250)]
    data = make_data_folder(harness.tmp / "ql", crons=crons, envs=[])
    result = _import(harness, data)
    assert [line for line in result.stderr.splitlines() if line.startswith("applied ")] == [
        "applied 100 of 260", "applied 200 of 260"]  # 250 crons, 9 scripts, 1 subscription


def test_an_imported_schedule_runs_its_copied_script_with_its_variable(harness: Harness) -> None:
    script = "import os\nprint('cookie=' + os.environ['JD_COOKIE'])\n"
    crons = [{"name": "每秒", "command": "python3 /ql/data/scripts/show.py", "schedule": "* * * * * *",
              "createdAt": "t", "updatedAt": "t"}]
    envs = [{"name": "JD_COOKIE", "value": v, "status": 0, "position": p, "remarks": "", "createdAt": "t",
             "updatedAt": "t"} for v, p in (("pt_key=A;", 2.0), ("pt_key=B;", 1.0))]
    data = make_data_folder(harness.tmp / "ql", crons=crons, envs=envs, scripts={"show.py": script})
    _import(harness, data, "--tz", "UTC")
    [schedule] = [s for s in decode_json(harness.cli("schedule", "list", "--json").stdout)
                  if s["command"][0] == "python3"]  # beside it: the fixture's subscription's pull
    assert schedule["command"] == ["python3", str(harness.tmp / "scripts" / "show.py")]
    harness.serve()
    wait_for(lambda: any(r["status"] == "succeeded" for r in decode_json(harness.cli("list", "--json").stdout)),
             "a fire of the imported schedule")
    run = next(r for r in decode_json(harness.cli("list", "--json").stdout) if r["status"] == "succeeded")
    assert harness.cli("logs", run["id"]).stdout == "cookie=***\n"  # the joined value, a secret, masked


def test_scripts_scan_adds_once(harness: Harness) -> None:
    scripts = harness.tmp / "scripts" / "repo"
    scripts.mkdir(parents=True)
    (scripts / "jd_a.js").write_text("/*\n0 9 * * * jd_a.js, tag=甲\n*/\nconst $ = new Env('甲');\n")
    (scripts / "jd_b.py").write_text("# cron: 30 8 * * *\n# new Env('乙')\n")
    first = harness.cli("scripts", "scan", str(scripts), "--add", "--json")
    assert [(s["name"], s["action"]) for s in json.loads(first.stdout)["scripts"]] == [
        ("甲", "created"), ("乙", "created")]
    second = harness.cli("scripts", "scan", str(scripts), "--add", "--json")
    assert [s["action"] for s in json.loads(second.stdout)["scripts"]] == ["exists", "exists"]
    listed = decode_json(harness.cli("schedule", "list", "--json").stdout)
    assert sorted(s["command"][1] for s in listed) == ["repo/jd_a.js", "repo/jd_b.py"]


def test_a_link_out_in_the_backup_is_never_made(harness: Harness) -> None:
    data = make_data_folder(harness.tmp / "ql", scripts={"a.js": "1"})
    archive = make_data_tgz(data, harness.tmp / "data.tgz", extra=[
        tar_member("data/scripts/passwd.js", kind=tarfile.SYMTYPE, link="/etc/passwd")])
    result = _import(harness, archive, "--json")
    rows = {item["source"]: item for item in json.loads(result.stdout)["items"]}
    assert rows["scripts/passwd.js"]["action"] == "skip"
    assert not (harness.tmp / "scripts" / "passwd.js").exists() and (harness.tmp / "scripts" / "a.js").exists()
