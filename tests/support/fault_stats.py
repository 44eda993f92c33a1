"""Counters of the fault campaigns, filled by the campaigns as they run and printed as one table.

Every figure comes from a campaign that actually ran in this pytest session: a test adds to a
counter only after the fault, cut, kill, jump or input it counts was really applied and checked.
"""

from __future__ import annotations

import os
from collections import Counter

#: Rows of the summary table, in print order. The last two must stay 0.
CUT_POINTS = "cut points tried"
KILLS = "kills tried"
CLOCK_JUMPS = "clock jumps tried"
FAULTS = "faults injected"
BAD_INPUTS = "bad inputs tried"
ACKED_LOST = "acknowledged operations lost"
INVARIANT_VIOLATIONS = "invariant violations"
ROWS = (CUT_POINTS, KILLS, CLOCK_JUMPS, FAULTS, BAD_INPUTS, ACKED_LOST, INVARIANT_VIOLATIONS)
MUST_BE_ZERO = (ACKED_LOST, INVARIANT_VIOLATIONS)

#: The fixed seed of every seeded campaign; override with EDGE_FAULT_SEED to explore.
SEED = int(os.environ.get("EDGE_FAULT_SEED", "20261130"))

STATS: Counter[str] = Counter()
#: Which campaigns contributed, for the table's footer.
CAMPAIGNS: Counter[str] = Counter()


def add(row: str, count: int = 1, *, campaign: str) -> None:
    if row not in ROWS:
        raise KeyError(f"unknown summary row {row!r}")
    STATS[row] += count
    CAMPAIGNS[campaign] += 0


def render(mode: str) -> list[str]:
    """The summary table as lines of text."""
    width = max(len(row) for row in ROWS)
    lines = [f"fault campaign summary (mode={mode}, seed={SEED})", f"{'measure':<{width}}  {'count':>8}"]
    lines.append("-" * (width + 10))
    for row in ROWS:
        flag = "  <-- must be 0" if row in MUST_BE_ZERO and STATS[row] else ""
        lines.append(f"{row:<{width}}  {STATS[row]:>8}{flag}")
    lines.append(f"campaigns: {', '.join(sorted(CAMPAIGNS)) or 'none'}")
    return lines
