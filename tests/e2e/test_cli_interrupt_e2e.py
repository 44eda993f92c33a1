"""Ctrl-C during ``edge-runtime logs RUN | slow-reader`` (and ``logs --follow``): a real shell
pipeline in a process group of its own gets SIGINT, as a terminal's Ctrl-C sends it to the
foreground group, at a different moment each time (while the CLI starts, while it writes into the
full pipe, while it follows). The CLI never prints a traceback (``BrokenPipeError``,
``KeyboardInterrupt``): it stops quietly, at most with its one ``Error:`` line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service_harness import Harness

pytestmark = pytest.mark.e2e

#: The console script a user runs (the venv's), else the module.
_SCRIPT = Path(sys.executable).parent / "edge-runtime"
#: A reader slower than the writer: the pipe fills and the CLI blocks writing into it.
_SLOW_READER = "while read -r line; do sleep 0.002; done"
#: When SIGINT comes after the pipeline started: during the start, while writing, later.
_DELAYS_S = (0.05, 0.15, 0.3, 0.5, 0.8, 1.2)
_NEVER = ("Traceback", "BrokenPipeError", "KeyboardInterrupt", "Exception ignored")


def _cli_words() -> str:
    return f'"{_SCRIPT}"' if _SCRIPT.exists() else f'"{sys.executable}" -m edge_runtime'


def _interrupt_pipeline(harness: Harness, cli_args: str, delay_s: float) -> tuple[int, str]:
    pipeline = f'{_cli_words()} --db "{harness.db_path}" {cli_args} | ({_SLOW_READER})'
    process = subprocess.Popen(["sh", "-c", pipeline], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=harness.env, start_new_session=True)
    try:
        time.sleep(delay_s)
        try:
            os.killpg(process.pid, signal.SIGINT)  # the whole foreground group, as Ctrl-C does
        except ProcessLookupError:
            pass  # the pipeline ended first: nothing to interrupt this time
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode, err.decode(errors="replace")


def test_ctrl_c_in_logs_into_a_slow_reader_never_prints_a_traceback(harness: Harness) -> None:
    run_id = harness.submit("sh", "-c", "seq 1 400000")
    harness.serve()
    harness.wait_status(run_id, "succeeded")
    interrupted = 0
    for delay in _DELAYS_S:
        code, err = _interrupt_pipeline(harness, f"logs {run_id}", delay)
        assert not any(word in err for word in _NEVER), (delay, err)
        assert all(line.startswith(("Error: ", "Note: ")) for line in err.splitlines()), (delay, err)
        interrupted += code != 0
    assert interrupted  # the signal did come while the pipeline ran (the log takes seconds to read)


def test_ctrl_c_in_logs_follow_into_a_slow_reader_never_prints_a_traceback(harness: Harness) -> None:
    run_id = harness.submit("sh", "-c", "while :; do seq 1 2000; sleep 0.05; done")
    harness.serve()
    harness.wait_running(run_id)
    for delay in _DELAYS_S:
        code, err = _interrupt_pipeline(harness, f"logs {run_id} --follow", delay)
        assert code != 0  # --follow of a running Attempt only ends by the interrupt
        assert not any(word in err for word in _NEVER), (delay, err)
        assert all(line.startswith(("Error: ", "Note: ")) for line in err.splitlines()), (delay, err)
    harness.cli("cancel", run_id)
