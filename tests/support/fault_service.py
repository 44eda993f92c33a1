"""Driving real ``edge-runtime serve`` processes for the service-level campaigns (kill -9, clock
jumps): spawn through the :mod:`fault_serve` launcher (token log, shiftable clock), submit and
cancel from this process, check the database between lives, and clean up every process.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from edge_runtime.contract.runs import CancelRunCommand, ProcessIdentity, RunError, SubmitRunCommand
from edge_runtime.local.database import LocalDatabase, open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.process_identity import group_members
from edge_runtime.local.wake import poke
from edge_runtime.contract.run_lease import REASON_ORPHAN_STARTING, REASON_ORPHAN_UNSTARTED
from edge_runtime.service.attempts import REASON_STOPPED_UNRECORDED
from tests.support.fault_workloads import stored_problems

HERE = Path(__file__).resolve().parent
GRACE_MS = 300
SLOTS = 3
SETTLE_S = 40.0

#: Commands by kind. Each logs "<label> <attempt id> <pid>" when it starts, so a second start of
#: the same Attempt shows as a repeated attempt id.
_LOG_START = 'echo "$0 $EDGE_RUNTIME_ATTEMPT_ID $$" >> "$STARTS"; '
_COMMANDS = {
    "quick": _LOG_START + "exec sleep 0.3",
    "long": _LOG_START + "exec sleep 4",
    "stubborn": _LOG_START + "trap '' TERM; sleep 3; sleep 1",
    "family": _LOG_START + "sleep 4 & sleep 4; wait",
}


class ServiceCampaign:
    def __init__(
        self, root: Path, rng: random.Random, *, clock_offset_ms: int | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.rng = rng
        self.device = root / "device"  # everything the runtime writes
        self.harness = root / "harness"  # what only the test writes (token log, start log)
        self.device.mkdir()
        self.harness.mkdir()
        self.db_path = self.device / "edge-runtime.db"
        self.starts = self.harness / "starts.log"
        self.tokens = self.harness / "tokens.log"
        # Short leases, so that an Attempt whose service died before it took the Run Lease is
        # abandoned (and its cancel can end) within the settle phase rather than after a minute.
        self.env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", FAULT_TOKEN_LOG=str(self.tokens),
                        STARTS=str(self.starts), EDGE_RUNTIME_RUN_LEASE_MS="3000",
                        EDGE_RUNTIME_SESSION_LEASE_MS="3000",
                        # The tasks log their start to $STARTS: a task gets only what pass_env names.
                        EDGE_RUNTIME_PASS_ENV="STARTS")
        for variable in ("EDGE_RUNTIME_CONFIG", "EDGE_RUNTIME_DB"):
            self.env.pop(variable, None)
        self.env.update(env or {})
        self.clock_file = self.harness / "clock-offset-ms"
        if clock_offset_ms is not None:
            self.set_clock_offset(clock_offset_ms)
            self.env["FAULT_CLOCK_FILE"] = str(self.clock_file)
        self.services: list[subprocess.Popen] = []
        self.labels: dict[str, str] = {}  # run id -> label
        self.seen_events: set[str] = set()
        self.acked_cancels: set[str] = set()
        self.kills = 0
        self.lost = 0
        self.violations: list[str] = []
        self.lost_problems: list[str] = []

    # ----------------------------------------------------------------- processes

    def set_clock_offset(self, offset_ms: int) -> None:
        """Shift the services' wall clock (atomically: a reader never sees a half-written file)."""
        temporary = self.clock_file.with_suffix(".tmp")
        temporary.write_text(str(offset_ms))
        os.replace(temporary, self.clock_file)

    def serve(self, worker_id: str = "fault-worker") -> subprocess.Popen:
        log = open(self.device / f"serve-{len(self.services)}.log", "wb")
        try:
            process = subprocess.Popen(
                [sys.executable, str(HERE / "fault_serve.py"), "--db", str(self.db_path), "serve",
                 "--worker-id", worker_id, "--grace-ms", str(GRACE_MS), "--poll-interval-ms", "1000",
                 "--slots", str(SLOTS)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=self.env,
            )
        finally:
            log.close()
        self.services.append(process)
        return process

    def wait_serving(self, process: subprocess.Popen, timeout: float = 30.0) -> bool:
        """Until the service logged ``recovery.done`` (True) or exited (False)."""
        log = self.device / f"serve-{len(self.services) - 1}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process.poll() is None:
            if b"recovery.done" in log.read_bytes():
                return True
            time.sleep(0.02)
        return False

    def log_tail(self, index: int, lines_wanted: int = 3) -> str:
        text = (self.device / f"serve-{index}.log").read_text(errors="replace")
        return " | ".join(text.strip().splitlines()[-lines_wanted:])

    def kill(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            self.kills += 1
        process.wait(30)

    def cleanup(self) -> None:
        for process in self.services:
            if process.poll() is None:
                process.kill()
            process.wait(30)
        # A process whose service died before recording its identity is known only from the
        # start log; its environment names its Attempt, which identifies it beyond a reused pid.
        for fields in (line.split() for line in lines(self.starts)):
            _kill_group_if_ours(int(fields[2]), fields[1])
        if not self.db_path.exists():
            return
        controller = LocalProcessController()
        with open_database(self.db_path, create=False) as db:
            for attempt in _attempt_identities(db):
                controller.force_kill(attempt)  # identity-checked: never someone else's process

    # ----------------------------------------------------------------- work

    def submit(self, repo: LocalRunRepository) -> None:
        kind = self.rng.choice(sorted(_COMMANDS))
        label = f"{kind}-{len(self.labels)}"
        run = repo.submit(SubmitRunCommand(argv=["/bin/sh", "-c", _COMMANDS[kind], label], name=label))
        self.labels[run.id] = label

    def cancel(self, repo: LocalRunRepository) -> None:
        if not self.labels:
            return
        run_id = self.rng.choice(sorted(self.labels))
        try:
            repo.request_cancel(CancelRunCommand(run_id=run_id, reason="fault campaign"))
        except RunError:
            return  # already ended: nothing to cancel
        self.acked_cancels.add(run_id)

    def act(self, seconds: float) -> None:
        """Submit and cancel while the service runs, for about ``seconds``."""
        deadline = time.monotonic() + seconds
        with open_database(self.db_path) as db:
            repo = LocalRunRepository(db)
            while True:
                if self.rng.random() < 0.6:
                    self.submit(repo)
                else:
                    self.cancel(repo)
                poke(self.db_path)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                time.sleep(min(remaining, self.rng.uniform(0.0, 0.25)))

    # ----------------------------------------------------------------- checks

    def check(self, when: str) -> None:
        with open_database(self.db_path, create=False) as db:
            problems = stored_problems(db)
            events = {row[0] for row in db.connection.execute("SELECT id FROM run_events")}
            cancels = {row[0] for row in db.connection.execute(
                "SELECT id FROM runs WHERE cancel_requested_at_ms IS NOT NULL")}
            # Only a process that may have started fails a Run: one was recorded (pid), or
            # the service died or stopped between the start barrier and recording one. (Every
            # Attempt crosses the barrier in the start transaction, so "it has a started lease"
            # would hold for any Run that ever had an Attempt: no check at all.)
            never_started = [row[0] for row in db.connection.execute(
                "SELECT r.id FROM runs r WHERE r.status = 'failed' AND NOT EXISTS (SELECT 1 FROM run_attempts a "
                "WHERE a.run_id = r.id AND (a.pid IS NOT NULL OR a.end_reason IN (?, ?) "
                "OR a.end_reason LIKE 'the process identity could not be recorded%' "
                "OR a.end_reason LIKE 'process % could not be identified after its start%'))",
                (REASON_ORPHAN_STARTING, REASON_STOPPED_UNRECORDED))]
            # No churn: a Run goes back to the queue only for a start that certainly made no
            # process (a claimed orphan, a spawn that failed), never for a refusal or a fence.
            churn = db.connection.execute(
                "SELECT run_id, json_extract(payload, '$.reason') FROM run_events WHERE type = 'run.requeued' "
                "AND json_extract(payload, '$.reason') <> ? "
                "AND json_extract(payload, '$.reason') NOT LIKE 'the process was not started:%' "
                "AND json_extract(payload, '$.reason') NOT LIKE 'cannot start %'",
                (REASON_ORPHAN_UNSTARTED,)).fetchall()
            succeeded = [row[0] for row in db.connection.execute("SELECT id FROM runs WHERE status = 'succeeded'")]
            over = db.connection.execute(
                "SELECT worker_id, session_generation, count(*) FROM run_dispatch_leases WHERE status = 'leased' "
                "GROUP BY worker_id, session_generation HAVING count(*) > ?", (SLOTS,)).fetchall()
        problems += [f"run {self.labels.get(run_id, run_id)} failed though no process may have started"
                     for run_id in never_started]
        problems += [f"session {worker}#{generation} holds {count} grants, above its {SLOTS} slots"
                     for worker, generation, count in over]
        problems += [f"run {self.labels.get(run_id, run_id)} was requeued for no failed start: {reason}"
                     for run_id, reason in churn]
        missing = len(self.seen_events - events) + len(self.acked_cancels - cancels)
        if missing:
            self.lost += missing
            self.lost_problems.append(f"{when}: {missing} committed events or acknowledged cancels disappeared")
        self.seen_events |= events
        starts = [line.split() for line in lines(self.starts)]
        by_label = {label: run_id for run_id, label in self.labels.items()}
        # A command never runs twice: at most one start per Run, whatever its Attempts (a start
        # per Attempt would allow a Run requeued after its process began to run again).
        for label, count in Counter(fields[0] for fields in starts).items():
            if count > 1:
                run_id = by_label.get(label, "")
                problems.append(f"{label} ran {count} times (attempts {sorted(f[1] for f in starts if f[0] == label)}, "
                                f"run {run_id})")
        started_labels = {fields[0] for fields in starts}
        problems += [f"run {self.labels[run_id]} succeeded but its command never started" for run_id in succeeded
                     if run_id in self.labels and self.labels[run_id] not in started_labels]
        self.violations += [f"{when}: {problem}" for problem in problems]

    def drain(self, stall_s: float = 15.0) -> None:
        """Let one service run every Run nobody cancelled to its end, then judge (each Run once: none
        may be stranded ``queued``/``dispatching``, none may fail without having started).

        However long the queue, it must keep moving: a judgement is made once every Run ended,
        or once nothing changed for ``stall_s`` (several Run Leases and the longest command)."""
        process = self.serve()
        last, changed_at = None, time.monotonic()
        while (undrained := self._undrained()) and time.monotonic() - changed_at < stall_s:
            if undrained != last:
                last, changed_at = undrained, time.monotonic()
            poke(self.db_path)
            time.sleep(0.2)
        for run_id, status in self._undrained():
            self.violations.append(f"run {self.labels.get(run_id, run_id)} never ended: {status}; "
                                   f"{self.describe(run_id)}")
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        self.check("after draining")

    def describe(self, run_id: str) -> str:
        """What the store holds of a Run's Attempts, their grants and sessions: a stuck Run's
        violation says why it is stuck, since a campaign's timing is not reproducible."""
        with open_database(self.db_path, create=False) as db:
            rows = db.connection.execute(
                "SELECT a.attempt, a.status, a.pid, a.end_reason, l.worker_id, l.session_generation, l.status, "
                "l.expires_at_ms, s.generation, s.status, s.lease_expires_at_ms FROM run_attempts a "
                "LEFT JOIN run_dispatch_leases l ON l.attempt_id = a.id "
                "LEFT JOIN worker_sessions s ON s.worker_id = l.worker_id WHERE a.run_id = ? ORDER BY a.attempt",
                (run_id,)).fetchall()
            events = [row[0] for row in db.connection.execute(
                "SELECT type FROM run_events WHERE run_id = ? ORDER BY sequence", (run_id,))]
            now = db.connection.execute("SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)").fetchone()[0]
        attempts = "; ".join(
            f"attempt {number} {status} pid={pid} reason={reason!r} grant={worker}#{generation} {grant} "
            f"expires {expires - now if expires else None} ms, session #{session_generation} {session} "
            f"expires {session_expires - now if session_expires else None} ms"
            for number, status, pid, reason, worker, generation, grant, expires, session_generation, session,
            session_expires in rows)
        return f"attempts: {attempts or 'none'}; events: {', '.join(events)}"

    def _undrained(self) -> list[tuple[str, str]]:
        with open_database(self.db_path, create=False) as db:
            # A running process of another worker id is that worker's to re-adopt when it returns.
            return db.connection.execute(
                "SELECT r.id, r.status FROM runs r WHERE r.cancel_requested_at_ms IS NULL "
                "AND r.status NOT IN ('succeeded', 'failed', 'cancelled') AND NOT EXISTS (SELECT 1 FROM "
                "run_attempts a JOIN run_dispatch_leases l ON l.attempt_id = a.id WHERE a.run_id = r.id "
                "AND a.status = 'running' AND l.worker_id <> 'fault-worker')"
            ).fetchall()

    def settle(self) -> None:
        """Cancel everything left, let one last service deliver it all, and judge the end state."""
        with open_database(self.db_path) as db:
            repo = LocalRunRepository(db)
            for run_id in sorted(self.labels):
                try:
                    repo.request_cancel(CancelRunCommand(run_id=run_id, reason="campaign end"))
                    self.acked_cancels.add(run_id)
                except RunError:
                    pass  # already ended
        process = self.serve()
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline and self._unsettled():
            poke(self.db_path)
            time.sleep(0.2)
        # Every SIGKILL deadline recorded has passed by now (grace is short): no group may be left.
        time.sleep(2 * GRACE_MS / 1000)
        with open_database(self.db_path, create=False) as db:
            for identity, deadline_ms in _deadlines(db):
                alive = [stat.pid for stat in group_members(identity.pgid, session=identity.pgid)]
                if alive:
                    self.violations.append(f"process group {identity.pgid} alive after its kill deadline: {alive}")
        for run_id, status, dispatch in self._unsettled():
            self.violations.append(f"cancel of run {self.labels[run_id]} never ended: run {status}, "
                                   f"dispatch {dispatch}; {self.describe(run_id)}")
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        self.check("after settling")

    def _unsettled(self) -> list[tuple[str, str, str | None]]:
        with open_database(self.db_path, create=False) as db:
            rows = db.connection.execute(
                "SELECT r.id, r.status, d.status FROM runs r LEFT JOIN run_cancellation_dispatches d ON d.run_id = r.id "
                "WHERE r.cancel_requested_at_ms IS NOT NULL AND r.status NOT IN ('succeeded', 'failed', 'cancelled') "
                "AND (d.status IS NULL OR d.status NOT IN ('dispatched', 'blocked'))"
            ).fetchall()
        return rows


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _kill_group_if_ours(pid: int, attempt_id: str) -> None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return  # gone already
    if f"EDGE_RUNTIME_ATTEMPT_ID={attempt_id}".encode() in environ:
        try:
            os.killpg(pid, signal.SIGKILL)  # the command is its group's leader (setsid at spawn)
        except ProcessLookupError:
            pass  # exited meanwhile


def _attempt_identities(db: LocalDatabase) -> Iterator[ProcessIdentity]:
    for pid, pgid, ticks, boot in db.connection.execute(
        "SELECT pid, pgid, process_start_ticks, boot_id FROM run_attempts WHERE pid IS NOT NULL"
    ):
        yield ProcessIdentity(pid=pid, pgid=pgid, start_ticks=ticks, boot_id=boot)


def _deadlines(db: LocalDatabase) -> Iterator[tuple[ProcessIdentity, int]]:
    for pid, pgid, ticks, boot, deadline in db.connection.execute(
        "SELECT pid, pgid, process_start_ticks, boot_id, kill_deadline_at_ms FROM run_attempts "
        "WHERE pid IS NOT NULL AND kill_deadline_at_ms IS NOT NULL"
    ):
        yield ProcessIdentity(pid=pid, pgid=pgid, start_ticks=ticks, boot_id=boot), deadline


