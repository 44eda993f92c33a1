"""A QingLong data folder or data.tgz read as hostile input (edge_runtime/qinglong/data_folder.py):
the layouts QingLong writes, and what a hostile one is refused or skipped for: members leaving the
archive (``..``, absolute), links (symbolic, hard, pointing out), special files, huge members, a
compression bomb, a member twice, a database that is a link or mid-write; a folder's symlinks are
never followed. The files a test plants outside are checked to be untouched."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from edge_runtime.qinglong import data_folder
from edge_runtime.qinglong.data_folder import open_source
from edge_runtime.qinglong.errors import QingLongSourceError
from tests.support.qinglong_fixtures import SCRIPTS, make_data_folder, make_data_tgz, tar_member


@pytest.fixture(params=["with data_filter", "without data_filter"])
def tar_filter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The archive rules hold on their own: also where tarfile has no ``data_filter`` (a router's
    Debian-built Python 3.11.2)."""
    if request.param == "without data_filter":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    return request.param


def _paths(source) -> list[str]:
    return [f.path for f in source.scripts]


def _skipped(source) -> dict[str, str]:
    return {entry.path: entry.reason for entry in source.skipped}


def _read_all(source) -> dict[str, bytes]:
    return {file.path: b"".join(chunks) for file, chunks in source.stream(source.scripts)}


def test_a_data_folder_gives_its_database_scripts_and_config(tmp_path: Path) -> None:
    data = make_data_folder(tmp_path / "ql")
    with open_source(data) as source:
        assert source.kind == "folder" and source.layout == "a QingLong data folder"
        assert sorted(_paths(source)) == sorted(SCRIPTS) and source.skipped == []
        assert source.config == ["config.sh", "task_before.sh"]
        assert source.database.read_bytes() == (data / "db" / "database.sqlite").read_bytes()
        assert os.stat(source.database).st_mode & 0o777 == 0o600  # a private copy
        assert _read_all(source) == {path: content.encode() for path, content in SCRIPTS.items()}
        private = source.database
    assert not private.exists()  # closed: the copy is gone


def test_the_install_folder_and_the_old_layout_are_found_too(tmp_path: Path) -> None:
    data = make_data_folder(tmp_path / "ql")
    with open_source(tmp_path / "ql") as source:  # /ql: its data/ is read
        assert source.layout == "a QingLong install folder (its data/ read)" and len(source.scripts) == len(SCRIPTS)
    old = tmp_path / "old"
    (data).rename(old)  # before 2.11.3, db/ scripts/ config/ sat in /ql itself: the same shape
    with open_source(old) as source:
        assert source.layout == "a QingLong data folder"


