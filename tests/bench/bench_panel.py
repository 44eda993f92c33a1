"""The web panel (docs/panel.md): what it costs and how fast it answers.

- panel bytes: the panel's source (``edge_runtime/panel``, its page, h11) and, when ``dist/``
  holds a build, what the audit's ``panel`` rule counts in each artifact (``dist/cross/*`` too);
- idle RSS of ``serve`` with the panel off and on (VmRSS after it settled; the panel also logged
  in once and answered a page, as a browser left open would have made it), from the sources in
  the venv and, when ``dist/`` holds one, from the host's one-folder build (the device's form: no
  stdlib ``dataclasses``, so h11 does not bring ``inspect``, ``ast`` and ``dis`` as in the venv);
- ``GET /api/runs?limit=50`` requests per second over one keep-alive connection, with 50 Runs
  stored, on this machine;
- from "Run" clicked to the Run shown ``running`` in a real browser: the figures the browser test
  wrote (``.test-output/browser/*-figures.json``; ``make test-browser`` first), p50.

Figures are reported, never judged pass/fail.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import common

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "a bench password"


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


#: The venv's interpreter running the sources (the venv has the stdlib's dataclasses, so h11 brings
#: inspect, ast and dis along: about 1.5 MiB the built artifacts do not carry).
SOURCE_SERVE = (sys.executable, "-m", "edge_runtime")


def _one_folder_exe(workdir: Path) -> Path | None:
    """The newest host one-folder build from dist/, unpacked under ``workdir``, or None."""
    builds = sorted((REPO / "dist").glob("edge-runtime-*.tar.xz"), key=lambda p: p.stat().st_mtime)
    if not builds:
        return None
    target = workdir / "one-folder"
    target.mkdir(exist_ok=True)
    with tarfile.open(builds[-1]) as archive:
        archive.extractall(target, filter="data")
    found = [p for p in target.rglob("edge-runtime") if p.is_file() and os.access(p, os.X_OK)]
    return found[0] if found else None


def _serve(workdir: Path, db: Path, tag: str, *flags: str, command: tuple[str, ...] = SOURCE_SERVE) -> tuple[subprocess.Popen, Path]:
    log = workdir / f"serve-{tag}.log"
    with open(log, "wb") as handle:
        process = subprocess.Popen([*command, "--db", str(db), "serve", "--worker-id", "bench",
                                    *flags], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=handle, cwd=REPO)
    deadline = time.monotonic() + 60
    while "recovery.done" not in log.read_text() or (flags and "panel." not in log.read_text()):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"serve did not start: {log.read_text()}")
        time.sleep(0.05)
    return process, log


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(30)


def _login(port: int) -> str:
    body = json.dumps({"password": PASSWORD}).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        status, head, _ = common.http_exchange(sock, f"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                                                     f"X-Edge-Panel: 1\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                                                     + body)
    assert status == 200, head
    return re.search(rb"edge_panel=([^;]+)", head).group(1).decode()


def _source_bytes() -> list[list[str]]:
    import h11

    panel = REPO / "edge_runtime" / "panel"
    code = sum(p.stat().st_size for p in panel.glob("*.py")) + (REPO / "edge_runtime" / "local" / "panel_auth.py").stat().st_size
    page = sum(p.stat().st_size for p in (panel / "static").iterdir())
    library = sum(p.stat().st_size for p in Path(h11.__file__).parent.glob("*.py"))
    return [["panel code (.py)", f"{code:,}"], ["page (html, css, js, svg)", f"{page:,}"], ["h11 (.py)", f"{library:,}"]]


def _artifact_rows() -> list[list[str]]:
    rows = []
    candidates = sorted((REPO / "dist").glob("edge-runtime")) + sorted((REPO / "dist").glob("edge-runtime-*.tar.xz"))
    candidates += sorted((REPO / "dist" / "cross").glob("*/edge-runtime*"))
    for artifact in candidates:
        if not artifact.is_file():
            continue
        done = subprocess.run([sys.executable, str(REPO / "artifact_audit.py"), "--json", str(artifact)],
                              capture_output=True, text=True, timeout=300)
        try:
            report = json.loads(done.stdout)["artifacts"][0]
        except (json.JSONDecodeError, KeyError, IndexError):
            continue
        panel = [r for r in report["rules"] if r["rule"] == "panel"]
        rows.append([str(artifact.relative_to(REPO)), f"{report['sizeBytes']:,}",
                     panel[0]["detail"] if panel else "no panel rule"])
    return rows


def run(workdir: Path, quick: bool) -> None:
    db = workdir / "edge.db"
    os.chmod(workdir, 0o700)
    subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(db), "panel", "password"], input=PASSWORD + "\n",
                   text=True, check=True, capture_output=True, cwd=REPO)
    common.print_table("panel bytes (source)", ["part", "bytes"], _source_bytes())
    rows = _artifact_rows()
    if rows:
        common.print_table("panel bytes in the built artifacts (audit rule panel)", ["artifact", "bytes", "panel"], rows)
    else:
        print("panel bytes in artifacts: no build in dist/ (make build; make cross TARGET=...)")

    settle = 2.0 if quick else 5.0
    forms = {"source (venv)": SOURCE_SERVE}
    exe = _one_folder_exe(workdir)
    if exe is not None:
        forms["one-folder build"] = (str(exe),)
    rows = []
    for form, command in forms.items():
        rss = {}
        for tag, flags in (("off", ()), ("on", ("--panel-listen", "127.0.0.1:0"))):
            process, log = _serve(workdir, db, f"{tag}-{len(rows)}", *flags, command=command)
            try:
                if flags:
                    port = int(re.search(r"listen=127\.0\.0\.1:(\d+)", log.read_text()).group(1))
                    _login(port)
                time.sleep(settle)
                rss[tag] = _rss_kib(process.pid)
                if flags and command is SOURCE_SERVE:
                    requests_per_s = _requests_per_second(db, port, 2.0 if quick else 5.0)
            finally:
                _stop(process)
        rows.append([form, f"{rss['off']:,}", f"{rss['on']:,}", f"{rss['on'] - rss['off']:,}"])
    if exe is None:
        print("idle RSS of the one-folder build: skipped (no dist/edge-runtime-*.tar.xz; run `make build`)")
    common.print_table("idle RSS of serve (VmRSS KiB)", ["form", "panel off", "panel on", "on - off"], rows)
    common.print_table("GET /api/runs?limit=50 (50 Runs stored, one keep-alive connection)", ["requests/s"],
                       [[f"{requests_per_s:,.0f}"]])
    figures = [ms for path in sorted((REPO / ".test-output" / "browser").glob("*-figures.json"))
               for ms in json.loads(path.read_text())["clickRunToShownRunningMs"]]
    if figures:
        common.print_table("'Run' clicked to the Run shown running (real browser)", ["runs", "p50 ms", "max ms"],
                           [[str(len(figures)), f"{common.median(figures):.0f}", f"{max(figures):.0f}"]])
    else:
        print("click Run -> shown running: no browser figures (make test-browser first)")


def _requests_per_second(db: Path, port: int, seconds: float) -> float:
    from edge_runtime.contract.runs import SubmitRunCommand
    from edge_runtime.local.database import open_database
    from edge_runtime.local.runs import LocalRunRepository

    with open_database(db, create=False) as connection:
        runs = LocalRunRepository(connection)
        for i in range(50 - len(runs.list_runs(limit=50))):
            runs.submit(SubmitRunCommand(argv=["true", str(i)]))
    token = _login(port)
    request = f"GET /api/runs?limit=50 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: edge_panel={token}\r\n\r\n".encode()
    count = 0
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            status, _, body = common.http_exchange(sock, request)
            assert status == 200 and body.startswith(b"[")
            count += 1
        return count / (time.perf_counter() - started)
