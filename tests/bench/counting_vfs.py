"""A VFS over SQLite's default one that counts bytes written and syncs (one ``fdatasync``/``fsync``
each) per file kind: used by the benchmarks that report what a workload writes to flash."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import apsw


def file_path(name: object) -> str:
    """The path SQLite opens under ``name`` (a URI filename, a plain name, or None for a temp file)."""
    return name.filename() if isinstance(name, apsw.URIFilename) else str(name or "")


class CountingVFS(apsw.VFS):
    """``kind(name)`` names the counter each opened file adds to; ``makedefault`` registers it as
    the process's default VFS, so everything SQLite opens from then on is counted."""

    def __init__(self, name: str, kind: Callable[[object], str], *, makedefault: bool = False) -> None:
        self.name = name
        self.kind = kind
        self.written: Counter[str] = Counter()
        self.syncs: Counter[str] = Counter()
        self.base = apsw.vfs_names()[0]  # the platform default ("unix"), before this one may replace it
        super().__init__(name, base=self.base, makedefault=makedefault)

    def xOpen(self, name, flags):  # noqa: ANN001 - apsw's signature
        return _CountingFile(self, name, flags)


class _CountingFile(apsw.VFSFile):
    def __init__(self, vfs: CountingVFS, name, flags) -> None:  # noqa: ANN001
        self._vfs = vfs
        self._kind = vfs.kind(name)
        super().__init__(vfs.base, name, flags)

    def xWrite(self, data, offset) -> None:  # noqa: ANN001
        super().xWrite(data, offset)
        self._vfs.written[self._kind] += len(data)

    def xSync(self, flags) -> None:  # noqa: ANN001
        super().xSync(flags)
        self._vfs.syncs[self._kind] += 1
