#!/usr/bin/env python3
"""A QingLong user's day at router scale (``make bench-day``): figures, never pass/fail.

    .venv/bin/python tests/bench/day.py [--quick] [--one-folder TAR_XZ] [--only idle,burst,day,panel]

The database: 700 schedules from the real script headers of ``tests/data/qinglong_script_headers.jsonl``
(their expressions, read as ``scripts scan`` reads them; ``true`` as every command), 10,000
finished Runs of history (``tests/support/history.py``: one real Run copied), 50 env entries, a
panel password and an OpenAPI app, the panel on. Every ``serve`` keeps 10,000 finished Runs
(``retain_runs``), so the history is not pruned away at start.

- idle: ``serve``'s RSS and CPU per minute with 0 and with the 700 schedules, none firing in the
  window: the schedules' zone is chosen so that now is in the widest gap of today's fire list.
  The one-folder build when ``dist/`` holds one (or ``--one-folder``), else the venv; the table
  says which.
- burst: 30 schedules due at 08:30:00 (the zone puts it a few seconds ahead), ``sleep 2``, 2
  slots: slot to each Run ``queued`` and ``running`` (p50, p99, max), the service's peak RSS, and
  that each ran once.
- day: the 700 schedules' fires over 24 hours with ``true``, the service on a clock this bench
  controls (``day_child.py``: idle waits skipped, the work itself real); syncs and bytes written
  (SQLite's, counted in its VFS; the process's ``write_bytes``; the Runs' log files), the
  database's size at the end and after a week (``--week``: six more days the same way).
- panel: ``GET /api/schedules`` and the OpenAPI's ``GET /open/crons`` with 700, and
  ``GET /api/runs`` (the panel's page, 50) with 10,000 stored, in ms, median of N.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

# Started by path (make bench-day), so its own folder is first on sys.path: `import common` finds
# the benchmarks' helpers; edge_runtime is the venv's (only the harness, run.py, edits sys.path).
BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parents[1]

import common  # noqa: E402

from edge_runtime.contract.cron import parse_schedule  # noqa: E402
from edge_runtime.contract.env_entries import NewEnvEntry  # noqa: E402
from edge_runtime.contract.schedules import AddScheduleCommand  # noqa: E402
from edge_runtime.contract.time_zones import time_zone  # noqa: E402
from edge_runtime.local.clock import ManualClock  # noqa: E402
from edge_runtime.local.database import open_database  # noqa: E402
from edge_runtime.local.environment import LocalEnvironmentRepository  # noqa: E402
from edge_runtime.local.schedules import LocalScheduleRepository  # noqa: E402
from edge_runtime.qinglong.script_scan import scanned_script  # noqa: E402
from tests.support.history import fill_history  # noqa: E402

HEADERS = REPO / "tests" / "data" / "qinglong_script_headers.jsonl"
CHILD = BENCH_DIR / "day_child.py"
SCHEDULES = 700
HISTORY = 10_000
ENV_ENTRIES = 50
BURST = 30
PASSWORD = "a bench password"
DAY_MS = 86_400_000
#: Every serve keeps the 10,000 Runs of history (``--retain-runs`` changes it).
RETAIN_RUNS = [HISTORY]


def _config() -> str:
    return f"retain_runs = {RETAIN_RUNS[0]}\n"


def corpus() -> list[tuple[str, str]]:
    """(expression, name) of the first 700 scripts whose header gives a schedule, in corpus order."""
    found = []
    with open(HEADERS, encoding="utf-8") as lines:
        next(lines)  # the sources line
        for line in lines:
            entry = json.loads(line)
            scanned = scanned_script(entry["header"], entry["path"], ["task", entry["path"]])
            if scanned.expression is not None:
                found.append((scanned.expression, scanned.name))
    return found[:SCHEDULES]


def posix_zone(offset_s: int) -> str:
    """A POSIX TZ text whose local time is UTC + ``offset_s`` (|offset| < 24 h, to the second)."""
    sign = "-" if offset_s >= 0 else "+"  # POSIX counts west positive
    h, rest = divmod(abs(offset_s), 3600)
    return f"BEN{sign}{h}:{rest // 60:02d}:{rest % 60:02d}"


def zone_putting(now_ms: int, local_s_of_day: float) -> str:
    """The zone in which ``now_ms`` is ``local_s_of_day`` seconds after local midnight."""
    offset = round(local_s_of_day - (now_ms / 1000) % 86_400)
    offset = (offset + 43_200) % 86_400 - 43_200
    return posix_zone(offset)


def first_fire(expressions: list[str], zone_text: str, after_ms: int) -> int:
    zone = time_zone(zone_text)
    return min(parse_schedule(e).next_fire_after(after_ms, zone) for e in expressions)


def quiet_zone(expressions: list[str], now_ms: int, window_s: float) -> str:
    """A zone in which none of ``expressions`` fires from now for ``window_s`` seconds."""
    zone0 = time_zone("UTC0")
    day0 = now_ms // DAY_MS * DAY_MS
    fires = sorted({t for e in expressions for t in _fires(parse_schedule(e), day0, day0 + DAY_MS, zone0)})
    gaps = sorted(((b - a, a) for a, b in zip(fires, fires[1:])), reverse=True)
    for _, start in gaps:
        zone = zone_putting(now_ms, (start - day0) / 1000 + 20)
        if first_fire(expressions, zone, now_ms) > now_ms + window_s * 1000:
            return zone
    raise RuntimeError("no quiet window in the corpus' day")


def _fires(schedule, start: int, end: int, zone) -> list[int]:  # noqa: ANN001
    out, t = [], start - 1
    while (t := schedule.next_fire_after(t, zone)) < end:
        out.append(t)
    return out


# --------------------------------------------------------------------------- the database


def base_database(workdir: Path) -> tuple[Path, dict]:
    """History, env, panel password and app (no schedules yet); the app's credentials."""
    db = workdir / "base" / "edge-runtime.db"
    db.parent.mkdir(parents=True)
    os.chmod(db.parent, 0o700)
    started = time.monotonic()
    fill_history(db, HISTORY)
    with open_database(db, create=False) as handle:
        names = [f"BENCH_VAR_{i % 17}" for i in range(ENV_ENTRIES)]
        LocalEnvironmentRepository(handle).add(
            [NewEnvEntry(name=name, value=f"value-{i}-" + "x" * 40, secret=i % 5 == 0) for i, name in enumerate(names)])
    _cli(db, "panel", "password", input=PASSWORD + "\n")
    printed = json.loads(_cli(db, "panel", "app", "add", "bench", "--scopes", "crons,envs,logs"))
    app = {"id": printed.get("clientId", printed.get("client_id")),
           "secret": printed.get("clientSecret", printed.get("client_secret"))}
    print(f"base database: {HISTORY:,} finished Runs, {ENV_ENTRIES} env entries, panel password and app, "
          f"in {time.monotonic() - started:.1f} s", flush=True)
    return db, app


