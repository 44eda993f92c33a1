"""Fetching what a subscription pulls, as hostile input: a public git repository through the
device's ``git``, or one file at an http(s) URL. Nothing fetched is ever run.

**A repository** is cloned bare (``git clone --bare --depth=1``): git writes only its own object
store, never a working tree, so no checkout-time behaviour of the download exists (no symlink
made, no ``.gitattributes`` filter, no submodule, no hook: a bare clone has none, and
``core.hooksPath=/dev/null`` stands anyway). Its files are listed from the commit's tree
(``git ls-tree``: mode, size, path) and read blob by blob (``git cat-file --batch``) into the
pull's staged folder, so a symlink or a submodule in the tree is a line in the log, never a file,
and a file too large is skipped by its listed size before a byte of it is read. git runs with
nothing of the device's or the user's configuration (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL``
empty, an empty private ``HOME``), no credential helper and no prompt, only the transport of the
subscription's URL (``GIT_ALLOW_PROTOCOL``: ``https`` for an https URL, so no redirect to plain
http; ``file`` only for a ``file://`` URL), and ``transfer.fsckObjects``, which refuses a tree that names ``..`` or ``.git``.
The clone's size is watched while it runs and it is stopped past :data:`MAX_FETCH_BYTES`.

**A file** is downloaded by ``curl``, else OpenWrt's ``uclient-fetch``, else ``wget`` (not by
Python's ``urllib``: the built executable leaves ``http.client`` out with ``email``, see
build/excludes.toml): at most :data:`MAX_FILE_BYTES`, certificates checked (never
``--no-check-certificate``), and with curl redirects only to https when the URL was https.

Every child process is this process's child in this process's group: the pull's Run's cancel
reaches it, and an error here kills it and waits for it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from typing import IO

import msgspec

from edge_runtime.contract.environment import DEFAULT_PATH
from edge_runtime.contract.subscriptions import (
    MAX_SCRIPT_PATH_LENGTH, GitMissingError, PullError, SubscriptionKind, SubscriptionRecord,
)
from edge_runtime.qinglong.data_folder import MAX_SCRIPT_BYTES
from edge_runtime.qinglong.script_files import CHUNK, MAX_DEPTH, SKIPPED_FOLDERS, name_problem, shown_name

#: The clone (git's packs) may grow to this while it is fetched; past it, the pull fails.
MAX_FETCH_BYTES = 256 * 1024 * 1024
#: One file copied into a subscription's folder, at most (a script's bound of the import).
MAX_FILE_BYTES = MAX_SCRIPT_BYTES
#: How often a running download's size is looked at.
_WATCH_S = 0.2
#: The end of a child's stderr kept for the error message.
_STDERR_TAIL = 2000

#: The programs a file is downloaded with, the first on ``PATH`` taken.
TRANSPORTS = ("curl", "uclient-fetch", "wget")
#: curl's exit status for "Maximum file size exceeded" (``--max-filesize``).
_CURL_TOO_LARGE = 63
#: What the device's git is told, always (see the module docstring).
GIT_HARDENING = (
    "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "credential.helper=",
    "-c", "core.askPass=", "-c", "transfer.fsckObjects=true", "-c", "fetch.fsckObjects=true",
    "-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=60", "-c", "submodule.recurse=false",
    "-c", "protocol.version=2",
)
#: Variables of the service's environment a download may need (proxies, CA certificates).
_PASSED = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY", "all_proxy",
           "ALL_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE")
_MISSING_GIT = ("git is not installed on this device: a repository cannot be pulled (OpenWrt: opkg install git "
                "git-http, or apk add git git-http on 25.12)")


class SourceEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A file of the fetched source (``skipped`` None: a regular file of ``size`` bytes that can be
    read), or an entry that is not copied (``skipped``: why)."""

    path: str
    size: int = 0
    executable: bool = False
    skipped: str | None = None
    #: The git blob id (None for a downloaded file).
    object_id: str | None = None


