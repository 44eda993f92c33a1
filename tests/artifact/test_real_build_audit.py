"""The audit against a real (tiny) PyInstaller one-file build with every fault planted at once.

The assembled artifacts of test_audit_rules.py use PyInstaller's own archive writers; this one goes
through PyInstaller's whole pipeline (analysis, PYZ, CArchive, bootloader), so a change in how
PyInstaller lays out a build cannot slip past the audit. It costs a PyInstaller run (about 15 s of
CPU), hence the ``fault`` marker: it runs in ``make test`` and CI, not in the quick
``-m "not fault"`` loop.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MONITOR = Path(__file__).resolve().parents[2] / "edge_runtime" / "service" / "native" / "edge-runtime-monitor"


@pytest.mark.fault
def test_a_real_build_with_psycopg_a_cluster_module_and_padding_fails_each_rule(tmp_path: Path, audit_module) -> None:
    source = tmp_path / "src"
    (source / "psycopg").mkdir(parents=True)
    (source / "psycopg" / "__init__.py").write_text("PQ = 'stub'\n")
    # A stand-in edge_runtime package (first on the analysis path) that has a cluster module.
    (source / "edge_runtime").mkdir()
    (source / "edge_runtime" / "__init__.py").write_text("")
    (source / "edge_runtime" / "cluster.py").write_text("NODES = 3\n")
    # And a whole stand-in panel (modules, h11, the page's files), so that its rule passes.
    (source / "edge_runtime" / "panel").mkdir()
    for name in ("__init__", "routes", "api", "server", "connections", "secret_throttle"):
        (source / "edge_runtime" / "panel" / f"{name}.py").write_text("")
    (source / "edge_runtime" / "qinglong").mkdir()
    for name in ("__init__", "open_routes", "openapi", "crons", "envs", "logs"):
        (source / "edge_runtime" / "qinglong" / f"{name}.py").write_text("")
    (source / "h11").mkdir()
    (source / "h11" / "__init__.py").write_text("")
    static = tmp_path / "static"
    static.mkdir()
    for name in ("index.html", "panel.css", "panel.js", "text.js", "favicon.svg"):
        (static / name).write_text("x")
    (source / "edge-runtime.py").write_text("import psycopg\nimport edge_runtime.cluster\nimport edge_runtime.panel.routes\n"
                                            "import edge_runtime.panel.api\nimport edge_runtime.panel.server\n"
                                            "import edge_runtime.panel.connections\nimport edge_runtime.panel.secret_throttle\n"
                                            "import edge_runtime.qinglong.open_routes\nimport edge_runtime.qinglong.openapi\n"
                                            "import edge_runtime.qinglong.crons\nimport edge_runtime.qinglong.envs\n"
                                            "import edge_runtime.qinglong.logs\n"
                                            "import h11\n"
                                            "print(psycopg.PQ)\n")
    budgets = audit_module.load_budgets(audit_module.DEFAULT_BUDGET_FILE)
    padding = tmp_path / "padding.bin"
    padding.write_bytes(os.urandom(budgets["onefile_bytes"]))  # random: stays this big compressed

    build = subprocess.run(
        [
            sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level=WARN", "--onefile",
            "--name", "edge-runtime",
            "--paths", str(source),
            "--add-data", f"{padding}:edge_runtime",
            "--add-data", f"{static}:edge_runtime/panel/static",
            # The per-Attempt monitor at the path the spec gives it, so the monitor rule passes.
            "--add-binary", f"{MONITOR}:edge_runtime/service/native",
            "--workpath", str(tmp_path / "work"), "--distpath", str(tmp_path / "dist"),
            "--specpath", str(tmp_path), str(source / "edge-runtime.py"),
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-2000:]
    executable = tmp_path / "dist" / "edge-runtime"
    assert subprocess.run([str(executable)], capture_output=True, text=True, check=True).stdout == "stub\n"

    report = audit_module.audit(executable, budgets)
    failed = {rule.rule: rule for rule in report.rules if not rule.passed}
    assert set(failed) == {"postgres-driver", "cluster-module", "third-party", "budget"}
    assert any(o.endswith("PYZ:psycopg") for o in failed["postgres-driver"].offenders)
    assert any(o.endswith("PYZ:edge_runtime.cluster") for o in failed["cluster-module"].offenders)
    assert failed["third-party"].offenders == ["psycopg"]
    assert audit_module.main([str(executable)]) == 1
