"""Read build/excludes.toml: the stdlib modules the artifact leaves out, and why.

Used by the PyInstaller spec (what to exclude) and by tests/artifact/test_exclusions.py (proof that
the runtime never needs them). Standard library only: it runs inside PyInstaller's spec execution.
"""

from __future__ import annotations

import importlib.util
import pkgutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

EXCLUDES_FILE = Path(__file__).resolve().with_name("excludes.toml")
KINDS = ("never", "fallback", "frozen")


class ExclusionsFileError(ValueError):
    """excludes.toml is malformed; the message names the entry."""


@dataclass(frozen=True, slots=True)
class Exclusion:
    module: str  # a module name, or "pkg.*" for every submodule of pkg except `keep`
    kind: str  # "never", "fallback" or "frozen", see excludes.toml
    why: str
    keep: tuple[str, ...] = ()

    def module_names(self) -> list[str]:
        """The concrete module names this entry excludes (a wildcard is expanded against this Python)."""
        if not self.module.endswith(".*"):
            return [self.module]
        package = self.module[:-2]
        spec = importlib.util.find_spec(package)
        if spec is None or spec.submodule_search_locations is None:
            raise ExclusionsFileError(f"{self.module}: {package} is not a package in this Python")
        names = sorted(info.name for info in pkgutil.iter_modules(spec.submodule_search_locations))
        missing = sorted(set(self.keep) - set(names))
        if missing:
            raise ExclusionsFileError(f"{self.module}: keep names modules that do not exist: {missing}")
        return [f"{package}.{name}" for name in names if name not in self.keep]

    def kept_names(self) -> list[str]:
        package = self.module[:-2] if self.module.endswith(".*") else self.module
        return [f"{package}.{name}" for name in self.keep]


def load(path: Path = EXCLUDES_FILE) -> list[Exclusion]:
    with open(path, "rb") as file:
        raw = tomllib.load(file)
    exclusions = []
    for index, entry in enumerate(raw.get("exclude", [])):
        unknown = set(entry) - {"module", "kind", "why", "keep"}
        if unknown or not {"module", "kind", "why"} <= set(entry):
            raise ExclusionsFileError(f"{path} entry {index}: needs module, kind, why (and optional keep); got {sorted(entry)}")
        if entry["kind"] not in KINDS:
            raise ExclusionsFileError(f"{path} entry {entry['module']}: kind must be one of {KINDS}")
        if entry.get("keep") and not entry["module"].endswith(".*"):
            raise ExclusionsFileError(f"{path} entry {entry['module']}: keep is only for a pkg.* entry")
        exclusions.append(Exclusion(entry["module"], entry["kind"], entry["why"], tuple(entry.get("keep", ()))))
    return exclusions


def excluded_module_names(exclusions: list[Exclusion]) -> list[str]:
    """Every concrete module name to hand to PyInstaller's ``excludes``."""
    return sorted({name for exclusion in exclusions for name in exclusion.module_names()})