def child_environment(base: Mapping[str, str], home: str) -> dict[str, str]:
    """The environment of a download's child: the service's ``PATH``, proxies and CA settings, a
    private empty ``HOME`` and the C locale; nothing else of the (hostile) environment."""
    env = {name: base[name] for name in _PASSED if name in base}
    env.update(PATH=base.get("PATH") or DEFAULT_PATH, HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"),
               LC_ALL="C", LANG="C")
    return env


class Child:
    """A download's child process, its stderr in a file of the work directory, stopped when it
    grows ``watched`` past ``limit`` bytes, killed and waited for on any error."""

    def __init__(self, argv: list[str], env: dict[str, str], stderr_path: str, *, stdin: int | None = None,
                 stdout: int | None = subprocess.DEVNULL) -> None:
        self._stderr = open(stderr_path, "w+b")  # noqa: SIM115 - closed by wait/kill
        try:
            self.process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL if stdin is None else stdin,
                                            stdout=stdout, stderr=self._stderr, close_fds=True)
        except OSError:
            self._stderr.close()
            raise

    def wait(self, *, watched: Callable[[], int] | None = None, limit: int = 0, what: str = "") -> int:
        """Its exit status (a signal: negative).

        Raises:
            PullError: ``watched()`` passed ``limit`` (the child was killed).
        """
        try:
            while True:
                try:
                    return self.process.wait(_WATCH_S if watched is not None else None)
                except subprocess.TimeoutExpired:
                    if watched is not None and watched() > limit:
                        raise PullError(f"{what} grew past {shown_size(limit)}: stopped; nothing changed")
        except BaseException:
            self.kill()
            raise

    def stderr_tail(self) -> str:
        self._stderr.flush()
        self._stderr.seek(max(0, os.fstat(self._stderr.fileno()).st_size - _STDERR_TAIL))
        text = self._stderr.read().decode("utf-8", "replace")
        return " ".join(line.strip() for line in text.splitlines() if line.strip())

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.close()

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()


def shown_size(size: int) -> str:
    """``size`` bytes in MiB, or KiB below one MiB."""
    return f"{size / (1024 * 1024):.1f} MiB" if size >= 1024 * 1024 else f"{size / 1024:.1f} KiB"


def tree_size(path: str) -> int:
    """Bytes the files under ``path`` take (a download being written), never following a link."""
    total = 0
    for top, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(top, name)).st_size
            except FileNotFoundError:
                continue  # a temporary file git removed meanwhile
    return total


def qinglong_folder(kind: SubscriptionKind, url: str, branch: str | None) -> str:
    """The folder QingLong names a subscription's (its alias, its ``uniq_path``):
    ``author_repo[_branch]`` for a repository, the file's parent and its name without the
    extension for a file; any other character becomes ``_``."""
    from urllib.parse import urlsplit  # urllib.parse alone: no http.client, no email

    parts = [part for part in urlsplit(url).path.rstrip("/").split("/") if part]
    if kind is SubscriptionKind.GIT:
        repo = (parts[-1] if parts else "repo").removesuffix(".git")
        author = parts[-2] if len(parts) > 1 else urlsplit(url).hostname or "repo"
        name = f"{author}_{repo}" + (f"_{branch}" if branch else "")
    else:
        stem = (parts[-1] if parts else "file").rsplit(".", 1)[0]
        name = f"{parts[-2]}_{stem}" if len(parts) > 1 else stem
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".-_")[:64]
    return name or "subscription"


# ----------------------------------------------------------------------------------- git


def git_program(env: Mapping[str, str]) -> str:
    """The device's git on ``env``'s PATH.

    Raises:
        GitMissingError: there is none.
    """
    found = shutil.which("git", path=env.get("PATH"))
    if found is None:
        raise GitMissingError(_MISSING_GIT)
    return found


def _git_failure(action: str, child: Child, status: int, url: str) -> PullError:
    said = child.stderr_tail()
    if "remote-http" in said and "not a git command" in said:
        return GitMissingError(f"{action} {url} failed: this git has no http(s) transport (OpenWrt: opkg install "
                               f"git-http); git said: {said}")
    if status < 0:
        return PullError(f"{action} {url} failed: git was killed by signal {-status}; nothing changed")
    return PullError(f"{action} {url} failed (git exit {status}): {said or 'no message'}; nothing changed")


