"""A Run's user on the cluster: the worker that starts its Attempt runs it as that user (looked
up on the worker's own host), and fails it, saying why, when that host has no such user. A real
``edge-runtime-cluster serve`` worker, run as root, and a throwaway system user."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from cluster_postgres.store import PostgresStore
from edge_runtime.contract.runs import SubmitRunCommand
from tests.support.cluster_serve_harness import Worker, private_root, wait_for

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="switching a task to another user needs a root worker"),
    pytest.mark.skipif(shutil.which("useradd") is None, reason="no useradd to make the throwaway task user with"),
]

SHORT_LEASES = {"EDGE_RUNTIME_SESSION_LEASE_MS": "2000", "EDGE_RUNTIME_RUN_LEASE_MS": "3000",
                "EDGE_RUNTIME_POLL_INTERVAL_MS": "1000"}


def _ended(db: Any, run_id: str) -> tuple[Any, ...] | None:
    row = db.execute("SELECT r.status, r.task_user, a.end_reason, a.log_path FROM ql3.runs r "
                     "JOIN ql3.run_attempts a ON a.run_id = r.id WHERE r.id = %s", (run_id,)).fetchone()
    return row if row is not None and row[0] in ("succeeded", "failed", "lost", "cancelled") else None


def test_the_worker_runs_a_run_as_its_user_and_fails_one_whose_user_its_host_lacks(
        pg_database: Any, owner: Any, tmp_path: Path) -> None:
    name = f"edge-c-{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", name], check=True,
                   capture_output=True)
    try:
        pg_database.reset(owner, None)
        store = PostgresStore(pg_database.runtime_dsn)
        with private_root() as root:
            worker = Worker(root, "u1", pg_database.runtime_dsn, slots=1, env=SHORT_LEASES)
            try:
                worker.start()
                as_user = store.runs.submit(SubmitRunCommand(argv=["sh", "-c", "id -u; echo HOME=$HOME"],
                                                             task_user=name)).id
                missing = store.runs.submit(SubmitRunCommand(argv=["true"], task_user="edge-nosuch-user")).id
                ran = wait_for(lambda: _ended(owner, as_user), 60, "the Run as the task user to end")
                failed = wait_for(lambda: _ended(owner, missing), 60, "the Run of a missing user to end")
                output = Path(ran[3]).read_text()
            finally:
                worker.stop()
                store.close()
        status, task_user, _, _ = ran
        assert (status, task_user) == ("succeeded", name)
        assert output.split() == [str(pwd.getpwnam(name).pw_uid), "HOME=/nonexistent"]
        status, task_user, reason, _ = failed
        assert (status, task_user) == ("failed", "edge-nosuch-user")
        assert "SERVICE_TASK_USER_UNKNOWN" in reason and "does not exist on this device" in reason
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)
