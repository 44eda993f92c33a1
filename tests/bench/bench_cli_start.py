"""CLI start time per command (``cli_start``): each command as a whole process, wall time, median.

Measured in two forms: the venv's ``edge-runtime`` with bytecode compiled first (``compileall``,
as an installed package has it), and the one-folder build from ``dist/`` (the newest
``edge-runtime-*.tar.xz``, unpacked into the bench directory) when one has been built
(``make build``); without a build that form is skipped and says so. ``submit`` writes to a fresh
migrated database; ``--version`` and ``--help`` touch no database. ``submit (service)`` is the
same ``submit`` with a ``serve`` of the same form running on that database, which takes the
command over its socket (docs/operating.md, "Submit through the service"). Figures only, never
judged.
"""

from __future__ import annotations

import compileall
import contextlib
import os
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV_EXE = REPO / ".venv" / "bin" / "edge-runtime"

#: Command name -> arguments after the executable.
COMMANDS: dict[str, list[str]] = {
    "--version": ["--version"],
    "--help": ["--help"],
    "submit": ["submit", "--", "true"],
    "list": ["list"],
}


def _one_folder_exe(workdir: Path) -> Path | None:
    builds = sorted((REPO / "dist").glob("edge-runtime-*.tar.xz"), key=lambda p: p.stat().st_mtime)
    if not builds:
        return None
    target = workdir / "one-folder"
    target.mkdir()
    with tarfile.open(builds[-1]) as archive:
        archive.extractall(target, filter="data")
    found = [p for p in target.rglob("edge-runtime") if p.is_file() and os.access(p, os.X_OK)]
    return found[0] if found else None


def _time_ms(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1000


def _measure(label: str, exe: Path, workdir: Path, repetitions: int) -> None:
    db = workdir / f"{label}.db"
    env = {**os.environ, "EDGE_RUNTIME_DB": str(db)}
    env.pop("EDGE_RUNTIME_CONFIG", None)
    subprocess.run([str(exe), "migrate"], env=env, check=True, stdout=subprocess.DEVNULL)
    for name, args in COMMANDS.items():
        _report(label, name, [str(exe), *args], env, repetitions)
    with _serving(exe, db, env):
        _report(label, "submit (service)", [str(exe), *COMMANDS["submit"]], env, repetitions)


def _report(label: str, name: str, argv: list[str], env: dict[str, str], repetitions: int) -> None:
    _time_ms(argv, env)  # one unmeasured round: page cache
    samples = [_time_ms(argv, env) for _ in range(repetitions)]
    print(f"cli_start {label:10} {name:16} median {statistics.median(samples):6.1f} ms  "
          f"min {min(samples):6.1f} ms  (n={repetitions})", flush=True)


@contextlib.contextmanager
def _serving(exe: Path, db: Path, env: dict[str, str]) -> Iterator[None]:
    """A ``serve`` on ``db`` until the block ends, once its submit socket is listening."""
    log = db.with_suffix(".serve.log")
    with open(log, "wb") as out:
        service = subprocess.Popen([str(exe), "serve", "--poll-interval-ms", "60000"], env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out)
    try:
        deadline = time.monotonic() + 30
        while b"submit_handoff.listening" not in log.read_bytes():
            if service.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"serve did not start listening: {log.read_text(errors='replace')}")
            time.sleep(0.05)
        yield
    finally:
        service.terminate()
        service.wait(30)


def run(workdir: Path, quick: bool) -> None:
    repetitions = 5 if quick else 21
    compileall.compile_dir(str(REPO / "edge_runtime"), quiet=1)
    _measure("venv", VENV_EXE, workdir, repetitions)
    exe = _one_folder_exe(workdir)
    if exe is None:
        print("cli_start one-folder: skipped (no dist/edge-runtime-*.tar.xz; run `make build`)")
    else:
        _measure("one-folder", exe, workdir, repetitions)
