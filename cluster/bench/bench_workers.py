"""``make bench-cluster`` (second part): Runs of ``true`` per second through 1, 2 and 4
``edge-runtime-cluster serve`` workers sharing one database, and the CPU and RSS of an idle worker.

Throughput: the workers are started and registered, then stopped (SIGSTOP) while ``--runs`` Runs of
``true`` are submitted (one transaction each, as ``edge-runtime-cluster submit`` does), then
continued (SIGCONT) together; the clock runs from the SIGCONT until the database holds every Run
ended. So a figure is the workers' rate (start, process, capture, end, lease completion), not the
submitter's. Idle: one registered worker with nothing to do, its own CPU time (``/proc/<pid>/stat``
utime + stime) over ``--idle-seconds``, and its RSS at the end.
Flood (printed first; ``--flood-only`` stops there): the same idle worker while the read-only
admin role sends ``NOTIFY ql3_wake`` (the channel workers listened on before the secret one of
migration 0008, and the only one it can name) as fast as one connection can for
``--flood-seconds``: its CPU, the scans of ``ql3`` tables its ticks make and the database's other
commits.

Figures are printed, never asserted (the machine is shared and noisy); the load average is printed
beside them. A private database is created through ``EDGE_PG_ADMIN_DSN`` and dropped at the end; the
workers get the DSN through ``$EDGE_RUNTIME_CLUSTER_DSN`` (never on a command line) and keep their
logs in a private temporary directory, removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

CLI = Path(sys.executable).parent / "edge-runtime-cluster"
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


class Workers:
    """``count`` serve processes with ``slots`` each, on the runtime DSN."""

    def __init__(self, root: Path, dsn: str, count: int, slots: int) -> None:
        env = {**os.environ, "EDGE_RUNTIME_CLUSTER_DSN": dsn, "XDG_STATE_HOME": str(root / "state")}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        for i in range(count):
            log = root / f"worker-{count}-{i}.log"
            self.logs.append(log)
            with open(log, "wb") as out:
                self.procs.append(subprocess.Popen(
                    [str(CLI), "serve", "--worker-id", f"bench-{count}-{i}", "--slots", str(slots),
                     "--log-dir", str(root / f"logs-{count}-{i}")],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True))

    def signal(self, signum: int) -> None:
        for proc in self.procs:
            os.kill(proc.pid, signum)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                    proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)

    def check_alive(self) -> None:
        for proc, log in zip(self.procs, self.logs):
            if proc.poll() is not None:
                raise SystemExit(f"a worker exited ({proc.returncode}); its log:\n{log.read_text(errors='replace')[-2000:]}")


def _wait(predicate: Any, timeout: float, what: str, workers: Workers) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        workers.check_alive()
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} not reached within {timeout:.0f} s")
        time.sleep(0.02)


def _count(owner: Any, query: str, *params: Any) -> int:
    return owner.execute(query, params).fetchone()[0]


def _reset(owner: Any) -> None:
    owner.execute("TRUNCATE ql3.schedule_fires, ql3.schedules, ql3.attempt_logs, ql3.run_events, ql3.run_cancellation_dispatches, "
                  "ql3.run_dispatch_leases, ql3.run_attempts, ql3.worker_sessions, ql3.runs")


def throughput(root: Path, owner: Any, dsn: str, workers_n: int, slots: int, runs: int) -> float:
    """Runs of ``true`` per second through ``workers_n`` workers (see the module's docstring)."""
    from cluster_postgres.store import PostgresStore
    from edge_runtime.contract.runs import SubmitRunCommand

    _reset(owner)
    workers = Workers(root, dsn, workers_n, slots)
    try:
        _wait(lambda: _count(owner, "SELECT count(*) FROM ql3.worker_sessions WHERE status = 'online'") == workers_n,
              60, f"{workers_n} workers online", workers)
        time.sleep(0.5)  # past start-up recovery
        workers.signal(signal.SIGSTOP)
        store = PostgresStore(dsn)
        try:
            for _ in range(runs):
                store.runs.submit(SubmitRunCommand(argv=["true"], name="bench"))
        finally:
            store.close()
        began = time.perf_counter()
        workers.signal(signal.SIGCONT)
        _wait(lambda: _count(owner, "SELECT count(*) FROM ql3.runs WHERE status IN ('succeeded', 'failed', 'cancelled')")
              == runs, 600, f"{runs} Runs ended", workers)
        elapsed = time.perf_counter() - began
        failed = _count(owner, "SELECT count(*) FROM ql3.runs WHERE status <> 'succeeded'")
        twice = _count(owner, "SELECT count(*) FROM (SELECT run_id FROM ql3.run_attempts GROUP BY run_id "
                              "HAVING count(*) > 1) t")
        if failed or twice:
            raise SystemExit(f"{failed} Runs did not succeed, {twice} had more than one Attempt: see {root}")
        return runs / elapsed
    finally:
        workers.stop()


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def _rss_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE


def idle(root: Path, owner: Any, dsn: str, seconds: float) -> tuple[float, int, int]:
    """(CPU % of one core, RSS bytes at the end, peak RSS bytes) of one registered idle worker."""
    _reset(owner)
    workers = Workers(root, dsn, 1, 2)
    try:
        _wait(lambda: _count(owner, "SELECT count(*) FROM ql3.worker_sessions WHERE status = 'online'") == 1,
              60, "the worker online", workers)
        time.sleep(3.0)  # start-up (imports, recovery) is not idling
        pid = workers.procs[0].pid
        ticks, began = _cpu_ticks(pid), time.monotonic()
        time.sleep(seconds)
        workers.check_alive()
        used = (_cpu_ticks(pid) - ticks) / _TICKS
        cpu = used / (time.monotonic() - began) * 100
        peak = int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if line.startswith("VmHWM:"))) * 1024
        return cpu, _rss_bytes(pid), peak
    finally:
        workers.stop()