def _cli(db: Path, *args: str, input: str | None = None) -> str:  # noqa: A002
    done = subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(db), *args], input=input,
                          capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{args}: {done.stderr}")
    return done.stdout


def database_with(base: Path, target: Path, schedules: list[tuple[str, str, list[str]]], zone_text: str,
                  now_ms: int | None = None) -> Path:
    """A copy of ``base`` at ``target`` with ``schedules`` ((expression, name, argv)) added in one
    transaction, in ``zone_text``; on ``now_ms``'s clock when given."""
    target.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(target.parent, 0o700)
    shutil.copyfile(base, target)
    clock = None if now_ms is None else ManualClock(now_ms)
    with open_database(target, create=False, **({} if clock is None else {"clock": clock})) as handle:
        repo = LocalScheduleRepository(handle, device_zone=zone_text)
        prepared = [repo.prepare_add(AddScheduleCommand(expression=e, name=n[:120] or None, argv=argv))
                    for e, n, argv in schedules]
        with handle.write() as now:
            for item in prepared:
                repo.insert_prepared(item, now)
        handle.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return target


# --------------------------------------------------------------------------- processes


def one_folder(workdir: Path, tarball: Path | None) -> Path | None:
    if tarball is None:
        builds = sorted((REPO / "dist").glob("edge-runtime-*.tar.xz"), key=lambda p: p.stat().st_mtime)
        if not builds:
            return None
        tarball = builds[-1]
    target = workdir / "one-folder"
    target.mkdir(exist_ok=True)
    with tarfile.open(tarball) as archive:
        archive.extractall(target, filter="data")
    found = [p for p in target.rglob("edge-runtime") if p.is_file() and os.access(p, os.X_OK)]
    return found[0] if found else None


