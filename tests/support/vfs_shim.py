"""A recording apsw VFS for the fault campaigns: power-cut states and injected disk faults.

Test tooling only; nothing in ``edge_runtime`` imports it. The shim inherits the default VFS
(``base=""``), so every byte still goes to the real files and WAL shared memory (the xShm methods)
keeps working. On top of that it:

* logs every write, truncate, sync, create and delete of each named file, in global order, so
  :meth:`RecordingVFS.power_cut` can rebuild what the disk would hold if power failed after any
  logged operation: per file, only what the last sync made durable (optionally plus a torn prefix
  of the unsynced tail, as a drive that wrote some sectors and not others);
* raises injected errors (disk full, I/O error) at named fault points, counting every hit so a
  campaign can fail when a fault point it names was never reached.

The ``-shm`` file never goes through ``xOpen`` on unix (it is mapped via the xShm methods of the
main file) and SQLite rebuilds it from the WAL on open, so a materialised copy has none.
"""

from __future__ import annotations

import itertools
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import apsw

_names = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Op:
    """One logged file operation. ``data`` is set for writes, ``size`` for truncates."""

    kind: str  # "create", "write", "truncate", "sync", "delete"
    path: str
    offset: int = 0
    data: bytes = b""
    size: int = 0


@dataclass(slots=True)
class Fault:
    """An injected error: the ``skip``+1-th matching operation and the ``times``-1 after it fail.

    Args:
        point: the fault point's name, counted in :attr:`RecordingVFS.hits`.
        op: ``"write"`` or ``"sync"``.
        suffix: only files whose name ends with it (``"-wal"``, ``".db"``); empty for every file.
        code: the SQLite result code raised (``SQLITE_FULL``, ``SQLITE_IOERR_WRITE``, ...).
    """

    point: str
    op: str
    code: int
    suffix: str = ""
    skip: int = 0
    times: int = 1
    seen: int = field(default=0, init=False)

    def fires(self, op: str, path: str) -> bool:
        if op != self.op or not path.endswith(self.suffix) or self.times <= 0:
            return False
        self.seen += 1
        if self.seen <= self.skip:
            return False
        self.times -= 1
        return True


def _path_of(name: object) -> str | None:
    if name is None:
        return None
    if isinstance(name, apsw.URIFilename):
        return os.path.abspath(name.filename())
    return os.path.abspath(str(name))


