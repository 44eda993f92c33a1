"""The per-Attempt monitor's log and exit status, log file names, and the wake socket."""

from __future__ import annotations

import os
import select
import signal
from pathlib import Path

from edge_runtime.service.log_capture import file_stem
from tests.support.monitor import exit_status, spawn_monitored, wait_monitor_gone
from edge_runtime.local.wake import MAX_SOCKET_PATH_BYTES, WakeSocket, poke, wake_dirs


def test_the_monitor_keeps_output_up_to_the_cap_whole_and_the_exit_status(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "attempt-1.log"
    exactly = "x" * 4095 + "\n"  # the cap, to the byte: no marker
    spawn_monitored(["sh", "-c", f"printf '%s' '{exactly}' >&2; exit 7"], log, cap=4096)
    assert exit_status(log) == 7
    wait_monitor_gone(log)
    assert log.read_text() == exactly


def test_the_monitor_keeps_the_last_bytes_written_before_a_signal_death(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "attempt-1.log"
    spawn_monitored(["sh", "-c", "echo last words; kill -USR1 $$"], log, cap=4096)
    assert exit_status(log) == -signal.SIGUSR1
    wait_monitor_gone(log)
    assert log.read_text() == "last words\n"


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
