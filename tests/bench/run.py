#!/usr/bin/env python3
"""Run the benchmarks: ``python tests/bench/run.py [--only NAME] [--quick]`` (``make bench``).

Discovers ``tests/bench/bench_*.py`` in sorted order and calls each module's
``run(workdir: pathlib.Path, quick: bool) -> None`` with a fresh directory ``.bench/<name>/`` under
the repository, which is on disk-backed storage like a device's flash (a tmpfs would make every
fsync free and the figures meaningless). Figures are printed, never judged pass/fail.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import shutil
import sys
import time
import traceback
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parents[1]
DEFAULT_WORKDIR = REPO / ".bench"

# Modules import their own helpers as `import common` and the test suite's as `from tests.support.x import`,
# wherever the harness is started from: both directories go on the path here, once.
for directory in (BENCH_DIR, REPO):
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))

import common  # noqa: E402


def discover() -> list[str]:
    """Names of the benchmark modules, without the ``bench_`` prefix, in sorted order."""
    return [path.stem.removeprefix("bench_") for path in sorted(BENCH_DIR.glob("bench_*.py"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", metavar="NAME", help="run one module (NAME or bench_NAME)")
    parser.add_argument("--quick", action="store_true", help="fewer cycles and repetitions (a smoke run)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                        help=f"where each module gets its fresh directory (default {DEFAULT_WORKDIR})")
    parser.add_argument("--list", action="store_true", help="list the modules and exit")
    args = parser.parse_args(argv)

    names = discover()
    if args.list:
        print("\n".join(names))
        return 0
    if args.only:
        wanted = args.only.removeprefix("bench_").removesuffix(".py")
        if wanted not in names:
            parser.error(f"no benchmark named {args.only!r}; have: {', '.join(names) or 'none'}")
        names = [wanted]
    if not names:
        print("no benchmark modules found", file=sys.stderr)
        return 1

    base = args.workdir.resolve()
    base.mkdir(parents=True, exist_ok=True)
    fs = common.filesystem_type(base)
    if fs in ("tmpfs", "ramfs"):
        print(f"Error: {base} is on {fs}; benchmarks must run on disk-backed storage (use --workdir)",
              file=sys.stderr)
        return 2
    import apsw  # the storage every module measures; report its version with the figures

    print(f"python {platform.python_version()}, SQLite {apsw.sqlite_lib_version()}, apsw {apsw.apsw_version()}, "
          f"{platform.machine()}, workdir {base} ({fs}){', quick' if args.quick else ''}")
    failed = []
    for name in names:
        workdir = base / name
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        print(f"\n== {name}", flush=True)
        started = time.monotonic()
        try:
            module = importlib.import_module(f"bench_{name}")
            module.run(workdir, args.quick)
        except Exception:  # one broken module must not hide the others' figures
            traceback.print_exc()
            failed.append(name)
        print(f"({name}: {time.monotonic() - started:.1f} s)", flush=True)
    if failed:
        print(f"Error: benchmark module(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