def test_a_folder_that_is_not_qinglongs_is_refused_with_what_is_there(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.txt").write_text("hi")
    with pytest.raises(QingLongSourceError, match=r"not a QingLong data folder: no db/database.sqlite .*found: notes.txt"):
        open_source(tmp_path / "x")
    (tmp_path / "nedb" / "db").mkdir(parents=True)
    (tmp_path / "nedb" / "db" / "crontab.db").write_text("{}\n")
    with pytest.raises(QingLongSourceError, match="QingLong 2.10 .* db/ holds crontab.db"):
        open_source(tmp_path / "nedb")
    with pytest.raises(QingLongSourceError, match="cannot read"):
        open_source(tmp_path / "missing")


def test_a_folders_links_are_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root's secret")
    data = make_data_folder(tmp_path / "ql", scripts={"a.js": "1", "dir/b.js": "2"})
    os.symlink(secret, data / "scripts" / "leak.js")
    os.symlink(tmp_path, data / "scripts" / "outside")
    os.mkfifo(data / "scripts" / "pipe.js")
    (data / "scripts" / "node_modules" / "x").mkdir(parents=True)
    (data / "scripts" / "node_modules" / "x" / "index.js").write_text("")
    with open_source(data) as source:
        assert sorted(_paths(source)) == ["a.js", "dir/b.js"]
        skipped = _skipped(source)
        assert skipped["leak.js"].startswith("a symbolic link") and skipped["outside"].startswith("a symbolic link")
        assert skipped["pipe.js"].startswith("not a regular file") and "npm" in skipped["node_modules/"]


def test_a_database_that_is_a_link_or_mid_write_is_refused(tmp_path: Path) -> None:
    data = make_data_folder(tmp_path / "ql")
    (data / "db" / "database.sqlite-journal").write_bytes(b"hot journal")
    with pytest.raises(QingLongSourceError, match="database.sqlite-journal is not empty: QingLong is running"):
        open_source(data)
    (data / "db" / "database.sqlite-journal").write_bytes(b"")  # an empty one is harmless
    with open_source(data):
        pass
    real = data / "db" / "real.sqlite"
    (data / "db" / "database.sqlite").rename(real)
    os.symlink(real, data / "db" / "database.sqlite")
    with pytest.raises(QingLongSourceError, match="is not a regular file"):
        open_source(data)


def test_a_data_tgz_is_read_as_qinglongs_backup_writes_it(tmp_path: Path) -> None:
    data = make_data_folder(tmp_path / "ql")
    archive = make_data_tgz(data, tmp_path / "data.tgz")
    with open_source(archive) as source:
        assert source.kind == "archive" and source.layout == "a QingLong backup (data.tgz)"
        assert sorted(_paths(source)) == sorted(SCRIPTS) and source.config == ["config.sh", "task_before.sh"]
        assert source.database.read_bytes() == (data / "db" / "database.sqlite").read_bytes()
        assert _read_all(source) == {path: content.encode() for path, content in SCRIPTS.items()}
    bare = make_data_tgz(data, tmp_path / "bare.tar.gz", prefix="")  # a tar of the folder's contents
    with open_source(bare) as source:
        assert source.layout == "an archive of a QingLong data folder" and len(source.scripts) == len(SCRIPTS)


@pytest.mark.parametrize("name", ["data/../../escape.js", "/etc/cron.d/evil", "data/scripts/../../../x.js",
                                  "./../x.js"])
def test_a_member_leaving_the_archive_refuses_it_whole(tmp_path: Path, name: str, tar_filter: str) -> None:
    data = make_data_folder(tmp_path / "ql")
    archive = make_data_tgz(data, tmp_path / "data.tgz", extra=[(tar_member(name), b"evil")])
    with pytest.raises(QingLongSourceError, match="leaves the archive's folder"):
        open_source(archive)


def test_links_in_the_archive_are_never_made(tmp_path: Path, tar_filter: str) -> None:
    data = make_data_folder(tmp_path / "ql", scripts={"a.js": "1"})
    archive = make_data_tgz(data, tmp_path / "data.tgz", extra=[
        tar_member("data/scripts/out.js", kind=tarfile.SYMTYPE, link="/etc/shadow"),
        tar_member("data/scripts/up.js", kind=tarfile.SYMTYPE, link="../../../../root/.ssh/id_rsa"),
        tar_member("data/scripts/in.js", kind=tarfile.SYMTYPE, link="a.js"),
        tar_member("data/scripts/hard.js", kind=tarfile.LNKTYPE, link="data/scripts/a.js"),
        tar_member("data/scripts/hard_out.js", kind=tarfile.LNKTYPE, link="../../etc/passwd"),
        tar_member("data/scripts/linkdir", kind=tarfile.SYMTYPE, link="/etc"),
        (tar_member("data/scripts/linkdir/cron.js"), b"through the link"),
        (tar_member("data/scripts/fifo.js", kind=tarfile.FIFOTYPE), b""),
    ])
    with open_source(archive) as source:
        assert _paths(source) == ["a.js"]
        skipped = _skipped(source)
        assert skipped["out.js"] == "a link (pointing outside the archive): links are never made, not copied"
        assert skipped["up.js"].startswith("a link (pointing outside the archive)")
        assert skipped["in.js"].startswith("a link (inside the archive)")
        assert skipped["hard.js"].startswith("a link (inside the archive)")
        assert skipped["hard_out.js"].startswith("a link (pointing outside the archive)")
        assert skipped["linkdir/cron.js"] == "inside a folder that is a link in the archive: not copied"
        assert skipped["fifo.js"].startswith("not a regular file")


def test_a_database_member_that_is_a_link_refuses_the_archive(tmp_path: Path) -> None:
    data = make_data_folder(tmp_path / "ql")
    (data / "db" / "database.sqlite").unlink()
    archive = make_data_tgz(data, tmp_path / "data.tgz", extra=[
        tar_member("data/db/database.sqlite", kind=tarfile.SYMTYPE, link="/etc/shadow")])
    with pytest.raises(QingLongSourceError, match="data/db/database.sqlite is not a regular file"):
        open_source(archive)


def test_huge_members_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data_folder, "MAX_SCRIPT_BYTES", 1000)
    data = make_data_folder(tmp_path / "ql", scripts={"small.js": "1"})
    archive = make_data_tgz(data, tmp_path / "data.tgz", extra=[(tar_member("data/scripts/big.js"), b"x" * 5000)])
    with open_source(archive) as source:
        assert _paths(source) == ["small.js"] and _skipped(source)["big.js"].startswith("larger than")
    monkeypatch.setattr(data_folder, "MAX_DATABASE_BYTES", 1000)
    with pytest.raises(QingLongSourceError, match="database.sqlite is larger than"):
        open_source(archive)


