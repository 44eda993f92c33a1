"""Run ``edge-runtime`` with every token it draws from ``secrets.token_urlsafe`` appended to the
file named by ``$FAULT_TOKEN_LOG`` (test tooling for the secrets-at-rest scan), and, when
``$FAULT_CLOCK_FILE`` is set, its system clock shifted by the milliseconds that file holds, so a
campaign can make the wall clock of a real service jump without touching the machine's clock.

The service generates its lease tokens in memory and never shows them; this launcher lets the
campaign know every raw token so it can prove none reached the database, the WAL or a log. The
token log lives outside the runtime's directory and is excluded from the scan.
"""

from __future__ import annotations

import os
import secrets
import sys
import time

from edge_runtime.local.clock import SystemClock

_token_urlsafe = secrets.token_urlsafe


def _logged_token_urlsafe(nbytes: int | None = None) -> str:
    token = _token_urlsafe(nbytes)
    with open(os.environ["FAULT_TOKEN_LOG"], "a", encoding="utf-8") as log:
        log.write(token + "\n")
    return token


secrets.token_urlsafe = _logged_token_urlsafe


def _shifted_now_ms(self: SystemClock) -> int:
    with open(os.environ["FAULT_CLOCK_FILE"], encoding="ascii") as offset:
        return max(0, time.time_ns() // 1_000_000 + int(offset.read().strip() or "0"))


if os.environ.get("FAULT_CLOCK_FILE"):
    SystemClock.now_ms = _shifted_now_ms  # type: ignore[method-assign]

if __name__ == "__main__":
    from edge_runtime.cli import main

    sys.exit(main(sys.argv[1:]))
