"""Shared fixtures: a fresh database file per test, opened with an injected manual clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, open_database


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fault-mode",
        choices=("short", "long"),
        default="short",
        help="fault campaigns: 'short' (bounded, for make test/CI) or 'long' (make fault)",
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_700_000_000_000)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "edge-runtime.db"


@pytest.fixture
def db(db_path: Path, clock: ManualClock) -> Iterator[LocalDatabase]:
    database = open_database(db_path, clock=clock)
    yield database
    database.close()
