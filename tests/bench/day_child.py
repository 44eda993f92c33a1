"""Run the edge-runtime CLI on a clock the day benchmark controls (used by ``day.py``).

``python day_child.py STATE_JSON START_AT_MS END_AT_MS -- <edge-runtime arguments>``

- The wall and monotonic clocks read ``START_AT_MS`` at start-up and go on from there.
- Until they reach ``END_AT_MS`` (0: never), the main thread's idle waits are skipped: when the
  service's loop would sleep in ``select`` (or ``time.sleep``) for longer than a short real wait,
  both clocks jump forward by the rest of the timeout, as if it had passed. A day of schedules
  then runs through the real loop, store and executor as fast as the service does the work, each
  Run's own start and end still in real time. Other threads (the panel) wait in real time.
- A counting VFS is SQLite's default before the runtime opens anything: every ``xWrite`` (bytes)
  and ``xSync`` (one ``fdatasync``/``fsync``) is counted per file kind.

A thread writes ``{"written", "syncs", "now_ms"}`` to ``STATE_JSON`` (atomically) every 100 ms and
at exit, so the benchmark reads the counters and the simulated time without touching the loop.
Only this benchmark child does any of this.
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

#: A wait shorter than this is real; a longer one first waits this long for real (a Run's exit, a
#: wake-up datagram), then skips the rest.
REAL_WAIT_S = 0.005


def _kind(name: object) -> str:
    path = file_path(name)
    for suffix in ("-wal", "-shm", "-journal"):
        if path.endswith(suffix):
            return suffix[1:]
    return "db" if path.endswith(".db") else "other"


class _Clock:
    """Both clocks as the real ones plus one offset; skipping moves the offset."""

    def __init__(self, start_at_ms: int, end_at_ms: int) -> None:
        self.real_time_ns, self.real_monotonic_ns = time.time_ns, time.monotonic_ns
        self.real_sleep = time.sleep
        self.offset_ns = start_at_ms * 1_000_000 - self.real_time_ns()
        self.mono_offset_ns = 0
        self.end_ns = end_at_ms * 1_000_000
        self.main = threading.main_thread()
        self.skipped_s = 0.0

    def time_ns(self) -> int:
        return self.real_time_ns() + self.offset_ns

    def monotonic_ns(self) -> int:
        return self.real_monotonic_ns() + self.mono_offset_ns

    def skippable(self, timeout: float | None) -> float:
        """The seconds of ``timeout`` to skip rather than wait (0: wait it all for real)."""
        if self.end_ns == 0 or threading.current_thread() is not self.main:
            return 0.0
        left = (self.end_ns - self.time_ns()) / 1e9
        if left <= 0:
            return 0.0
        wanted = left if timeout is None else timeout
        return max(0.0, min(wanted, left) - REAL_WAIT_S)

    def skip(self, seconds: float) -> None:
        step = int(seconds * 1e9)
        self.offset_ns += step
        self.mono_offset_ns += step
        self.skipped_s += seconds

    def install(self) -> None:
        time.time_ns = self.time_ns
        time.time = lambda: self.time_ns() / 1e9
        time.monotonic_ns = self.monotonic_ns
        time.monotonic = lambda: self.monotonic_ns() / 1e9

        def sleep(seconds: float) -> None:
            skip = self.skippable(seconds)
            self.real_sleep(seconds - skip)
            self.skip(skip)

        time.sleep = sleep
        selector = selectors.DefaultSelector
        real_select = selector.select
        clock = self

        def select(self, timeout=None):  # noqa: ANN001, ANN202
            skip = clock.skippable(timeout)
            if skip <= 0:
                return real_select(self, timeout)
            events = real_select(self, REAL_WAIT_S)
            if not events:
                clock.skip(skip)
            return events

        selector.select = select


def main() -> int:
    state_path, start_at_ms, end_at_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    argv = sys.argv[5:] if sys.argv[4] == "--" else sys.argv[4:]
    vfs = CountingVFS("bench-day", _kind, makedefault=True)
    clock = _Clock(start_at_ms, end_at_ms)
    lock = threading.Lock()

    def dump() -> None:
        with lock:
            data = {"written": dict(vfs.written), "syncs": dict(vfs.syncs), "now_ms": clock.time_ns() // 1_000_000,
                    "skipped_s": clock.skipped_s}
            tmp = f"{state_path}.tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(data, handle)
            os.replace(tmp, state_path)

    def dumper() -> None:
        while True:
            threading.Event().wait(0.1)
            try:
                dump()
            except RuntimeError:  # a counter changed size while copied: take the next round
                continue

    clock.install()  # before the runtime is imported: every clock it binds is this one
    dump()
    atexit.register(dump)
    threading.Thread(target=dumper, daemon=True).start()
    from edge_runtime.cli.main import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
