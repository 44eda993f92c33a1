"""artifact_audit.py against assembled artifacts: a clean one passes, each planted fault fails the
rule that names it (and only the rules that should), in every form the audit reads."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
import pytest

from tests.support.artifact_layout import ROOT
from tests.support.fake_artifacts import MONITOR, MAKERS, make_onefile, make_onefolder, make_tarball, random_bytes

FORMS = sorted(MAKERS)


def failing_rules(report) -> set[str]:
    return {rule.rule for rule in report.rules if not rule.passed}


def offenders(report, rule_name: str) -> list[str]:
    (rule,) = [rule for rule in report.rules if rule.rule == rule_name]
    return rule.offenders


@pytest.fixture(scope="module")
def budgets(audit_module) -> dict[str, int]:
    return audit_module.load_budgets(audit_module.DEFAULT_BUDGET_FILE)


@pytest.mark.parametrize("form", FORMS)
def test_a_clean_artifact_passes_every_rule_and_lists_every_entry(form, tmp_path, audit_module, budgets, capsys) -> None:
    artifact = MAKERS[form](tmp_path)
    report = audit_module.audit(artifact, budgets)
    assert failing_rules(report) == set()
    paths = [entry.path for entry in report.entries]
    assert any(p.endswith("PYZ:edge_runtime.cli.main") for p in paths)
    assert any(p.endswith("base_library.zip:encodings/utf_8.pyc") for p in paths)
    assert any(p.endswith("python3.11/lib-dynload/_struct.cpython-311-x86_64-linux-gnu.so") for p in paths)
    modules = {entry.module for entry in report.entries if entry.module}
    assert {"edge_runtime.cli.main", "encodings.utf_8", "_struct", "apsw", "msgspec._core"} <= modules
    assert audit_module.main([str(artifact)]) == 0
    assert "verdict: PASS" in capsys.readouterr().out


@pytest.mark.parametrize("form", FORMS)
def test_a_stub_psycopg_fails_the_postgres_rule(form, tmp_path, audit_module, budgets, capsys) -> None:
    artifact = MAKERS[form](tmp_path, extra_pyz={"psycopg": "package", "psycopg.pq": "module"})
    report = audit_module.audit(artifact, budgets)
    # psycopg is also a third-party package outside the allow-list: both rules name it.
    assert failing_rules(report) == {"postgres-driver", "third-party"}
    assert any(o.endswith("PYZ:psycopg") for o in offenders(report, "postgres-driver"))
    assert offenders(report, "third-party") == ["psycopg"]
    assert audit_module.main([str(artifact)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  postgres-driver" in out and "verdict: FAIL" in out


@pytest.mark.parametrize(
    "name", ["libpq.so.5", "psycopg2_binary.libs/libpq-8a3f1c2e.so.5.16", "asyncpg/protocol/protocol.cpython-311-x86_64-linux-gnu.so"]
)
@pytest.mark.parametrize("form", ["onefile", "folder"])
def test_a_postgres_client_library_fails_the_postgres_rule(form, name, tmp_path, audit_module, budgets) -> None:
    artifact = MAKERS[form](tmp_path, extra_files={name: b"\x7fELF postgres"})
    report = audit_module.audit(artifact, budgets)
    assert "postgres-driver" in failing_rules(report)
    assert any(o.endswith(name) for o in offenders(report, "postgres-driver"))


@pytest.mark.parametrize("form", FORMS)
def test_an_edge_runtime_cluster_module_fails_the_cluster_rule(form, tmp_path, audit_module, budgets) -> None:
    artifact = MAKERS[form](tmp_path, extra_pyz={"edge_runtime.cluster": "module"})
    report = audit_module.audit(artifact, budgets)
    # edge_runtime itself is allowed: only the cluster rule fails.
    assert failing_rules(report) == {"cluster-module"}
    assert any(o.endswith("PYZ:edge_runtime.cluster") for o in offenders(report, "cluster-module"))


@pytest.mark.parametrize(
    "name",
    [
        "edge_runtime/cluster_sync.cpython-311-x86_64-linux-gnu.so",
        "edge_runtime/cluster/schema.sql",
    ],
)
def test_a_cluster_path_component_fails_the_cluster_rule(name, tmp_path, audit_module, budgets) -> None:
    report = audit_module.audit(make_onefolder(tmp_path, extra_files={name: b"x"}), budgets)
    assert failing_rules(report) == {"cluster-module"}


def test_names_that_only_resemble_cluster_pass(tmp_path, audit_module, budgets) -> None:
    artifact = make_onefile(tmp_path, extra_pyz={"edge_runtime.clusters": "module", "edge_runtime.subcluster": "module"})
    assert failing_rules(audit_module.audit(artifact, budgets)) == set()


@pytest.mark.parametrize("form", FORMS)
def test_a_third_party_package_outside_the_allow_list_fails(form, tmp_path, audit_module, budgets) -> None:
    artifact = MAKERS[form](tmp_path, extra_pyz={"requests": "package", "requests.api": "module"})
    report = audit_module.audit(artifact, budgets)
    assert failing_rules(report) == {"third-party"}
    assert offenders(report, "third-party") == ["requests"]


def test_a_third_party_data_directory_fails(tmp_path, audit_module, budgets) -> None:
    folder = make_onefolder(tmp_path, extra_files={"certifi-2024.2.2.dist-info/METADATA": b"Name: certifi"})
    report = audit_module.audit(folder, budgets)
    assert offenders(report, "third-party") == ["certifi"]


@pytest.mark.parametrize("form", ["onefile", "folder"])
def test_a_shared_library_of_a_foreign_package_fails(form, tmp_path, audit_module, budgets) -> None:
    artifact = MAKERS[form](tmp_path, extra_files={"numpy.libs/libopenblas64_p-r0-0cf96a72.3.23.dev.so": b"x"})
    report = audit_module.audit(artifact, budgets)
    assert failing_rules(report) == {"third-party"}
    assert offenders(report, "third-party") == ["numpy"]


def test_the_stdlib_sqlite3_fails_its_rule(tmp_path, audit_module, budgets) -> None:
    artifact = make_onefile(
        tmp_path, extra_files={"python3.11/lib-dynload/_sqlite3.cpython-311-x86_64-linux-gnu.so": b"x"}
    )
    assert failing_rules(audit_module.audit(artifact, budgets)) == {"stdlib-sqlite3"}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("monitor", [None, b"#!/bin/sh\n"], ids=["missing", "not-elf"])
def test_an_artifact_without_its_elf_monitor_fails_the_monitor_rule(form, monitor, tmp_path, audit_module,
                                                                    budgets) -> None:
    report = audit_module.audit(MAKERS[form](tmp_path, extra_files={MONITOR: monitor}), budgets)
    assert failing_rules(report) == {"monitor"}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dropped", ["edge_runtime/panel/static/panel.js", "edge_runtime/panel/static/index.html",
                                     "edge_runtime/panel/static/text.js"])
def test_an_artifact_without_the_panel_s_page_fails_the_panel_rule(form, dropped, tmp_path, audit_module, budgets) -> None:
    report = audit_module.audit(MAKERS[form](tmp_path, extra_files={dropped: None}), budgets)
    assert failing_rules(report) == {"panel"} and offenders(report, "panel") == [dropped]


def test_an_artifact_without_h11_fails_the_panel_rule(tmp_path, audit_module, budgets) -> None:
    report = audit_module.audit(make_onefile(tmp_path, extra_pyz={"h11": None}), budgets)
    assert failing_rules(report) == {"panel"} and offenders(report, "panel") == ["h11"]


def test_an_over_budget_one_file_fails_the_budget_rule(tmp_path, audit_module, budgets) -> None:
    artifact = make_onefile(tmp_path, extra_files={"edge_runtime/padding.bin": random_bytes(budgets["onefile_bytes"])})
    report = audit_module.audit(artifact, budgets)
    assert failing_rules(report) == {"budget"}
    assert report.size > budgets["onefile_bytes"]


def test_an_over_budget_tarball_fails_the_budget_rule(tmp_path, audit_module, budgets, capsys) -> None:
    padding = random_bytes(budgets["onefolder_tar_xz_bytes"] + 65_536)
    artifact = make_tarball(tmp_path, extra_files={"edge_runtime/padding.bin": padding})
    report = audit_module.audit(artifact, budgets)
    assert failing_rules(report) == {"budget"}
    assert audit_module.main([str(artifact)]) == 1
    assert "FAIL  budget" in capsys.readouterr().out


def test_the_budget_is_inclusive_to_the_byte(tmp_path, audit_module) -> None:
    artifact = make_onefile(tmp_path)
    size = artifact.stat().st_size
    for budget, passed in ((size, True), (size - 1, False)):
        budget_file = tmp_path / f"budget-{budget}.toml"
        budget_file.write_text(f"onefile_bytes = {budget}\nonefolder_tar_xz_bytes = {budget}\n")
        report = audit_module.audit(artifact, audit_module.load_budgets(budget_file))
        assert ("budget" not in failing_rules(report)) is passed


def test_a_bare_folder_has_no_budget_of_its_own(tmp_path, audit_module, budgets) -> None:
    folder = make_onefolder(tmp_path, extra_files={"edge_runtime/padding.bin": b"\0" * (budgets["onefile_bytes"] + 1)})
    report = audit_module.audit(folder, budgets)
    assert report.budget is None and failing_rules(report) == set()


def test_json_report_names_the_failing_rule(tmp_path, audit_module, capsys) -> None:
    artifact = make_onefile(tmp_path, extra_pyz={"edge_runtime.cluster": "module"})
    assert audit_module.main(["--json", str(artifact)]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["passed"] is False
    (result,) = document["artifacts"]
    assert result["form"] == "one-file"
    assert {r["rule"]: r["passed"] for r in result["rules"]} == {
        "postgres-driver": True,
        "cluster-module": False,
        "third-party": True,
        "stdlib-sqlite3": True,
        "monitor": True,
        "panel": True,
        "budget": True,
    }
    assert any(e["module"] == "edge_runtime.cluster" for e in result["entries"])
    assert len(result["largest"]) == 10


def test_output_file_holds_the_printed_report(tmp_path, audit_module, capsys) -> None:
    artifact = make_onefile(tmp_path)
    report_file = tmp_path / "audit.txt"
    assert audit_module.main(["--output", str(report_file), str(artifact)]) == 0
    assert report_file.read_text() == capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".audit.txt")] == []  # no temp left


def test_an_artifact_that_is_not_one_exits_2(tmp_path, audit_module, capsys) -> None:
    bogus = tmp_path / "edge-runtime"
    bogus.write_bytes(b"#!/bin/sh\necho not a build\n")
    assert audit_module.main([str(bogus)]) == 2
    assert capsys.readouterr().err.startswith(f"Error: {bogus.name}: not a PyInstaller executable")
    assert audit_module.main([str(tmp_path / "missing")]) == 2


def test_an_artifact_of_another_python_version_is_refused(tmp_path, audit_module, capsys) -> None:
    other = f"3.{sys.version_info.minor + 1}"
    artifact = make_onefile(tmp_path, extra_files={f"libpython{other}.so.1.0": b"x"})
    assert audit_module.main([str(artifact)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("Error: ") and f"{other}, audited with Python 3.{sys.version_info.minor}" in error


def test_the_docs_quote_the_budget_file() -> None:
    with open(ROOT / "build" / "budget.toml", "rb") as file:
        budget = tomllib.load(file)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    building = (ROOT / "docs" / "building.md").read_text(encoding="utf-8")
    for key in ("onefile_bytes", "onefolder_tar_xz_bytes"):
        assert f"{budget[key] / 1_048_576:g} MiB" in readme, f"README must quote {key} from build/budget.toml"
        assert f"{budget[key] / 1_048_576:g} MiB" in building, f"docs/building.md must quote {key}"
        assert f"{budget[key]:,}" in building


def _budget_values(table: dict) -> set[int]:
    """Every byte figure of build/budget.toml, the host's and each router target's."""
    return {v for value in table.values()
            for v in (_budget_values(value) if isinstance(value, dict) else {value}) if isinstance(v, int)}


_MIB = re.compile(r"(\d+(?:\.\d+)?)\s+MiB\b")
_BYTES = re.compile(r"\b\d{1,3}(?:,\d{3}){2,}\b")  # a figure in the millions, written 3,670,016
_ARTIFACT = re.compile(r"\.tar\.xz|one-file|one-folder")


def _units(text: str) -> list[str]:
    """``text`` as its table rows and its sentences (a paragraph's lines joined)."""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    prose = " ".join(line for line in text.splitlines() if not line.startswith("|"))
    return rows + re.split(r"\.\s", " ".join(prose.split()))


def _clauses(unit: str) -> list[str]:
    """A row or sentence in the pieces one figure can be about: cells, clauses, parentheses."""
    return re.split(r"[|;()]", unit)


def _not_budgets(clause: str, budgets: set[int]) -> list[str]:
    quoted = {f"{b / 1_048_576:g}" for b in budgets}
    return ([f"{m} MiB" for m in _MIB.findall(clause) if m not in quoted]
            + [n for n in _BYTES.findall(clause) if int(n.replace(",", "")) not in budgets])


def test_every_budget_a_page_names_is_one_build_budget_toml_holds() -> None:
    """One source of truth for every budget: a figure called a budget (or a goal), or the size in
    MiB of an artifact outside the measured figures of docs/benchmarks.md, is one of the file's."""
    with open(ROOT / "build" / "budget.toml", "rb") as file:
        budgets = _budget_values(tomllib.load(file))
    assert {4_718_592, 3_670_016, 5_767_168, 4_194_304} <= budgets  # the walk found the file's tables
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "build" / "cross").glob("*.sh"))]
    found = []
    for page in pages:
        measured = page.suffix != ".md" or page.name == "benchmarks.md"  # sizes measured, not budgets
        for unit in _units(page.read_text(encoding="utf-8")):
            if not measured and _ARTIFACT.search(unit):  # an artifact's size in MiB is its budget
                found += [f"{page.relative_to(ROOT)}: {figure} in {unit.strip()[:160]!r}"
                          for figure in _not_budgets(" ".join(f"{m} MiB" for m in _MIB.findall(unit)), budgets)]
            for clause in _clauses(unit):
                if re.search(r"\b(?:budget|goal)s?\b", clause, re.I):
                    found += [f"{page.relative_to(ROOT)}: {figure} in {clause.strip()[:160]!r}"
                              for figure in _not_budgets(clause, budgets)]
    assert found == [], "figures build/budget.toml does not hold:\n" + "\n".join(found)
    # Not vacuous: the rule finds a figure the file does not hold.
    assert _not_budgets("the routers' goal 2.59 MiB = 2,715,812 bytes", budgets) == ["2.59 MiB", "2,715,812"]


def test_the_cli_runs_as_a_script(tmp_path) -> None:
    artifact = make_tarball(tmp_path)
    result = subprocess.run(
        [sys.executable, str(ROOT / "artifact_audit.py"), str(artifact)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("== audit PASSED: 1 artifact(s)")