class RecordingVFS(apsw.VFS):
    """The shim. Register it, pass :attr:`name` as ``vfs=`` to ``open_database``; unregister when done."""

    def __init__(self) -> None:
        self.name = f"fault-recording-{os.getpid()}-{next(_names)}"
        self.ops: list[Op] = []
        #: What each file held when the shim first saw it (it may predate the recording).
        self.initial: dict[str, bytes | None] = {}
        self.faults: list[Fault] = []
        self.hits: Counter[str] = Counter()
        super().__init__(self.name, base="")

    # ----------------------------------------------------------------- logging

    def position(self) -> int:
        """How many operations are logged: a cut at this position keeps everything synced so far."""
        return len(self.ops)

    def _see(self, path: str) -> None:
        if path not in self.initial:
            self.initial[path] = Path(path).read_bytes() if os.path.exists(path) else None

    def _log(self, op: Op) -> None:
        self.ops.append(op)

    def _maybe_fail(self, op: str, path: str) -> None:
        for fault in self.faults:
            if fault.fires(op, path):
                self.hits[fault.point] += 1
                error = apsw.exception_for(fault.code)
                # SQLite's own texts for these codes, as a real full or failing disk reports them.
                full = (fault.code & 0xFF) == apsw.SQLITE_FULL
                error.args = ("database or disk is full" if full else "disk I/O error",)
                raise error

    def inject(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        self.faults.clear()

    # ----------------------------------------------------------------- VFS methods

    def xOpen(self, name: object, flags: list[int]) -> apsw.VFSFile:
        path = _path_of(name)
        if path is not None:
            self._see(path)
            if not os.path.exists(path):
                self._log(Op("create", path))
        return RecordingFile(self, path, name, flags)

    def xDelete(self, filename: str, syncdir: bool) -> None:
        path = os.path.abspath(filename)
        self._see(path)
        super().xDelete(filename, syncdir)
        self._log(Op("delete", path))

    # ----------------------------------------------------------------- power cuts

    def sync_positions(self) -> list[int]:
        """Every position just after a sync: the cut points where a commit may have become durable."""
        return [index + 1 for index, op in enumerate(self.ops) if op.kind == "sync"]

    def write_positions(self) -> list[int]:
        return [index + 1 for index, op in enumerate(self.ops) if op.kind == "write"]

    def power_cut(self, position: int, rng: random.Random | None = None) -> dict[str, bytes | None]:
        """The content of every file (None: absent) after a power cut following ``position`` ops.

        Without ``rng`` only synced data survives. With ``rng`` the unsynced operations of each
        file survive as an in-order prefix of random length whose last write is torn at a random
        byte, a drive that had written part of its cache when the power went.

        Creates and deletes are taken as durable at once (SQLite syncs the directory for them).
        """
        current: dict[str, bytearray | None] = {}
        durable: dict[str, bytes | None] = {}
        pending: dict[str, list[Op]] = {}
        for path, data in self.initial.items():
            current[path] = None if data is None else bytearray(data)
            durable[path] = data
            pending[path] = []
        for op in self.ops[:position]:
            path = op.path
            if op.kind == "create":
                current[path], durable[path], pending[path] = bytearray(), b"", []
            elif op.kind == "delete":
                current[path], durable[path], pending[path] = None, None, []
            elif op.kind == "sync":
                content = current[path]
                durable[path] = None if content is None else bytes(content)
                pending[path] = []
            else:
                _apply(current, op)
                pending[path].append(op)
        result: dict[str, bytes | None] = {}
        for path, data in durable.items():
            ops = pending[path]
            if rng is None or not ops or data is None:
                result[path] = data
                continue
            state = {path: bytearray(data)}
            keep = rng.randint(0, len(ops))
            for op in ops[:keep]:
                _apply(state, op)
            if keep < len(ops) and ops[keep].kind == "write":
                torn = ops[keep]
                _apply(state, Op("write", path, torn.offset, torn.data[: rng.randint(0, len(torn.data))]))
            result[path] = bytes(state[path])
        return result

    def materialise(self, position: int, directory: Path, rng: random.Random | None = None) -> dict[str, Path]:
        """Write the power-cut state of every file into ``directory`` (same base names, no ``-shm``).

        Returns the map from original path to the written copy.
        """
        directory.mkdir(parents=True, exist_ok=True)
        written = {}
        for path, data in self.power_cut(position, rng).items():
            if data is None or path.endswith("-shm"):
                continue
            target = directory / os.path.basename(path)
            target.write_bytes(data)
            written[path] = target
        return written

    def written_bytes(self) -> list[bytes]:
        """Every chunk of data ever written through the shim (for secrets-at-rest scans)."""
        return [op.data for op in self.ops if op.kind == "write"]


def _apply(files: dict[str, bytearray | None], op: Op) -> None:
    content = files.get(op.path)
    if content is None:
        content = files[op.path] = bytearray()
    if op.kind == "write":
        end = op.offset + len(op.data)
        if len(content) < op.offset:
            content.extend(bytes(op.offset - len(content)))
        content[op.offset:end] = op.data
    elif op.kind == "truncate":
        del content[op.size:]


class RecordingFile(apsw.VFSFile):
    """A default-VFS file whose writes, truncates and syncs are logged (and may be failed)."""

    def __init__(self, vfs: RecordingVFS, path: str | None, name: object, flags: list[int]) -> None:
        self._vfs = vfs
        self._path = path
        super().__init__("", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        if self._path is None:
            super().xWrite(data, offset)
            return
        self._vfs._maybe_fail("write", self._path)
        super().xWrite(data, offset)
        self._vfs._log(Op("write", self._path, offset, bytes(data)))

    def xTruncate(self, newsize: int) -> None:
        super().xTruncate(newsize)
        if self._path is not None:
            self._vfs._log(Op("truncate", self._path, size=newsize))

    def xSync(self, flags: int) -> None:
        if self._path is not None:
            self._vfs._maybe_fail("sync", self._path)
        super().xSync(flags)
        if self._path is not None:
            self._vfs._log(Op("sync", self._path))
