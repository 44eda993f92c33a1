"""Hardening, in-process: the task environment, trusted directories (the runtime directory, log_dir)
and the log-cap pace. The black-box forms: tests/e2e/test_hardening_e2e.py and
tests/artifact/test_built_binary_hardening.py.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest

from edge_runtime.contract.runs import SubmitRunCommand
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service import log_capture
from edge_runtime.service.attempts import AttemptSupervisor
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.executor import task_environment
from edge_runtime.service.journal import Journal
from edge_runtime.service.loop import EventLoop
from edge_runtime.service.process_identity import read_boot_id
from edge_runtime.service.trusted_paths import directory_problem, unpack_directory_problem
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.worker import WorkerSession

BUNDLE = "/tmp/_MEIabc123"

# ------------------------------------------------------------------ point 1


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # one-file or one-folder, started without LD_LIBRARY_PATH: the bootloader's value goes
        ({"LD_LIBRARY_PATH": BUNDLE}, {}),
        # started with one: the original comes back, and the bootloader's copy of it goes
        ({"LD_LIBRARY_PATH": f"{BUNDLE}:/opt/lib", "LD_LIBRARY_PATH_ORIG": "/opt/lib"}, {"LD_LIBRARY_PATH": "/opt/lib"}),
        # something else set it after the bootloader: left as it is
        ({"LD_LIBRARY_PATH": "/opt/lib"}, {"LD_LIBRARY_PATH": "/opt/lib"}),
    ],
)
def test_the_task_gets_the_library_path_the_service_was_started_with(given, expected) -> None:
    bundler = {"_PYI_ARCHIVE_FILE": "/usr/bin/edge-runtime", "_PYI_APPLICATION_HOME_DIR": BUNDLE,
               "_PYI_PARENT_PROCESS_LEVEL": "1", "_PYI_LINUX_PROCESS_NAME": "edge-runtime"}
    base = {"PATH": "/bin", "TZ": "CST-8"}  # a TZ of its own: the device's zone is not read
    assert task_environment({**base, **bundler, **given}, BUNDLE) == {**base, **expected}


def test_from_source_only_bundler_variables_are_dropped() -> None:
    given = {"PATH": "/bin", "TZ": "CST-8", "LD_LIBRARY_PATH": f"{BUNDLE}:/x", "_PYI_ARCHIVE_FILE": "/y"}
    assert task_environment(given) == {"PATH": "/bin", "TZ": "CST-8", "LD_LIBRARY_PATH": f"{BUNDLE}:/x"}


# ------------------------------------------------------------------ points 2 and 4


def test_a_private_directory_is_trusted(tmp_path: Path) -> None:
    assert directory_problem(tmp_path) is None


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o707, 0o1777])
def test_a_directory_others_may_write_is_not(tmp_path: Path, mode: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    assert "is writable by group or others" in directory_problem(shared)
    # below it, too: others could rename what is inside (unless sticky, like /tmp)
    (shared / "mine").mkdir(mode=0o700)
    below = directory_problem(shared / "mine")
    assert (below is None) if mode & 0o1000 else (f"{shared} is writable" in below)


def test_a_sticky_directory_is_accepted_as_an_unpack_directory(tmp_path: Path) -> None:
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    assert directory_problem(sticky, sticky_ok=True) is None
    unpacked = sticky / "_MEIxyz"
    unpacked.mkdir(mode=0o700)
    assert unpack_directory_problem(str(unpacked), one_file=True) is None
    unpacked.chmod(0o755)
    assert "is not a private (0700) directory" in unpack_directory_problem(str(unpacked), one_file=True)


def test_a_directory_of_another_uid_is_not_trusted(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another uid")
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o755)
    os.chown(foreign, 65534, 65534)
    assert "is owned by uid 65534" in directory_problem(foreign)


def test_a_symlink_cannot_lead_around_the_rule(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (tmp_path / "link").symlink_to(shared)
    assert f"{tmp_path / 'link'} is writable by group or others" in directory_problem(tmp_path / "link")
    # a private directory whose real parent others may write: found on the resolved path
    (shared / "inner").mkdir(mode=0o700)
    (tmp_path / "inner-link").symlink_to(shared / "inner")
    assert f"{shared} is writable by group or others" in directory_problem(tmp_path / "inner-link")
    assert "is not a directory" in directory_problem(Path(__file__))
    assert "No such file" in directory_problem(tmp_path / "missing")


# ------------------------------------------------------------------ point 12: past the cap


def test_past_the_cap_the_log_keeps_its_beginning_and_its_end(db: LocalDatabase, tmp_path: Path) -> None:
    runs = LocalRunRepository(db)
    worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=1, session_lease_ms=30_000, run_lease_ms=60_000)
    worker.register()
    loop = EventLoop()
    supervisor = AttemptSupervisor(runs=runs, worker=worker, controller=LocalProcessController(), loop=loop,
                                   journal=Journal(io.StringIO()), slots=1, log_dir=tmp_path / "logs",
                                   log_max_bytes=4096, boot_id=read_boot_id())
    run_id = runs.submit(SubmitRunCommand(argv=["seq", "1", "200000"])).id
    try:
        assert supervisor.start_queued() == 1
        deadline = time.monotonic() + 60
        while supervisor.running or supervisor.seconds_to_capture_timer() is not None:
            assert time.monotonic() < deadline, "the attempt did not end"
            timer = supervisor.seconds_to_capture_timer()
            for callback in loop.wait(0.05 if timer is None else min(timer, 0.05)):
                callback()
            supervisor.poll_exits()
            supervisor.run_capture_timers()
    finally:
        supervisor.close()
        loop.close()
    attempt = runs.attempts(run_id)[-1]
    assert attempt.status.value == "succeeded"
    log = Path(attempt.log_path).read_bytes()
    output = "".join(f"{n}\n" for n in range(1, 200001)).encode()
    tail = log_capture.log_tail_bytes(4096)
    head = 4096 - tail
    marker = (f"\n[edge-runtime: output truncated: {len(output) - 4096} bytes left out between the first {head} bytes "
              f"and the last {tail} bytes]\n").encode()
    assert log == output[:head] + marker + output[-tail:]
