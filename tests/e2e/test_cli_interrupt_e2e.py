"""Ctrl-C during ``edge-runtime logs RUN | slow-reader`` (and ``logs --follow``): a real shell
pipeline in a process group of its own gets SIGINT, as a terminal's Ctrl-C sends it to the
foreground group, at a different moment each time: counted from the start (while the CLI loads
argparse, gettext, its command's module) and from the reader's first line (while the CLI writes
into the full pipe, while it follows). The CLI never prints a traceback (``BrokenPipeError``,
``KeyboardInterrupt``): it stops, at most with its one ``Error:`` line.

Two reports are not the CLI's: a SIGINT in the first milliseconds can meet the interpreter itself
still starting (``Fatal Python error: init_import_site``), or the launcher pip generates (its
``from edge_runtime.cli import main`` line, while the import system looks for the package),
before any code of the CLI runs; Python prints those on its own. They are told apart (no frame of
the CLI's own files) and allowed. Once the package's code runs, it catches the interrupt."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.service_harness import Harness, wait_for

pytestmark = pytest.mark.e2e

#: The console script a user runs (the venv's), else the module.
_SCRIPT = Path(sys.executable).parent / "edge-runtime"
#: A reader slower than the writer (the pipe fills and the CLI blocks writing into it); it makes
#: the file named by $0 once the first line came.
_SLOW_READER = 'read -r line && : > "$0"; while read -r line; do sleep 0.002; done'
#: When SIGINT comes: (counted from the reader's first line?, seconds): while loading, at once,
#: while writing, later.
_MOMENTS = ((False, 0.05), (False, 0.1), (False, 0.15), (False, 0.25), (True, 0.0), (True, 0.02), (True, 0.1),
            (True, 0.3), (True, 0.6), (True, 1.0))
_NEVER = ("Traceback", "BrokenPipeError", "KeyboardInterrupt", "Exception ignored")
#: The interpreter's own report of a SIGINT during its start, before the CLI's code runs.
_INTERPRETER_START = "Fatal Python error: init_import_site"


def _before_the_cli_ran(err: str) -> bool:
    """Whether ``err`` is Python's report of an interrupt before any of the CLI's code ran."""
    if _INTERPRETER_START in err:
        return True
    frames = re.findall(r'^  File "([^"]+)"', err, re.M)
    return bool(frames) and set(frames) == {str(_SCRIPT)} and err.rstrip().endswith("KeyboardInterrupt")


def _assert_quiet(moment: tuple[bool, float], err: str) -> None:
    if _before_the_cli_ran(err):
        return  # Python's, not the CLI's (see the module's docstring)
    assert not any(word in err for word in _NEVER), (moment, err)
    assert all(line.startswith(("Error: ", "Note: ")) for line in err.splitlines()), (moment, err)


def _cli_words() -> str:
    return f'"{_SCRIPT}"' if _SCRIPT.exists() else f'"{sys.executable}" -m edge_runtime'


def _sigint_by_default() -> None:
    """SIGINT's default action in the pipeline, as a terminal's foreground job has it: a shell
    that starts a job in the background (``make test &``) hands an *ignored* SIGINT down to
    everything it runs, and an ignored signal survives exec, so Ctrl-C would reach nobody."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _pipeline_started(pgid: int) -> bool:
    """Whether the process group holds both the CLI (an interpreter running it) and the slow
    reader (its own ``sh -c``), not only the shells forked to start them, which show the whole
    pipeline as their command line."""
    cli = reader = False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if int(stat.rsplit(")", 1)[1].split()[2]) != pgid or not argv[0]:
            continue
        shell = argv[0] in (b"sh", b"/bin/sh")
        cli |= not shell and any(b"edge-runtime" in a or b"edge_runtime" in a for a in argv)
        reader |= shell and len(argv) > 2 and argv[2].startswith(b"read -r line")
    return cli and reader


def _interrupt_pipeline(harness: Harness, cli_args: str, moment: tuple[bool, float]) -> tuple[int, str]:
    after_first_line, delay_s = moment
    ready = harness.tmp / "first-line"
    ready.unlink(missing_ok=True)
    pipeline = f'{_cli_words()} --db "{harness.db_path}" {cli_args} | (sh -c \'{_SLOW_READER}\' "{ready}")'
    process = subprocess.Popen(["sh", "-c", pipeline], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=harness.env, start_new_session=True,
                               preexec_fn=_sigint_by_default)
    try:
        # Counted from when both ends of the pipe exist: on a loaded machine the shell may fork the
        # reader later than the delay, and a SIGINT before that would miss it (the reader then
        # reads a log of seconds and the pipeline outlives the test's patience).
        wait_for(lambda: _pipeline_started(process.pid), "the CLI and the reader to start")
        if after_first_line:
            wait_for(ready.exists, "the reader's first line")
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
        process.stderr.close()  # also after a timeout: no descriptor left for a later test to find
    return process.returncode, err.decode(errors="replace")


def test_ctrl_c_in_logs_into_a_slow_reader_never_prints_a_traceback(harness: Harness) -> None:
    run_id = harness.submit("sh", "-c", "seq 1 400000")
    harness.serve()
    harness.wait_status(run_id, "succeeded")
    interrupted = 0
    for moment in _MOMENTS:
        code, err = _interrupt_pipeline(harness, f"logs {run_id}", moment)
        _assert_quiet(moment, err)
        interrupted += code != 0
    assert interrupted  # the signal did come while the pipeline ran (the log takes seconds to read)


def test_ctrl_c_in_logs_follow_into_a_slow_reader_never_prints_a_traceback(harness: Harness) -> None:
    run_id = harness.submit("sh", "-c", "while :; do seq 1 2000; sleep 0.05; done")
    harness.serve()
    harness.wait_running(run_id)
    for moment in _MOMENTS:
        code, err = _interrupt_pipeline(harness, f"logs {run_id} --follow", moment)
        assert code != 0  # --follow of a running Attempt only ends by the interrupt
        _assert_quiet(moment, err)
    harness.cli("cancel", run_id)
