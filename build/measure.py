"""Measure the built artifacts: the figures docs/benchmarks.md quotes (never pass/fail).

- one-file size and one-folder .tar.xz size (bytes, against the budget);
- bytes the one-file build unpacks at every start (from its archive's table of contents);
- median wall time of ``edge-runtime --version`` for both forms (several interleaved runs);
- peak RSS (VmHWM) of an idle ``serve`` from the one-file build: the bootloader process and the
  Python child separately.

Usage: build/measure.py [--runs N] [--idle-seconds S] [--output FILE]
Run it on an otherwise quiet machine: start times on a shared 2-core box are noisy.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"
sys.path.insert(0, str(ROOT))

import artifact_audit  # noqa: E402  (the repo root's audit: the same budget and archive reading)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def median_start_ms(executables: dict[str, Path], runs: int, env: dict[str, str]) -> dict[str, tuple[float, float]]:
    """Median (wall ms, CPU ms) per executable. CPU time (user+sys of the process tree) is the
    steadier figure on a loaded machine; wall time is what a user waits."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in executables}
    for _ in range(runs):
        for name, executable in executables.items():  # interleaved, so load spikes hit both forms
            cpu_before, started = _children_cpu_s(), time.perf_counter()
            subprocess.run([str(executable), "--version"], env=env, capture_output=True, check=True)
            wall, cpu = time.perf_counter() - started, _children_cpu_s() - cpu_before
            samples[name].append((wall * 1000, cpu * 1000))
    return {
        name: (statistics.median(w for w, _ in values), statistics.median(c for _, c in values))
        for name, values in samples.items()
    }


def _vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for pid {pid}")


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


def idle_serve_rss(executable: Path, idle_seconds: float, env: dict[str, str], workdir: Path) -> dict[str, object]:
    log_path = workdir / "serve.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [str(executable), "--db", str(workdir / "measure.db"), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + 60
            while "service.started" not in log_path.read_text():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"serve did not start:\n{log_path.read_text()}")
                time.sleep(0.1)
            time.sleep(idle_seconds)
            children = _children(process.pid)
            unpacked = sum(
                f.stat().st_size for d in Path(env["TMPDIR"]).glob("_MEI*") for f in d.rglob("*") if f.is_file()
            )
            return {
                "bootloader_kib": _vm_hwm_kib(process.pid),
                "child_kib": [_vm_hwm_kib(child) for child in children],
                "unpacked_bytes_on_disk": unpacked,
            }
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="measure.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--output", type=Path, help="also write the figures to FILE (atomically)")
    args = parser.parse_args(argv)

    onefile = DIST / "edge-runtime"
    tarballs = sorted(DIST.glob("edge-runtime-*.tar.xz"))
    if not onefile.is_file() or not tarballs:
        sys.stderr.write("Error: no build in dist/\nTry: make build\n")
        return 1
    budgets = artifact_audit.load_budgets(artifact_audit.DEFAULT_BUDGET_FILE)
    onefile_report = artifact_audit.audit(onefile, budgets)
    lines = [
        f"one-file size:        {onefile.stat().st_size:>11,} bytes (budget {budgets['onefile_bytes']:,})",
        f"one-folder tar.xz:    {tarballs[-1].stat().st_size:>11,} bytes (budget {budgets['onefolder_tar_xz_bytes']:,})",
        f"unpacked at start:    {onefile_report.unpacked_at_start:>11,} bytes (one-file, per its archive)",
    ]
    with tempfile.TemporaryDirectory(prefix="edge-runtime-measure-") as temp:
        work = Path(temp)
        (work / "unpack").mkdir()
        env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work / "unpack"), "LANG": "C.UTF-8"}
        with tarfile.open(tarballs[-1]) as tar:
            artifact_audit.extract_safely(tar, work / "onefolder")  # Python 3.11.2 has no filter=data
        (folder,) = (work / "onefolder").iterdir()
        medians = median_start_ms({"one-file": onefile, "one-folder": folder / "edge-runtime"}, args.runs, env)
        for name, (wall, cpu) in medians.items():
            lines.append(f"start --version:      {wall:>11.1f} ms wall, {cpu:.1f} ms CPU, median of {args.runs} ({name})")
        help_text = subprocess.run([str(onefile), "--help"], env=env, capture_output=True, text=True).stdout
        if "serve" in help_text.split():
            rss = idle_serve_rss(onefile, args.idle_seconds, env, work)
            lines.append(f"unpacked on disk:     {rss['unpacked_bytes_on_disk']:>11,} bytes (the _MEI dir while serve runs)")
            lines.append(f"idle serve peak RSS:  {rss['bootloader_kib']:>11,} KiB bootloader (one-file parent)")
            for child in rss["child_kib"]:
                lines.append(f"idle serve peak RSS:  {child:>11,} KiB Python child ({args.idle_seconds:g} s idle)")
        else:
            lines.append("idle serve peak RSS:  not measured: this build has no serve command")
    lines.append(f"load average at end:  {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.output:
        artifact_audit.write_atomically(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
