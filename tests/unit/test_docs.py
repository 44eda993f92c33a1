"""The README and docs/ against the code they describe (as sqlite-utils' test_docs.py does for its CLI).

- every relative link in README.md and docs/*.md names a file of the repository, and every
  ``#anchor`` a heading of the page it points to (a clone has nothing outside the repository);
- the configuration table in docs/operating.md lists exactly the keys of ``ServiceConfig``, each
  with its real default;
- the command table in README.md names every ``edge-runtime`` subcommand (nested ones too) and
  only real ones, each option it shows being one that command accepts;
- the adapter table in docs/architecture.md names each module of edge_runtime/local/ and of
  cluster/cluster_postgres/ once, and a concept only one adapter has says so; its service table
  names each module of edge_runtime/service/ once;
- a reader of the README's front door from a clone meets the two set-up commands first, then how
  to get ``edge-runtime`` on ``PATH`` before the first command that uses it.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import msgspec
import pytest

from edge_runtime.cli.parser import build_parser
from edge_runtime.service.config import ServiceConfig
from edge_runtime.service.worker import IDLE_SESSION_LEASE_MS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def _prose(text: str) -> str:
    """The text without code blocks and code spans, where brackets are not links."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to dashes."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def _links() -> list[tuple[Path, str]]:
    return [(page, m.group(1)) for page in PAGES for m in _LINK.finditer(_prose(page.read_text(encoding="utf-8")))]


def test_the_pages_link_to_one_another() -> None:
    links = _links()
    assert any(target.startswith("docs/") for page, target in links if page.name == "README.md")
    for page in PAGES:
        assert "../shared" not in page.read_text(encoding="utf-8"), f"{page.name} points outside the repository"


@pytest.mark.parametrize(("page", "target"), _links(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_every_relative_link_resolves(page: Path, target: str) -> None:
    if re.match(r"[a-z]+:", target):  # https:, mailto:: not ours to check offline
        return
    path_part, _, anchor = target.partition("#")
    destination = (page.parent / path_part).resolve() if path_part else page
    assert destination.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
    assert ROOT in destination.parents or destination == ROOT, f"{page.name}: {target} leaves the repository"
    if anchor:
        assert destination.suffix == ".md", f"{page.name}: {target} has an anchor into a file that is not a page"
        assert anchor in _anchors(destination), f"{page.name}: {target}: no such heading in {destination.name}"


def _table(text: str, header: str) -> list[list[str]]:
    lines = text.splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))])
    return rows


def _documented_defaults() -> dict[str, str]:
    text = (ROOT / "docs" / "operating.md").read_text(encoding="utf-8")
    documented = {}
    for key_cell, default_cell, _meaning in _table(text, "| key | default | meaning |"):
        keys = re.findall(r"`([a-z_]+)`", key_cell)
        defaults = [d.strip() for d in default_cell.split(",")] if len(keys) > 1 else [default_cell]
        assert len(defaults) == len(keys), f"row {key_cell}: one default per key"
        documented.update(zip(keys, defaults, strict=True))
    return documented


def test_the_configuration_table_lists_every_key_with_its_default() -> None:
    documented = _documented_defaults()
    fields = {f.name: f for f in msgspec.structs.fields(ServiceConfig)}
    assert set(documented) == set(fields)
    config = ServiceConfig()
    for name, field in fields.items():
        doc = documented[name]
        value = getattr(config, name)
        if name == "worker_id":
            assert doc == "`edge-<hostname>`" and value.startswith("edge-")
        elif name == "log_dir":
            assert doc.startswith("`logs/` beside the database")
            assert config.resolved_log_dir("/srv/x/edge.db") == Path("/srv/x/logs")
        elif name == "pass_env":
            assert doc == "none" and value == []
        elif name == "work_dir":
            assert value is msgspec.UNSET and doc.startswith("`work/` beside the database")
            assert config.resolved_work_dir("/srv/x/edge.db") == Path("/srv/x/work")
        elif name == "scripts_dir":
            assert value is msgspec.UNSET and doc.startswith("`scripts/` beside the database")
            assert config.resolved_scripts_dir("/srv/x/edge.db") == Path("/srv/x/scripts")
        elif name == "panel_listen":
            assert value is msgspec.UNSET and doc.startswith("none (no panel)")
        elif name == "task_user":
            assert value is msgspec.UNSET and doc.startswith("none (the service's own user)")
        elif name == "idle_session_lease_ms":
            assert value is msgspec.UNSET and doc.split()[0] == str(IDLE_SESSION_LEASE_MS)
        elif isinstance(value, bool):
            assert doc == str(value).lower(), name
        else:
            assert field.default is not msgspec.NODEFAULT, name
            assert doc == str(value), f"{name}: docs say {doc}, the code {value}"


