"""The event loop's mechanics and the service journal's line format."""

from __future__ import annotations

import io
import os
import signal
import socket

from edge_runtime.service.journal import Journal
from edge_runtime.service.loop import EventLoop


def test_a_signal_only_sets_a_flag_and_wakes_the_sleeping_loop() -> None:
    loop = EventLoop()
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        loop.install_signals([signal.SIGUSR1])
        os.kill(os.getpid(), signal.SIGUSR1)
        callbacks = loop.wait(30.0)  # returns at once: the wake-up fd is readable
        for callback in callbacks:
            callback()
        assert callbacks, "the signal did not wake the selector"
        assert loop.flags.take(signal.SIGUSR1) is True
        assert loop.flags.take(signal.SIGUSR1) is False
    finally:
        loop.close()
    assert signal.getsignal(signal.SIGUSR1) == previous


def test_wait_returns_the_callbacks_of_ready_descriptors_only() -> None:
    loop = EventLoop()
    left, right = socket.socketpair()
    quiet_left, quiet_right = socket.socketpair()
    seen: list[str] = []
    try:
        loop.register(left, lambda: seen.append("ready"))
        loop.register(quiet_left, lambda: seen.append("quiet"))
        assert loop.wait(0) == []
        right.send(b"x")
        for callback in loop.wait(5.0):
            callback()
        assert seen == ["ready"]
        loop.unregister(left)
        loop.unregister(left)  # idempotent
    finally:
        loop.close()
        for sock in (left, right, quiet_left, quiet_right):
            sock.close()


def test_journal_writes_one_quoted_line_per_event() -> None:
    stream = io.StringIO()
    Journal(stream).info("attempt.finished", run="r1", reason='terminated by "SIGTERM"\nx', code=None, n=3)
    line = stream.getvalue()
    assert line.count("\n") == 1
    assert line.split(" ", 2)[1:] == ["info", 'attempt.finished run=r1 reason="terminated by \\"SIGTERM\\"\\nx" n=3\n']
