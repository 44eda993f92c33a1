"""The test suite's own layout: helpers live in ``tests/support/`` and are reached one way.

A helper reachable under two names is two modules: a second copy of ``fault_stats`` counts campaigns
the summary never shows, a second ``conftest`` registers nothing. So:

- under tests/ (outside tests/support/ and the benchmarks, which run as scripts) and cluster/tests/,
  every Python file is a test module (``test_*.py``) or a ``conftest.py``;
- every import of a helper is ``from tests.support.<module> import name`` (or ``from tests.support
  import <module>`` for a module used as a namespace); never a bare module name found through
  ``sys.path``, never ``support.<module>``, never a ``conftest`` or another test module;
- no test file edits ``sys.path`` (pytest puts the repository root there: ``pythonpath`` in
  pyproject.toml); the benchmark harness does, for scripts started by path;
- a test module is named after what it checks, never after a tracker's number, and none is named to
  sort last (``test_zz_…``): pytest runs files in name order, and a test relying on that order fails
  alone.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SUPPORT = TESTS / "support"
BENCH = TESTS / "bench"
CLUSTER_TESTS = ROOT / "cluster" / "tests"

#: The benchmarks' own helpers, imported by bare name by scripts run from tests/bench/ (run.py).
BENCH_LOCAL = frozenset(path.stem for path in BENCH.glob("*.py"))


def _python_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.py") if "node_modules" not in path.parts)


def _support_modules() -> set[str]:
    return {path.stem for path in SUPPORT.glob("*.py") if path.stem != "__init__"}


def _test_modules() -> set[str]:
    return {path.stem for root in (TESTS, CLUSTER_TESTS) for path in _python_files(root) if path.stem.startswith("test_")}


def misplaced_modules(tests: Path = TESTS, cluster_tests: Path = CLUSTER_TESTS) -> list[str]:
    """Python files under the test trees that are neither a test module nor a conftest, outside
    tests/support/ and tests/bench/ (the package markers ``tests/__init__.py`` and
    ``tests/support/__init__.py`` aside)."""
    allowed_inits = {tests / "__init__.py", tests / "support" / "__init__.py"}
    found = []
    for root in (tests, cluster_tests):
        for path in _python_files(root):
            if path.is_relative_to(tests / "support") or path.is_relative_to(tests / "bench") or path in allowed_inits:
                continue
            if not (path.name.startswith("test_") or path.name == "conftest.py"):
                found.append(path.relative_to(root.parent if root == tests else root.parents[1]).as_posix())
    return found


def stray_imports(source: str, support: set[str], test_modules: set[str], bench_script: bool = False) -> list[str]:
    """The imports in ``source`` that reach a helper, a conftest or a test module other than through
    ``tests.support`` (each as ``line: statement``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [(node.module, [alias.name for alias in node.names])]
        elif isinstance(node, ast.ImportFrom):
            found.append(f"{node.lineno}: relative import from {'.' * node.level}{node.module or ''}")
            continue
        else:
            continue
        for module, names in modules:
            parts = module.split(".")
            if parts[0] == "tests":
                one_way = (
                    names is not None
                    and (
                        (len(parts) == 3 and parts[1] == "support" and parts[2] in support)
                        or (len(parts) == 2 and parts[1] == "support" and set(names) <= support)
                    )
                )
                if not one_way:
                    found.append(f"{node.lineno}: {module}")
            elif parts[0] == "support" or parts[0] == "conftest" or parts[0] in test_modules:
                found.append(f"{node.lineno}: {module}")
            elif parts[0] in support and not (bench_script and parts[0] in BENCH_LOCAL):
                found.append(f"{node.lineno}: {module}")
    return found


def edits_sys_path(source: str) -> bool:
    """Whether the code calls a method of ``sys.path`` (insert, append, …) or assigns to it."""
    for node in ast.walk(ast.parse(source)):
        target = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(ast.unparse(t).startswith("sys.path") for t in targets):
                return True
        if target is not None and ast.unparse(target) == "sys.path":
            return True
    return False


#: A name that is a tracker reference (``issue``, or a part that is only digits: ``test_42_…``), or one
#: chosen to sort last (``zz``, ``last``).
_BAD_NAME_PART = re.compile(r"^(issue\d*|\d+|z{2,}|last)$", re.IGNORECASE)


def badly_named(stems: set[str]) -> list[str]:
    return sorted(stem for stem in stems if any(_BAD_NAME_PART.match(part) for part in stem.split("_")[1:]))


def test_helpers_live_in_tests_support() -> None:
    assert (SUPPORT / "__init__.py").is_file() and (TESTS / "__init__.py").is_file()
    assert len(_support_modules()) > 20  # the walk below sees the helpers
    assert misplaced_modules() == []


def test_every_helper_is_imported_through_tests_support() -> None:
    support, test_modules = _support_modules(), _test_modules()
    stray = {}
    for root in (TESTS, CLUSTER_TESTS):
        for path in _python_files(root):
            found = stray_imports(path.read_text(encoding="utf-8"), support, test_modules,
                                  bench_script=path.is_relative_to(BENCH))
            if found:
                stray[path.relative_to(ROOT).as_posix()] = found
    assert stray == {}


def test_only_the_benchmark_harness_edits_sys_path() -> None:
    editing = sorted(path.relative_to(ROOT).as_posix() for root in (TESTS, CLUSTER_TESTS) for path in _python_files(root)
                     if edits_sys_path(path.read_text(encoding="utf-8")))
    assert editing == ["tests/bench/run.py"]


def test_no_test_module_is_named_after_a_ticket_or_to_run_last() -> None:
    stems = _test_modules() | {path.stem for path in _python_files(BENCH)}
    assert len(stems) > 100
    assert badly_named(stems) == []


# The checks themselves, on the layouts and imports they exist to refuse.

def test_the_checks_refuse_yesterdays_layout(tmp_path: Path) -> None:
    tests, cluster_tests = tmp_path / "tests", tmp_path / "cluster" / "tests"
    for path in (tests / "dispatch_support.py", tests / "conformance" / "pg_test_database.py", tests / "unit" / "test_x.py",
                 tests / "support" / "dispatch.py", tests / "bench" / "common.py", cluster_tests / "ha_cluster.py",
                 cluster_tests / "conftest.py"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    assert misplaced_modules(tests, cluster_tests) == [
        "tests/conformance/pg_test_database.py", "tests/dispatch_support.py", "cluster/tests/ha_cluster.py",
    ]


def test_the_checks_refuse_every_other_way_in() -> None:
    support, tests = {"dispatch", "fault_stats", "common"}, {"test_built_binary"}
    refused = """
from dispatch import seed
import fault_stats
from support.dispatch import seed
from tests.dispatch import seed
import tests.support.dispatch
from tests.support import seed
from tests.artifact.conftest import ROOT
from conftest import ROOT
from test_built_binary import run
from tests.artifact.test_built_binary import run
from .dispatch import seed
"""
    assert len(stray_imports(refused, support, tests)) == len(refused.strip().splitlines())
    allowed = "from tests.support.dispatch import seed\nfrom tests.support import fault_stats\nimport os\n"
    assert stray_imports(allowed, support, tests) == []
    assert stray_imports("import common\n", support, tests, bench_script=True) == []
    assert edits_sys_path("import sys\nsys.path.insert(0, 'tests')\n")
    assert edits_sys_path("import sys\nsys.path = ['x']\n")
    assert not edits_sys_path("import sys\nprint(sys.path)\n")
    assert badly_named({"test_issue_25", "test_fault_zz_secrets", "test_25_cancel", "test_h11_loader", "test_last"}) == [
        "test_25_cancel", "test_fault_zz_secrets", "test_issue_25", "test_last",
    ]
