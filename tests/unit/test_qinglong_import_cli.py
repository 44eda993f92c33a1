"""``edge-runtime import qinglong`` and ``scripts scan`` in process, against every fixture schema:
what is created (schedules paused or not, in QingLong's zone; variables; scripts with their
folders), that a second import creates nothing, that ``--dry-run`` writes nothing, the JSON
report, and the scripts directory's writer (never replaces, never follows a link, refuses bytes
that changed since they were listed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edge_runtime.cli.main import main
from edge_runtime.local.database import open_database
from edge_runtime.qinglong import import_apply
from edge_runtime.qinglong.errors import ScriptsDirectoryError
from edge_runtime.qinglong.script_files import FileWriter, hash_chunks
from tests.support.qinglong_fixtures import SCRIPTS, VERSIONS, make_data_folder, make_data_tgz


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _import(capsys, db: Path, path: Path, *extra: str) -> dict:
    code, out, err = _cli(capsys, "--db", str(db), "import", "qinglong", str(path), "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def _actions(report: dict, kind: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in report["items"]:
        if item["kind"] == kind:
            counts[item["action"]] = counts.get(item["action"], 0) + 1
    return counts


@pytest.mark.parametrize("version", VERSIONS)
def test_an_import_creates_schedules_variables_and_scripts_and_a_second_creates_nothing(
        capsys, tmp_path: Path, version: str) -> None:
    data = make_data_folder(tmp_path / "ql", version, time_zone="Asia/Shanghai" if version.startswith("2.21") else None)
    db = tmp_path / "dev" / "edge-runtime.db"
    report = _import(capsys, db, data)
    assert report["qinglongVersion"] and report["dryRun"] is False
    assert report["scriptsDir"] == str(tmp_path / "dev" / "scripts")
    schedules = _actions(report, "schedule")
    assert schedules["created"] == (15 if version == "2.11.0" else 16) and "failed" not in schedules
    assert _actions(report, "script") == {"created": len(SCRIPTS)}
    assert _actions(report, "env") == {"created": 9, "skip": 2}
    code, listed, _ = _cli(capsys, "--db", str(db), "schedule", "list", "--json")
    records = {r["name"] if "name" in r else "-": r for r in json.loads(listed)}
    assert records["京豆变动通知"]["command"] == ["task", "jd_bean_change.js"] and not records["京豆变动通知"]["paused"]
    assert records["京豆变动通知"]["labels"] == ["京东", "通知"]
    assert records["京喜工厂"]["paused"] and records["旧的已停用任务"]["paused"]
    assert records["签到领现金"]["expression"] == "0 0,12 * * *"  # 6 fields, second 0: canonical 5
    assert records["京豆变动通知"]["timeZone"] in ("Asia/Shanghai", "CST-8")
    code, variables, _ = _cli(capsys, "--db", str(db), "env", "list", "--json")
    entries = json.loads(variables)
    shown = {v["name"]: v for v in entries}
    cookies = [v for v in entries if v["name"] == "JD_COOKIE"]
    pinned = version.startswith("2.21")  # isPinned came with 2.20; before, the entry at position 1 is simply last
    expected = [("大号", True, False), ("小号", True, False), ("已过期", False, False)]
    expected = [("", True, True), *expected] if pinned else [*expected, ("", True, False)]
    assert [(c["remarks"], c["enabled"], c["pinned"]) for c in cookies] == expected  # QingLong's order
    assert all(c["secret"] and "value" not in c for c in cookies)
    assert shown["QUOTED"]["value"] == "it's \"quoted\" & spaced 中文"
    scripts = tmp_path / "dev" / "scripts"
    for relative, content in SCRIPTS.items():
        assert (scripts / relative).read_text() == content
    assert oct(os.stat(scripts / "shufflewzc_faker2_main").st_mode & 0o777) == "0o755"

    again = _import(capsys, db, make_data_tgz(data, tmp_path / "data.tgz"))  # the same data, as its backup
    assert set(again["counts"]) == {"exists", "skip"}, again["counts"]
    assert again["counts"]["exists"]["schedule"] == schedules["created"]
    code, listed_again, _ = _cli(capsys, "--db", str(db), "schedule", "list", "--json")
    assert len(json.loads(listed_again)) == len(json.loads(listed))


def test_a_dry_run_writes_nothing(capsys, tmp_path: Path) -> None:
    data = make_data_folder(tmp_path / "ql")
    db = tmp_path / "dev" / "edge-runtime.db"
    report = _import(capsys, db, data, "--dry-run")
    assert report["dryRun"] is True and report["counts"]["create"]["schedule"] == 16
    assert not (tmp_path / "dev").exists()  # no database, no scripts directory
    code, _, _ = _cli(capsys, "--db", str(db), "env", "set", "JD_DEBUG", "true")
    before = db.read_bytes()
    report = _import(capsys, db, data, "--dry-run")
    assert [i["action"] for i in report["items"] if i["source"] == "Envs id 7"] == ["create"]  # another value: another entry
    assert db.read_bytes() == before and not (tmp_path / "dev" / "scripts").exists()


def test_the_scripts_go_where_the_service_runs_them_from_the_scripts_dir_setting(
        capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_data_folder(tmp_path / "ql")
    db = tmp_path / "dev" / "edge-runtime.db"
    config = tmp_path / "config.toml"
    config.write_text(f'scripts_dir = "{tmp_path / "usb" / "scripts"}"\n')
    monkeypatch.setenv("EDGE_RUNTIME_CONFIG", str(config))
    assert _import(capsys, db, data, "--dry-run")["scriptsDir"] == str(tmp_path / "usb" / "scripts")
    monkeypatch.setenv("EDGE_RUNTIME_SCRIPTS_DIR", str(tmp_path / "other"))  # the environment over the file
    assert _import(capsys, db, data, "--dry-run")["scriptsDir"] == str(tmp_path / "other")
    (tmp_path / "other" / "repo").mkdir(parents=True)
    (tmp_path / "other" / "repo" / "x.js").write_text("// 1 2 * * * x.js\n")
    code, out, _ = _cli(capsys, "--db", str(db), "scripts", "scan", str(tmp_path / "other" / "repo"), "--json")
    assert json.loads(out)["scripts"][0]["command"] == ["task", "repo/x.js"]


def test_the_text_report_names_what_is_skipped_and_why(capsys, tmp_path: Path) -> None:
    data = make_data_folder(tmp_path / "ql")
    code, out, err = _cli(capsys, "--db", str(tmp_path / "e.db"), "import", "qinglong", str(data), "--dry-run")
    assert code == 0 and err == ""
    assert "skip    schedule     Crontabs id 6             更新面板  23 3 * * *  ql update\n" in out
    assert "why: QingLong's own system cron: not a task of yours" in out
    assert "create  scripts      scripts/shufflewzc_faker2_main/ 2 files, 90 B" in out
    assert out.rstrip().endswith("dry run: nothing written")
    assert "pt_key" not in out  # an env's value is never printed


def test_a_hostile_name_cannot_drive_the_terminal(capsys, tmp_path: Path) -> None:
    data = make_data_folder(tmp_path / "ql", crons=[
        {"name": "x\x1b]0;pwned\x07", "command": "task a.js\x1b[2J", "schedule": "0 9 * * *", "createdAt": "t",
         "updatedAt": "t"}], envs=[])
    code, out, _ = _cli(capsys, "--db", str(tmp_path / "e.db"), "import", "qinglong", str(data), "--dry-run")
    assert "\x1b" not in out and "\\u001b" in out


def test_an_untrusted_scripts_directory_is_refused(capsys, tmp_path: Path) -> None:
    data = make_data_folder(tmp_path / "ql")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    code, _, err = _cli(capsys, "--db", str(tmp_path / "e.db"), "import", "qinglong", str(data),
                        "--scripts-dir", str(shared))
    assert code == 1 and "SCRIPTS_DIRECTORY_REFUSED" in err and "writable by group or others" in err
    assert list(shared.iterdir()) == [] and not (tmp_path / "e.db").exists()  # refused before anything is written
    code, _, err = _cli(capsys, "--db", str(tmp_path / "e.db"), "import", "qinglong", str(data),
                        "--scripts-dir", str(shared / "new"))  # to be made inside another user's folder
    assert code == 1 and "SCRIPTS_DIRECTORY_REFUSED" in err and not (shared / "new").exists()


def test_a_bad_zone_is_refused_before_anything_is_written(capsys, tmp_path: Path) -> None:
    data = make_data_folder(tmp_path / "ql")
    code, _, err = _cli(capsys, "--db", str(tmp_path / "e.db"), "import", "qinglong", str(data), "--tz", "Mars/Base")
    assert code == 1 and "INVALID_TIME_ZONE" in err
    assert not (tmp_path / "e.db").exists() and not (tmp_path / "scripts").exists()


def test_scripts_that_do_not_fit_are_refused_before_anything_is_written(capsys, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_data_folder(tmp_path / "ql")

    class Full:
        f_bavail, f_frsize = 10, 4096

    monkeypatch.setattr(import_apply.os, "fstatvfs", lambda fd: Full())
    code, _, err = _cli(capsys, "--db", str(tmp_path / "e.db"), "import", "qinglong", str(data))
    assert code == 1 and "the scripts need" in err and "nothing imported" in err
    assert list((tmp_path / "scripts").iterdir()) == []


def test_the_writer_never_replaces_never_follows_a_link_and_checks_the_bytes(tmp_path: Path) -> None:
    top = tmp_path / "scripts"
    top.mkdir()
    (top / "taken.js").write_text("mine")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", top / "linked")
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    writer = FileWriter(fd)
    try:
        digest = hash_chunks([b"new"])[0]
        assert writer.write("a/b/new.js", [b"new"], sha256=digest, limit=100, executable=True) is True
        assert os.stat(top / "a" / "b" / "new.js").st_mode & 0o777 == 0o755
        assert writer.write("a/b/new.js", [b"new"], sha256=digest, limit=100, executable=True) is False  # here
        with pytest.raises(ScriptsDirectoryError, match="another file is there already"):
            writer.write("taken.js", [b"new"], sha256=digest, limit=100, executable=False)
        with pytest.raises(ScriptsDirectoryError, match="linked in the scripts directory is a link or a file"):
            writer.write("linked/x.js", [b"new"], sha256=digest, limit=100, executable=False)
        with pytest.raises(ScriptsDirectoryError, match="changed since it was read"):
            writer.write("c.js", [b"other bytes"], sha256=digest, limit=100, executable=False)
        with pytest.raises(ScriptsDirectoryError, match="not a relative path"):
            writer.write("../escape.js", [b"new"], sha256=digest, limit=100, executable=False)
    finally:
        writer.close()
        os.close(fd)
    assert (top / "taken.js").read_text() == "mine" and list((tmp_path / "elsewhere").iterdir()) == []
    assert not (top / "c.js").exists() and not [p for p in top.rglob(".*import-*")]  # no temporary left


def test_scripts_scan_shows_each_schedule_and_adds_them_once(capsys, tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    (scripts / "repo").mkdir(parents=True)
    (scripts / "repo" / "jd_bean.js").write_text("// 15 8 * * * jd_bean.js\nconst $ = new Env('京豆');\n")
    (scripts / "repo" / "helper.js").write_text("module.exports = {}\n")
    (scripts / "repo" / "bad.py").write_text("# cron: 0 9 L * 1#9\n")
    (scripts / "repo" / "notes.txt").write_text("15 8 * * * notes.txt\n")  # not a script
    os.symlink("/etc/passwd", scripts / "repo" / "link.js")
    db = tmp_path / "e.db"
    base = ("--db", str(db), "scripts", "scan", str(scripts / "repo"), "--scripts-dir", str(scripts))
    code, out, _ = _cli(capsys, *base, "--json")
    found = {s["path"]: s for s in json.loads(out)["scripts"]}
    assert sorted(found) == ["bad.py", "helper.js", "jd_bean.js"]
    assert found["jd_bean.js"]["expression"] == "15 8 * * *" and found["jd_bean.js"]["command"] == [
        "task", "repo/jd_bean.js"]
    assert "is not valid" in found["bad.py"]["problem"] and found["helper.js"]["problem"] == "no schedule in its header"
    assert json.loads(out)["skipped"] == [{"path": "link.js", "reason": "a symbolic link: never followed, not copied"}]
    assert not db.exists()  # a scan without --add writes nothing
    code, out, _ = _cli(capsys, *base, "--add", "--random-time", "seed", "--paused")
    assert code == 0 and out.rstrip().endswith("3 scripts, 2 with a schedule; 2 added, 0 here already")
    code, out, _ = _cli(capsys, *base, "--add", "--random-time", "seed")
    assert out.rstrip().endswith("3 scripts, 2 with a schedule; 0 added, 2 here already")
    code, listed, _ = _cli(capsys, "--db", str(db), "schedule", "list", "--json")
    records = json.loads(listed)
    assert len(records) == 2 and all(r["paused"] for r in records)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.js").write_text("// 1 2 * * * x.js\n")
    code, out, _ = _cli(capsys, "--db", str(db), "scripts", "scan", str(outside), "--scripts-dir", str(scripts),
                        "--json")
    assert json.loads(out)["scripts"][0]["command"] == ["task", str(outside / "x.js")]


def test_an_import_into_a_database_keeps_its_other_schedules(capsys, tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    code, _, _ = _cli(capsys, "--db", str(db), "schedule", "add", "--name", "mine", "0 1 * * *", "--", "true")
    _import(capsys, db, make_data_folder(tmp_path / "ql"))
    with open_database(db, create=False) as database:
        names = [row[0] for row in database.connection.execute("SELECT name FROM schedules ORDER BY created_at_ms")]
    assert names[0] == "mine" and len(names) == 18 and names[-1] == "pull faker2"  # 16 crons, 1 subscription
