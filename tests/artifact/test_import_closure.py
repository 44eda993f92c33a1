"""Importing every edge_runtime module and running ``edge-runtime --help`` from source never
imports a forbidden name: no PostgreSQL driver, no cluster module, no stdlib sqlite3.

The artifact audit checks the same names inside the built executable; this is the fast check that
runs on every ``make test``, from the source tree, in a fresh interpreter (sys.modules of the test
process would be polluted by pytest and its plugins).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.artifact_layout import PACKAGE_DIR, package_modules, run_probe

POSTGRES_DRIVERS = {"psycopg", "psycopg2", "psycopg_binary", "psycopg_c", "asyncpg", "pg8000"}


def forbidden(module: str) -> bool:
    parts = module.split(".")
    return (
        parts[0] in POSTGRES_DRIVERS
        or parts[0] in {"sqlite3", "_sqlite3"}
        or any(part == "cluster" or part.startswith("cluster_") for part in parts)
    )


@pytest.fixture(scope="module")
def source_run(tmp_path_factory) -> dict:
    return run_probe({"blocked": []}, tmp_path_factory.mktemp("closure"))


def test_every_module_imports_and_help_runs(source_run) -> None:
    steps = source_run["steps"]
    assert steps["import_errors"] == {}
    assert set(steps["edge_runtime_modules"]) <= set(source_run["modules"])
    assert steps["help"]["code"] == 0
    assert steps["help"]["stdout"].startswith("usage: edge-runtime")


def test_no_forbidden_module_is_ever_imported(source_run) -> None:
    assert [m for m in source_run["modules"] if forbidden(m)] == []


def test_no_edge_runtime_file_is_named_cluster() -> None:
    # A cluster module that nothing imports yet would still be collected into the artifact.
    assert [m for m in package_modules() if forbidden(m)] == []
    assert [p for p in PACKAGE_DIR.rglob("*") if forbidden(p.stem)] == []


@pytest.mark.parametrize("module", ["psycopg.pq", "edge_runtime.cluster", "edge_runtime.cluster_sync", "_sqlite3"])
def test_the_forbidden_check_names_what_it_must(module: str) -> None:
    assert forbidden(module)


@pytest.mark.parametrize("module", ["edge_runtime.clusters", "edge_runtime.local.database", "apsw", "pg"])
def test_the_forbidden_check_leaves_other_names_alone(module: str) -> None:
    assert not forbidden(module)


def test_the_blocker_sees_an_import_the_runtime_makes(tmp_path: Path) -> None:
    # The exclusion proof relies on the probe noticing imports; block one the CLI really makes.
    run = run_probe({"blocked": ["shlex"]}, tmp_path)
    assert "shlex" in run["attempts"]
    assert run["steps"]["import_errors"], "blocking an imported module must break an import"
