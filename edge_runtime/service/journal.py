"""The service's own log: one line per event on stderr, ``key=value`` pairs after a fixed prefix.

Lines are meant for ``logread`` (procd) and ``journalctl`` (systemd), which add their own
timestamps; ours is kept anyway for a plain terminal. Values never include lease tokens or
process output; command lines are not logged either (they may carry secrets).
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


def _format(value: Any) -> str:
    text = str(value)
    if not text or any(ch in text for ch in ' ="\n\t'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class Journal:
    """Writes ``<UTC time> <level> <event> key=value ...`` lines, flushed one by one."""

    __slots__ = ("_stream",)

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr

    def _line(self, level: str, event: str, fields: dict[str, Any]) -> None:
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"
        pairs = " ".join(f"{key}={_format(value)}" for key, value in fields.items() if value is not None)
        self._stream.write(f"{stamp} {level} {event}{' ' if pairs else ''}{pairs}\n")
        self._stream.flush()

    def info(self, event: str, **fields: Any) -> None:
        self._line("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._line("warn", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._line("error", event, fields)
