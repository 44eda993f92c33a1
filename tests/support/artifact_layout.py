"""The artifact tests' view of the repository: its layout, its package's modules, files loaded by path, and
the source-runtime probe (runtime_probe.py, run in a fresh interpreter)."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = ROOT / "edge_runtime"
PROBE = Path(__file__).resolve().with_name("runtime_probe.py")


def package_modules(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """Every module of the package, from its files: whatever engineers add is covered."""
    names = []
    for source in sorted(package_dir.rglob("*.py")):
        parts = source.relative_to(package_dir.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def mentioned_modules(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """Every absolute module name an ``import`` anywhere in the package's source mentions, including
    imports inside functions. ``from pkg import name`` also yields ``pkg.name`` (it may be a submodule;
    the probe ignores it when it is an attribute)."""
    names: set[str] = set()
    for source in sorted(package_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"), str(source))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*")
    return sorted(name for name in names if not name.startswith("edge_runtime"))


def load_path_module(name: str, path: Path) -> ModuleType:
    """Import a file that is not on sys.path (build/exclusions.py, artifact_audit.py) under ``name``."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_probe(options: dict, tmp_path: Path) -> dict:
    """Run tests/support/runtime_probe.py in a fresh interpreter, the way the artifact runs Python:
    -OO (the build's optimize=2) and -X utf8 (the build's UTF-8 mode)."""
    options = {"package_modules": package_modules(), "mentioned_modules": mentioned_modules(), **options}
    result = subprocess.run(
        [sys.executable, "-X", "utf8", "-OO", "-B", str(PROBE), json.dumps(options)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"probe failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout)
