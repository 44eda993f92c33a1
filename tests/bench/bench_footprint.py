"""Flash writes of the device service (docs/storage.md): syncs and bytes per Run, and of an idle serve.

A real ``serve`` and real ``submit`` processes run through ``footprint_child.py``, which counts
every SQLite ``xWrite`` (bytes) and ``xSync`` (one fdatasync) per file kind (db, wal, shm) with a
counting VFS registered as the default. Log bytes are the sizes of the log files the Runs left
(task output is appended once and never rewritten, and never synced).

- per Run: Runs are submitted one after the other (each waits for the previous to finish, as a
  scheduled task would run), of ``true`` and of a command printing 1 KB. The window starts
  before the first ``submit`` and ends once the last Run finished; it includes everything the
  service did meanwhile (heartbeats, watermark and checkpoints too), divided by the Runs.
- stored bytes per Run: the database's b-trees (``dbstat``) divided by the Runs stored, per table
  with its indexes.
- idle: a ``serve`` with nothing to do, its clocks sped up (x60: a simulated hour takes a real
  minute; x30 over 20 s with ``--quick``), counted over the simulated period and given per hour.

Figures are reported, never judged pass/fail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import apsw

import common

CHILD = Path(__file__).resolve().with_name("footprint_child.py")
OUTPUT_1K = "head -c 1023 /dev/zero | tr '\\0' x; echo"


def _counters(path: Path) -> tuple[Counter, Counter]:
    for _ in range(50):
        try:
            data = json.loads(path.read_text())
            return Counter(data["written"]), Counter(data["syncs"])
        except (FileNotFoundError, json.JSONDecodeError):
            time.sleep(0.05)
    raise RuntimeError(f"no counters in {path}")


def _child(workdir: Path, db: Path, tag: str, speed: float, *args: str, **popen) -> tuple[subprocess.Popen, Path]:
    counters = workdir / f"counters-{tag}.json"
    process = subprocess.Popen(
        [sys.executable, str(CHILD), str(counters), str(speed), "--", "--db", str(db), *args], **popen)
    return process, counters


def _wait(condition, timeout: float, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark wait timed out")
        time.sleep(interval)


class _Serve:
    def __init__(self, workdir: Path, db: Path, tag: str, speed: float = 1.0) -> None:
        self.log = workdir / f"serve-{tag}.log"
        with open(self.log, "wb") as handle:
            self.process, self.counters = _child(
                workdir, db, f"serve-{tag}", speed, "serve", "--worker-id", "bench", "--slots", "2",
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=handle)
        _wait(lambda: "recovery.done" in self.log.read_text() or self.process.poll() is not None, 60)
        if self.process.poll() is not None:
            raise RuntimeError(f"serve exited: {self.log.read_text()}")

    def snapshot(self) -> tuple[Counter, Counter]:
        time.sleep(0.25)  # the child dumps its counters every 100 ms
        return _counters(self.counters)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(60)


def _status(connection: apsw.Connection, run_id: str) -> str | None:
    row = connection.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
    return None if row is None else row[0]


def _runs(workdir: Path, label: str, command: list[str], count: int) -> dict:
    case = workdir / label
    case.mkdir()
    db = case / "edge-runtime.db"
    serve = _Serve(case, db, label)
    reader = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    submit_written, submit_syncs = Counter(), Counter()
    try:
        time.sleep(1.0)  # let start-up writes settle
        before_written, before_syncs = serve.snapshot()
        for index in range(count):
            process, counters = _child(case, db, f"submit-{index}", 1.0, "submit", "--", *command,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, err = process.communicate(timeout=60)
            if process.returncode != 0:
                raise RuntimeError(f"submit failed: {err}")
            written, syncs = _counters(counters)
            submit_written += written
            submit_syncs += syncs
            run_id = out.strip()
            _wait(lambda: _status(reader, run_id) in ("succeeded", "failed", "cancelled"), 60, 0.002)
        after_written, after_syncs = serve.snapshot()
        stored = _stored_bytes(reader)
        failed = reader.execute("SELECT count(*) FROM runs WHERE status <> 'succeeded'").fetchone()[0]
    finally:
        reader.close()
        serve.stop()
    logs = [p for p in (case / "logs").iterdir() if p.suffix == ".log"] if (case / "logs").exists() else []
    return {
        "serve_written": after_written - before_written,
        "serve_syncs": after_syncs - before_syncs,
        "submit_written": submit_written,
        "submit_syncs": submit_syncs,
        "log_bytes": sum(p.stat().st_size for p in logs),
        "log_files": len(logs),
        "stored": stored,
        "failed": failed,
        "count": count,
    }


def _stored_bytes(connection: apsw.Connection) -> dict[str, int]:
    """Bytes of b-tree pages per table (its indexes included), from ``dbstat``."""
    rows = connection.execute(
        "SELECT coalesce(m.tbl_name, s.name), sum(s.pgsize) FROM dbstat s "
        "LEFT JOIN sqlite_schema m ON m.name = s.name GROUP BY 1").fetchall()
    return {name: size for name, size in rows}


def _idle(workdir: Path, seconds: float, speed: float) -> tuple[Counter, Counter, float]:
    case = workdir / "idle"
    case.mkdir()
    db = case / "edge-runtime.db"
    serve = _Serve(case, db, "idle", speed)
    try:
        time.sleep(1.0)
        w0, s0 = serve.snapshot()
        started = time.monotonic()
        time.sleep(seconds)
        w1, s1 = serve.snapshot()
        simulated_h = (time.monotonic() - started) * speed / 3600
    finally:
        serve.stop()
    return w1 - w0, s1 - s0, simulated_h


def _row(label: str, result: dict) -> list[str]:
    count = result["count"]
    written = result["serve_written"] + result["submit_written"]
    syncs = result["serve_syncs"] + result["submit_syncs"]
    total = sum(written.values()) + result["log_bytes"]
    return [
        label, str(count),
        f"{sum(syncs.values()) / count:.2f}",
        f"{sum(result['submit_syncs'].values()) / count:.2f}",
        f"{sum(result['serve_syncs'].values()) / count:.2f}",
        f"{written['db'] / count / 1024:.1f}",
        f"{written['wal'] / count / 1024:.1f}",
        f"{(written['shm'] + written['other'] + written['journal']) / count / 1024:.1f}",
        f"{result['log_bytes'] / count / 1024:.1f} ({result['log_files']} files)",
        f"{total / count / 1024:.1f}",
    ]


def run(workdir: Path, quick: bool) -> None:
    count = 30 if quick else 200
    true_case = _runs(workdir, "true", ["true"], count)
    output_case = _runs(workdir, "output-1k", ["sh", "-c", OUTPUT_1K], count // 2)
    common.print_table(
        "footprint: per Run (submit + serve), Runs one after another, 2 slots "
        "(targets: syncs <= 4, total <= 60 KB)",
        ["case", "Runs", "syncs/Run", "submit", "serve", "db KB", "wal KB", "shm+other KB", "logs KB",
         "total KB/Run"],
        [_row("true", true_case), _row("1 KB of output", output_case)],
    )
    for label, result in (("true", true_case), ("1 KB of output", output_case)):
        if result["failed"]:
            print(f"warning: {result['failed']} Run(s) of {label} did not succeed")
    stored = true_case["stored"]
    per_run = sorted(((size / count, name) for name, size in stored.items()), reverse=True)
    common.print_table(
        f"footprint: stored bytes per Run of `true` ({count} Runs; b-tree pages incl. indexes, dbstat)",
        ["table", "bytes/Run"],
        [[name, f"{value:,.0f}"] for value, name in per_run if value >= 1]
        + [["all", f"{sum(stored.values()) / count:,.0f}"]],
    )
    seconds, speed = (20.0, 30.0) if quick else (60.0, 60.0)
    written, syncs, hours = _idle(workdir, seconds, speed)
    common.print_table(
        f"footprint: idle serve, {hours * 60:.0f} simulated minutes (clocks x{speed:g}), per hour "
        "(target: syncs <= 60)",
        ["figure", "per hour"],
        [["syncs", f"{sum(syncs.values()) / hours:,.0f}"],
         ["  of the db / wal", f"{syncs['db'] / hours:,.0f} / {syncs['wal'] / hours:,.0f}"],
         ["KB written (db + wal + shm)", f"{sum(written.values()) / hours / 1024:,.0f}"]],
    )
    for path in workdir.rglob("*.log"):
        os.unlink(path)
