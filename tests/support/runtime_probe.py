"""Run the runtime from source in a fresh interpreter and report what it imported, as JSON.

Run as a script by the artifact tests (never imported by pytest itself, so the test process's own
imports cannot hide anything):

    python -X utf8 -OO runtime_probe.py '{"package_modules": [...], "mentioned_modules": [...],
                                          "blocked": [...], "db": "/tmp/x.db", ...}'

It installs a meta-path finder that refuses every ``blocked`` module (and its submodules) and
records each attempt, then:

1. imports every ``edge_runtime`` module, and every module named by any ``import`` statement in
   the package's source, including imports inside functions (so lazily imported code counts);
   both lists come from the test, which parses the source;
2. runs ``edge-runtime --help`` through the console script's entry point, edge_runtime.cli:main;
3. migrates and checks a database through the CLI, and exercises the stdlib paths whose C helpers
   the build may leave out (hashing, HMAC, secrets, uuid4, heapq, bisect, warnings, shutil, TOML).

Prints ``{"attempts": [...], "modules": [...], "preloaded": [...], "steps": {...}, "fallbacks": {...}}``.
"""

from __future__ import annotations

import sys

# The probe's own imports, kept to a few light modules the runtime imports anyway: they load before
# the blocker and are reported in "preloaded", which the test checks holds no blocked module.
# (No ast, pkgutil, runpy or importlib.abc here: they import modules the build leaves out. The test
# process parses the source and passes the module names in.)
import contextlib
import importlib
import io
import json


class BlockingFinder:
    """A meta-path finder (duck-typed: importlib.abc would import importlib.resources)."""

    def __init__(self, blocked: set[str]) -> None:
        self.blocked = blocked
        self.attempts: list[str] = []

    def find_spec(self, fullname, path=None, target=None):
        parts = fullname.split(".")
        if any(".".join(parts[:i]) in self.blocked for i in range(1, len(parts) + 1)):
            self.attempts.append(fullname)
            raise ModuleNotFoundError(f"blocked by runtime_probe: {fullname}", name=fullname)
        return None


def run_cli(argv: list[str]) -> dict:
    """Run the ``edge-runtime`` console script's entry point (edge_runtime.cli:main); capture its
    exit code and output."""
    try:
        from edge_runtime.cli import main as cli_main
    except Exception as exc:  # reported; the test fails on a CLI that cannot even be imported
        return {"code": None, "stdout": "", "stderr": f"{type(exc).__name__}: {exc}"}
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(argv)
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def exercise_fallbacks() -> dict[str, object]:
    """Each stdlib path with an optional C helper, with a result the test compares to a known value."""
    import bisect
    import hashlib
    import heapq
    import hmac
    import secrets
    import shutil
    import uuid
    import warnings

    import msgspec

    # A warning with a source object is the one warnings formats through tracemalloc (guarded).
    shown = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stderr(shown):
        warnings.simplefilter("always")
        warnings.warn("probe", ResourceWarning, stacklevel=1, source=object())
    return {
        "sha256": hashlib.sha256(b"edge-runtime").hexdigest(),
        "md5": hashlib.md5(b"edge-runtime").hexdigest(),
        "blake2b": hashlib.blake2b(b"edge-runtime", digest_size=8).hexdigest(),
        "hmac": hmac.new(b"key", b"edge-runtime", "sha256").hexdigest(),
        "token_hex_len": len(secrets.token_hex(16)),
        "uuid4_version": uuid.uuid4().version,
        "heapq": heapq.nsmallest(2, [5, 1, 4, 2]),
        "bisect": bisect.bisect([1, 2, 4], 3),
        "warning": shown.getvalue(),
        "shutil_which_sh": shutil.which("sh") is not None,
        "toml": msgspec.toml.decode(b'slots = 2\nname = "x"\n'),
        "decimal": msgspec.json.decode(b'"1.10"', type=__import__("decimal").Decimal).as_tuple()[1],
        "h11": _h11_exchange(),
        "tar_gz": _tar_gz_round_trip(),
    }


def _tar_gz_round_trip() -> list[list[object]]:
    """A gzip'd tar written and read back in memory, as the QingLong import reads a data.tgz
    (tarfile tries ``grp`` and falls back to none): each member's name, type and bytes."""
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("data/scripts/a.js")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"1;\n"))
    buffer.seek(0)
    with tarfile.open(fileobj=buffer, mode="r|*") as tar:
        return [[m.name, m.isreg(), tar.extractfile(m).read().decode()] for m in tar]


def _h11_exchange() -> list[str]:
    """A request and its response through h11 as the panel loads it (with dataclasses blocked:
    h11_loader's stand-in), as the events' reprs and a few of their methods' results."""
    from edge_runtime.panel.h11_loader import load_h11

    h11 = load_h11()
    server = h11.Connection(h11.SERVER)
    server.receive_data(b"POST /api/runs?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}")
    events = [server.next_event() for _ in range(3)]
    out = server.send(h11.Response(status_code=201, headers=[(b"content-length", b"0")], reason=b"Created"))
    out += server.send(h11.EndOfMessage())
    shown = [repr(e) for e in events] + [out.decode()]
    shown.append(str(events[2] == h11.EndOfMessage()) + str(hash(h11.ConnectionClosed()) == hash(h11.ConnectionClosed())))
    try:
        events[0].method = b"GET"
    except AttributeError as exc:
        shown.append(type(exc).__name__)
    shown.append(repr(h11.ConnectionClosed()) + str(h11.ConnectionClosed() == h11.ConnectionClosed()))
    return shown


def main() -> int:
    options = json.loads(sys.argv[1])
    preloaded = sorted(sys.modules)
    finder = BlockingFinder(set(options.get("blocked", [])))
    sys.meta_path.insert(0, finder)
    steps: dict[str, object] = {}

    modules = options["package_modules"]
    import_errors = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # reported, and the test fails on it
            import_errors[name] = f"{type(exc).__name__}: {exc}"
    mentioned_errors = {}
    for name in options["mentioned_modules"]:
        if name.startswith("edge_runtime") or name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # `from pkg import name` where name is an attribute, not a submodule: not an error.
            if exc.name != name:
                mentioned_errors[name] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # reported, and the test fails on it
            mentioned_errors[name] = f"{type(exc).__name__}: {exc}"
    steps["edge_runtime_modules"] = modules
    steps["import_errors"] = import_errors
    steps["mentioned_import_errors"] = mentioned_errors

    steps["help"] = run_cli(["--help"])
    if options.get("db"):
        steps["migrate"] = run_cli(["--db", options["db"], "migrate"])
        steps["check"] = run_cli(["--db", options["db"], "check", "--json"])
    fallbacks = exercise_fallbacks() if options.get("fallbacks") else {}

    frozen = {name: getattr(getattr(sys.modules.get(name), "__spec__", None), "origin", None) for name in options.get("frozen", [])}
    print(
        json.dumps(
            {
                "attempts": sorted(set(finder.attempts)),
                "modules": sorted(sys.modules),
                "preloaded": preloaded,
                "steps": steps,
                "fallbacks": fallbacks,
                "frozen_origins": frozen,
                "flags": {"optimize": sys.flags.optimize, "utf8_mode": sys.flags.utf8_mode},
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
