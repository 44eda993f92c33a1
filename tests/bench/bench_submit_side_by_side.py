"""Submitting many Runs, side by side (``submit_side_by_side``): N Runs of ``true``, 2 slots.

Four ways to get the same N commands run, repetitions interleaved (A/B/C/D, A/B/C/D, ...) so that
the machine's drift hits each alike:

- ``drain``: the service's own time. The N Runs are queued in one transaction while ``serve``
  idles, then it is woken: from the wake-up to the last Run's end.
- ``per-call``: ``serve`` running, ``edge-runtime submit -- true`` run N times one after another
  (the venv's console script, bytecode compiled): from the first submit to the last Run's end.
- ``batch``: the same with one ``edge-runtime submit --batch -`` given the N lines on stdin.
- ``tsp``: task-spooler (Debian's ``task-spooler``, ``tsp -S 2``, then N times ``tsp true``, each
  job's output kept in a file as the runtime keeps its logs). Skipped, and said so, when ``tsp``
  is not installed.

Per way: total time (median and min), submits per second (N over the submit phase), peak RSS of
the service or daemon (``VmHWM``) and of the largest submitting client (GNU ``time``'s ``%M``, in the
traced pass), and bytes
written to storage per job (``write_bytes`` of ``/proc/<pid>/io`` of the service or daemon, which
counts the jobs it reaped, plus every client's). Syncs per job (``fsync``, ``fdatasync``, ...) are
counted in one more pass of at most 100 jobs under ``strace -f -c`` (its time is not reported),
skipped without strace. Figures only, never judged.
"""

from __future__ import annotations

import compileall
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import apsw

REPO = Path(__file__).resolve().parents[2]
EDGE = REPO / ".venv" / "bin" / "edge-runtime"
SLOTS = "2"
SYNC_CALLS = ("fsync", "fdatasync", "sync_file_range", "syncfs", "sync", "msync")
_TERMINAL_SQL = "SELECT count(*) FROM runs WHERE status IN ('succeeded', 'failed', 'cancelled')"


