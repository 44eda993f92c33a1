"""``LocalDatabase.write(synced=False)``: one commit without a WAL sync (fewer flash writes), the connection's
durability put back afterwards, whatever happened inside the transaction."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import apsw
import pytest

from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database


class _SyncCountingVFS(apsw.VFS):
    def __init__(self, name: str) -> None:
        self.name = name
        self.syncs: Counter[str] = Counter()
        super().__init__(name, base="")

    def xOpen(self, name, flags):  # noqa: ANN001 - apsw's signature
        return _File(self, name, flags)


class _File(apsw.VFSFile):
    def __init__(self, vfs: _SyncCountingVFS, name, flags) -> None:  # noqa: ANN001
        self._vfs = vfs
        path = name.filename() if isinstance(name, apsw.URIFilename) else str(name or "")
        self._kind = "wal" if path.endswith("-wal") else "db" if path.endswith(".db") else "other"
        super().__init__("", name, flags)

    def xSync(self, flags) -> None:  # noqa: ANN001
        self._vfs.syncs[self._kind] += 1
        super().xSync(flags)


@pytest.fixture
def counted(tmp_path: Path):
    vfs = _SyncCountingVFS(f"count-syncs-{id(tmp_path)}")
    db = open_database(tmp_path / "edge-runtime.db", clock=ManualClock(1_000), vfs=vfs.name)
    db.connection.execute("PRAGMA wal_autocheckpoint = 0")  # only the commits under study sync
    db.connection.execute("CREATE TABLE t (x)")
    yield db, vfs
    db.close()
    vfs.unregister()


def _level(db) -> int:
    return db.connection.execute("PRAGMA synchronous").fetchone()[0]


def test_a_default_commit_syncs_the_wal_and_an_unsynced_one_does_not(counted) -> None:
    db, vfs = counted
    vfs.syncs.clear()
    with db.write():
        db.connection.execute("INSERT INTO t VALUES (1)")
    assert vfs.syncs["wal"] == 1
    with db.write(synced=False):
        db.connection.execute("INSERT INTO t VALUES (2)")
    assert vfs.syncs["wal"] == 1, "the unsynced commit synced the WAL"
    assert _level(db) == 2, "FULL was not put back after the unsynced commit"
    with db.write():
        db.connection.execute("INSERT INTO t VALUES (3)")
    assert vfs.syncs["wal"] == 2
    assert [row[0] for row in db.connection.execute("SELECT x FROM t ORDER BY x")] == [1, 2, 3]


def test_durability_is_put_back_after_a_rolled_back_unsynced_transaction(counted) -> None:
    db, _ = counted
    with pytest.raises(RuntimeError), db.write(synced=False):
        db.connection.execute("INSERT INTO t VALUES (1)")
        raise RuntimeError("boom")
    assert _level(db) == 2
    assert db.connection.execute("SELECT count(*) FROM t").fetchone()[0] == 0


def test_an_unsynced_transaction_never_raises_a_weaker_setting(counted) -> None:
    db, _ = counted
    db.connection.execute("PRAGMA synchronous = OFF")
    with db.write(synced=False):
        db.connection.execute("INSERT INTO t VALUES (1)")
    assert _level(db) == 0