def _cli_commands() -> dict[tuple[str, ...], set[str]]:
    """(command,) or (command, subcommand) -> the options it accepts (the global ones included)."""
    parser = build_parser()
    global_options = {o for a in parser._actions for o in a.option_strings}

    def options(p: argparse.ArgumentParser) -> set[str]:
        return global_options | {o for a in p._actions for o in a.option_strings}

    commands: dict[tuple[str, ...], set[str]] = {}
    top = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in top.choices.items():
        nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:
            for child, child_parser in nested[0].choices.items():
                commands[(name, child)] = options(child_parser)
                # A third level (`panel app add|list|remove`): its row shows the actions' options.
                for deeper in (a for a in child_parser._actions if isinstance(a, argparse._SubParsersAction)):
                    for grandchild in deeper.choices.values():
                        commands[(name, child)] |= options(grandchild)
        else:
            commands[(name,)] = options(sub)
    commands[()] = global_options  # `edge-runtime --version`
    return commands


def _documented_commands() -> dict[tuple[str, ...], set[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    known = _cli_commands()
    documented: dict[tuple[str, ...], set[str]] = {}
    for row in _table(text, "| command | what it does |"):
        last: list[tuple[str, ...]] = []
        for span in re.findall(r"`([^`]+)`", row[0]):
            words = span.replace("\\|", "|").split()
            named = words[0] == "edge-runtime"
            if named:
                words = words[1:]
            if named and words[0].startswith("--"):  # `edge-runtime --version`
                names = [()]
            elif words[0].startswith("--"):  # `--drop-scrub-backup`: an option of the row's command
                names = last
            else:
                head = words[0] if words else ""
                if any(key[:1] == (head,) and len(key) == 2 for key in known):
                    names = [(head, child) for child in words[1].split("|")]
                else:
                    names = [(head,)] if head else [()]
            for name in names:
                documented.setdefault(name, set()).update(w.split("=")[0] for w in words if w.startswith("--") and w != "--")
            last = names
    return documented


def test_the_command_table_matches_the_cli() -> None:
    known = _cli_commands()
    documented = _documented_commands()
    assert set(documented) == set(known), (
        f"missing from the README: {sorted(set(known) - set(documented))}; "
        f"not commands: {sorted(set(documented) - set(known))}"
    )
    for name, flags in documented.items():
        assert flags <= known[name], f"edge-runtime {' '.join(name)}: no such option {sorted(flags - known[name])}"


_ADAPTERS = {"local": ROOT / "edge_runtime" / "local", "cluster": ROOT / "cluster" / "cluster_postgres"}


def _adapter_files(cell: str) -> list[str]:
    """The adapter's files a cell of the adapter table names: its ``*.py`` code spans outside
    parentheses (a parenthesis says where the other adapter does it, or adds a detail)."""
    return [span for span in re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", cell)) if span.endswith(".py")]


def test_the_adapter_table_names_every_module_of_both_adapters_once() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named: dict[str, list[str]] = {"local": [], "cluster": []}
    header = "| concept | `edge_runtime/local/` | `cluster/cluster_postgres/` |"
    for concept, local_cell, cluster_cell in _table(text, header):
        local, cluster = _adapter_files(local_cell), _adapter_files(cluster_cell)
        assert local or cluster, f"{concept}: names a file of neither adapter"
        assert bool(local) or local_cell.startswith("cluster only"), f"{concept}: say it is cluster only"
        assert bool(cluster) or cluster_cell.startswith("local only"), f"{concept}: say it is local only"
        named["local"] += local
        named["cluster"] += cluster
    for adapter, package in _ADAPTERS.items():
        modules = sorted(str(path.relative_to(package)) for path in package.rglob("*.py"))
        assert sorted(named[adapter]) == modules, f"docs/architecture.md, the adapter table: {adapter} files"


def _section(text: str, heading: str) -> str:
    """The text of the README section under ``## heading``, up to the next ``## ``."""
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_a_clone_meets_the_set_up_commands_first_then_how_to_put_edge_runtime_on_path() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.index("\n## From a clone\n") < text.index("\n## A first Run\n")
    set_up = _section(text, "From a clone").split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in set_up.splitlines()] == ["make run", "make test"]
    first_run = _section(text, "A first Run")
    before_any_command = first_run.split("```sh\n", 1)[0]
    assert "`. .venv/bin/activate`" in before_any_command and "`.venv/bin/edge-runtime`" in before_any_command
    assert first_run.split("```sh\n", 1)[1].startswith("edge-runtime ")  # the commands it makes work


def test_the_service_table_names_every_module_of_the_service_once() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = [span for _part, cell in _table(text, "| part | modules |") for span in re.findall(r"`([^`]+\.py)`", cell)]
    package = ROOT / "edge_runtime" / "service"
    modules = sorted(str(path.relative_to(package)) for path in package.rglob("*.py"))
    assert sorted(named) == modules, "docs/architecture.md, the service table: edge_runtime/service/ files"
