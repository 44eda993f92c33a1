#!/usr/bin/env python3
"""Make the QingLong script corpus: header lines of public QingLong script repositories, never
their code, for the header tests and the benchmarks.

    .venv/bin/python tests/bench/qinglong_corpus.py --source owner/name=/path/to/bare.git [...] \
        [--qinglong-results FILE.tsv]

For each source (a git directory; its HEAD is read, and recorded with the repository's name),
every script (``.js .mjs .cjs .ts .py .sh``) gives its header: among its first
:data:`HEADER_LINES` lines, those a header rule can read (a line with ``cron``, ``new Env(``,
``name:`` or 5-6 cron fields) and the lines that open or close a comment block (so a ``name:``
line keeps its comment around it); a line longer than :data:`MAX_LINE` characters is code, and
every other line (prose, code) is left out too. Written:

- ``tests/data/qinglong_script_headers.jsonl``: first a line ``{"sources": {repo: commit},
  "madeBy": ...}``, then a line per script, ``{"repo", "path", "header", "qinglong": {"cron",
  "name"}}`` (``qinglong``: what QingLong 2.21's own shell made of the same header text, from
  ``--qinglong-results``, a TSV of ``repo path cron name`` computed where QingLong's shell is at
  hand; absent when not given);
- ``tests/bench/data/qinglong_crons.tsv``: ``expression<TAB>script<TAB>name<TAB>repo`` for every
  script whose header gives a valid schedule by this build's reading: the corpus of real cron
  expressions the benchmarks use.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

from edge_runtime.qinglong.script_scan import SCRIPT_SUFFIXES, scanned_script

REPO = Path(__file__).resolve().parents[2]

HEADER_LINES = 40
MAX_LINE = 300
HEADERS = REPO / "tests" / "data" / "qinglong_script_headers.jsonl"
CRONS = REPO / "tests" / "bench" / "data" / "qinglong_crons.tsv"
_RULE_LINE = re.compile(r"cron|new\s+Env\s*\(|name\s*[:：]|([0-9*][0-9*,/\-]*\s+){4,5}[0-9*]", re.IGNORECASE)
_BLOCK = re.compile(r"/\*|\*/|\"\"\"|'''")


def header_of(text: str) -> str:
    """The header lines of a script's text (module docstring)."""
    return "\n".join(line.rstrip() for line in text.splitlines()[:HEADER_LINES]
                     if len(line) <= MAX_LINE and (_RULE_LINE.search(line) or _BLOCK.search(line)))


def _git(git_dir: str, *args: str) -> bytes:
    return subprocess.run(["git", "-C", git_dir, *args], check=True, capture_output=True).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", action="append", required=True, metavar="OWNER/NAME=GITDIR")
    parser.add_argument("--qinglong-results", metavar="TSV")
    args = parser.parse_args(argv)
    qinglong: dict[tuple[str, str], dict[str, str]] = {}
    if args.qinglong_results:
        for line in Path(args.qinglong_results).read_text(encoding="utf-8").splitlines():
            repo, path, cron, name = (line.split("\t") + ["", "", "", ""])[:4]
            qinglong[(repo, path)] = {"cron": cron, "name": name}
    entries, crons = [], []
    sources: dict[str, str] = {}
    for source in args.source:
        repo, _, git_dir = source.partition("=")
        sources[repo] = _git(git_dir, "rev-parse", "HEAD").decode().strip()
        paths = [p for p in _git(git_dir, "ls-tree", "-r", "--name-only", "HEAD").decode().splitlines()
                 if p.endswith(SCRIPT_SUFFIXES)]
        for path in sorted(paths):
            text = _git(git_dir, "show", f"HEAD:{path}").decode("utf-8", "replace")
            header = header_of(text)
            entry = {"repo": repo, "path": path, "header": header}
            if (repo, path) in qinglong:
                entry["qinglong"] = qinglong[(repo, path)]
            entries.append(entry)
            scanned = scanned_script(header, path, ["task", path])
            if scanned.expression is not None:
                crons.append("\t".join((scanned.expression, path, scanned.name.replace("\t", " "), repo)))
    HEADERS.parent.mkdir(parents=True, exist_ok=True)
    meta = {"sources": sources, "madeBy": "tests/bench/qinglong_corpus.py (header lines only, never code)"}
    HEADERS.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in [meta, *entries]), encoding="utf-8")
    CRONS.parent.mkdir(parents=True, exist_ok=True)
    CRONS.write_text("# expression\tscript\tname\trepo (made by tests/bench/qinglong_corpus.py)\n"
                     + "".join(line + "\n" for line in crons), encoding="utf-8")
    print(f"{len(entries)} scripts -> {HEADERS.relative_to(REPO)}; {len(crons)} crons -> {CRONS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
