"""A throwaway PostgreSQL primary + streaming standby on loopback, for the HA gate (§7).

The servers run as the ``postgres`` OS user (initdb refuses root) from the distribution's
binaries, in a private temp directory (mkdtemp: 0700, unpredictable name) handed to that user,
on free loopback ports, with Unix sockets inside that directory. ``reap_orphans`` stops and removes
what a killed earlier run left (its pid is in the directory name and no longer alive).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN = Path(os.environ.get("EDGE_PG_BIN", "/usr/lib/postgresql/15/bin"))
PREFIX = "ql3-ha-gate-"


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "the HA gate needs root to run throwaway servers as the postgres OS user"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "there is no postgres OS user"
    if not (PG_BIN / "initdb").exists():
        return f"no PostgreSQL binaries in {PG_BIN} (set EDGE_PG_BIN)"
    return None


def _as_postgres(*args: str | Path, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", "postgres", "--", *map(str, args)], capture_output=True, text=True,
                          check=check, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists (a test's reaper of leftovers asks: another user's process counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_orphans() -> list[str]:
    """Stop the servers of, and delete, gate directories whose creating process is gone."""
    reaped = []
    for path in glob.glob(os.path.join(tempfile.gettempdir(), PREFIX + "*")):
        try:
            pid = int(Path(path).name[len(PREFIX):].split("-", 1)[0])
        except ValueError:
            continue
        if pid_alive(pid) or Path(path).is_symlink():
            continue
        for data in (Path(path) / "primary", Path(path) / "standby"):
            if (data / "postmaster.pid").exists():
                _as_postgres(PG_BIN / "pg_ctl", "stop", "-m", "immediate", "-D", data, check=False)
        shutil.rmtree(path, ignore_errors=True)
        reaped.append(path)
    return reaped


class Server:
    def __init__(self, root: Path, name: str) -> None:
        self.root = root
        self.data = root / name
        self.log = root / f"{name}.log"
        self.port = free_port()

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=5"

    def start(self) -> None:
        _as_postgres(PG_BIN / "pg_ctl", "start", "-w", "-t", "60", "-D", self.data, "-l", self.log,
                     "-o", f"-p {self.port} -k {self.root}")

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            _as_postgres(PG_BIN / "pg_ctl", "stop", "-m", mode, "-w", "-D", self.data, check=False)


class HaPair:
    """Primary + streaming standby. Use as a context manager: everything is stopped and removed.

    ``standby=False``: the primary alone. ``listen_addresses`` and ``hba`` (extra pg_hba.conf
    lines) let clients in other network namespaces reach it over their veth; ``log_statements``
    logs every statement (the digest-only proof reads that log).
    """

    def __init__(self, *, standby: bool = True, listen_addresses: str = "127.0.0.1", hba: tuple[str, ...] = (),
                 log_statements: bool = True) -> None:
        self.with_standby = standby
        self.listen_addresses = listen_addresses
        self.hba = hba
        self.log_statements = log_statements
        reap_orphans()
        self.root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
        shutil.chown(self.root, "postgres", "postgres")
        self.primary = Server(self.root, "primary")
        self.standby = Server(self.root, "standby")

    def __enter__(self) -> "HaPair":
        try:
            self._set_up()
        except BaseException:
            self.close()
            raise
        return self

    def _set_up(self) -> None:
        _as_postgres(PG_BIN / "initdb", "-D", self.primary.data, "-A", "trust", "-U", "postgres", "--no-sync",
                     "-E", "UTF8", "--locale", "C")
        with open(self.primary.data / "postgresql.conf", "a") as conf:
            conf.write(f"listen_addresses = '{self.listen_addresses}'\nwal_level = replica\nmax_wal_senders = 4\n"
                       "fsync = on\n")
            if self.log_statements:
                conf.write("log_statement = 'all'\nlog_min_duration_statement = 0\n")
        if self.hba:
            with open(self.primary.data / "pg_hba.conf", "a") as hba:
                hba.write("".join(line + "\n" for line in self.hba))
        self.primary.start()
        if not self.with_standby:
            return
        _as_postgres(PG_BIN / "pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres",
                     "-D", self.standby.data, "-R", "-X", "stream", "--no-sync")
        self.standby.start()

    def wait_streaming(self, timeout: float = 30) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                if conn.execute("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").fetchone()[0]:
                    return
                time.sleep(0.1)
        raise TimeoutError("the standby never reached streaming")

    def wal_bytes(self) -> bytes:
        """Every WAL segment of both servers, raw (tuples are stored there as written)."""
        return b"".join(p.read_bytes() for server in (self.primary, self.standby)
                        for p in sorted((server.data / "pg_wal").iterdir()) if len(p.name) == 24)

    def promote(self) -> None:
        _as_postgres(PG_BIN / "pg_ctl", "promote", "-w", "-t", "60", "-D", self.standby.data)

    def close(self) -> None:
        self.standby.stop("immediate")
        self.primary.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self.close()