class GitSource:
    """A bare, shallow clone of one branch of a repository, in ``work`` (a private directory)."""

    def __init__(self, record: SubscriptionRecord, work: str, base_env: Mapping[str, str], *,
                 max_fetch_bytes: int = MAX_FETCH_BYTES) -> None:
        home = os.path.join(work, "home")
        os.makedirs(home, mode=0o700, exist_ok=True)
        self.env = child_environment(base_env, home)
        self.env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0",
                        GIT_NO_REPLACE_OBJECTS="1",
                        # Only the URL's own transport: no redirect to plain http from https, no ext::.
                        GIT_ALLOW_PROTOCOL=record.url.split(":", 1)[0].lower())
        self.git = [git_program(self.env), *GIT_HARDENING]
        self.record = record
        self.work = work
        self.repository = os.path.join(work, "git")
        self.max_fetch_bytes = max_fetch_bytes
        self._reader: Child | None = None

    def _run(self, action: str, argv: list[str], *, stdout: int | None = subprocess.DEVNULL,
             watched: Callable[[], int] | None = None) -> Child:
        child = Child([*self.git, *argv], self.env, os.path.join(self.work, f"{action.split()[0]}.stderr"),
                      stdout=stdout)
        status = child.wait(watched=watched, limit=self.max_fetch_bytes, what=f"the clone of {self.record.url}")
        if status != 0:
            failure = _git_failure(action, child, status, self.record.url)
            child.close()
            raise failure
        return child

    def remote_revision(self) -> str | None:
        """The commit the branch (or the default branch) points at upstream, asked without a
        clone; None when the answer names no commit (a tag, say): the clone tells then."""
        branch = self.record.branch
        ref = "HEAD" if branch is msgspec.UNSET else f"refs/heads/{branch}"
        out = os.path.join(self.work, "ls-remote.out")
        with open(out, "w+b") as stdout:
            child = self._run("ls-remote", ["ls-remote", "--", self.record.url, ref], stdout=stdout.fileno())
            child.close()
            stdout.seek(0)
            text = stdout.read(4096).decode("ascii", "replace")
        match = re.match(r"([0-9a-f]{40}|[0-9a-f]{64})\s", text)
        return match.group(1) if match else None

    def fetch(self) -> str:
        """Clone; the commit fetched."""
        branch = self.record.branch
        argv = ["clone", "--bare", "--depth=1", "--no-tags", "--single-branch", "--template=", "-q",
                *(() if branch is msgspec.UNSET else ("--branch", branch)), "--", self.record.url, self.repository]
        self._run("clone", argv, watched=lambda: tree_size(self.repository)).close()
        if tree_size(self.repository) > self.max_fetch_bytes:  # one that finished between two looks
            raise PullError(f"the clone of {self.record.url} grew past {shown_size(self.max_fetch_bytes)}: refused; "
                            f"nothing changed")
        out = os.path.join(self.work, "rev-parse.out")
        with open(out, "w+b") as stdout:
            self._run("rev-parse", ["--git-dir", self.repository, "rev-parse", "--verify", "HEAD^{commit}"],
                      stdout=stdout.fileno()).close()
            stdout.seek(0)
            revision = stdout.read(200).decode("ascii", "replace").strip()
        if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", revision):
            raise PullError(f"git named no commit for {self.record.url} ({revision[:80]!r}); nothing changed")
        return revision

    def entries(self) -> list[SourceEntry]:
        """Every entry of the fetched commit's tree."""
        out = os.path.join(self.work, "ls-tree.out")
        with open(out, "w+b") as stdout:
            self._run("ls-tree", ["--git-dir", self.repository, "ls-tree", "-r", "-z", "--long", "--full-tree",
                                  "HEAD"], stdout=stdout.fileno()).close()
            stdout.seek(0)
            listing = stdout.read()
        return [tree_entry(record) for record in listing.split(b"\0") if record]

    def read(self, entry: SourceEntry) -> Iterator[bytes]:
        """The bytes of ``entry``'s blob, in chunks (each read whole before the next is asked)."""
        if self._reader is None:
            self._reader = Child([*self.git, "--git-dir", self.repository, "cat-file", "--batch"], self.env,
                                 os.path.join(self.work, "cat-file.stderr"), stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE)
        process = self._reader.process
        stdin, stdout = process.stdin, process.stdout  # both pipes: Child was handed PIPE for each
        if entry.object_id is None:
            raise PullError(f"{entry.path} has no object to read; nothing changed")
        stdin.write(entry.object_id.encode("ascii") + b"\n")
        stdin.flush()
        header = stdout.readline(200).split()
        if len(header) != 3 or header[1] != b"blob" or header[2] != str(entry.size).encode():
            raise PullError(f"git gave {b' '.join(header)[:100]!r} for {entry.path}: not its listed blob; nothing "
                            f"changed")
        yield from _read_exactly(stdout, entry.size)
        if stdout.read(1) != b"\n":
            raise PullError(f"git's copy of {entry.path} did not end where its size said; nothing changed")

    def close(self) -> None:
        if self._reader is not None:
            self._reader.kill()
            self._reader = None


