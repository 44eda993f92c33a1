"""CLI time independent of stored history: ``show``, ``list``, ``events``, ``submit`` and
``cancel`` as real processes (the installed ``.venv/bin/edge-runtime``) on a database holding 1k and
50k finished Runs, their ratio (target <= 1.2x), and ``check`` (which reads the whole file on purpose).

The history is made quickly (tests/support/history.py): one Run goes through the real repository
sequence, then its rows are copied under new ids and times in bulk transactions. Each command is
timed as a whole process, the two sizes alternating (so drift in a shared machine hits both), median
of several repetitions after one unmeasured round (page cache); the ratio is the median of the
paired ratios.
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from pathlib import Path

import common

from edge_runtime.local.database import open_database
from edge_runtime.local.guarded_clock import full_observed_floor_ms, observed_floor_ms
from tests.support.history import fill_history

EDGE_RUNTIME = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "edge-runtime"


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of ``argv`` as a process, in ms. The CPU time is
    much less disturbed by neighbours on a shared machine than the wall time."""
    cpu, started = _cpu_s(), time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed, cpu = (time.perf_counter() - started) * 1000, (_cpu_s() - cpu) * 1000
    if done.returncode != 0 and not (done.returncode == 1 and "check" in argv):  # check: 1 = not ready
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.decode(errors='replace')}")
    return elapsed, cpu


class _Store:
    """One database of the comparison: its path, newest Run and a private environment."""

    def __init__(self, directory: Path, size: int) -> None:
        self.db_path = directory / "edge-runtime.db"
        started = time.monotonic()
        self.newest = fill_history(self.db_path, size)
        print(f"{size:,} finished Runs stored in {time.monotonic() - started:.1f} s "
              f"({self.db_path.stat().st_size / (1 << 20):.1f} MiB)", flush=True)
        (directory / "none.toml").write_text("")
        self.env = {**os.environ, "HOME": str(directory), "TMPDIR": str(directory),
                    "EDGE_RUNTIME_CONFIG": str(directory / "none.toml")}
        self.env.pop("EDGE_RUNTIME_DB", None)
        self.base = [str(EDGE_RUNTIME), "--db", str(self.db_path)]

    def argv(self, command: str) -> list[str]:
        if command == "cancel":  # a fresh queued Run each time (a second cancel is refused)
            queued = subprocess.run([*self.base, "submit", "--", "true"], env=self.env, capture_output=True,
                                    check=True, text=True).stdout.split()[0]
            return [*self.base, "cancel", queued]
        return [*self.base, *{"show": ["show", self.newest], "list": ["list"], "events": ["events", self.newest],
                              "submit": ["submit", "--", "true"], "check": ["check"]}[command]]


def _floor_ms(store: _Store, floor, repeat: int) -> float:
    with open_database(store.db_path, create=False, read_only=True) as db:
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            floor(db)
            times.append((time.perf_counter() - started) * 1000)
    return common.median(times)


def run(workdir: Path, quick: bool) -> None:
    if not EDGE_RUNTIME.exists():
        print(f"skipped: {EDGE_RUNTIME} is not installed (make venv)")
        return
    sizes = (1_000, 10_000) if quick else (1_000, 50_000)
    repeat = 3 if quick else 11
    stores = []
    for size in sizes:
        (workdir / f"runs-{size}").mkdir()
        stores.append(_Store(workdir / f"runs-{size}", size))
    small, large = stores
    rows = []
    for command in ("show", "list", "events", "submit", "cancel", "check"):
        wall: tuple[list[float], list[float]] = ([], [])
        cpu: tuple[list[float], list[float]] = ([], [])
        reps = max(2, repeat // 3) if command == "check" else repeat
        for i in range(reps + 1):  # the two sizes alternate, so drift in the machine hits both
            for index in ((0, 1) if i % 2 else (1, 0)):
                argv = stores[index].argv(command)
                elapsed, used = _run(argv, stores[index].env)
                if i:  # the first round warms the page cache
                    wall[index].append(elapsed)
                    cpu[index].append(used)
        rows.append([command, f"{common.median(wall[0]):.0f}", f"{common.median(wall[1]):.0f}",
                     f"{common.median([b / a for a, b in zip(*wall)]):.2f}x",
                     f"{common.median(cpu[0]):.0f}", f"{common.median(cpu[1]):.0f}",
                     f"{common.median([b / a for a, b in zip(*cpu)]):.2f}x"])
    for name, floor in (("serve start: clock floor, indexed", observed_floor_ms),
                        ("  the same read by scans (before 0008)", full_observed_floor_ms)):
        a, b = _floor_ms(small, floor, repeat), _floor_ms(large, floor, repeat)
        rows.append([name, f"{a:.1f}", f"{b:.1f}", f"{b / a:.2f}x", "", "", ""])
    common.print_table(
        f"CLI as a process, median ms ({repeat} runs, check {max(2, repeat // 3)}; sizes alternate): wall and CPU "
        f"time; ratio = median of paired ratios, target <= 1.2x (check excluded: it reads the whole file)",
        ["command", f"wall {sizes[0]:,}", f"wall {sizes[1]:,}", "ratio", f"cpu {sizes[0]:,}", f"cpu {sizes[1]:,}",
         "ratio"], rows,
    )
