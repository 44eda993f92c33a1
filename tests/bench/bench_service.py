"""Benchmarks of the device service (``edge-runtime serve``) as a real process.

- cancel latency: from ``edge-runtime cancel`` returning to the target process observing SIGTERM
  (its handler writes a wall-clock stamp). Also shown from the moment ``cancel`` was invoked, which
  adds the CLI's own start-up, and from the cancel's commit (``cancel_requested_at_ms``, the
  service's own share: wake-up, claim, identity check, signal). A negative figure means the signal
  arrived before the CLI had finished exiting (the CLI wakes the service right after its commit,
  then still has to tear its interpreter down).
- idle cost: CPU time and peak RSS (``VmHWM``) of a ``serve`` with no work, measured from
  ``/proc/<pid>`` after start-up, over 60 s (10 s with ``--quick``).
- throughput: Runs of ``true`` completed per second with 2 slots, Runs queued up front.
- output past the log cap: CPU of ``serve`` while a Run of ``yes`` writes past ``log_max_bytes``
  (hardening, log growth while serving: it used to read and drop it at full speed, about half a core).

Figures are reported, never judged pass/fail.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import common

from edge_runtime.contract.runs import SubmitRunCommand, TERMINAL_RUN_STATUSES
from edge_runtime.local.database import open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.local.wake import poke

_TARGET = """
import signal, sys, time
stamp, ready = sys.argv[1], sys.argv[2]
def on_term(signum, frame):
    now = time.time_ns()
    with open(stamp, "w") as f:
        f.write(str(now))
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
with open(ready, "w") as f:
    f.write("1")
while True:
    signal.pause()