def _read_exactly(stream: IO[bytes], size: int) -> Iterator[bytes]:
    left = size
    while left:
        chunk = stream.read(min(CHUNK, left))
        if not chunk:
            raise PullError(f"git's output ended {left} bytes early; nothing changed")
        left -= len(chunk)
        yield chunk


_TREE_LINE = re.compile(rb"(\d{6}) (\w+) ([0-9a-f]{40}|[0-9a-f]{64}) +(\d+|-)\t(.*)", re.S)


def tree_entry(record: bytes) -> SourceEntry:
    """One record of ``git ls-tree -r -z --long``, as an entry (what is not copied says why)."""
    match = _TREE_LINE.fullmatch(record)
    if match is None:
        return SourceEntry(path=shown_name(record.decode("utf-8", "surrogateescape")[-200:]),
                           skipped="a tree entry git listed in a form this does not read: not copied")
    mode, kind, object_id, size, raw_path = match.groups()
    try:
        path = raw_path.decode("utf-8")
    except UnicodeDecodeError:
        return SourceEntry(path=shown_name(raw_path.decode("utf-8", "surrogateescape")),
                           skipped="its name is not UTF-8: not copied")
    problem = path_problem(path)
    if problem is not None:
        return SourceEntry(path=shown_name(path), skipped=problem)
    if mode == b"120000":
        return SourceEntry(path=path, skipped="a symbolic link: never made, not copied")
    if mode == b"160000" or kind == b"commit":
        return SourceEntry(path=path, skipped="a submodule: not fetched")
    if kind != b"blob" or mode not in (b"100644", b"100755"):
        return SourceEntry(path=path, skipped=f"not a regular file (mode {mode.decode()}): not copied")
    length = int(size)
    if length > MAX_FILE_BYTES:
        return SourceEntry(path=path, size=length,
                           skipped=f"{shown_size(length)}: larger than {shown_size(MAX_FILE_BYTES)}, not copied")
    return SourceEntry(path=path, size=length, executable=mode == b"100755", object_id=object_id.decode())


def path_problem(path: str) -> str | None:
    """Why a path from the source is not taken into a folder (``..``, a control character, too
    deep, inside a folder that is never copied), or None."""
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "its path is not a plain relative path: not copied"
    for part in parts:
        problem = name_problem(part)
        if problem is not None:
            return problem
    if len(parts) > MAX_DEPTH:
        return f"deeper than {MAX_DEPTH} folders: not copied"
    for part in parts[:-1]:
        if part in SKIPPED_FOLDERS:
            return SKIPPED_FOLDERS[part]
    if len(path) > MAX_SCRIPT_PATH_LENGTH:
        return f"its path is longer than {MAX_SCRIPT_PATH_LENGTH} characters: not copied"
    return None


# ----------------------------------------------------------------------------------- one file


