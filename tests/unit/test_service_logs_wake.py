"""The per-Attempt FIFO log capture (cap, marker, re-open) and the wake socket."""

from __future__ import annotations

import os
import select
from pathlib import Path

from edge_runtime.service.log_capture import (
    LogCapture,
    create_fifo,
    file_stem,
    log_paths,
    open_child_output,
    truncation_marker,
)
from edge_runtime.local.wake import MAX_SOCKET_PATH_BYTES, WakeSocket, poke, wake_dirs


def _capture(tmp_path: Path, cap: int) -> tuple[LogCapture, int]:
    log, fifo = log_paths(tmp_path / "logs", "attempt-1")
    create_fifo(fifo)
    writer = open_child_output(fifo)
    capture = LogCapture("attempt-1", log, fifo, cap)
    capture.open()
    return capture, writer


def test_capture_keeps_output_up_to_the_cap_then_one_marker(tmp_path: Path) -> None:
    capture, writer = _capture(tmp_path, 10)
    os.write(writer, b"0123456789abcdef")
    assert capture.pump() is True
    os.write(writer, b"more")
    assert capture.pump() is True
    os.close(writer)
    assert capture.pump() is False  # every writer closed
    capture.close(unlink_fifo=True)
    assert capture.log_path.read_bytes() == b"0123456789" + truncation_marker(10)
    assert not capture.fifo_path.exists()


def test_reopened_capture_continues_the_same_file_and_cap(tmp_path: Path) -> None:
    # The child holds the FIFO open across a service restart; the new service re-opens it by path.
    capture, writer = _capture(tmp_path, 8)
    os.write(writer, b"abcd")
    capture.pump()
    capture.close()  # the service dies
    os.write(writer, b"efghij")  # the child keeps writing: no SIGPIPE, the pipe buffers it
    again = LogCapture("attempt-1", capture.log_path, capture.fifo_path, 8)
    again.open()
    assert again.pump() is True
    os.close(writer)
    assert again.pump() is False
    again.close(unlink_fifo=True)
    assert capture.log_path.read_bytes() == b"abcdefgh" + truncation_marker(8)


def test_file_stem_hashes_unsafe_ids() -> None:
    assert file_stem("0b9c-uuid") == "0b9c-uuid"
    assert "/" not in file_stem("../../etc/passwd")
    assert file_stem("../x") != file_stem("../y")


def test_poke_wakes_every_live_service_and_drops_stale_sockets(tmp_path: Path) -> None:
    db = tmp_path / "edge-runtime.db"
    wake = WakeSocket(db)
    try:
        stale = wake.path.with_name("999999.sock")
        import socket

        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as dead:
            dead.bind(os.fspath(stale))  # bound, then closed: its service is gone
        assert poke(db) == 1
        assert not stale.exists()
        readable, _, _ = select.select([wake], [], [], 5)
        assert readable == [wake]
        assert wake.drain() == 1
        assert wake.drain() == 0
    finally:
        wake.close()
    assert not wake.path.exists()
    assert poke(db) == 0


def test_a_deep_database_keeps_its_wake_socket_beside_it_and_is_woken(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 200) / "edge-runtime.db"
    deep.parent.mkdir()
    assert len(os.fsencode(deep.parent / "edge-runtime.db.wake" / "4194304.sock")) > MAX_SOCKET_PATH_BYTES
    wake = WakeSocket(deep)
    try:
        assert wake.path.parent == wake_dirs(deep)[0] == deep.parent / "edge-runtime.db.wake"
        assert poke(deep) == 1
        readable, _, _ = select.select([wake], [], [], 5)
        assert readable == [wake] and wake.drain() == 1
    finally:
        wake.close()
    assert not wake.path.exists()
