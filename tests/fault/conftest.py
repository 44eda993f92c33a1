"""Fault campaigns: the fixed seed (printed on every failure), the mode, and the summary table.

Every test here is marked ``fault``. ``make test`` runs the short mode (bounded; the whole
directory well under a minute), ``make fault`` the long one (``--fault-mode=long``). Either way
the session ends with one table of what was tried and what was lost (it must be nothing).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

import fault_stats


@pytest.fixture
def fault_mode(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--fault-mode")


@pytest.fixture
def long_mode(fault_mode: str) -> bool:
    return fault_mode == "long"


@pytest.fixture
def fault_seed() -> int:
    return fault_stats.SEED


@pytest.fixture
def rng(fault_seed: int, request: pytest.FixtureRequest) -> random.Random:
    # One stream per test, derived from the fixed seed and the test's id, so a single test
    # reproduces alone with the same seed.
    return random.Random(f"{fault_seed}:{request.node.nodeid}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and "fault" in item.keywords:
        report.sections.append(
            ("fault campaign seed",
             f"seed={fault_stats.SEED}; reproduce with EDGE_FAULT_SEED={fault_stats.SEED} "
             f"pytest '{item.nodeid}' --fault-mode={item.config.getoption('--fault-mode')}")
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    if not fault_stats.CAMPAIGNS:
        return
    terminalreporter.section("fault campaign summary")
    for line in fault_stats.render(config.getoption("--fault-mode")):
        terminalreporter.write_line(line)
