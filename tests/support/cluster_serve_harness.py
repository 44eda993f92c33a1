"""What the multi-worker tests run: ``edge-runtime-cluster serve`` processes, each optionally in a
network namespace of its own (``ip netns`` + a veth pair, made and removed here), and the cleanup
of all of it, also of what a killed earlier run left (reaped at the next start).

Each test run owns one private directory (mkdtemp, 0700, named after its pid) holding the workers'
logs and a ``pids`` file; namespaces are named ``ql3w<pid>n<i>``. ``reap_orphans`` kills the serve
processes and deletes the namespaces of runs whose pid is gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.ha_cluster import pid_alive

CLI = Path(sys.executable).parent / "edge-runtime-cluster"
DIR_PREFIX = "ql3-serve-test-"
_NS = re.compile(r"ql3w(\d+)n(\d+)")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def netns_unavailable_reason() -> str | None:
    """Why workers cannot each get a network namespace here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"ql3w{os.getpid()}n99"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _is_our_serve(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(part.endswith(b"edge-runtime-cluster") for part in cmdline) and b"serve" in cmdline


def reap_orphans() -> list[str]:
    """Kill the serve processes and delete the namespaces of earlier runs whose pid is gone."""
    reaped = []
    for path in Path(tempfile.gettempdir()).glob(DIR_PREFIX + "*"):
        try:
            owner = int(path.name[len(DIR_PREFIX):].split("-", 1)[0])
        except ValueError:
            continue
        if pid_alive(owner) or path.is_symlink():
            continue
        pids = path / "pids"
        if pids.exists():
            for line in pids.read_text().split():
                if line.isdigit() and _is_our_serve(int(line)):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(line), signal.SIGKILL)
        shutil.rmtree(path, ignore_errors=True)
        reaped.append(str(path))
    if shutil.which("ip") is not None and os.geteuid() == 0:
        for line in _ip("netns", "list", check=False).stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            match = _NS.fullmatch(name)
            if match and not pid_alive(int(match.group(1))):
                _ip("netns", "del", name, check=False)
                reaped.append(name)
    return reaped


class Namespace:
    """A network namespace joined to the host by a veth pair: the host end is ``host_ip``, the
    namespace end ``ns_ip`` (a /30 of 10.<a>.<index>.0, ``a`` from the pid). Nothing else: the
    namespace's only route is the veth, so the worker reaches PostgreSQL at ``host_ip``."""

    def __init__(self, index: int) -> None:
        pid = os.getpid()
        self.name = f"ql3w{pid}n{index}"
        self.host_if = f"q{pid % 10_000_000}h{index}"[:15]
        self.ns_if = f"q{pid % 10_000_000}n{index}"[:15]
        subnet = f"10.{64 + pid % 128}.{index}"
        self.host_ip, self.ns_ip = f"{subnet}.1", f"{subnet}.2"
        self.subnet = f"{subnet}.0/30"

    def create(self) -> None:
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            _ip("link", "set", self.ns_if, "netns", self.name)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            _ip("-n", self.name, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
            _ip("-n", self.name, "link", "set", self.ns_if, "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
        except BaseException:
            self.delete()
            raise

    def delete(self) -> None:
        # Deleting the namespace destroys its veth end, and with it the pair.
        _ip("netns", "del", self.name, check=False)
        _ip("link", "del", self.host_if, check=False)

    def cut(self) -> None:
        """Take the link down: the worker can no longer reach the database (no reset: silence)."""
        _ip("link", "set", self.host_if, "down")

    def restore(self) -> None:
        _ip("link", "set", self.host_if, "up")


class Worker:
    """One ``edge-runtime-cluster serve`` process (in ``namespace`` when given)."""

    def __init__(self, root: Path, worker_id: str, dsn: str, *, slots: int, namespace: Namespace | None = None,
                 env: dict[str, str] | None = None, grace_ms: int = 2000) -> None:
        self.root = root
        self.worker_id = worker_id
        self.dsn = dsn
        self.slots = slots
        self.namespace = namespace
        self.env = {**os.environ, **(env or {})}
        self.grace_ms = grace_ms
        self.log_dir = root / f"logs-{worker_id}"
        self.process: subprocess.Popen[bytes] | None = None
        self.generation_logs: list[Path] = []

    def start(self) -> None:
        log = self.root / f"{self.worker_id}.{len(self.generation_logs)}.log"
        self.generation_logs.append(log)
        argv = [str(CLI), "serve", "--dsn", self.dsn, "--worker-id", self.worker_id, "--slots", str(self.slots),
                "--grace-ms", str(self.grace_ms), "--log-dir", str(self.log_dir)]
        if self.namespace is not None:
            argv = ["ip", "netns", "exec", self.namespace.name, *argv]  # `ip` execs the command itself
        with open(log, "wb") as out:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                            env=self.env, start_new_session=True)
        with open(self.root / "pids", "a") as pids:
            pids.write(f"{self.process.pid}\n")

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.generation_logs if p.exists())

    def kill9(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill9()


@contextlib.contextmanager
def private_root() -> Iterator[Path]:
    """The run's private directory; removed at the end."""
    reap_orphans()
    root = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def live_group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids of process group ``pgid``."""
    from edge_runtime.service.process_identity import group_members

    return [stat.pid for stat in group_members(pgid)]


def kill_attempt_groups(conn: Any) -> None:
    """SIGKILL the process groups of every Attempt recorded in the database whose leader is still
    the recorded process (start time checked): tasks left by a killed worker outlive it."""
    from edge_runtime.service.process_identity import read_stat

    for pid, pgid, ticks in conn.execute(
            "SELECT pid, pgid, process_start_ticks FROM ql3.run_attempts WHERE pid IS NOT NULL").fetchall():
        stat = read_stat(pid)
        if stat is not None and stat.start_ticks == ticks or live_group_members(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until truthy; a liveness guard, never a figure under test."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"liveness guard: {what} not reached within {timeout:.0f} s")
        time.sleep(interval)
