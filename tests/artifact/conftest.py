"""Fixtures of the artifact tests: the build's exclusion list and the audit, loaded from their files."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.support.artifact_layout import ROOT, load_path_module


@pytest.fixture(scope="session")
def exclusions() -> ModuleType:
    return load_path_module("edge_runtime_build_exclusions", ROOT / "build" / "exclusions.py")


@pytest.fixture(scope="session")
def audit_module() -> ModuleType:
    return load_path_module("artifact_audit", ROOT / "artifact_audit.py")
