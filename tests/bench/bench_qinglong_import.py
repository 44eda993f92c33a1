"""Moving from QingLong at the size of a real install (docs/qinglong.md): figures only, never judged.

- ``import qinglong`` of a data folder with 300 crons (names and expressions from the corpus of
  real headers, tests/bench/data/qinglong_crons.tsv; 1 in 10 disabled) and 100 envs (in 20
  names, 1 in 7 disabled), and a script for each cron (its real header lines): the dry run, the
  import (into a fresh database and scripts directory, fsync included) and the same import
  again; each as a whole ``edge-runtime`` process, wall time, and what it created;
- the same from the folder's ``data.tgz``;
- ``scripts scan`` of the corpus's 1148 real script headers (tests/data/qinglong_script_headers.jsonl),
  one file each, as a whole process: the time, and how many got a schedule.

The databases and scripts are made in the bench's work directory (disk-backed, like a router's
flash), never in /tmp.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import common

from tests.support.qinglong_fixtures import make_data_folder, make_data_tgz, scale_rows

REPO = Path(__file__).resolve().parents[2]
CRONS = REPO / "tests" / "bench" / "data" / "qinglong_crons.tsv"
HEADERS = REPO / "tests" / "data" / "qinglong_script_headers.jsonl"


def _corpus() -> list[tuple[str, str, str]]:
    rows = []
    for line in CRONS.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            continue
        expression, script, name, _repo = line.split("\t")
        rows.append((script, name, expression))
    return rows


def _headers() -> list[dict]:
    return [json.loads(line) for line in HEADERS.read_text(encoding="utf-8").splitlines()[1:]]


def _cli(db: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(db), *args], capture_output=True,
                            text=True, check=True)
    return time.perf_counter() - started, result


def _created(result: subprocess.CompletedProcess) -> str:
    counts = json.loads(result.stdout)["counts"]
    return "; ".join(f"{action} " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
                     for action, kinds in sorted(counts.items()))


def run(workdir: Path, quick: bool) -> None:
    corpus = _corpus()
    headers = {entry["path"].rsplit("/", 1)[-1]: entry["header"] for entry in _headers()}
    crons, envs = scale_rows(300, 100, corpus)
    scripts = {}
    for cron in crons:
        script = cron["command"].split()[1]
        scripts[script] = headers.get(script, f"// {script}\n") + "\nconsole.log('run');\n"
    data = make_data_folder(workdir / "ql", "2.21.0", crons=crons, envs=envs, scripts=scripts,
                            time_zone="Asia/Shanghai")
    archive = make_data_tgz(data, workdir / "data.tgz")
    rows = []
    for label, source, into in (("data folder", data, "from-folder"), ("data.tgz", archive, "from-archive")):
        target = workdir / into / "edge-runtime.db"
        target.parent.mkdir(parents=True)
        for step, extra in (("dry run", ["--dry-run"]), ("import", []), ("import again", [])):
            seconds, result = _cli(target, "import", "qinglong", str(source), "--json", *extra)
            rows.append([f"{label}: {step}", f"{seconds:.2f}", _created(result)])
    common.print_table("import qinglong: 300 crons, 100 envs, one script per cron (s, whole process)",
                       ["case", "seconds", "what it did"], rows)

    folder = workdir / "scan"
    for index, entry in enumerate(_headers()):
        path = folder / entry["repo"].replace("/", "_") / entry["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(entry["header"] + "\n", encoding="utf-8")
    db = workdir / "scan.db"
    repeats = 1 if quick else 3
    times, found = [], None
    for _ in range(repeats):
        seconds, result = _cli(db, "scripts", "scan", str(folder), "--json")
        times.append(seconds)
        scanned = json.loads(result.stdout)["scripts"]
        found = (len(scanned), sum(1 for s in scanned if s["expression"] is not None))
    common.print_table("scripts scan: the corpus's real headers, one file each (s, whole process, median)",
                       ["case", "seconds", "scripts", "with a schedule"],
                       [["scan", f"{common.median(times):.2f}", str(found[0]), str(found[1])]])
    shutil.rmtree(folder, ignore_errors=True)