class Serve:
    def __init__(self, command: list[str], db: Path, *flags: str, panel: bool = True) -> None:
        self.log = db.parent / "serve.log"
        config = db.parent / "serve.toml"
        config.write_text(_config())
        extra = ["--panel-listen", "127.0.0.1:0"] if panel else []
        env = {**os.environ, "EDGE_RUNTIME_CONFIG": str(config)}
        with open(self.log, "wb") as handle:
            self.process = subprocess.Popen(
                [*command, "--db", str(db), "serve", "--worker-id", "bench", "--slots", "2", *extra, *flags],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=handle, cwd=db.parent, env=env)
        deadline = time.monotonic() + 60
        while "recovery.done" not in self.log.read_text() or (panel and "panel." not in self.log.read_text()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"serve did not start: {self.log.read_text()}")
            time.sleep(0.05)
        self.port = None
        if panel:
            self.port = int(re.search(r"listen=127\.0\.0\.1:(\d+)", self.log.read_text()).group(1))

    def status(self, key: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise RuntimeError(f"no {key}")

    def write_bytes(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/io").read_text().splitlines():
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
        raise RuntimeError("no write_bytes")

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _venv_command() -> list[str]:
    return [sys.executable, "-m", "edge_runtime"]


# --------------------------------------------------------------------------- idle


def idle(workdir: Path, base: Path, crons: list[tuple[str, str]], command: list[str], seconds: float) -> list[list[str]]:
    rows, figures = [], {}
    expressions = [e for e, _ in crons]
    for count in (0, SCHEDULES):
        now = time.time_ns() // 1_000_000
        zone = quiet_zone(expressions, now, seconds + 60)
        db = database_with(base, workdir / f"idle-{count}" / "edge-runtime.db",
                           [(e, n, ["true"]) for e, n in crons[:count]], zone)
        serve = Serve(command, db)
        try:
            time.sleep(5)  # start-up settles (imports, recovery, first retention pass)
            cpu0 = serve.cpu_s()
            time.sleep(seconds)
            cpu = serve.cpu_s() - cpu0
            rss, hwm = serve.status("VmRSS"), serve.status("VmHWM")
            fired = _count(db, "SELECT count(*) FROM runs WHERE schedule_id IS NOT NULL")
        finally:
            serve.stop()
        figures[count] = rss
        rows.append([f"{count}", f"{rss:,}", f"{hwm:,}", f"{cpu * 60 / seconds:.3f}", str(fired)])
    per = (figures[SCHEDULES] - figures[0]) * 1024 / SCHEDULES
    rows.append(["per schedule", f"{per:,.0f} B", "", "", ""])
    return rows


def _count(db: Path, sql: str, args: tuple = ()) -> int:
    with open_database(db, create=False, read_only=True) as handle:
        return handle.connection.execute(sql, args).fetchone()[0]


# --------------------------------------------------------------------------- burst


def burst(workdir: Path, base: Path, crons: list[tuple[str, str]], command: list[str]) -> list[list[str]]:
    slot_s = 8 * 3600 + 30 * 60
    lead_s = 15.0
    now = time.time_ns() // 1_000_000
    zone = zone_putting(now, slot_s - lead_s)
    zone_obj = time_zone(zone)
    after = now + 1000
    # The 30: those whose next fire is the 08:30:00 slot, then others moved to it.
    slot_ms = parse_schedule("30 8 * * *").next_fire_after(after, zone_obj)
    at_slot = [i for i, (e, _) in enumerate(crons) if parse_schedule(e).next_fire_after(after, zone_obj) == slot_ms]
    chosen = (at_slot + [i for i in range(len(crons)) if i not in at_slot])[:BURST]
    schedules = []
    for index, (expression, name) in enumerate(crons):
        if index in chosen:
            schedules.append(("30 8 * * *", f"burst {index}", ["sleep", "2"]))
        else:
            schedules.append((expression, name, ["true"]))
    db = database_with(base, workdir / "burst" / "edge-runtime.db", schedules, zone)
    serve = Serve(command, db)
    peak = 0
    try:
        deadline = time.monotonic() + lead_s + BURST * 2 / 2 + 60
        while time.monotonic() < deadline:
            peak = max(peak, serve.status("VmHWM"))
            done = _count(db, "SELECT count(*) FROM runs r JOIN schedules s ON s.id = r.schedule_id "
                              "WHERE s.name LIKE 'burst %' AND r.status IN ('succeeded', 'failed', 'cancelled')")
            if done >= BURST:
                break
            time.sleep(0.2)
        peak = max(peak, serve.status("VmHWM"))
    finally:
        serve.stop()
    with open_database(db, create=False, read_only=True) as handle:
        rows = handle.connection.execute(
            "SELECT r.id, r.scheduled_for_ms, r.created_at_ms, r.status, "
            "(SELECT min(a.started_at_ms) FROM run_attempts a WHERE a.run_id = r.id), "
            "(SELECT count(*) FROM run_attempts a WHERE a.run_id = r.id) "
            "FROM runs r JOIN schedules s ON s.id = r.schedule_id WHERE s.name LIKE 'burst %'").fetchall()
    queued = [(created - slot) / 1000 for _, slot, created, _, _, _ in rows]
    running = [(started - slot) / 1000 for _, slot, _, _, started, _ in rows if started is not None]
    once = sum(1 for row in rows if row[3] == "succeeded" and row[5] == 1)
    print(f"burst: {len(rows)} Runs of {BURST} schedules at the slot {slot_ms} ({zone}); "
          f"{once} succeeded with exactly one Attempt; slots fired: {sorted({r[1] for r in rows}) == [slot_ms]}")
    return [
        ["slot -> queued (s)", f"{common.percentile(queued, 0.5):.3f}", f"{common.percentile(queued, 0.99):.3f}",
         f"{max(queued):.3f}"],
        ["slot -> running (s)", f"{common.percentile(running, 0.5):.3f}", f"{common.percentile(running, 0.99):.3f}",
         f"{max(running):.3f}"],
        ["service peak RSS (VmHWM KiB)", f"{peak:,}", "", ""],
        ["Runs / ran exactly once", f"{len(rows)} / {once}", "", ""],
    ]


# --------------------------------------------------------------------------- a day compressed


def day(workdir: Path, base: Path, crons: list[tuple[str, str]], days: int, hours: float = 24,
        app: dict | None = None, repeat: int = 21) -> list[list[str]]:
    # A day ahead of the real clock (the history's times are behind it), from local midnight, UTC.
    start = (time.time_ns() // 1_000_000 // DAY_MS + 2) * DAY_MS
    db = database_with(base, workdir / "day" / "edge-runtime.db", [(e, n, ["true"]) for e, n in crons], "UTC0",
                       now_ms=start - 10_000)
    expected = sum(len(_fires(parse_schedule(e), start, start + int(DAY_MS * hours / 24), time_zone("UTC0")))
                   for e, _ in crons)
    size0 = _db_bytes(db)
    rows = []
    ends = [start + int(DAY_MS * hours / 24) * (n + 1) for n in range(days)]
    # The child's counters and the service's journal go to RAM (on a router stderr goes to logd, in
    # RAM): /proc/<pid>/io's write_bytes is then the service's own storage writes.
    ram = Path(tempfile.mkdtemp(prefix="edge-bench-day-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    state = ram / "state.json"
    config = db.parent / "serve.toml"
    config.write_text(_config())
    env = {**os.environ, "EDGE_RUNTIME_CONFIG": str(config)}
    log = ram / "serve.log"
    with open(log, "wb") as handle:
        process = subprocess.Popen(
            [sys.executable, str(CHILD), str(state), str(start - 5_000), str(ends[-1]), "--", "--db", str(db),
             "serve", "--worker-id", "bench", "--slots", "2", "--panel-listen", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=handle, cwd=db.parent, env=env)
    try:
        previous = _state(state)
        io0 = _write_bytes(process.pid)
        logs0 = _log_bytes(db.parent / "logs")
        real0 = time.monotonic()
        for number, end in enumerate(ends, 1):
            while _state(state)["now_ms"] < end:
                if process.poll() is not None:
                    raise RuntimeError(f"serve exited: {log.read_text()[-2000:]}")
                time.sleep(0.5)
            time.sleep(1.0)  # the last Runs end, the counters are dumped
            current = _state(state)
            io1, logs1 = _write_bytes(process.pid), _log_bytes(db.parent / "logs")
            fired = _count(db, "SELECT count(*) FROM runs WHERE schedule_id IS NOT NULL")
            written = {k: current["written"].get(k, 0) - previous["written"].get(k, 0) for k in ("db", "wal", "shm")}
            syncs = sum(current["syncs"].values()) - sum(previous["syncs"].values())
            rows.append([f"day {number}", f"{fired:,}", f"{syncs:,}",
                         f"{written['db'] / 1e6:.2f} / {written['wal'] / 1e6:.2f} / {written['shm'] / 1e6:.2f}",
                         f"{(logs1 - logs0) / 1e6:.2f}", f"{(io1 - io0) / 1e6:.2f}", f"{_db_bytes(db) / 1e6:.2f}",
                         f"{time.monotonic() - real0:.0f}"])
            previous, io0, logs0, real0 = current, io1, logs1, time.monotonic()
        if app is not None:  # the pages again, now that every schedule has Runs of its own
            port = int(re.search(r"listen=127\.0\.0\.1:(\d+)", log.read_text()).group(1))
            after, tries = None, 0
            while after is None and tries < 20:
                tries += 1
                try:
                    after = panel(port, app, repeat)
                except RuntimeError as exc:  # the day's figures above still count
                    print(f"panel after the day, try {tries}: not measured ({exc})", flush=True)
                    time.sleep(1.0)
            if after is not None:
                common.print_table(f"panel and OpenAPI after the day (its Runs kept), median of {repeat} (ms)",
                                   ["request", "median ms", "max ms", "bytes"], after)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(60)
        shutil.copyfile(log, db.parent / "serve.log")
        shutil.rmtree(ram)
    print(f"day: {expected:,} fires expected on the first day; database before {size0 / 1e6:.2f} MB "
          f"({HISTORY:,} Runs, {SCHEDULES} schedules); retain_runs = {RETAIN_RUNS[0]}")
    return rows


def _state(path: Path) -> dict:
    for _ in range(100):
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            time.sleep(0.05)
    raise RuntimeError(f"no state in {path}")


def _write_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise RuntimeError("no write_bytes")


def _log_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) if directory.exists() else 0


def _db_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())


# --------------------------------------------------------------------------- the panel


def panel(port: int, app: dict, repeat: int) -> list[list[str]]:
    host = f"Host: 127.0.0.1:{port}\r\n"
    body = json.dumps({"password": PASSWORD})
    with socket.create_connection(("127.0.0.1", port)) as sock:
        status, head, answer = common.http_exchange(
            sock, f"POST /api/login HTTP/1.1\r\n{host}X-Edge-Panel: 1\r\nContent-Length: {len(body)}\r\n\r\n{body}"
            .encode())
        if status != 200:
            raise RuntimeError(f"panel login: HTTP {status}: {answer[:300]!r}")
        cookie = re.search(rb"edge_panel=([^;]+)", head).group(1).decode()
        _, _, token_body = common.http_exchange(sock, f"GET /open/auth/token?client_id={app['id']}&client_secret="
                                                      f"{app['secret']} HTTP/1.1\r\n{host}\r\n".encode())
        token = json.loads(token_body)["data"]["token"]
        cases = [
            ("panel GET /api/schedules (700)", f"GET /api/schedules HTTP/1.1\r\n{host}Cookie: edge_panel={cookie}\r\n\r\n"),
            ("OpenAPI GET /open/crons (700)", f"GET /open/crons HTTP/1.1\r\n{host}Authorization: Bearer {token}\r\n\r\n"),
            ("OpenAPI GET /open/crons?page=1&size=20", f"GET /open/crons?page=1&size=20 HTTP/1.1\r\n{host}"
                                                       f"Authorization: Bearer {token}\r\n\r\n"),
            ("panel GET /api/runs?limit=50 (10,000 stored)", f"GET /api/runs?limit=50 HTTP/1.1\r\n{host}"
                                                              f"Cookie: edge_panel={cookie}\r\n\r\n"),
        ]
        rows = []
        for label, text in cases:
            times, size = [], 0
            for _ in range(repeat + 1):
                started = time.perf_counter()
                status, _, answer = common.http_exchange(sock, text.encode())
                times.append((time.perf_counter() - started) * 1000)
                if status != 200:
                    raise RuntimeError(f"{label}: HTTP {status}: {answer[:300]!r}")
                size = len(answer)
            times = times[1:]
            rows.append([label, f"{common.median(times):.1f}", f"{max(times):.1f}", f"{size:,}"])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10 s idle windows, fewer panel requests")
    parser.add_argument("--one-folder", type=Path, help="a one-folder .tar.xz to run (default: the newest in dist/)")
    parser.add_argument("--venv", action="store_true", help="run the venv's sources even when dist/ has a build")
    parser.add_argument("--only", default="idle,burst,day,panel", help="comma-separated parts")
    parser.add_argument("--week", action="store_true", help="go on for a week in the day part")
    parser.add_argument("--hours", type=float, default=24.0, help="simulated hours of the day part (default 24)")
    parser.add_argument("--retain-runs", type=int, default=HISTORY, help=f"serve's retain_runs (default {HISTORY})")
    parser.add_argument("--workdir", type=Path, default=REPO / ".bench" / "day")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    RETAIN_RUNS[0] = args.retain_runs
    workdir = args.workdir.resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    fs = common.filesystem_type(workdir)
    if fs in ("tmpfs", "ramfs"):
        print(f"Error: {workdir} is on {fs}; the figures need disk-backed storage", file=sys.stderr)
        return 2
    import apsw

    load = os.getloadavg()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; python {platform.python_version()}, "
          f"SQLite {apsw.sqlite_lib_version()}, {platform.machine()}, {os.cpu_count()} cores, "
          f"load {load[0]:.1f}/{load[1]:.1f}, workdir {workdir} ({fs})", flush=True)
    crons = corpus()
    base, app = base_database(workdir)
    exe = None if args.venv else one_folder(workdir, args.one_folder)
    command = [str(exe)] if exe is not None else _venv_command()
    form = f"one-folder build ({exe.relative_to(workdir)})" if exe is not None else "venv (sources)"
    print(f"serve: {form}", flush=True)
    if "idle" in parts or "panel" in parts:
        seconds = 10.0 if args.quick else 60.0
        if "idle" in parts:
            common.print_table(f"idle serve, panel on, {form}, over {seconds:.0f} s (none due in the window)",
                               ["schedules", "VmRSS KiB", "VmHWM KiB", "CPU s/min", "fired"],
                               idle(workdir, base, crons, command, seconds))
        if "panel" in parts:
            now = time.time_ns() // 1_000_000
            zone = quiet_zone([e for e, _ in crons], now, 120)
            db = database_with(base, workdir / "panel" / "edge-runtime.db", [(e, n, ["true"]) for e, n in crons], zone)
            serve = Serve(command, db)
            try:
                repeat = 5 if args.quick else 21
                common.print_table(f"panel and OpenAPI, {form}, one keep-alive connection, median of {repeat} (ms)",
                                   ["request", "median ms", "max ms", "bytes"], panel(serve.port, app, repeat))
            finally:
                serve.stop()
    if "burst" in parts:
        common.print_table(f"burst: {BURST} schedules due at 08:30:00, sleep 2, 2 slots, {form}",
                           ["figure", "p50", "p99", "max"], burst(workdir, base, crons, command))
    if "day" in parts:
        days = 7 if args.week else 1
        common.print_table(
            "a day compressed: the corpus' fires with true, venv serve on the bench's clock, panel on (MB)",
            ["period", "Runs fired (total)", "syncs", "SQLite written db / wal / shm", "logs", "write_bytes",
             "db + wal size", "real s"],
            day(workdir, base, crons, days, args.hours, app, 5 if args.quick else 21))
    return 0


if __name__ == "__main__":
    sys.exit(main())
