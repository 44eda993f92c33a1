"""The legacy raw-token scrub on a 10k-row database: time per step and flash writes.

Database: 10,000 Runs, each with one Attempt, one event and one leased cancellation dispatch whose
``lease_token`` holds a raw token (every 4th already the ``sha256:`` form): the worst case the
previous layout can leave. Time: median of fresh runs on the default VFS. Flash writes: one more
run through a counting VFS (bytes written and syncs per file; VACUUM's temp file is listed apart,
since on OpenWrt it lands in /tmp, which is RAM). Anchors: a plain copy of the database file with
fsync, and a plain VACUUM of it, the two things the scrub cannot do with less.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import apsw

import common
from counting_vfs import CountingVFS, file_path

from edge_runtime.local.legacy_token_scrub import drop_scrub_backup, rollback_scrub, scrub_legacy_tokens
from tests.support.legacy_tokens import build_legacy_database

DB_NAME = "edge-runtime.db"


def _kind(name: object) -> str:
    """The database's own files by their suffix; anything else is VACUUM's temp file."""
    base = os.path.basename(file_path(name))
    return base.replace(DB_NAME, "<db>") if DB_NAME in base else "temp (VACUUM, /tmp)"


def _fresh(workdir: Path, template: Path) -> Path:
    target = workdir / "run"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    shutil.copyfile(template, target / DB_NAME)
    return target / DB_NAME


def _timed(action) -> float:  # noqa: ANN001
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def run(workdir: Path, quick: bool) -> None:
    rows = 1_000 if quick else 10_000
    repeats = 1 if quick else 3
    template = workdir / "template" / DB_NAME
    template.parent.mkdir()
    build_legacy_database(str(template), rows, digest_every=4)
    size = template.stat().st_size

    steps: dict[str, list[float]] = {}
    totals, rollbacks, drops, copies, vacuums = [], [], [], [], []
    after_size = backup_size = 0
    for _ in range(repeats):
        path = _fresh(workdir, template)
        marks = [time.perf_counter()]

        def progress(line: str) -> None:  # one line after each step: its end
            marks.append(time.perf_counter())

        totals.append(_timed(lambda: scrub_legacy_tokens(str(path), progress=progress)))
        for name, start, end in zip(("backup + verify", "rewrite (one transaction)", "VACUUM + checkpoints"),
                                    marks, marks[1:]):
            steps.setdefault(name, []).append((end - start) * 1000)
        after_size = path.stat().st_size
        backup_size = Path(f"{path}.scrub-backup").stat().st_size
        rollbacks.append(_timed(lambda: rollback_scrub(str(path))))
        drops.append(_timed(lambda: drop_scrub_backup(str(path))))
        # Anchors on the same file: a plain copy with fsync, a plain VACUUM.
        copy_target = path.parent / "copy.db"

        def copy() -> None:
            shutil.copyfile(path, copy_target)
            with open(copy_target, "rb+") as handle:
                os.fsync(handle.fileno())

        copies.append(_timed(copy))

        def vacuum() -> None:
            connection = apsw.Connection(str(copy_target))
            connection.execute("VACUUM")
            connection.close()

        vacuums.append(_timed(vacuum))

    vfs = CountingVFS(f"bench-scrub-{os.getpid()}", _kind)
    try:
        path = _fresh(workdir, template)
        scrub_legacy_tokens(str(path), vfs=vfs.name)
    finally:
        vfs.unregister()

    med = common.median
    common.print_table(
        f"scrub of {rows:,} leased dispatches ({rows - rows // 4:,} raw tokens), database {size:,} bytes "
        f"-> {after_size:,} after VACUUM, backup {backup_size:,} bytes (median of {repeats})",
        ["step", "ms"],
        [*[(name, f"{med(values):.0f}") for name, values in steps.items()],
         ("whole scrub (open, lock, backup, rewrite, VACUUM)", f"{med(totals):.0f}"),
         ("rollback (gate check + restore)", f"{med(rollbacks):.0f}"),
         ("drop backup (overwrite + unlink)", f"{med(drops):.0f}"),
         ("anchor: copy the file + fsync", f"{med(copies):.0f}"),
         ("anchor: plain VACUUM of the copy", f"{med(vacuums):.0f}")],
    )
    kinds = sorted(set(vfs.written) | set(vfs.syncs))
    flash = [k for k in kinds if k.startswith("<db>")]
    common.print_table(
        "flash writes of one scrub (counting VFS)",
        ["file", "bytes written", "syncs"],
        [*[(k, f"{vfs.written[k]:,}", str(vfs.syncs[k])) for k in kinds],
         ("total on the database's filesystem", f"{sum(vfs.written[k] for k in flash):,}",
          str(sum(vfs.syncs[k] for k in flash))),
         ("  as multiples of the database size", f"{sum(vfs.written[k] for k in flash) / size:.1f}x", "")],
    )