def file_name(url: str) -> str:
    """The name a file subscription's download gets: the URL path's last segment, decoded.

    Raises:
        PullError: the URL names no file, or one whose name is not taken.
    """
    from urllib.parse import unquote, urlsplit  # urllib.parse alone: no http.client, no email

    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1], errors="strict")
    problem = name_problem(name) if name else "it is empty"
    if problem is None and (name.startswith(".") or "/" in name or "\\" in name):
        problem = "it is not a plain file name"
    if problem is not None:
        raise PullError(f"the URL {url} names no file a folder can take ({problem}); nothing changed")
    return name


class FileSource:
    """One file downloaded into ``work`` (a private directory)."""

    def __init__(self, record: SubscriptionRecord, work: str, base_env: Mapping[str, str], *,
                 transports: tuple[str, ...] = TRANSPORTS,
                 max_bytes: int = MAX_FILE_BYTES) -> None:
        self.record = record
        self.work = work
        home = os.path.join(work, "home")
        os.makedirs(home, mode=0o700, exist_ok=True)
        self.env = child_environment(base_env, home)
        self.transports = transports
        self.max_bytes = max_bytes
        self.name = file_name(record.url)
        self.download = os.path.join(work, "download")
        self.entry: SourceEntry | None = None
        self.transport = ""

    def fetch(self) -> str:
        """Download; the revision (``sha256:<hex>`` of the bytes)."""
        for transport in self.transports:
            if self._fetch_with(transport) is None:
                continue  # not on this device (or not in this build): the next one
            self.transport = transport
            break
        else:
            raise PullError(f"nothing on this device downloads {self.record.url}: neither curl, uclient-fetch nor "
                            f"wget (OpenWrt: opkg install uclient-fetch libustream-mbedtls); nothing changed")
        digest = hashlib.sha256()
        with open(self.download, "rb") as file:
            size = 0
            while chunk := file.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
        self.entry = SourceEntry(path=self.name, size=size)
        return f"sha256:{digest.hexdigest()}"

    def entries(self) -> list[SourceEntry]:
        """The one file (after :meth:`fetch`)."""
        return [] if self.entry is None else [self.entry]

    def read(self, entry: SourceEntry) -> Iterator[bytes]:
        with open(self.download, "rb") as file:
            while chunk := file.read(CHUNK):
                yield chunk

    def close(self) -> None:
        pass

    def _fetch_with(self, transport: str) -> bool | None:
        """Download with ``transport`` (a program on ``PATH``): True when done, None when this
        device lacks it.

        Raises:
            PullError: it failed (the server's answer, the size, the network).
        """
        program = shutil.which(transport, path=self.env["PATH"])
        if program is None:
            return None
        url, https = self.record.url, self.record.url.lower().startswith("https:")
        if transport == "curl":
            # -q first: no .curlrc; --proto-redir keeps an https download on https.
            argv = [program, "-q", "--fail", "--silent", "--show-error", "--location", "--max-redirs", "5",
                    "--proto", "=https,http", "--proto-redir", "=https" if https else "=https,http",
                    "--max-filesize", str(self.max_bytes), "--connect-timeout", "30", "--speed-limit", "1000",
                    "--speed-time", "60", "--output", self.download, "--", url]
        else:  # uclient-fetch and wget take the same few options
            argv = [program, "-q", "-T", "60", "-O", self.download, url]
        child = Child(argv, self.env, os.path.join(self.work, f"{transport}.stderr"))
        status = child.wait(watched=lambda: _size(self.download), limit=self.max_bytes,
                            what=f"the download of {url}")
        said = child.stderr_tail()
        child.close()
        if transport == "curl" and status == _CURL_TOO_LARGE or _size(self.download) > self.max_bytes:
            raise PullError(f"the download of {url} is larger than {shown_size(self.max_bytes)}; nothing changed")
        if status != 0:
            raise PullError(f"{transport} could not download {url} (exit {status}): {said or 'no message'}; nothing "
                            f"changed")
        return True


def _size(path: str) -> int:
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return 0


def open_source(record: SubscriptionRecord, work: str, base_env: Mapping[str, str], **options: object):
    """The source of ``record``, fetched into ``work`` by :meth:`fetch`."""
    if record.kind is SubscriptionKind.GIT:
        return GitSource(record, work, base_env, **options)  # type: ignore[arg-type]
    return FileSource(record, work, base_env, **options)  # type: ignore[arg-type]
