"""The artifact's bytecode is built at optimize level 2 (build/edge-runtime.spec), which drops every
``assert`` and every docstring. The runtime must not rely on either, or the executable would
behave differently from the source the test suite checks.

Module-level asserts on constants are allowed: they are checked each time the test suite imports
the module from source, and constants cannot differ in the build.
"""

from __future__ import annotations

import ast

from tests.support.artifact_layout import PACKAGE_DIR


def _sources() -> list[tuple[str, ast.Module]]:
    return [
        (str(path.relative_to(PACKAGE_DIR.parent)), ast.parse(path.read_text(encoding="utf-8"), str(path)))
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
    ]


def test_no_assert_guards_runtime_behaviour() -> None:
    offenders = []
    for name, tree in _sources():
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                offenders += [f"{name}:{node.lineno}" for node in ast.walk(function) if isinstance(node, ast.Assert)]
    assert offenders == [], "asserts vanish from the executable (optimize=2); raise an error instead"


def test_no_code_reads_a_docstring() -> None:
    offenders = [
        f"{name}:{node.lineno}"
        for name, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "__doc__"
    ]
    assert offenders == [], "docstrings are None in the executable (optimize=2); use explicit strings"