#: What a worker's ticks read: every scan of a ``ql3`` table (the flood's NOTIFYs and the
#: server's reads of the notification queue touch none).
_SCANS = ("SELECT coalesce(sum(seq_scan + coalesce(idx_scan, 0)), 0) FROM pg_stat_user_tables"
          " WHERE schemaname = 'ql3'")
_COMMITS = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"


def flood(root: Path, owner: Any, dsn: str, flood_dsn: str, seconds: float) -> tuple[float, int, int, int]:
    """(CPU % of one core, NOTIFYs sent, the database's other commits, scans of ``ql3`` tables)
    while another role (``flood_dsn``: the read-only admin role) sends ``NOTIFY ql3_wake`` as
    fast as one connection can, one transaction each, at one registered idle worker.

    The other commits include the server's own: it reads the notification queue in a
    transaction of the listening backend, each time it is signalled. The scans are the worker's
    ticks' alone. A backend reports its counts to the statistics when it has been idle a while
    (up to 10 s later) or when it exits, so the worker idles past that before they are read, and
    the flooder's connection is closed and the worker stopped before they are read again (its
    shutdown's few queries are counted with the flood's)."""
    def counts() -> tuple[int, int]:
        owner.execute("SELECT pg_stat_clear_snapshot()")
        return _count(owner, _COMMITS), _count(owner, _SCANS)

    _reset(owner)
    workers = Workers(root, dsn, 1, 2)
    try:
        _wait(lambda: _count(owner, "SELECT count(*) FROM ql3.worker_sessions WHERE status = 'online'") == 1,
              60, "the worker online", workers)
        time.sleep(11.0)  # start-up (imports, recovery) is not the flood's, and its counts are reported
        pid, sent = workers.procs[0].pid, 0
        with psycopg.connect(flood_dsn, autocommit=True) as flooder:
            (commits, scans), ticks, began = counts(), _cpu_ticks(pid), time.monotonic()
            while time.monotonic() - began < seconds:
                flooder.execute("NOTIFY ql3_wake")
                sent += 1
            used = (_cpu_ticks(pid) - ticks) / _TICKS
            elapsed = time.monotonic() - began
        workers.check_alive()
        workers.stop()
        time.sleep(0.5)  # the exited backends' last reports
        commits_after, scans_after = counts()
        return used / elapsed * 100, sent, commits_after - commits - sent, scans_after - scans
    finally:
        workers.stop()


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="Runs of `true` per measurement")
    parser.add_argument("--slots", type=int, default=4, help="slots of each worker")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per worker count; the median is reported")
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="how long the idle worker is sampled")
    parser.add_argument("--flood-seconds", type=float, default=10.0, help="how long the wake channel is flooded")
    parser.add_argument("--flood-only", action="store_true", help="measure only the flood of the wake channel")
    args = parser.parse_args()
    admin_dsn = os.environ.get("EDGE_PG_ADMIN_DSN")
    if not admin_dsn:
        print("EDGE_PG_ADMIN_DSN is not set (e.g. host=127.0.0.1 user=postgres dbname=postgres)", file=sys.stderr)
        return 2
    if not CLI.exists():
        print(f"{CLI} is missing: install ./cluster into this venv (make .venv-cluster/.installed)", file=sys.stderr)
        return 2
    from cluster_postgres.migrations import migrate
    from cluster_postgres.readiness import bootstrap

    name = f"ql3_bench_{os.getpid()}_{secrets.token_hex(3)}"
    bootstrap(admin_dsn, name)
    owner_dsn = make_conninfo(admin_dsn, user="ql3_migration_owner", dbname=name)
    runtime_dsn = make_conninfo(admin_dsn, user="ql3_runtime", dbname=name)
    root = Path(tempfile.mkdtemp(prefix="ql3-bench-workers-"))
    try:
        migrate(owner_dsn)
        with psycopg.connect(owner_dsn, autocommit=True) as owner:
            cpu, sent, commits, scans = flood(root, owner, runtime_dsn, make_conninfo(
                admin_dsn, user="ql3_cluster_admin", dbname=name), args.flood_seconds)
            print(f"\nwake channel flooded for {args.flood_seconds:g} s by ql3_cluster_admin ({sent:,} NOTIFYs, one "
                  f"transaction each): the worker's CPU {cpu:.1f} % of one core; {commits:,} other commits in the "
                  f"database (the server's reads of the notification queue among them); {scans:,} scans of ql3 "
                  f"tables (the worker's ticks); load avg {_load()}")
            if args.flood_only:
                return 0
            print(f"\nRuns of `true` through edge-runtime-cluster serve workers ({args.slots} slots each), "
                  f"{args.runs} Runs per measurement, median of {args.rounds}; {os.cpu_count()} CPUs, PostgreSQL on loopback")
            print(f"{'workers':>7}  {'runs/s':>7}  {'scaling':>7}  {'rounds runs/s':>20}  load avg 1/5/15 min")
            base = None
            for count in (1, 2, 4):
                rates = [throughput(root, owner, runtime_dsn, count, args.slots, args.runs) for _ in range(args.rounds)]
                rate = statistics.median(rates)
                base = base or rate
                print(f"{count:>7}  {rate:>7.1f}  {rate / base:>6.2f}x  {' '.join(f'{r:.1f}' for r in rates):>20}  {_load()}")
            cpu, rss, peak = idle(root, owner, runtime_dsn, args.idle_seconds)
            print(f"\nidle worker over {args.idle_seconds:g} s: CPU {cpu:.2f} % of one core, RSS {rss / 2**20:.1f} MiB "
                  f"(peak {peak / 2**20:.1f} MiB); load avg {_load()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
