"""Fixtures of the conformance suite: one ``backend`` parameter per adapter, Local first."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.conformance_backends import LocalBackend, PostgresBackend
from tests.support.pg_test_database import TestDatabase, private_database


@pytest.fixture(scope="session")
def pg_database() -> Iterator[TestDatabase]:
    yield from private_database()


@pytest.fixture(params=["local", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "local":
        made: Any = LocalBackend(tmp_path / "edge-runtime.db")
    else:
        made = PostgresBackend(request.getfixturevalue("pg_database"))
    try:
        yield made
    finally:
        made.close()
