"""Local sources for the subscription tests, never the internet: git repositories (``file://``,
and served by ``git daemon`` on 127.0.0.1), an HTTP server of files, and a server that accepts
and never answers (a pull that hangs until it is cancelled)."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

_GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def git(repo: Path, *args: str, stdin: bytes | None = None) -> str:
    result = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, check=True,
                            env={**os.environ, **_GIT_ENV})
    return result.stdout.decode().strip()


class Repo:
    """A repository with a work tree, committed to by the tests."""

    def __init__(self, path: Path, branch: str = "main") -> None:
        self.path = path
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", branch)

    @property
    def url(self) -> str:
        return f"file://{self.path}"

    def commit(self, files: Mapping[str, str | bytes | None], message: str = "change",
               links: Mapping[str, str] | None = None) -> str:
        """Write (``None``: remove) ``files`` and make ``links``, commit them all; the commit id."""
        for name, content in files.items():
            target = self.path / name
            if content is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content.encode() if isinstance(content, str) else content)
        for name, where in (links or {}).items():
            os.symlink(where, self.path / name)
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "--allow-empty", "-m", message)
        return git(self.path, "rev-parse", "HEAD")

    def commit_tree(self, entries: list[tuple[str, str, bytes]], message: str = "crafted") -> str:
        """A commit whose tree is exactly ``entries`` (mode, name, content): names git's own
        commands would never make (``..``, ``.git``)."""
        lines = []
        for mode, name, content in entries:
            blob = git(self.path, "hash-object", "-w", "--stdin", stdin=content)
            lines.append(f"{mode} blob {blob}\t{name}\n")
        tree = git(self.path, "mktree", stdin="".join(lines).encode())
        parent = git(self.path, "rev-parse", "HEAD")
        commit = git(self.path, "commit-tree", tree, "-p", parent, "-m", message)
        git(self.path, "update-ref", "refs/heads/main", commit)
        return commit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def git_daemon(base: Path) -> Iterator[str]:
    """``git daemon`` serving the repositories under ``base`` on 127.0.0.1; yields ``git://host:port``."""
    port = free_port()
    process = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={base}",
                                "--listen=127.0.0.1", f"--port={port}", str(base)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **_GIT_ENV})
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"git://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def have_git_daemon() -> bool:
    if shutil.which("git") is None:
        return False
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True).stdout.strip()
    return os.path.exists(os.path.join(exec_path, "git-daemon"))


@contextmanager
def http_files(files: dict[str, bytes], redirects: Mapping[str, str] | None = None) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering ``files`` by path (``/jd_x.js``), 404 otherwise, and
    ``redirects`` (path -> location) with 302; yields ``http://127.0.0.1:port``. ``files`` may be
    changed while it runs."""
    moved = dict(redirects or {})

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path in moved:
                self.send_response(302)
                self.send_header("Location", moved[self.path])
                self.end_headers()
                return
            body = files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts every connection and never says a word (a source
    that hangs); yields its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for connection in held:
            connection.close()
        listener.close()
