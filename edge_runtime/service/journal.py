"""The service's own log: one line per event on stderr, ``key=value`` pairs after a fixed prefix.

Lines are meant for ``logread`` (procd) and ``journalctl`` (systemd), which add their own
timestamps; ours is kept anyway for a plain terminal. Values never include lease tokens or
process output; command lines are not logged either. A value may still quote a stored text (a
cancel reason, an error naming a path): every value is masked with the store's secrets (the
redactor the service hands over with :meth:`Journal.mask_with`) before it is quoted.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from edge_runtime.contract.env_entries import EnvironmentStore
from edge_runtime.contract.redaction import Redactor


def _format(value: Any) -> str:
    text = str(value)
    if not text or any(ch in text for ch in ' ="\n\t'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class Journal:
    """Writes ``<UTC time> <level> <event> key=value ...`` lines, flushed one by one."""

    __slots__ = ("_stream", "_redactor")

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._redactor = Redactor()

    def mask_with(self, redactor: Redactor) -> None:
        """Mask every later line's values with ``redactor`` (one assignment: a line written by
        another thread meanwhile uses the old one or the new one, whole)."""
        self._redactor = redactor

    def _line(self, level: str, event: str, fields: dict[str, Any]) -> None:
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"
        mask = self._redactor.text
        pairs = " ".join(f"{key}={_format(mask(str(value)))}" for key, value in fields.items() if value is not None)
        self._stream.write(f"{stamp} {level} {event}{' ' if pairs else ''}{pairs}\n")
        self._stream.flush()

    def info(self, event: str, **fields: Any) -> None:
        self._line("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._line("warn", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._line("error", event, fields)


#: How often the service reads its secrets again for its log's mask, besides at start and whenever
#: an Attempt's shared variables changed: a secret set meanwhile is masked in its lines after this.
SECRETS_REFRESH_S = 1.0


class JournalSecrets:
    """Keeps a journal's mask to the store's secrets: read at start (:meth:`refresh`), whenever
    the shared variables an Attempt gets differ from the last ones read (:meth:`task_values`, so
    the lines about an Attempt mask what it was given), and at most every ``SECRETS_REFRESH_S``
    otherwise (:meth:`refresh_when_due`, from the loop's tick)."""

    __slots__ = ("_journal", "_environment", "_seen", "_next_s")

    def __init__(self, journal: Journal, environment: Callable[[], EnvironmentStore | None]) -> None:
        self._journal = journal
        #: Looked up on each call: a store may replace the repository behind it (a reconnect).
        self._environment = environment
        self._seen: dict[str, str] | None = None
        self._next_s = 0.0

    def refresh(self) -> None:
        """Raises EdgeRuntimeError: the store could not read the secrets (the mask stays as it was)."""
        environment = self._environment()
        self._journal.mask_with(Redactor(() if environment is None else environment.secret_values()))
        self._next_s = time.monotonic() + SECRETS_REFRESH_S

    def refresh_when_due(self) -> None:
        if time.monotonic() >= self._next_s:
            self.refresh()

    def task_values(self) -> dict[str, str]:
        """The shared variables an Attempt gets (none where the store keeps none)."""
        environment = self._environment()
        if environment is None:
            return {}
        values = environment.task_values()
        if values != self._seen:
            self._seen = values
            self.refresh()
        return values
