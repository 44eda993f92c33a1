"""The service talks to storage through the ports (edge_runtime/contract/ports.py); only a
composition root picks an adapter (docs/architecture.md, layers and layout); each layer imports
exactly the layers its package docstring names (contract <- local, contract <- service,
operations -> contract, the faces -> operations, cli -> all of them, cluster_postgres -> contract,
service and cli); the QingLong face (edge_runtime/qinglong/) imports only the contract and the
operations, and only the composition roots import it; and no modules import one another in a
circle: every arrow points one way.

Read statically, by AST, from the source of every module: every ``import`` and ``from ... import``
anywhere in a module (a function-level import counts: it is how the CLI defers loading), relative
imports resolved. Nothing is imported to check it, so an import behind a branch is seen too. For
circles only, an import under ``if TYPE_CHECKING:`` is no arrow (it never runs).
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
    "edge_runtime.cli.notify": "a task's `notify send` hands its message to the Local service over its socket "
                               "(the capability in its environment), opening no store",
    "edge_runtime.cli.notify_handoff": "the Local service's end of a task's message: its socket and token check",
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
#: docstrings state (edge_runtime/*/__init__.py, edge_runtime/operations.py,
#: cluster/cluster_postgres/__init__.py) and docs/architecture.md draws. Exactly these: a layer
#: that stops using one leaves the table. The faces stand on the operations: the panel and the
#: CLI are the runtime's own, qinglong speaks for QingLong's clients and imports no adapter; of
#: them only the CLI, where the composition roots are, imports the others.
DEPENDS_ON = {
    "contract": set(),
    "local": {"contract"},
    "service": {"contract"},
    "operations": {"contract", "service"},
    "qinglong": {"contract", "operations"},
    "panel": {"contract", "local", "operations"},
    "cli": {"contract", "local", "service", "operations", "panel", "qinglong"},
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
    packages["operations"] = _PACKAGE / "operations.py"
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


# ----------------------------------------------------------------- the QingLong face


def test_the_qinglong_face_imports_no_adapter_and_only_the_composition_roots_import_it() -> None:
    # Implied by DEPENDS_ON; stated on its own as the rule of a face for another product's clients.
    found = layer_imports()
    assert set(found["qinglong"]) <= {"contract", "operations"}, found["qinglong"]
    importers = {layer: targets["qinglong"] for layer, targets in found.items() if "qinglong" in targets}
    assert set(importers) <= {"cli", "cluster_postgres"}, importers


# ----------------------------------------------------------------- circles


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: at module level or in a function, in any branch but
    the body of an ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        children = list(ast.iter_child_nodes(node))
        if _is_type_checking(node):
            children = [child for child in children if child not in node.body]
        todo.extend(children)
    return found


def import_arrows(path: Path, name: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the module ``name`` (at ``path``) imports when it runs:
    ``import a.b`` and ``from a.b import c`` point at ``a.b``, or at ``a.b.c`` when that is a
    module (a package's ``__init__`` run on the way is no arrow of its own)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    arrows: set[str] = set()
    for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            arrows.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:
            arrows.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source)
    return arrows & modules - {name}


def circles(sources: dict[str, Path]) -> list[list[str]]:
    """The circles among ``sources`` (module -> path): each a sorted list of the modules that
    import one another round (Tarjan's strongly connected components of more than one)."""
    names = set(sources)
    graph = {name: sorted(import_arrows(path, name, names)) for name, path in sources.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found)


def _describe(circle: list[str], sources: dict[str, Path]) -> str:
    members = set(circle)
    arrows = [f"{name} -> {target}" for name in circle
              for target in sorted(import_arrows(sources[name], name, set(sources)) & members)]
    return "; ".join(arrows)


def _cluster_modules() -> dict[str, Path]:
    found = {}
    for path in sorted(_CLUSTER.rglob("*.py")):
        parts = path.relative_to(_CLUSTER.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def test_no_circle_of_imports_in_the_runtime_nor_the_cluster_package() -> None:
    modules = {**_modules(), **_cluster_modules()}
    assert len([name for name in modules if name.startswith("cluster_postgres")]) > 5
    found = circles(modules)
    assert not found, "modules that import one another in a circle: " + " | ".join(
        _describe(circle, modules) for circle in found)


def test_the_circle_scan_counts_what_runs_and_only_that(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    files = {
        "__init__.py": "",
        "a.py": "from pkg import b\n",  # a submodule by ``from package import``
        "b.py": "def f():\n    from .c import g\n",  # a function-level, relative import
        "c.py": "import pkg.a\n",  # closes a -> b -> c -> a
        "d.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from pkg.e import x\nelse:\n    import pkg.f\n",
        "e.py": "from pkg.d import y\n",  # back to d, but d only type-checks e: no circle
        "f.py": "from pkg import d\n",  # back to d, which imports f when it runs: a circle
    }
    sources = {}
    for file, text in files.items():
        (package / file).write_text(text, encoding="utf-8")
        sources["pkg" if file == "__init__.py" else f"pkg.{file[:-3]}"] = package / file
    assert circles(sources) == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.d", "pkg.f"]]
