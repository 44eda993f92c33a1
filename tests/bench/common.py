"""Shared helpers for the benchmark modules run by ``tests/bench/run.py``.

Harness contract: each ``tests/bench/bench_<name>.py`` defines ``run(workdir: pathlib.Path, quick: bool)
-> None``; ``workdir`` is a fresh, empty directory on disk-backed storage (never tmpfs) that the module
may fill as it likes; ``quick`` asks for fewer cycles and repetitions. A module prints its own table
(with :func:`print_table`) and returns; figures are reported, never judged pass/fail.

To compare a candidate with an anchor fairly, run them alternately (A/B/A/B, :func:`alternate`) so
that drift in the machine (page cache, thermal, a neighbour's I/O) hits both equally, and compare
medians, or the median of the per-repetition ratios (:func:`paired_ratio`).
"""

from __future__ import annotations

import math
import os
import re
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Sample",
    "Series",
    "alternate",
    "filesystem_type",
    "median",
    "p95",
    "paired_ratio",
    "percentile",
    "print_anchor_comparison",
    "print_table",
    "series_row",
    "timed_cycles",
]


def http_exchange(sock, request: bytes = b"") -> tuple[int, bytes, bytes]:
    """Send ``request`` (when there is one) on the kept-alive ``sock``, then read one HTTP/1.1
    answer: its status, its head and its body (as long as its Content-Length says)."""
    if request:
        sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("the connection closed before an answer")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(head.split()[1]), head, rest


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def percentile(values: Iterable[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` in (0, 1]) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def p95(values: Iterable[float]) -> float:
    return percentile(values, 0.95)


@dataclass
class Sample:
    """One repetition of a case: how many cycles ran, their total time and each cycle's latency."""

    cycles: int
    seconds: float
    latencies: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Cycles per second over the whole repetition."""
        return self.cycles / self.seconds

    @property
    def us_per_cycle(self) -> float:
        return self.seconds / self.cycles * 1e6


@dataclass
class Series:
    """Every repetition of one case."""

    name: str
    samples: list[Sample] = field(default_factory=list)

    @property
    def median_rate(self) -> float:
        return median(s.rate for s in self.samples)

    @property
    def median_us(self) -> float:
        return median(s.us_per_cycle for s in self.samples)

    @property
    def p95_latency_us(self) -> float:
        return p95(latency for s in self.samples for latency in s.latencies) * 1e6


def timed_cycles(cycle: Callable[[int], None], cycles: int, start: int = 0) -> Sample:
    """Call ``cycle(i)`` for ``i`` in ``start .. start + cycles - 1`` and time each call.

    The per-cycle timer reads cost well under a microsecond, which is noise beside a cycle that
    syncs a file.
    """
    clock = time.perf_counter
    latencies = []
    begin = clock()
    for index in range(start, start + cycles):
        t0 = clock()
        cycle(index)
        latencies.append(clock() - t0)
    return Sample(cycles=cycles, seconds=clock() - begin, latencies=latencies)


def alternate(
    cases: Mapping[str, Callable[[int], Sample]], repetitions: int, *, warmup: int = 1
) -> dict[str, Series]:
    """Run every case once per repetition, in a fixed order (A, B, A, B, ...).

    Args:
        cases: name -> function of the repetition number (negative for warm-up rounds) that
            runs one repetition and returns its :class:`Sample`.
        repetitions: measured repetitions of each case.
        warmup: discarded rounds run first (page cache, lazy imports, first WAL growth).
    """
    for round_ in range(warmup):
        for run in cases.values():
            run(-1 - round_)
    series = {name: Series(name) for name in cases}
    for repetition in range(repetitions):
        for name, run in cases.items():
            series[name].samples.append(run(repetition))
    return series


def paired_ratio(candidate: Series, anchor: Series) -> float:
    """Median over repetitions of candidate rate / anchor rate (each pair ran back to back)."""
    return median(c.rate / a.rate for c, a in zip(candidate.samples, anchor.samples, strict=True))


def series_row(series: Series) -> list[str]:
    """The standard row: name, cycles/s, µs/cycle (medians), p95 of single-cycle latency, repetitions."""
    return [
        series.name,
        f"{series.median_rate:,.0f}",
        f"{series.median_us:,.1f}",
        f"{series.p95_latency_us:,.1f}",
        str(len(series.samples)),
    ]


SERIES_HEADERS = ["case", "cycles/s (median)", "µs/cycle (median)", "p95 µs (one cycle)", "reps"]


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a plain aligned table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]

    def line(cells: Sequence[str]) -> str:
        first, *rest = (str(c) for c in cells)
        parts = [first.ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(rest, widths[1:])]
        return "  ".join(parts).rstrip()

    print(f"\n{title}")
    print(line(headers))
    print("  ".join("-" * width for width in widths))
    for row in rows:
        print(line(row))


def filesystem_type(path: Path) -> str:
    """The type of the filesystem holding ``path`` (from /proc/mounts), or 'unknown'."""
    target = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for entry in mounts:
                parts = entry.split()
                if len(parts) < 3:
                    continue
                mount_point = parts[1].replace("\\040", " ")
                inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best):
                    best, kind = mount_point, parts[2]
    except OSError:
        pass
    return kind


def print_anchor_comparison(
    title: str,
    full: Mapping[str, "Series"],
    full_ratio: float,
    off: Mapping[str, "Series"],
    off_ratio: float,
    *,
    cycles: int,
    repetitions: int,
    target: float,
) -> None:
    """Report an anchor (a) vs repository (b) pair measured with and without syncs.

    ``full``/``off`` map case names to series in the order (a), (b); the ratios are
    :func:`paired_ratio` of (b) over (a). The ``synchronous=OFF`` pair isolates the Python work
    per cycle, which is what the repository adds on top of the same durable work.
    """
    print_table(
        f"{title}, WAL, {cycles} cycles x {repetitions} alternating repetitions",
        SERIES_HEADERS,
        [series_row(s) for s in full.values()],
    )
    a, b = full.values()
    print(f"ratio (b)/(a), synchronous=FULL: {full_ratio:.3f} (median of paired repetitions; "
          f"medians {b.median_rate:,.0f} / {a.median_rate:,.0f} cycles/s = {b.median_rate / a.median_rate:.3f}); "
          f"target >= {target}")
    print_table(
        f"informative: the same without syncs (synchronous=OFF), {cycles * 4} cycles x {repetitions}: "
        "the Python work per cycle",
        SERIES_HEADERS,
        [series_row(s) for s in off.values()],
    )
    off_a, off_b = off.values()
    print(f"ratio (b)/(a), synchronous=OFF: {off_ratio:.3f}; "
          f"repository overhead {off_b.median_us - off_a.median_us:,.1f} µs/cycle")
