"""The user commands get their store from the composition root (``args.stores``) through the Store
port; on the device that is the Local store, and a read command still imports no more of the
runtime than it needs (a router pays for every module at each start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from edge_runtime.cli.common import LOCAL_STORES, READ
from edge_runtime.cli.parser import build_parser

USER_COMMANDS = ("submit", "cancel", "show", "list", "events", "logs")

_PROBE = """
import sys
from edge_runtime.cli.main import main
code = main(sys.argv[1:])
print(code, sorted(m for m in sys.modules if m.startswith("edge_runtime")))
"""


def test_every_user_command_runs_on_the_local_store_by_default() -> None:
    parser = build_parser()
    for argv in ([name, "r1"] if name not in ("submit", "list") else [name] for name in USER_COMMANDS):
        assert parser.parse_args(argv).stores is LOCAL_STORES, argv
    for action in ("show", "rearm"):
        extra = ["--expected-version", "1"] if action == "rearm" else []
        assert parser.parse_args(["dispatch", action, "r1", *extra]).stores is LOCAL_STORES


def test_the_local_store_keeps_no_log_copies_and_wakes_the_service_by_its_socket(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    parser = build_parser()
    args = parser.parse_args(["--db", str(db), "submit", "--", "true"])
    assert args.run(args) == 0
    args = parser.parse_args(["--db", str(db), "list"])
    with LOCAL_STORES.open(args, READ) as store:
        assert store.attempt_logs is None  # the logs are files on the device: no copies
        assert [run.status.value for run in store.runs.list_runs()] == ["queued"]
        store.wake_workers()  # no service listening: nothing happens, nothing raised


def test_read_commands_import_neither_the_lease_authority_nor_the_service(tmp_path: Path) -> None:
    db = str(tmp_path / "e.db")
    made = subprocess.run([sys.executable, "-c", _PROBE, "--db", db, "submit", "--", "true"],
                          capture_output=True, text=True, check=True)
    run_id = made.stdout.splitlines()[0]
    heavy = ["edge_runtime.local.worker_lease", "edge_runtime.service.service", "edge_runtime.service.process_identity",
             "cluster_postgres"]
    for argv in (["show", run_id], ["list"], ["events", run_id], ["dispatch", "show", run_id], ["logs", run_id],
                 ["cancel", run_id]):
        out = subprocess.run([sys.executable, "-c", _PROBE, "--db", db, *argv], capture_output=True, text=True,
                             check=False).stdout.splitlines()[-1]
        code, modules = out.split(" ", 1)
        assert code == ("1" if argv[0] == "logs" else "0"), argv  # logs: no attempt yet
        assert "'edge_runtime.local.store'" in modules, argv  # the commands did go through the Store port
        # Only a write wakes the service (the wake socket's module).
        for module in heavy + ([] if argv[0] == "cancel" else ["edge_runtime.local.wake"]):
            assert f"'{module}'" not in modules, (argv, module)