def test_a_compression_bomb_ends_at_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data_folder, "MAX_ARCHIVE_BYTES", 10 * 1024 * 1024)
    data = make_data_folder(tmp_path / "ql", scripts={"a.js": "1"})
    zeros = tar_member("data/log/huge.log")
    zeros.size = 64 * 1024 * 1024
    archive = tmp_path / "bomb.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(data / "db" / "database.sqlite", arcname="data/db/database.sqlite")
        tar.addfile(zeros, _Zeros(zeros.size))
    assert archive.stat().st_size < 1024 * 1024  # 64 MiB of zeros in well under 1 MiB
    with pytest.raises(QingLongSourceError, match=r"holds more than 10 MiB: refused \(a compression bomb"):
        open_source(archive)


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = min(len(buffer), self.left)
        buffer[:count] = bytes(count)
        self.left -= count
        return count


def test_too_many_members_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data_folder, "MAX_ARCHIVE_MEMBERS", 20)
    data = make_data_folder(tmp_path / "ql", scripts={f"s{i}.js": "1" for i in range(30)})
    with pytest.raises(QingLongSourceError, match="more than 20 members"):
        open_source(make_data_tgz(data, tmp_path / "data.tgz"))


def test_a_member_twice_refuses_the_archive(tmp_path: Path) -> None:
    data = make_data_folder(tmp_path / "ql", scripts={"a.js": "1"})
    archive = make_data_tgz(data, tmp_path / "data.tgz", extra=[(tar_member("data/scripts/a.js"), b"second")])
    with pytest.raises(QingLongSourceError, match="holds 'data/scripts/a.js' twice"):
        open_source(archive)


def test_an_archive_without_a_database_or_not_an_archive_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "other.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tar_member("photos/cat.jpg")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"jpg"))
    with pytest.raises(QingLongSourceError, match="not a QingLong backup: no data/db/database.sqlite .*found at its "
                                                  "top: photos"):
        open_source(archive)
    junk = tmp_path / "junk.tgz"
    junk.write_bytes(b"\x1f\x8b" + os.urandom(200))
    with pytest.raises(QingLongSourceError):
        open_source(junk)


def test_a_script_changed_after_it_was_listed_is_read_as_it_is_now(tmp_path: Path) -> None:
    """The listing records each file's SHA-256; the writer compares (test_qinglong_apply): here,
    the stream gives the bytes as they are at copy time, not the listed ones."""
    data = make_data_folder(tmp_path / "ql", scripts={"a.js": "first"})
    with open_source(data) as source:
        listed = source.scripts[0].sha256
        (data / "scripts" / "a.js").write_text("changed")
        assert _read_all(source) == {"a.js": b"changed"} and source.scripts[0].sha256 == listed
