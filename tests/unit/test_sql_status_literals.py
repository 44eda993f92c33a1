"""No adapter retypes a status name in its SQL: every one comes from the contract's enums through
:mod:`edge_runtime.contract.sql_vocabulary` ("a status name once").

The SQL of both adapters is read as text (every string constant and every literal part of an
f-string, by AST), so the Cluster adapter is checked without psycopg installed. A quoted value of
any contract enum (``'queued'``, ``'leased'``, ``'started'``) in that text is a retyped name. The
schema's migrations are not scanned: a CHECK or a partial index is written once, in SQL, and
tests compare the schema with the enums.
"""

from __future__ import annotations

import ast
import enum
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import edge_runtime.contract
from edge_runtime.contract.runs import RunStatus
from edge_runtime.contract.sql_vocabulary import ACTIVE_ATTEMPT_SQL, sql_in, sql_literal

_ROOT = Path(__file__).resolve().parents[2]
ADAPTER_PACKAGES = (_ROOT / "edge_runtime" / "local", _ROOT / "cluster" / "cluster_postgres")


def _contract_vocabulary() -> set[str]:
    """Every value of every StrEnum the contract declares."""
    names: set[str] = set()
    for module_info in pkgutil.iter_modules(edge_runtime.contract.__path__):
        module = importlib.import_module(f"edge_runtime.contract.{module_info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, enum.StrEnum) and obj.__module__ == module.__name__:
                names.update(member.value for member in obj)
    return names


def _string_constants(path: Path) -> list[tuple[int, str]]:
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def retyped_status_names(paths: list[Path]) -> list[tuple[Path, int, str]]:
    """(file, line, quoted name) of every contract status name quoted in the files' strings."""
    quoted = re.compile(r"'(" + "|".join(map(re.escape, sorted(_contract_vocabulary(), key=len, reverse=True))) + r")'")
    return [(path, line, match.group(0))
            for path in paths for line, text in _string_constants(path) for match in quoted.finditer(text)]


def _adapter_modules() -> list[Path]:
    return sorted(path for package in ADAPTER_PACKAGES for path in package.rglob("*.py"))


def test_the_adapters_have_modules_to_scan() -> None:
    packages = {path.parent.name for path in _adapter_modules()}
    assert {"local", "cluster_postgres"} <= packages


def test_no_adapter_sql_retypes_a_status_name() -> None:
    found = [f"{path.relative_to(_ROOT)}:{line}: {literal}"
             for path, line, literal in retyped_status_names(_adapter_modules())]
    assert not found, "status names typed into SQL (use edge_runtime.contract.sql_vocabulary):\n" + "\n".join(found)


def test_the_scan_sees_literals_in_plain_and_f_strings(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        'A = "UPDATE runs SET status = \'queued\' WHERE id = ?"\n'
        'B = f"SELECT 1 FROM leases WHERE status = \'leased\' AND x IN {C}"\n'
        'D = "status = \'not_a_status\'"\n',
        encoding="utf-8",
    )
    assert retyped_status_names([planted]) == [(planted, 1, "'queued'"), (planted, 2, "'leased'")]


def test_sql_in_keeps_the_enums_order_and_refuses_strangers() -> None:
    assert sql_in(RunStatus, {RunStatus.QUEUED, RunStatus.CREATED}) == "('created', 'queued')"
    assert ACTIVE_ATTEMPT_SQL == "('claimed', 'starting', 'running')"  # as migration 0003's partial index
    with pytest.raises(ValueError):
        sql_in(RunStatus, set())

    class Hostile(enum.StrEnum):
        QUOTE = "x') OR ('1"

    with pytest.raises(ValueError):
        sql_literal(Hostile.QUOTE)
