"""The per-Attempt monitor: what starting an Attempt costs, and what its monitor costs while it runs.

- spawn-to-running: the wall time of one start pass that starts one queued Run of ``true`` (its
  Run Lease claimed and start barrier crossed, the process spawned, its identity recorded and the
  Attempt ``running``), on a Local database in a fresh directory, in-process (the supervisor as
  the service loop drives it). Median and p95 over the Runs.
- the monitor (when this build has one): its file size and the RSS (``VmRSS``, ``VmHWM``) of the
  monitor process of an Attempt running ``sleep``, read from ``/proc``, over several Attempts
  (min and median: the machine may be loaded).
- the router targets' monitors: their file sizes, from the cross build's cache
  (``/var/cache/edge-runtime-cross/<target>/monitor``) when it is there; their RSS is not measured
  here (under qemu-user it would be the emulator's).

The "before" figure (no monitor: the service spawned the task itself) comes from running this
file against the tree of the commit before the monitor, in a temporary worktree (its supervisor
has no ``poll_exits``; ``_monitor_cost`` then reports that the build has none).

Figures are reported, never judged pass/fail.
"""

from __future__ import annotations

import time
from pathlib import Path

import common

from edge_runtime.contract.runs import SubmitRunCommand
from edge_runtime.local.database import open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.attempts import AttemptSupervisor
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.journal import Journal
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.process_identity import read_boot_id
from edge_runtime.service.worker import WorkerSession


class _Rig:
    def __init__(self, db, workdir: Path) -> None:
        self.runs = LocalRunRepository(db)
        self.worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="bench", slots=1,
                                    session_lease_ms=30_000, run_lease_ms=60_000)
        self.worker.register()
        self.loop = EventLoop()
        self.supervisor = AttemptSupervisor(
            runs=self.runs, worker=self.worker, controller=LocalProcessController(), loop=self.loop,
            journal=Journal(open("/dev/null", "w")), slots=1, log_dir=workdir / "logs",
            log_max_bytes=1 << 20, boot_id=read_boot_id(),
        )

    def drive_until_idle(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.supervisor.running or self.supervisor.pending_retries:
            if time.monotonic() > deadline:
                raise RuntimeError("an Attempt did not end")
            for callback in self.loop.wait(0.05):
                callback()
            # poll_exits: with monitors; reap_children: the supervisor before them (for "before" figures).
            poll = getattr(self.supervisor, "poll_exits", None) or self.supervisor.reap_children
            poll()
            self.supervisor.run_capture_timers()
            self.supervisor.retry_completions()

    def close(self) -> None:
        self.supervisor.close()
        self.loop.close()


def _spawn_to_running(workdir: Path, count: int) -> list[float]:
    times = []
    with open_database(workdir / "spawn.db", create=True) as db:
        rig = _Rig(db, workdir)
        try:
            for _ in range(count):
                rig.runs.submit(SubmitRunCommand(argv=["true"]))
                begin = time.perf_counter()
                started = rig.supervisor.start_queued()
                elapsed = time.perf_counter() - begin
                if started != 1:
                    raise RuntimeError("the Run did not start")
                times.append(elapsed * 1000)
                rig.drive_until_idle()
        finally:
            rig.close()
    return times


def _status_kib(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _monitor_cost(workdir: Path, samples: int) -> list[list[str]] | None:
    try:
        from edge_runtime.service.monitor import monitor_path
    except ImportError:
        return None
    binary = monitor_path()
    rss: list[int] = []
    hwm: list[int] = []
    with open_database(workdir / "rss.db", create=True) as db:
        rig = _Rig(db, workdir)
        try:
            for _ in range(samples):
                run_id = rig.runs.submit(SubmitRunCommand(argv=["sleep", "1"])).id
                rig.supervisor.start_queued()
                time.sleep(0.3)
                attempt = rig.runs.attempts(run_id)[-1]
                pid = attempt.identity.pid
                monitor = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])  # its parent
                for values, field in ((rss, "VmRSS"), (hwm, "VmHWM")):
                    value = _status_kib(monitor, field)
                    if value is not None:
                        values.append(value)
                rig.drive_until_idle()
        finally:
            rig.close()

    def spread(values: list[int]) -> str:
        return f"{min(values)} / {common.median(values):.0f}" if values else "n/a"

    return [["monitor file bytes", f"{binary.stat().st_size:,}"],
            [f"monitor VmRSS KiB (min / median of {samples})", spread(rss)],
            [f"monitor VmHWM KiB (min / median of {samples})", spread(hwm)]]


#: Where ``build/cross/build-app.sh`` leaves each router target's monitor.
CROSS_CACHE = Path("/var/cache/edge-runtime-cross")
CROSS_TARGETS = ("aarch64-musl", "mipsel-musl-sf")


def _cross_sizes() -> list[list[str]]:
    rows = []
    for target in CROSS_TARGETS:
        binary = CROSS_CACHE / target / "monitor" / "edge-runtime-monitor"
        rows.append([target, f"{binary.stat().st_size:,}" if binary.is_file() else "not built here (no cross cache)"])
    return rows


def run(workdir: Path, quick: bool) -> None:
    count = 30 if quick else 200
    times = _spawn_to_running(workdir, count)
    common.print_table(
        f"start pass of one Run of `true` (claim, spawn, identity recorded: `running`), {count} Runs",
        ["figure", "value"],
        [["median ms", f"{common.median(times):.2f}"], ["p95 ms", f"{common.p95(times):.2f}"],
         ["min ms", f"{min(times):.2f}"]],
    )
    cost = _monitor_cost(workdir, 3 if quick else 10)
    if cost is None:
        print("(this build has no per-Attempt monitor)")
        return
    common.print_table("the per-Attempt monitor (host build)", ["figure", "value"], cost)
    common.print_table("the per-Attempt monitor per router target (static musl, stripped)",
                       ["target", "file bytes"], _cross_sizes())
