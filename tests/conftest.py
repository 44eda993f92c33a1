"""Shared fixtures: a fresh database file per test, opened with an injected manual clock."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import LocalDatabase, WriteTransaction, open_database


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fault-mode",
        choices=("short", "long"),
        default="short",
        help="fault campaigns: 'short' (bounded, for make test/CI) or 'long' (make fault)",
    )


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Skips counted by reason, one line each, in place of a line per skipped test (``-r`` in the
    addopts leaves ``s`` out): a run without PostgreSQL or without a build skips a hundred or more
    tests for two or three reasons, and those reasons are what the reader needs."""
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if reasons:
        terminalreporter.section("skipped, by reason")
        for reason, count in reasons.most_common():
            terminalreporter.line(f"{count:5d}  {reason}")


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


@pytest.fixture
def fail_next_commit(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``fail_next_commit(apsw.FullError)``: the next write transaction's COMMIT fails with that
    SQLite error (busy, I/O error, disk full) and everything it wrote is rolled back."""
    plan: list[type[BaseException]] = []
    original = WriteTransaction.__exit__

    def exit_(self: WriteTransaction, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and plan:
            error = plan.pop(0)
            self._rollback()
            raise error("injected")
        return original(self, exc_type, exc, tb)

    monkeypatch.setattr(WriteTransaction, "__exit__", exit_)
    yield plan.append
