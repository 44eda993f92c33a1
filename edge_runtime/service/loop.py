"""The event loop's mechanics: one ``select`` over every descriptor, signals turned into flags.

Nothing here knows about Runs. The service registers readable descriptors (the wake socket, log
FIFOs, pidfds) with callbacks and asks the loop to wait until one is ready, a signal arrives, or
its next due time comes; it never polls faster than that.

Signal handlers only set a flag; ``signal.set_wakeup_fd`` makes the kernel-level handler write
the signal number to a socket the selector watches, so a signal that arrives just before
``select`` starts sleeping still wakes it (the classic lost-wake-up race of a plain flag).
"""

from __future__ import annotations

import selectors
import signal
import socket
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

Callback = Callable[[], None]


class SignalFlags:
    """Which signals arrived since they were last taken (set by handlers, read by the loop)."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: set[int] = set()

    def set(self, signum: int) -> None:
        self._pending.add(signum)

    def take(self, signum: int) -> bool:
        if signum in self._pending:
            self._pending.discard(signum)
            return True
        return False


class EventLoop:
    """A selector plus the signal wake-up channel. Not thread-safe; one per service."""

    __slots__ = ("_selector", "_signal_reader", "_signal_writer", "flags", "_old_handlers", "_old_wakeup_fd")

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._signal_reader, self._signal_writer = socket.socketpair()
        self._signal_reader.setblocking(False)
        self._signal_writer.setblocking(False)
        self._selector.register(self._signal_reader, selectors.EVENT_READ, self._drain_signals)
        self.flags = SignalFlags()
        self._old_handlers: dict[int, Any] = {}
        self._old_wakeup_fd: int | None = None

    def install_signals(self, signums: Iterable[int]) -> None:
        """Route ``signums`` to flags. Call from the main thread."""
        self._old_wakeup_fd = signal.set_wakeup_fd(self._signal_writer.fileno(), warn_on_full_buffer=False)
        for signum in signums:
            self._old_handlers[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only a flag: the loop acts on it after select returns.
        self.flags.set(signum)

    def register(self, fileobj: Any, callback: Callback) -> None:
        self._selector.register(fileobj, selectors.EVENT_READ, callback)

    def unregister(self, fileobj: Any) -> None:
        try:
            self._selector.unregister(fileobj)
        except (KeyError, ValueError):
            pass  # already gone: unregistering is idempotent by design

    def wait(self, timeout_s: float | None) -> list[Callback]:
        """Sleep until a descriptor is ready, a signal arrives or ``timeout_s`` passes.

        Returns the callbacks of the ready descriptors, for the caller to run in order.
        """
        events = self._selector.select(None if timeout_s is None else max(0.0, timeout_s))
        return [key.data for key, _ in events]

    def _drain_signals(self) -> None:
        while True:
            try:
                if not self._signal_reader.recv(64):
                    return
            except (BlockingIOError, InterruptedError):
                return

    def close(self) -> None:
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler)
        self._old_handlers.clear()
        if self._old_wakeup_fd is not None:
            signal.set_wakeup_fd(self._old_wakeup_fd)
            self._old_wakeup_fd = None
        self._selector.close()
        self._signal_reader.close()
        self._signal_writer.close()
