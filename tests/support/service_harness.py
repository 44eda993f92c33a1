"""End-to-end harness (imported by the e2e tests; the fixture lives in conftest.py): real ``edge-runtime serve`` processes on a temporary database.

Every process a test starts is cleaned up in a finalizer, whatever the test did: services are
SIGKILLed and reaped, then every Attempt's process group recorded in the database (and any
identity a test registered) is SIGKILLed through the identity-checked controller, so a test can
never leave a process behind nor kill one that is not its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from edge_runtime.contract.runs import ProcessIdentity, RunDetail, SubmitRunCommand
from edge_runtime.local.database import open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.process_identity import read_stat
from edge_runtime.local.wake import poke

WAIT_S = 15.0  # generous: these waits end as soon as the condition holds


def wait_for(condition: Callable[[], Any], what: str, timeout: float = WAIT_S, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def process_gone(pid: int) -> bool:
    """No such process, or only a zombie left for its (possibly non-reaping) parent."""
    stat = read_stat(pid)
    return stat is None or stat.is_zombie


class Service:
    """One ``serve`` subprocess and its stderr log."""

    def __init__(self, process: subprocess.Popen, log_path: Path) -> None:
        self.process = process
        self.log_path = log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, needle: str, timeout: float = WAIT_S) -> None:
        wait_for(lambda: needle in self.log() or self.process.poll() is not None, f"{needle!r} in the service log",
                 timeout)
        assert needle in self.log(), f"service exited ({self.process.returncode}) before logging {needle!r}:\n{self.log()}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = WAIT_S) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.db_path = tmp_path / "edge-runtime.db"
        self.services: list[Service] = []
        self.extra_identities: list[ProcessIdentity] = []
        self.env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        self.env.pop("EDGE_RUNTIME_CONFIG", None)
        self.env.pop("EDGE_RUNTIME_DB", None)

    # ----------------------------------------------------------------- processes

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [sys.executable, "-m", "edge_runtime", "--db", str(self.db_path), *args],
            capture_output=True, text=True, env=self.env, timeout=60,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"edge-runtime {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result

    def serve(
        self,
        *flags: str,
        worker_id: str = "e2e-worker",
        grace_ms: int = 1000,
        pass_fds: tuple[int, ...] = (),
        env: dict[str, str] | None = None,
    ) -> Service:
        log_path = self.tmp / f"serve-{len(self.services)}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "edge_runtime", "--db", str(self.db_path), "serve",
                 "--worker-id", worker_id, "--grace-ms", str(grace_ms), "--poll-interval-ms", "5000", *flags],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env={**self.env, **(env or {})}, pass_fds=pass_fds,
            )
        service = Service(process, log_path)
        self.services.append(service)
        service.wait_log("recovery.done")
        # Started: its side servers too (the submit hand-off, the notification sender, tasks'
        # messages, the panel), so what a test measures at rest (descriptors, memory) is the whole
        # service.
        wait_for(lambda: "service.ready" in service.log() or process.poll() is not None,
                 "the service and its side servers to start")
        return service

    def submit(self, *argv: str) -> str:
        return self.cli("submit", "--", *argv).stdout.strip()

    def submit_many(self, argvs: list[list[str]]) -> list[str]:
        """Queue several Runs in one process (no CLI start-up each), then wake the services."""
        with open_database(self.db_path, create=False) as db:
            runs = LocalRunRepository(db)
            ids = [runs.submit(SubmitRunCommand(argv=argv)).id for argv in argvs]
        poke(self.db_path)
        return ids

    # ----------------------------------------------------------------- state

    def detail(self, run_id: str) -> RunDetail:
        with open_database(self.db_path, create=False) as db:
            return LocalRunRepository(db).detail(run_id)

    def events(self, run_id: str) -> list[Any]:
        with open_database(self.db_path, create=False) as db:
            return LocalRunRepository(db).events(run_id)

    def event_types(self, run_id: str) -> list[str]:
        return [event.type for event in self.events(run_id)]

    def wait_status(self, run_id: str, *statuses: str, timeout: float = WAIT_S) -> RunDetail:
        return wait_for(
            lambda: (d := self.detail(run_id)).status.value in statuses and d,
            f"run {run_id} to reach {statuses}",
            timeout,
        )

    def wait_running(self, run_id: str) -> ProcessIdentity:
        detail = self.wait_status(run_id, "running")
        identity = detail.attempts[-1].identity
        assert identity is not None
        return identity

    # ----------------------------------------------------------------- cleanup

    def cleanup(self) -> None:
        for service in self.services:
            if service.process.poll() is None:
                service.process.kill()
            service.process.wait(30)
        identities = list(self.extra_identities)
        if self.db_path.exists():
            with open_database(self.db_path, create=False) as db:
                for attempt in _all_attempts(LocalRunRepository(db), db):
                    if attempt.identity is not None:
                        identities.append(attempt.identity)
        controller = LocalProcessController()
        for identity in identities:
            controller.force_kill(identity)  # identity-checked: never someone else's process


def _all_attempts(runs: LocalRunRepository, db: Any) -> list[Any]:
    attempts = []
    for run in runs.list_runs(limit=10_000):
        attempts.extend(runs.attempts(run.id))
    return attempts


def decode_json(text: str) -> Any:
    return msgspec.json.decode(text)
