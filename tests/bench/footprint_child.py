"""Run the edge-runtime CLI with every SQLite write and sync counted (used by bench_footprint).

``python footprint_child.py COUNTERS_JSON TIME_SPEED -- <edge-runtime arguments>``

A counting VFS is registered as SQLite's default before the runtime opens anything, so every
``xWrite`` (bytes) and ``xSync`` (one ``fdatasync``/``fsync`` of the file) of the database, its
WAL and anything else SQLite opens is counted per file kind. A thread writes the counters to
``COUNTERS_JSON`` (atomically) every 100 ms and once more at exit, so the benchmark can read them
while the process serves, without touching its loop.

``TIME_SPEED`` > 1 runs a simulated period faster: wall and monotonic clocks read ``speed`` times
as fast from start-up, and every sleep or ``select`` timeout is divided by it. The service then
does in one real minute what it does in ``speed`` minutes (heartbeats, watermark, recovery,
retention checks), through its real loop and storage. Only this benchmark child does this.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import sys
import threading
import time

from counting_vfs import CountingVFS, file_path


def _kind(name: object) -> str:
    """The file kind by name suffix: db, wal, shm, journal, other."""
    path = file_path(name)
    for suffix in ("-wal", "-shm", "-journal"):
        if path.endswith(suffix):
            return suffix[1:]
    return "db" if path.endswith(".db") else "other"


def _speed_up(speed: float) -> None:
    real_time_ns, real_monotonic_ns, real_sleep = time.time_ns, time.monotonic_ns, time.sleep
    t0, m0 = real_time_ns(), real_monotonic_ns()

    def time_ns() -> int:
        return t0 + int((real_time_ns() - t0) * speed)

    def monotonic_ns() -> int:
        return m0 + int((real_monotonic_ns() - m0) * speed)

    time.time_ns = time_ns
    time.time = lambda: time_ns() / 1e9
    time.monotonic_ns = monotonic_ns
    time.monotonic = lambda: monotonic_ns() / 1e9
    time.sleep = lambda seconds: real_sleep(seconds / speed)
    selector = selectors.DefaultSelector
    real_select = selector.select

    def select(self, timeout=None):  # noqa: ANN001, ANN202
        return real_select(self, None if timeout is None else timeout / speed)

    selector.select = select


def main() -> int:
    counters_path, speed = sys.argv[1], float(sys.argv[2])
    argv = sys.argv[4:] if sys.argv[3] == "--" else sys.argv[3:]
    vfs = CountingVFS("bench-footprint", _kind, makedefault=True)
    lock = threading.Lock()

    def dump() -> None:
        with lock:
            data = {"written": dict(vfs.written), "syncs": dict(vfs.syncs)}
            tmp = f"{counters_path}.tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(data, handle)
            os.replace(tmp, counters_path)

    def dumper() -> None:
        while True:
            threading.Event().wait(0.1)  # real time: Event.wait is not sped up
            try:
                dump()
            except RuntimeError:  # a counter changed size while copied: take the next round
                continue

    dump()
    atexit.register(dump)
    threading.Thread(target=dumper, daemon=True).start()
    if speed != 1:
        _speed_up(speed)
    from edge_runtime.cli.main import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