"""


class _Serve:
    def __init__(self, db: Path, log: Path, *flags: str) -> None:
        self.db = db
        self._log_path = log
        with open(log, "wb") as handle:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "edge_runtime", "--db", str(db), "serve", "--worker-id", "bench", *flags],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=handle,
            )
        _wait(lambda: "recovery.done" in log.read_text() or self.process.poll() is not None, 30)
        if self.process.poll() is not None:
            raise RuntimeError(f"serve exited: {log.read_text()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        _kill_leftovers(self.db)


def _kill_leftovers(db_path: Path) -> None:
    if not db_path.exists():
        return  # the service never got as far as creating it: nothing can have been started
    controller = LocalProcessController()
    with open_database(db_path, create=False) as db:
        runs = LocalRunRepository(db)
        for attempt in runs.active_attempts():
            if attempt.identity is not None:
                controller.force_kill(attempt.identity)


def _wait(condition, timeout: float, interval: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark wait timed out")
        time.sleep(interval)
    return True


def _cli(db: Path, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "edge_runtime", "--db", str(db), *args], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


# --------------------------------------------------------------------------- cancel latency


def _cancel_latency(workdir: Path, cancels: int) -> tuple[list[float], list[float], list[float]]:
    db = workdir / "cancel.db"
    serve = _Serve(db, workdir / "cancel-serve.log", "--slots", "2", "--grace-ms", "5000")
    from_return: list[float] = []
    from_invoke: list[float] = []
    from_commit: list[float] = []
    try:
        with open_database(db, create=False) as handle:
            runs = LocalRunRepository(handle)
            for index in range(cancels):
                stamp, ready = workdir / f"stamp-{index}", workdir / f"ready-{index}"
                run_id = _cli(db, "submit", "--", sys.executable, "-c", _TARGET, str(stamp), str(ready))
                _wait(ready.exists, 30)
                invoked = time.time_ns()
                _cli(db, "cancel", run_id)
                returned = time.time_ns()
                _wait(lambda: stamp.exists() and stamp.read_text().strip() != "", 30)
                observed = int(stamp.read_text())
                from_return.append((observed - returned) / 1e6)
                from_invoke.append((observed - invoked) / 1e6)
                _wait(lambda: runs.get(run_id).status in TERMINAL_RUN_STATUSES, 30)
                committed = runs.get(run_id).cancel_requested_at_ms  # the cancel's commit, wall-clock ms
                from_commit.append(observed / 1e6 - committed)
    finally:
        serve.stop()
    return from_return, from_invoke, from_commit


# --------------------------------------------------------------------------- idle cost


def _proc_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime (14) + stime (15)


def _proc_hwm_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _idle_cost(workdir: Path, seconds: float) -> tuple[float, float, float]:
    db = workdir / "idle.db"
    serve = _Serve(db, workdir / "idle-serve.log")
    try:
        pid = serve.process.pid
        startup = _proc_cpu_seconds(pid)
        time.sleep(seconds)
        window = _proc_cpu_seconds(pid) - startup
        return window, startup, _proc_hwm_mib(pid)
    finally:
        serve.stop()


# --------------------------------------------------------------------------- throughput


def _throughput(workdir: Path, count: int) -> tuple[float, float]:
    db = workdir / "throughput.db"
    serve = _Serve(db, workdir / "throughput-serve.log", "--slots", "2")
    try:
        with open_database(db, create=False) as handle:
            runs = LocalRunRepository(handle)
            ids = [runs.submit(SubmitRunCommand(argv=["true"])).id for _ in range(count)]
            begin = time.perf_counter()
            poke(db)
            _wait(lambda: runs.get(ids[-1]).status in TERMINAL_RUN_STATUSES
                  and all(runs.get(i).status in TERMINAL_RUN_STATUSES for i in ids), 600, 0.01)
            elapsed = time.perf_counter() - begin
            succeeded = sum(1 for i in ids if runs.get(i).status.value == "succeeded")
    finally:
        serve.stop()
    return count / elapsed, succeeded / count


# --------------------------------------------------------------------------- output past the cap


def _flood_past_cap(workdir: Path, seconds: float) -> float:
    """Share of a core ``serve`` spends while ``yes`` writes past the log cap."""
    db = workdir / "flood.db"
    serve = _Serve(db, workdir / "flood-serve.log", "--log-max-bytes", "4096")
    try:
        run_id = _cli(db, "submit", "--", "yes")
        with open_database(db, create=False) as handle:
            runs = LocalRunRepository(handle)
            _wait(lambda: runs.get(run_id).status.value == "running", 30)
            time.sleep(1.0)  # past the cap by now: 4 KiB
            before, begin = _proc_cpu_seconds(serve.process.pid), time.perf_counter()
            time.sleep(seconds)
            share = (_proc_cpu_seconds(serve.process.pid) - before) / (time.perf_counter() - begin)
        _cli(db, "cancel", run_id)
        return share
    finally:
        serve.stop()


def run(workdir: Path, quick: bool) -> None:
    cancels = 10 if quick else 50
    idle_s = 10.0 if quick else 60.0
    runs_count = 40 if quick else 200

    from_return, from_invoke, from_commit = _cancel_latency(workdir, cancels)
    common.print_table(
        f"serve: cancel latency, {cancels} cancels (ms; target: median <= 100, p95 <= 250 from return)",
        ["measured from", "median ms", "p95 ms", "min ms", "max ms"],
        [
            [name, f"{common.median(values):.1f}", f"{common.p95(values):.1f}", f"{min(values):.1f}",
             f"{max(values):.1f}"]
            for name, values in (
                ("cancel returned", from_return),
                ("cancel committed", from_commit),
                ("cancel invoked", from_invoke),
            )
        ],
    )

    window, startup, hwm = _idle_cost(workdir, idle_s)
    common.print_table(
        f"serve: idle cost over {idle_s:.0f} s (target for 60 s: CPU <= 0.3 s, peak RSS <= 30 MiB)",
        ["figure", "value"],
        [["CPU s in the idle window", f"{window:.3f}"], ["CPU s at start-up", f"{startup:.3f}"],
         ["peak RSS MiB (VmHWM)", f"{hwm:.1f}"]],
    )

    rate, ok = _throughput(workdir, runs_count)
    common.print_table(
        f"serve: throughput, {runs_count} runs of `true`, 2 slots",
        ["figure", "value"],
        [["runs completed / s", f"{rate:.1f}"], ["succeeded", f"{ok:.0%}"]],
    )

    flood_s = 5.0 if quick else 20.0
    share = _flood_past_cap(workdir, flood_s)
    common.print_table(
        f"serve: a Run of `yes` past the 4 KiB log cap, over {flood_s:.0f} s",
        ["figure", "value"],
        [["serve CPU, share of one core", f"{share:.1%}"]],
    )
