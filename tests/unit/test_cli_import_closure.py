"""What a command imports is what it uses: the import closure of ``--version`` and ``submit``.

Each probe runs the CLI's entry point in a fresh interpreter (the test process has imported
everything already) and prints ``sys.modules`` afterwards. Guarded by module names, never by a
time: the start-up figures themselves are in the bench (``cli_start``, docs/benchmarks.md).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: ``--version`` is answered before the parser exists: not even argparse or typing.
NEVER_FOR_VERSION = ("argparse", "typing", "collections", "pathlib", "re", "enum", "signal", "msgspec", "apsw",
                     "edge_runtime.cli.parser", "edge_runtime.local", "edge_runtime.service")

#: ``submit`` (and ``submit --batch``) writes one transaction to the Local store: none of the
#: service stack (but the trusted-directory check every write applies), no cron or time zones,
#: no lease authority, no schedules, retention, health checks or the scrub, and no stdlib module
#: for processes, signals, JSON, URLs, zones or temporary files.
NEVER_FOR_SUBMIT = (
    "edge_runtime.service.service", "edge_runtime.service.worker", "edge_runtime.service.executor",
    "edge_runtime.service.config", "edge_runtime.service.attempts", "edge_runtime.service.monitor",
    "edge_runtime.contract.cron", "edge_runtime.contract.schedules", "edge_runtime.contract.time_zones",
    "edge_runtime.local.worker_lease", "edge_runtime.local.run_start", "edge_runtime.local.schedules",
    "edge_runtime.local.retention", "edge_runtime.local.health", "edge_runtime.local.legacy_token_scrub",
    "edge_runtime.local.content_fingerprint",
    "subprocess", "signal", "json", "urllib.request", "zoneinfo", "tempfile", "email", "shlex",
)

_PROBE = """
import os, sys
if os.environ.get("PROBE_ONE_FOLDER"):  # as the one-folder build runs: frozen, its home "_internal"
    sys.frozen, sys._MEIPASS = True, os.path.join(os.getcwd(), "_internal")
from edge_runtime.cli.main import main
code = main(sys.argv[1:])
sys.stdout.flush()
print()
print(repr((code, sorted(sys.modules))))
"""


def _closure(argv: list[str], stdin: str = "", *, one_folder: bool = False) -> dict:
    env = {**os.environ, "PROBE_ONE_FOLDER": "1" if one_folder else ""}
    result = subprocess.run([sys.executable, "-c", _PROBE, *argv], input=stdin, capture_output=True,
                            text=True, timeout=120, check=True, env=env)
    code, modules = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    return {"code": code, "modules": modules}


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == name or m.startswith(name + ".") for name in names)]


@pytest.mark.parametrize("one_folder", [False, True], ids=["source", "one-folder"])
def test_version_loads_only_the_entry_point(one_folder: bool) -> None:
    run = _closure(["--version"], one_folder=one_folder)
    assert run["code"] == 0
    # A frozen build first asks whether it is a one-file child to bind to its launcher (the
    # one-folder build is not): the launcher module and the pidfd helper, never signal.
    allowed = {"edge_runtime.service", "edge_runtime.service.watch"} if one_folder else set()
    assert [m for m in _loaded(run["modules"], NEVER_FOR_VERSION) if m not in allowed] == []
    assert "edge_runtime.cli.main" in run["modules"]
    assert ("edge_runtime.cli.launcher" in run["modules"]) is one_folder  # the probe did run frozen


@pytest.mark.parametrize("batch", [False, True], ids=["one", "batch"])
def test_submit_loads_neither_the_service_stack_nor_what_it_does_not_use(tmp_path: Path, batch: bool) -> None:
    db = str(tmp_path / "edge-runtime.db")
    assert _closure(["--db", db, "migrate"])["code"] == 0
    if batch:
        run = _closure(["--db", db, "submit", "--batch", "-"], stdin='["true"]\n["echo", "x"]\n')
    else:
        run = _closure(["--db", db, "submit", "--", "true"])
    assert run["code"] == 0
    assert "apsw" in run["modules"] and "edge_runtime.local.runs" in run["modules"]  # the probe sees real imports
    assert _loaded(run["modules"], NEVER_FOR_SUBMIT) == []


_ENTRY_PROBE = """
import sys
sys.frozen, sys._MEIPASS = True, "/usr/lib"  # a one-folder install in a root-owned directory
sys.argv = ["edge-runtime", "--version"]
try:
    with open(ENTRY, encoding="utf-8") as script:  # as the bootloader runs it (runpy imports typing)
        exec(compile(script.read(), ENTRY, "exec"), {"__name__": "__main__"})
except SystemExit as exit_:
    code = exit_.code
sys.stdout.flush()
print()
print(repr((code, sorted(sys.modules))))
"""


def test_built_entry_script_checks_its_install_directory_without_typing() -> None:
    """The built executables' entry script checks the directory it runs from before the CLI
    loads, on every command: that check must not pull in typing, re or collections."""
    entry = Path(__file__).resolve().parents[2] / "build" / "edge-runtime.py"
    probe = _ENTRY_PROBE.replace("ENTRY", repr(str(entry)))
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    code, modules = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    assert code == 0, result.stderr
    assert result.stdout.startswith("edge-runtime "), result.stdout
    assert "edge_runtime.service.trusted_paths" in modules  # the check did run
    allowed = {"edge_runtime.service", "edge_runtime.service.watch", "edge_runtime.service.errors",
               "edge_runtime.service.trusted_paths"}
    assert [m for m in _loaded(modules, NEVER_FOR_VERSION) if m not in allowed] == []
