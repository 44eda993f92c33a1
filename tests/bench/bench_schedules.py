"""Benchmarks of schedules (docs/schedules.md).

- idle CPU of a real ``serve`` holding 0 and 50 schedules that do not fire in the window (daily
  slots): it sleeps until the next fire time, so the schedules must add nothing measurable
  (target: <= 0.3 s of CPU per minute). Over 60 s (10 s with ``--quick``), from ``/proc/<pid>``.
- the scheduler's tick in process, with 50 and 5,000 schedules: a tick with nothing due, a tick
  that fires one due schedule (one write transaction, fsync included), and the sleep computation
  (``next_due_at_ms``). Both read through indexes, so their cost follows the due schedules, not
  all of them (O(due)).
- the fire-time search (``next_fire_after``): the rarest valid expression (the 29th of February
  on a Sunday, 40 years ahead) and the full 400-year search that proves an expression never
  fires in its zone, for a POSIX rule and, where the system has zoneinfo, an IANA name.

Figures are reported, never judged pass/fail.
"""

from __future__ import annotations

import io
import time
import uuid
from pathlib import Path

import common
from bench_service import _proc_cpu_seconds, _Serve

from edge_runtime.contract.cron import ScheduleNeverFiresError, parse_schedule
from edge_runtime.contract.schedules import AddScheduleCommand
from edge_runtime.contract.time_zones import InvalidTimeZoneError, time_zone
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.schedules import LocalScheduleRepository
from edge_runtime.service.journal import Journal
from edge_runtime.service.scheduler import Scheduler

_NOW_MS = 1_800_000_000_000
_FAR_MS = _NOW_MS + 365 * 86_400_000


def _idle_cpu(workdir: Path, schedules: int, seconds: float) -> float:
    db_path = workdir / f"idle-{schedules}.db"
    with open_database(db_path) as db:
        repo = LocalScheduleRepository(db)
        for index in range(schedules):  # daily slots around the clock, none within the window
            hour, minute = (time.gmtime().tm_hour + 2 + index // 60) % 24, index % 60
            repo.add(AddScheduleCommand(expression=f"{minute} {hour} * * *", argv=["true"]))
    serve = _Serve(db_path, workdir / f"idle-{schedules}.log")
    try:
        before = _proc_cpu_seconds(serve.process.pid)
        time.sleep(seconds)
        return _proc_cpu_seconds(serve.process.pid) - before
    finally:
        serve.stop()


def _tick_costs(workdir: Path, count: int, reps: int) -> tuple[float, float, float]:
    clock = ManualClock(_NOW_MS)
    with open_database(workdir / f"tick-{count}.db", clock=clock) as db:
        with db.write() as now:  # bulk set-up in one transaction; the fires below are the real path
            db.connection.executemany(
                "INSERT INTO schedules (id, expression, command, overlap, next_fire_at_ms, created_at_ms, "
                "updated_at_ms) VALUES (?, '0 0 1 1 *', '[\"true\"]', 'skip', ?, ?, ?)",
                [(str(uuid.uuid4()), _FAR_MS + i, now, now) for i in range(count)],
            )
        ids = [row[0] for row in db.connection.execute("SELECT id FROM schedules LIMIT ?", (reps,))]
        scheduler = Scheduler(LocalScheduleRepository(db), Journal(io.StringIO()))
        idle, fire, sleep = [], [], []
        for index in range(reps):
            begin = time.perf_counter()
            scheduler.tick()
            idle.append(time.perf_counter() - begin)
            begin = time.perf_counter()
            scheduler.next_due_at_ms()
            sleep.append(time.perf_counter() - begin)
            with db.write():  # make one schedule due (a fresh slot; its previous Run has ended)
                db.connection.execute("UPDATE runs SET status = 'succeeded' WHERE status = 'queued'")
                db.connection.execute("UPDATE schedules SET next_fire_at_ms = ? WHERE id = ?",
                                      (_NOW_MS - 1 - index, ids[index % len(ids)]))
            begin = time.perf_counter()
            assert scheduler.tick()
            fire.append(time.perf_counter() - begin)
        return common.median(idle) * 1000, common.median(fire) * 1000, common.median(sleep) * 1000


#: (what, expression, zone, after ms): searches to time, each ending at a fire or at the bound.
_SEARCHES = (
    ("rarest valid: 29 Feb on a Sunday, 2088 -> 2128", "0 0 29 2 */7", "CET-1CEST,M3.5.0,M10.5.0/3", 3_728_937_600_000),
    ("never fires, POSIX rule (400 years)", "0 * 10 4 *", "AAA-12BBB12,J1,J100/0", _NOW_MS),
    ("never fires, POSIX rule (400 years)", "0 */24 * 3 0L", "EET-2EEST,M3.5.0/0,M10.5.0/0", _NOW_MS),
    ("never fires, IANA name (400 years)", "0 */24 * 3 0L", "Asia/Beirut", _NOW_MS),
)


def _search_ms(expression: str, zone_text: str, after_ms: int, reps: int) -> float | None:
    try:
        zone = time_zone(zone_text)
    except InvalidTimeZoneError:  # no zoneinfo on this system: nothing to measure
        return None
    schedule, times = parse_schedule(expression), []
    for _ in range(reps):
        begin = time.perf_counter()
        try:
            schedule.next_fire_after(after_ms, zone)
        except ScheduleNeverFiresError:
            pass  # the outcome measured: the whole bounded search
        times.append(time.perf_counter() - begin)
    return common.median(times) * 1000


def run(workdir: Path, quick: bool) -> None:
    seconds = 10.0 if quick else 60.0
    rows = [[f"{n} schedules", f"{_idle_cpu(workdir, n, seconds) * 60 / seconds:.3f}"] for n in (0, 50)]
    common.print_table(
        f"serve: idle CPU with schedules, over {seconds:.0f} s (target: <= 0.3 s per minute with 50)",
        ["schedules", "CPU s per minute"], rows,
    )
    reps = 20 if quick else 100
    rows = []
    for count in (50, 5000):
        idle, fire, sleep = _tick_costs(workdir, count, reps)
        rows.append([f"{count}", f"{idle:.3f}", f"{fire:.3f}", f"{sleep:.3f}"])
    common.print_table(
        f"scheduler tick, median of {reps} (ms; O(due): the columns should not grow with the count)",
        ["schedules", "tick, none due", "tick, one due (fires)", "next_due_at_ms"], rows,
    )
    reps = 3 if quick else 10
    rows = []
    for what, expression, zone_text, after_ms in _SEARCHES:
        took = _search_ms(expression, zone_text, after_ms, reps)
        rows.append([what, f"{expression} in {zone_text}", "no zoneinfo" if took is None else f"{took:.1f}"])
    common.print_table(f"fire-time search, median of {reps} (ms)", ["search", "expression", "ms"], rows)