def _wait_until(condition, timeout: float, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark wait timed out")
        time.sleep(interval)


def _proc_io_write_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/io", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    raise RuntimeError(f"no write_bytes in /proc/{pid}/io")


def _proc_hwm_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")


class _Clients:
    """Runs client processes one after another; keeps their storage writes. ``wrap()`` gives the
    command each one is run under (the sync pass: ``time`` and ``strace``, a fresh file each)."""

    def __init__(self, env: dict[str, str], wrap: Callable[[], list[str]] | None = None) -> None:
        self.env, self.wrap = env, wrap or list
        self.written = 0

    def run(self, argv: list[str], stdin: bytes | None = None) -> bytes:
        process = subprocess.Popen([*self.wrap(), *argv], env=self.env, stdin=subprocess.PIPE if stdin else
                                   subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        if stdin is not None:
            process.stdin.write(stdin)  # read whole before the client prints: no pipe deadlock
            process.stdin.close()
        out = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        process.stdout.close()
        if process.returncode != 0:
            raise RuntimeError(f"{argv[:3]} exited {process.returncode}")
        # Not usage.ru_maxrss: a child forked from this process counts its RSS before the exec.
        self.written += usage.ru_oublock * 512
        return out


# --------------------------------------------------------------------------- the runtime


class _Runtime:
    def __init__(self, workdir: Path, label: str, wrap: list[str] | None = None) -> None:
        self.dir = workdir / label
        self.dir.mkdir(mode=0o700)
        self.db = self.dir / "edge-runtime.db"
        self.env = {**os.environ, "EDGE_RUNTIME_DB": str(self.db)}
        subprocess.run([str(EDGE), "migrate"], env=self.env, check=True, stdout=subprocess.DEVNULL)
        self.log = self.dir / "serve.log"
        with open(self.log, "wb") as handle:
            self.serve = subprocess.Popen([*(wrap or []), str(EDGE), "serve", "--worker-id", "bench", "--slots", SLOTS],
                                          env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=handle)
        _wait_until(lambda: "recovery.done" in self.log.read_text() or self.serve.poll() is not None, 60)
        if self.serve.poll() is not None:
            raise RuntimeError(f"serve exited: {self.log.read_text()}")
        self.pid = self._service_pid(wrap)
        self.written_before = _proc_io_write_bytes(self.pid)
        self._reader = apsw.Connection(str(self.db), flags=apsw.SQLITE_OPEN_READONLY)

    def _service_pid(self, wrap: list[str] | None) -> int:
        if not wrap:
            return self.serve.pid
        children = Path(f"/proc/{self.serve.pid}/task/{self.serve.pid}/children").read_text().split()
        return int(children[0])  # strace's one child: the service

    def wait_done(self, count: int) -> None:
        _wait_until(lambda: self._reader.execute(_TERMINAL_SQL).fetchone()[0] >= count, 900)

    def succeeded(self) -> int:
        return self._reader.execute("SELECT count(*) FROM runs WHERE status = 'succeeded'").fetchone()[0]

    def figures(self) -> tuple[int, int]:
        """The service's peak RSS (KiB) and storage bytes written since it started."""
        return _proc_hwm_kib(self.pid), _proc_io_write_bytes(self.pid) - self.written_before

    def stop(self) -> None:
        self._reader.close()
        if self.serve.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
        self.serve.wait(60)


def _drain(workdir: Path, label: str, count: int) -> dict:
    from edge_runtime.contract.runs import SubmitRunCommand
    from edge_runtime.local.database import open_database
    from edge_runtime.local.runs import LocalRunRepository
    from edge_runtime.local.wake import poke

    runtime = _Runtime(workdir, label)
    try:
        with open_database(runtime.db, create=False) as db:
            LocalRunRepository(db).submit_batch([SubmitRunCommand(argv=["true"])] * count)
        begin = time.perf_counter()
        poke(str(runtime.db))
        runtime.wait_done(count)
        total = time.perf_counter() - begin
        rss, written = runtime.figures()
        return {"total": total, "submit": None, "rss": rss, "written": written, "ok": runtime.succeeded()}
    finally:
        runtime.stop()


def _runtime_submits(workdir: Path, label: str, count: int, *, batch: bool, trace: Path | None = None) -> dict:
    wrap = _strace(trace, "serve") if trace else None
    runtime = _Runtime(workdir, label, wrap)
    clients = _Clients(runtime.env, (lambda: _strace(trace, "client") + _timed(trace)) if trace else None)
    try:
        begin = time.perf_counter()
        if batch:
            clients.run([str(EDGE), "submit", "--batch", "-"], stdin=b'["true"]\n' * count)
        else:
            for _ in range(count):
                clients.run([str(EDGE), "submit", "--", "true"])
        submitted = time.perf_counter() - begin
        runtime.wait_done(count)
        total = time.perf_counter() - begin
        rss, written = runtime.figures()
        return {"total": total, "submit": submitted, "rss": rss, "written": written + clients.written,
                "ok": runtime.succeeded()}
    finally:
        runtime.stop()


# --------------------------------------------------------------------------- task-spooler


def _tsp_daemon(tsp: str, socket: str) -> int:
    """The pid of the task-spooler server listening on ``socket``: a client starts it, detached,
    and is the one other ``tsp`` process with that socket until it has exited."""
    real = os.path.realpath(tsp)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.path.realpath(f"/proc/{entry}/exe") != real:
                    continue
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"TS_SOCKET={socket}".encode() in environ:
                found.append(int(entry))
        if len(found) == 1:
            return found[0]
        time.sleep(0.01)
    raise RuntimeError("task-spooler server not found")


def _tsp(workdir: Path, label: str, count: int, tsp: str, *, trace: Path | None = None) -> dict:
    home = workdir / label
    home.mkdir(mode=0o700)
    socket = str(home / "tsp.socket")
    env = {**os.environ, "TS_SOCKET": socket, "TMPDIR": str(home), "TS_MAXFINISHED": str(count + 10)}
    env.pop("TS_ONFINISH", None)
    # The first client starts the server, detached, with 2 slots; a strace -f of it follows the
    # server and ends with it, so it is not waited for here.
    starter = subprocess.Popen([*(_strace(trace, "daemon") if trace else []), tsp, "-S", SLOTS], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_until(lambda: os.path.exists(socket), 30)
    if not trace:
        starter.wait(30)
    daemon = _tsp_daemon(tsp, socket)
    written_before = _proc_io_write_bytes(daemon)
    clients = _Clients(env, (lambda: _strace(trace, "client") + _timed(trace)) if trace else None)
    try:
        begin = time.perf_counter()
        for _ in range(count):
            clients.run([tsp, "true"])
        submitted = time.perf_counter() - begin
        listing = _Clients(env)

        def all_finished() -> bool:
            lines = listing.run([tsp, "-l"]).decode().splitlines()[1:]
            return len(lines) >= count and all(" finished " in line for line in lines)

        _wait_until(all_finished, 900, 0.005)
        total = time.perf_counter() - begin
        ok = sum(1 for line in listing.run([tsp, "-l"]).decode().splitlines()[1:] if line.split()[3] == "0")
        return {"total": total, "submit": submitted, "rss": _proc_hwm_kib(daemon),
                "written": _proc_io_write_bytes(daemon) - written_before + clients.written, "ok": ok}
    finally:
        subprocess.run([tsp, "-K"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        _wait_until(lambda: not Path(f"/proc/{daemon}").exists(), 30)
        starter.wait(30)


# --------------------------------------------------------------------------- syncs


def _strace(trace: Path, role: str) -> list[str]:
    """``strace`` counting the sync calls of a process and its children, a file per process."""
    trace.mkdir(exist_ok=True)
    return ["strace", "-f", "-qq", "-c", "-e", f"trace={','.join(SYNC_CALLS)}", "-o",
            str(trace / f"sync-{role}-{time.monotonic_ns()}.txt")]


def _timed(trace: Path) -> list[str]:
    """GNU ``time`` writing the client's peak RSS (KiB) to a file of its own."""
    return ["/usr/bin/time", "-f", "%M", "-o", str(trace / f"rss-{time.monotonic_ns()}.txt")]


def _client_rss_kib(trace: Path) -> int:
    return max(int(path.read_text().split()[-1]) for path in trace.glob("rss-*.txt"))


def _sync_calls(trace: Path) -> int:
    calls = 0
    for summary in trace.glob("sync-*.txt"):
        for line in summary.read_text().splitlines():
            fields = line.split()
            if fields and fields[-1] in SYNC_CALLS and fields[-2].isdigit():
                calls += int(fields[-2]) if len(fields) == 5 else int(fields[3])
    return calls


def _syncs_and_client_rss(workdir: Path, count: int, tsp: str | None) -> dict[str, tuple[float, int]]:
    """Per way: sync calls per job and the largest client's peak RSS (KiB), in one traced pass."""
    per_job: dict[str, tuple[float, int]] = {}
    for label, measure in (("per-call", lambda t: _runtime_submits(workdir, "sync-per-call", count, batch=False, trace=t)),
                           ("batch", lambda t: _runtime_submits(workdir, "sync-batch", count, batch=True, trace=t)),
                           ("tsp", (lambda t: _tsp(workdir, "sync-tsp", count, tsp, trace=t)) if tsp else None)):
        if measure is None:
            continue
        trace = workdir / f"strace-{label}"
        measure(trace)
        time.sleep(0.5)  # strace writes its summary when its last traced process has exited
        per_job[label] = (_sync_calls(trace) / count, _client_rss_kib(trace))
    return per_job


# --------------------------------------------------------------------------- report


def run(workdir: Path, quick: bool) -> None:
    count = 100 if quick else 500
    repetitions = 1 if quick else 3
    compileall.compile_dir(str(REPO / "edge_runtime"), quiet=1)
    tsp = shutil.which("tsp")
    if tsp is None:
        print("submit_side_by_side tsp: skipped (task-spooler not installed: apt-get install task-spooler)")
    ways = {
        "drain": lambda rep: _drain(workdir, f"drain-{rep}", count),
        "per-call": lambda rep: _runtime_submits(workdir, f"per-call-{rep}", count, batch=False),
        "batch": lambda rep: _runtime_submits(workdir, f"batch-{rep}", count, batch=True),
        **({"tsp": lambda rep: _tsp(workdir, f"tsp-{rep}", count, tsp)} if tsp else {}),
    }
    results: dict[str, list[dict]] = {name: [] for name in ways}
    for rep in range(repetitions):
        for name, measure in ways.items():
            results[name].append(measure(rep))
            print(f"  rep {rep + 1} {name:8} {results[name][-1]['total']:7.2f} s", flush=True)

    traced: dict[str, tuple[float, int]] = {}
    if shutil.which("strace") and os.path.exists("/usr/bin/time"):
        traced = _syncs_and_client_rss(workdir, min(count, 100), tsp)
    else:
        print("submit_side_by_side syncs and client RSS: skipped (needs strace and GNU time)")

    drain = statistics.median(r["total"] for r in results["drain"])
    rows = []
    for name, samples in results.items():
        totals = [r["total"] for r in samples]
        submit_rates = [count / r["submit"] for r in samples if r["submit"]]
        rows.append([
            name, f"{statistics.median(totals):.2f}", f"{min(totals):.2f}", f"{statistics.median(totals) / drain:.2f}",
            f"{statistics.median(submit_rates):.0f}" if submit_rates else "-",
            f"{max(r['rss'] for r in samples) / 1024:.1f}",
            f"{traced[name][1] / 1024:.1f}" if name in traced else "-",
            f"{statistics.median(r['written'] for r in samples) / count / 1024:.1f}",
            f"{traced[name][0]:.2f}" if name in traced else "-",
            f"{min(r['ok'] for r in samples)}/{count}",
        ])
    import common

    common.print_table(
        f"submit_side_by_side: {count} jobs of `true`, {SLOTS} slots, {repetitions} interleaved repetitions "
        f"(target: batch total <= 2x drain)",
        ["way", "total s (median)", "total s (min)", "x drain", "submits/s", "service/daemon RSS MiB",
         "client RSS MiB", "KiB written / job", "syncs / job", "succeeded"],
        rows,
    )
