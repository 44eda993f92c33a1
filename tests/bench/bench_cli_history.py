"""CLI time against stored history (issue 13): ``show``, ``list``, ``events``, ``submit`` and
``cancel`` as real processes (the installed ``.venv/bin/edge-runtime``) on a database holding 1k and
50k finished Runs, their ratio (target <= 1.2x), and ``check`` (which reads the whole file on purpose).

The history is made quickly (tests/history_support.py): one Run goes through the real repository
sequence, then its rows are copied under new ids and times in bulk transactions. Each command is
timed as a whole process, median of several repetitions, after one unmeasured warm-up (page cache).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import common

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from history_support import fill_history  # noqa: E402

EDGE_RUNTIME = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "edge-runtime"


def _time(argv: list[str], env: dict[str, str], repeat: int, extra: list[str] | None = None) -> float:
    """Median wall time of ``argv`` as a process, in ms (after one warm-up run); ``extra``: one
    more argument per repetition (a fresh Run to cancel each time)."""
    times = []
    for i in range(repeat + 1):
        if extra is not None:
            argv = [*argv[:-1], extra[i]]
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        elapsed = (time.perf_counter() - started) * 1000
        if done.returncode not in (0, 1) or (done.returncode == 1 and argv[3] != "check"):
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.decode(errors='replace')}")
        if i:
            times.append(elapsed)
    return common.median(times)


def _measure(db_path: Path, newest: str, workdir: Path, repeat: int) -> dict[str, float]:
    env = {**os.environ, "HOME": str(workdir), "TMPDIR": str(workdir), "EDGE_RUNTIME_CONFIG": str(workdir / "none.toml")}
    env.pop("EDGE_RUNTIME_DB", None)
    (workdir / "none.toml").write_text("")
    base = [str(EDGE_RUNTIME), "--db", str(db_path)]
    figures = {
        "show": _time([*base, "show", newest], env, repeat),
        "list": _time([*base, "list"], env, repeat),
        "events": _time([*base, "events", newest], env, repeat),
        "submit": _time([*base, "submit", "--", "true"], env, repeat),
    }
    queued = [subprocess.run([*base, "submit", "--", "true"], env=env, capture_output=True, check=True,
                             text=True).stdout.split()[0] for _ in range(repeat + 1)]
    figures["cancel"] = _time([*base, "cancel", queued[0]], env, repeat, extra=queued)
    figures["check"] = _time([*base, "check"], env, max(1, repeat // 3))
    return figures


def run(workdir: Path, quick: bool) -> None:
    if not EDGE_RUNTIME.exists():
        print(f"skipped: {EDGE_RUNTIME} is not installed (make venv)")
        return
    sizes = (1_000, 10_000) if quick else (1_000, 50_000)
    repeat = 3 if quick else 9
    results = {}
    for size in sizes:
        directory = workdir / f"runs-{size}"
        directory.mkdir()
        db_path = directory / "edge-runtime.db"
        started = time.monotonic()
        newest = fill_history(db_path, size)
        filled = time.monotonic() - started
        size_mb = db_path.stat().st_size / (1 << 20)
        print(f"{size:,} finished Runs stored in {filled:.1f} s ({size_mb:.1f} MiB)", flush=True)
        results[size] = _measure(db_path, newest, directory, repeat)
    small, large = sizes
    rows = [[name, f"{results[small][name]:.0f}", f"{results[large][name]:.0f}",
             f"{results[large][name] / results[small][name]:.2f}x"] for name in results[small]]
    common.print_table(
        f"CLI wall time as a process, median ms ({repeat} runs; check {max(1, repeat // 3)}); target ratio <= 1.2x "
        f"(check excluded: it reads the whole file)",
        ["command", f"{small:,} Runs", f"{large:,} Runs", "ratio"], rows,
    )
