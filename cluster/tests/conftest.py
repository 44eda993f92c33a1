"""Fixtures of the PostgreSQL-only tests: the session's private database (shared with the
conformance suite), a reset owner connection per test, and runtime connections."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.pg_test_database import TestDatabase, private_database

START_MS = 1_700_000_000_000


@pytest.fixture(scope="session")
def pg_database() -> Iterator[TestDatabase]:
    yield from private_database()


@pytest.fixture
def owner(pg_database: TestDatabase) -> Iterator[Any]:
    """The migration owner's connection, on empty tables, with the test clock at START_MS."""
    conn = pg_database.owner_connection()
    conn.execute("SET search_path = ql3")
    pg_database.reset(conn, START_MS)
    yield conn
    conn.close()


@pytest.fixture
def runtime(pg_database: TestDatabase) -> Iterator[Any]:
    """A factory of ``ql3_runtime`` connections (closed at the end of the test)."""
    from cluster_postgres.connection import connect

    made: list[Any] = []

    def open_one() -> Any:
        made.append(connect(pg_database.runtime_dsn))
        return made[-1]

    yield open_one
    for conn in made:
        conn.close()
