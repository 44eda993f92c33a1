"""Fault campaigns: the fixed seed (printed on every failure), the mode, and the summary table.

Every test here is marked ``fault``. ``make test`` runs the short mode (bounded; the whole
directory well under a minute), ``make fault`` the long one (``--fault-mode=long``). Either way
the session ends with one table of what was tried and what was lost (it must be nothing). After
each test, the files it had the runtime write hold no raw lease token (secrets at rest), whatever
order the tests run in.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from tests.support import fault_secrets
from tests.support import fault_stats
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


@pytest.fixture(autouse=True)
def no_raw_lease_token_at_rest() -> Iterator[None]:
    """Secrets at rest, checked at the end of each test: no file under the directories the test
    registered (database, ``-wal``, ``-shm``, journals, Attempt logs) holds the raw bytes of any
    lease token issued so far, by this test or an earlier one. A leak is an error at teardown of
    the test that wrote it."""
    first = len(fault_secrets.RUNTIME_DIRS)
    yield
    leaks = fault_secrets.leaks_at_rest(fault_secrets.RUNTIME_DIRS[first:])
    assert leaks == {}, f"raw lease tokens found at rest: {leaks}"


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
