"""Fixtures of the end-to-end tests: a harness whose finalizer leaves no process behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.service_harness import Harness


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path)
    try:
        yield h
    finally:
        h.cleanup()
