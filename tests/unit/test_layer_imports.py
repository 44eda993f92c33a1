"""The service talks to storage through the ports (edge_runtime/contract/ports.py); only a
composition root picks an adapter (docs/architecture.md, layers and layout); each layer imports
exactly the layers its package docstring names (contract <- local, contract <- service,
cli -> all three, cluster_postgres -> contract, service and cli).

Read statically, by AST, from the source of every module: every ``import`` and ``from ... import``
anywhere in a module (a function-level import counts: it is how the CLI defers loading), relative
imports resolved. Nothing is imported to check it, so an import behind a branch is seen too.
"""

from __future__ import annotations

import ast
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[2] / "edge_runtime"
ADAPTER = "edge_runtime.local"

#: CLI modules that may import the Local adapter, each with its reason. A module that no longer
#: imports it must leave this list (tested), so the list only shrinks.
CLI_LOCAL_IMPORTS = {
    "edge_runtime.cli.serve": "the composition root of the device service: builds the Local store and adapters",
    "edge_runtime.cli.common": "the composition root of the user commands (LocalStores, --db)",
    "edge_runtime.cli.local_database": "the Local openers of the user commands, imported only when a "
                                       "Local store is opened (the cluster CLI never loads them)",
    "edge_runtime.cli.check": "checks the Local database file itself (integrity, schema, retention plan)",
    "edge_runtime.cli.migrate": "migrates and scrubs the Local database file itself",
    "edge_runtime.cli.panel": "sets the panel password in the Local database file itself",
    "edge_runtime.cli.submit_handoff": "hands a submit to the Local service over its socket beside the "
                                       "database file (the client end runs before any store is opened)",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(_PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, name: str) -> set[str]:
    """Every module ``path`` (the module ``name``) imports, with ``from x import y`` also as ``x.y``
    (y may be a submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)
    return found


def is_adapter(module: str) -> bool:
    return module == ADAPTER or module.startswith(ADAPTER + ".")


def _modules() -> dict[str, Path]:
    return {module_name(path): path for path in _PACKAGE.rglob("*.py")}


def reachable(start: set[str], modules: dict[str, Path]) -> dict[str, str]:
    """Every edge_runtime module reachable from ``start`` by static imports -> the module that
    first imports it."""
    seen = {name: name for name in start}
    todo = list(start)
    while todo:
        current = todo.pop()
        for target in imported_modules(modules[current], current):
            if target in modules and target not in seen:
                seen[target] = current
                todo.append(target)
    return seen


def test_no_service_module_imports_the_local_adapter_even_indirectly() -> None:
    modules = _modules()
    service = {name for name in modules if name.startswith("edge_runtime.service")}
    assert len(service) > 10
    found = reachable(service, modules)
    offending = sorted(f"{name} (imported by {by})" for name, by in found.items() if is_adapter(name))
    assert not offending, offending


def test_only_the_listed_cli_modules_import_the_local_adapter() -> None:
    modules = _modules()
    importing = {name for name, path in modules.items()
                 if name.startswith("edge_runtime.cli") and any(map(is_adapter, imported_modules(path, name)))}
    assert importing - CLI_LOCAL_IMPORTS.keys() == set(), "CLI modules picking the Local adapter outside a root"
    assert CLI_LOCAL_IMPORTS.keys() - importing == set(), "listed modules that no longer import it: unlist them"


#: Which layers each layer imports (by any module, statically): the direction the package
#: docstrings state (edge_runtime/*/__init__.py, cluster/cluster_postgres/__init__.py) and
#: docs/architecture.md draws. Exactly these: a layer that stops using one leaves the table.
DEPENDS_ON = {
    "contract": set(),
    "local": {"contract"},
    "service": {"contract"},
    "qinglong": {"contract"},
    "cli": {"contract", "local", "service", "qinglong"},
    "cluster_postgres": {"contract", "service", "cli"},
}
_CLUSTER = _PACKAGE.parent / "cluster" / "cluster_postgres"


def layer_of(module: str) -> str | None:
    """The layer a module belongs to (None outside the runtime and the Cluster package)."""
    parts = module.split(".")
    if parts[0] == "cluster_postgres":
        return "cluster_postgres"
    if parts[0] == "edge_runtime" and len(parts) > 1 and parts[1] in DEPENDS_ON:
        return parts[1]
    return None


def layer_imports() -> dict[str, dict[str, str]]:
    """layer -> {layer it imports -> one module that does, with what}."""
    sources = list(_modules().items())
    for path in sorted(_CLUSTER.rglob("*.py")):
        parts = path.relative_to(_CLUSTER.parent).with_suffix("").parts
        sources.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    found: dict[str, dict[str, str]] = {layer: {} for layer in DEPENDS_ON}
    for name, path in sources:
        source = layer_of(name)
        if source is None:
            continue
        for target in imported_modules(path, name):
            imported = layer_of(target)
            if imported is not None and imported != source:
                found[source].setdefault(imported, f"{name} imports {target}")
    return found


def test_each_layer_imports_exactly_the_layers_its_docstring_names() -> None:
    found = layer_imports()
    assert len(list(_CLUSTER.glob("*.py"))) > 5
    for layer, allowed in DEPENDS_ON.items():
        extra = {target: by for target, by in found[layer].items() if target not in allowed}
        assert not extra, f"{layer} imports a layer it must not: {extra}"
        assert set(found[layer]) == allowed, f"{layer} no longer imports {allowed - set(found[layer])}: update DEPENDS_ON"


def test_each_package_docstring_states_its_dependency_direction() -> None:
    packages = {layer: _PACKAGE / layer / "__init__.py" for layer in DEPENDS_ON if layer != "cluster_postgres"}
    packages["cluster_postgres"] = _CLUSTER / "__init__.py"
    for layer, path in packages.items():
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        paragraph = next((p for p in doc.split("\n\n") if p.startswith("Dependency direction:")), "")
        assert paragraph, f"{path}: no 'Dependency direction:' paragraph"
        for target in DEPENDS_ON[layer]:
            assert target in paragraph, f"{path}: the dependency on {target} is not stated"


def test_the_scan_sees_every_form_of_import(tmp_path: Path) -> None:
    planted = _PACKAGE / "service" / "x.py"  # never written: only its name places the relative imports
    forms = {
        "import edge_runtime.local.database": True,
        "from edge_runtime.local.runs import LocalRunRepository": True,
        "from edge_runtime import local": True,
        "from ..local import store": True,
        "from ..local.errors import StorageErrors": True,
        "def f():\n    from edge_runtime.local.wake import poke": True,
        "from ..contract import ports": False,
        "from . import journal": False,
        "import edge_runtime.localized": False,
    }
    for source, expected in forms.items():
        path = tmp_path / "x.py"
        path.write_text(source + "\n", encoding="utf-8")
        modules = imported_modules(path, module_name(planted))
        assert any(map(is_adapter, modules)) is expected, (source, modules)
