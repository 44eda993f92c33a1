"""Which pages each of a Run's four commits writes to the WAL, by b-tree (fewer flash writes: bytes per Run).

Every commit appends each page it changed, whole, to the WAL (and a checkpoint copies it back), so
the bytes a Run writes are its commits' page counts times the page size. This shows where they go:
the Run's four commits (``submit``; ``start``: Attempt, Run Lease and start barrier; ``running``:
the process identity; ``finish``: the Attempt's end with its lease) made through the Local
repositories as the service makes them, on a database that already holds some history, with
automatic checkpoints off so the WAL holds exactly the frames of the commit under study.
``page 1`` is the file header (it changes when the file grows or the freelist does); ``new or
ptrmap`` are pages no b-tree owned before the Run (taken from the freelist or the end of the file
by a split) and the pointer-map pages ``auto_vacuum`` keeps up to date.

Figures are reported, never judged pass/fail.
"""

from __future__ import annotations

import struct
from collections import Counter, defaultdict
from pathlib import Path

from edge_runtime.contract.runs import AttemptStatus, SubmitRunCommand
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.process_identity import ProcessIdentity
from edge_runtime.service.worker import WorkerSession

STEPS = ("submit", "start", "running", "finish")
_WAL_HEADER_BYTES = 32
_FRAME_HEADER_BYTES = 24


def _wal_pages(wal: Path, page_size: int) -> list[int]:
    """The page number of every frame in the WAL, in order."""
    data = wal.read_bytes() if wal.exists() else b""
    frame = _FRAME_HEADER_BYTES + page_size
    return [struct.unpack_from(">I", data, offset)[0]
            for offset in range(_WAL_HEADER_BYTES, len(data) - frame + 1, frame)]


def run(workdir: Path, quick: bool) -> None:
    history, measured = (100, 10) if quick else (1000, 50)
    path = workdir / "edge-runtime.db"
    clock = ManualClock(1_800_000_000_000)
    with open_database(path, clock=clock) as db:
        connection = db.connection
        connection.execute("PRAGMA wal_autocheckpoint = 0")
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        runs = LocalRunRepository(db)
        worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="bench", slots=2,
                               session_lease_ms=30_000, run_lease_ms=60_000)
        worker.register()

        def one_run(n: int, mark) -> None:
            run_id = runs.submit(SubmitRunCommand(argv=["true"])).id
            mark("submit")
            attempt_id = worker.start(run_id).lease.attempt_id
            mark("start")
            identity = ProcessIdentity(pid=1000 + n, pgid=1000 + n, start_ticks=n, boot_id="bench-boot")
            runs.record_running(attempt_id, identity, log_path=str(workdir / f"logs/{attempt_id}.log"),
                                actor_id=worker.owner)
            mark("running")
            clock.advance(100)
            runs.finish_attempt(attempt_id, AttemptStatus.SUCCEEDED, actor_id=worker.owner, exit_code=0)
            worker.complete(attempt_id)  # nothing left to do: the end completed the lease (no commit)
            mark("finish")
            worker.heartbeat(2)  # keeps the session live on the injected clock; not a Run's commit

        for n in range(history):
            one_run(n, lambda step: None)
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")

        wal = Path(f"{path}-wal")
        pages: dict[str, Counter[str]] = defaultdict(Counter)
        for n in range(history, history + measured):
            owner = {page: name for name, page in connection.execute("SELECT name, pageno FROM dbstat")}
            seen = len(_wal_pages(wal, page_size))

            def mark(step: str) -> None:
                nonlocal seen
                frames = _wal_pages(wal, page_size)
                for page in frames[seen:]:
                    pages[step]["page 1" if page == 1 else owner.get(page, "new or ptrmap")] += 1
                seen = len(frames)

            one_run(n, mark)
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the next Run's frames start afresh

    total = sum(sum(counter.values()) for counter in pages.values()) / measured
    print(f"commit_pages: WAL pages per commit of a Run, {page_size}-byte pages, {measured} Runs after {history} "
          f"already stored: {total:.1f} pages = {total * (page_size + _FRAME_HEADER_BYTES) / 1024:.1f} KB per Run")
    for step in STEPS:
        counts = pages[step]
        print(f"  {step:8s} {sum(counts.values()) / measured:5.1f} pages: "
              + ", ".join(f"{name} {count / measured:.1f}" for name, count in counts.most_common()))
