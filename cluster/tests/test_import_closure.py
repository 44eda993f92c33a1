"""``edge-runtime-cluster`` never loads the Local adapter (cluster-profile.md §1).

Its user commands are the edge CLI's own modules (``edge_runtime.cli.submit`` …), which open the
Local store by default: importing them must not import ``edge_runtime.local`` nor apsw (the Local
openers import it when called). Each probe runs in a fresh interpreter, so nothing the test
process already imported hides a leak. No database is needed.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

#: What may never appear in ``sys.modules`` of a cluster process.
_FORBIDDEN = ("sorted(m for m in sys.modules"
              " if m == 'apsw' or m == 'edge_runtime.local' or m.startswith('edge_runtime.local.'))")

#: Each command of ``edge-runtime-cluster`` and the modules it runs.
COMMAND_MODULES = {
    "bootstrap": ["cluster_postgres.cli", "cluster_postgres.readiness"],
    "migrate": ["cluster_postgres.cli", "cluster_postgres.migrations"],
    "check": ["cluster_postgres.cli", "cluster_postgres.readiness"],
    "serve": ["cluster_postgres.cli", "cluster_postgres.serve"],
    "retention": ["cluster_postgres.cli", "cluster_postgres.commands", "cluster_postgres.retention", "cluster_postgres.store"],
    **{name: ["cluster_postgres.cli", "cluster_postgres.commands", "cluster_postgres.store",
              f"edge_runtime.cli.{module}"]
       for name, module in (("submit", "submit"), ("cancel", "cancel"), ("show", "show"), ("list", "list_runs"),
                            ("events", "events"), ("logs", "logs"), ("dispatch", "dispatch"), ("env", "env"),
                            ("schedule", "schedule"), ("notify", "notify"))},
}


def _forbidden_after(body: str) -> str:
    probe = f"import sys\nimport cluster_postgres\n{body}\nprint({_FORBIDDEN})\n"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip().splitlines()[-1]


def test_the_user_commands_are_the_ones_the_cluster_cli_registers() -> None:
    from cluster_postgres.commands import USER_COMMANDS

    assert set(COMMAND_MODULES) == {"bootstrap", "migrate", "check", "serve", "retention", *USER_COMMANDS}


@pytest.mark.parametrize("command", sorted(COMMAND_MODULES))
def test_importing_a_cluster_command_loads_neither_the_local_adapter_nor_apsw(command: str) -> None:
    body = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in COMMAND_MODULES[command])
    assert _forbidden_after(body) == "[]"


def test_the_whole_cluster_cli_parses_and_runs_a_command_without_the_local_adapter() -> None:
    # Every command registered (the parser imports each module), then a user command run to its
    # store opener: nothing answers on port 1, so it ends as a storage error, exit code 1.
    body = (
        "from cluster_postgres.cli import main\n"
        "code = main(['list', '--dsn', 'host=127.0.0.1 port=1 user=nobody dbname=none connect_timeout=2'])\n"
        "assert code == 1, code\n"
    )
    assert _forbidden_after(body) == "[]"
