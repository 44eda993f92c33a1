"""A reader of apk v3 packages (apk-tools 3's ADB format), written apart from the writer it checks.

build/cross/apkv3.py writes the packages; this file shares no code with it and is written from
apk-tools' description of the format (apk-v3(5), and the field numbers of src/apk_adb.h), so that a
misreading of the format in one is not silently repeated by the other. It reads what apk needs
from a package to install it, and refuses what apk would refuse or trip over:

- the container: ``ADBd`` + raw deflate, ``ADBc`` + algorithm and level, or ``ADB.`` uncompressed;
  then ``ADB.`` + schema ``pckg``; blocks of an u32 (2 type bits, 30 size bits) padded with zeros to
  8 bytes; one ADB block first, signature blocks, then data blocks only;
- every value: its type, its offset inside the ADB block and aligned for what it points at, its
  length inside the block;
- the metadata: name and version present; directories and each directory's files sorted by name,
  every directory's parent listed before it, no path leaving the root; a regular file has a
  SHA-256; a symlink its target;
- the data: exactly one data block per non-empty regular file, in the order of the metadata, of
  the file's size and SHA-256.

Signatures are not checked (the packages are unsigned, installed with ``--allow-untrusted``).
"""

from __future__ import annotations

import hashlib
import stat
import struct
import zlib
from typing import NamedTuple


class AdbFormatError(Exception):
    """Not a valid apk v3 package (the message says where)."""


class Acl(NamedTuple):
    mode: int
    user: str
    group: str


class PackagedFile(NamedTuple):
    path: str  # relative to the root, no leading slash
    acl: Acl
    size: int
    mtime: int
    sha256: bytes | None  # regular files
    link_target: str | None  # symlinks


class PackagedDirectory(NamedTuple):
    path: str  # "" for the root
    acl: Acl
    files: tuple[PackagedFile, ...]


class Package(NamedTuple):
    schema: bytes
    compression: str
    info: dict[str, object]
    directories: tuple[PackagedDirectory, ...]
    scripts: dict[str, bytes]
    contents: dict[str, bytes]  # path -> content of every regular file

    def files(self) -> list[PackagedFile]:
        return [f for d in self.directories for f in d.files]


# The top 4 bits of a value say what it is.
_SPECIAL, _INT, _INT32, _INT64 = 0x0, 0x1, 0x2, 0x3
_BLOBS = {0x8: (1, "<B"), 0x9: (2, "<H"), 0xA: (4, "<I")}  # type -> (length size = alignment, format)
_ARRAY, _OBJECT = 0xD, 0xE

_INFO_STRINGS = {1: "name", 2: "version", 4: "description", 5: "arch", 6: "license", 7: "origin",
                 8: "maintainer", 9: "url"}
_INFO_HASHES, _INFO_BUILD_TIME, _INFO_INSTALLED_SIZE, _INFO_DEPENDS = 3, 11, 12, 15
_SCRIPTS = ("trigger", "pre-install", "post-install", "pre-deinstall", "post-deinstall", "pre-upgrade",
            "post-upgrade")


class _Block(NamedTuple):
    kind: int
    payload: bytes


def _container(data: bytes) -> tuple[str, bytes]:
    magic = data[:4]
    if magic == b"ADB.":
        return "none", data
    if magic == b"ADBd":
        algorithm, body = 1, data[4:]
    elif magic == b"ADBc":
        if len(data) < 6:
            raise AdbFormatError("truncated compression header")
        algorithm, body = data[4], data[6:]
        if algorithm == 0:
            return "none", body
    else:
        raise AdbFormatError(f"not an apk v3 package: starts with {magic!r}")
    if algorithm != 1:
        raise AdbFormatError(f"compression algorithm {algorithm} is not deflate")
    inflater = zlib.decompressobj(-15)
    try:
        plain = inflater.decompress(body) + inflater.flush()
    except zlib.error as error:
        raise AdbFormatError(f"the deflate stream is damaged: {error}") from error
    if not inflater.eof or inflater.unused_data:
        raise AdbFormatError("the deflate stream is truncated or followed by other bytes")
    return "deflate", plain


def _blocks(stream: bytes) -> tuple[bytes, list[_Block]]:
    if len(stream) < 8 or stream[:4] != b"ADB.":
        raise AdbFormatError("no ADB. file header")
    schema, position, blocks = stream[4:8], 8, []
    while position < len(stream):
        if position + 4 > len(stream):
            raise AdbFormatError(f"truncated block header at {position}")
        (word,) = struct.unpack_from("<I", stream, position)
        kind, raw = word >> 30, word & 0x3FFFFFFF
        if kind == 3:
            raise AdbFormatError(f"extended block at {position} (none of ours needs one)")
        if raw < 4:
            raise AdbFormatError(f"block at {position} is shorter than its header")
        padded = (raw + 7) // 8 * 8
        if position + padded > len(stream):
            raise AdbFormatError(f"block at {position} runs past the end")
        if any(stream[position + raw:position + padded]):
            raise AdbFormatError(f"block at {position}: padding is not zeros")
        blocks.append(_Block(kind, stream[position + 4:position + raw]))
        position += padded
    kinds = [b.kind for b in blocks]
    if not kinds or kinds[0] != 0 or 0 in kinds[1:]:
        raise AdbFormatError("the first block, and only it, must be the ADB block")
    seen_data = False
    for kind in kinds[1:]:
        if kind == 2:
            seen_data = True
        elif kind == 1 and seen_data:
            raise AdbFormatError("a signature block after a data block")
    return schema, blocks


class _Values:
    """Typed reads of values inside one ADB block."""

    def __init__(self, adb: bytes) -> None:
        if len(adb) < 8:
            raise AdbFormatError("the ADB block has no header")
        if adb[0] != 0:
            raise AdbFormatError(f"ADB compat version {adb[0]}, not 0")
        self.adb = adb

    def root(self) -> int:
        return struct.unpack_from("<I", self.adb, 4)[0]

    def _at(self, value: int, alignment: int, size: int, what: str) -> int:
        offset = value & 0x0FFFFFFF
        if offset % alignment:
            raise AdbFormatError(f"{what} at {offset} is not aligned to {alignment}")
        if offset + size > len(self.adb):
            raise AdbFormatError(f"{what} at {offset} runs past the ADB block")
        return offset

    def integer(self, value: int, what: str) -> int | None:
        kind = value >> 28
        if value == 0:
            return None
        if kind == _INT:
            return value & 0x0FFFFFFF
        if kind == _INT32:
            return struct.unpack_from("<I", self.adb, self._at(value, 4, 4, what))[0]
        if kind == _INT64:
            return struct.unpack_from("<Q", self.adb, self._at(value, 4, 8, what))[0]
        raise AdbFormatError(f"{what}: value {value:#010x} is not an integer")

    def blob(self, value: int, what: str) -> bytes | None:
        if value == 0:
            return None
        kind = value >> 28
        if kind not in _BLOBS:
            raise AdbFormatError(f"{what}: value {value:#010x} is not a blob")
        width, fmt = _BLOBS[kind]
        offset = self._at(value, width, width, what)
        (length,) = struct.unpack_from(fmt, self.adb, offset)
        if offset + width + length > len(self.adb):
            raise AdbFormatError(f"{what}: blob at {offset} runs past the ADB block")
        return self.adb[offset + width:offset + width + length]

    def text(self, value: int, what: str) -> str | None:
        data = self.blob(value, what)
        if data is None:
            return None
        try:
            return data.decode()
        except UnicodeDecodeError as error:
            raise AdbFormatError(f"{what}: not UTF-8") from error

    def slots(self, value: int, what: str) -> dict[int, int]:
        """The non-null slots of an object or array, by number (from 1)."""
        if value == 0:
            return {}
        if value >> 28 not in (_ARRAY, _OBJECT):
            raise AdbFormatError(f"{what}: value {value:#010x} is not an object or array")
        offset = self._at(value, 4, 4, what)
        (count,) = struct.unpack_from("<I", self.adb, offset)
        if count < 1:
            raise AdbFormatError(f"{what}: object with no slot count")
        self._at(value, 4, 4 * count, what)
        values = struct.unpack_from(f"<{count}I", self.adb, offset)
        return {i: v for i, v in enumerate(values) if i and v}

    def array(self, value: int, what: str) -> list[int]:
        slots = self.slots(value, what)
        if sorted(slots) != list(range(1, len(slots) + 1)):
            raise AdbFormatError(f"{what}: an array with a hole")
        return [slots[i] for i in sorted(slots)]


def _acl(values: _Values, value: int, what: str) -> Acl:
    slots = values.slots(value, what)
    mode = values.integer(slots.get(1, 0), f"{what} mode")
    if mode is None or mode & ~0o7777:
        raise AdbFormatError(f"{what}: mode {mode!r}")
    return Acl(mode, values.text(slots.get(2, 0), f"{what} user") or "", values.text(slots.get(3, 0), f"{what} group") or "")


def _check_relative(path: str, what: str) -> None:
    parts = path.split("/")
    if path.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise AdbFormatError(f"{what}: {path!r} is not a plain relative path")


def _file(values: _Values, directory: str, value: int, what: str) -> PackagedFile:
    slots = values.slots(value, what)
    name = values.text(slots.get(1, 0), f"{what} name")
    if not name or "/" in name or name in (".", ".."):
        raise AdbFormatError(f"{what}: file name {name!r}")
    path = f"{directory}/{name}" if directory else name
    size = values.integer(slots.get(3, 0), f"{path} size") or 0
    mtime = values.integer(slots.get(4, 0), f"{path} mtime") or 0
    digest = values.blob(slots.get(5, 0), f"{path} hash")
    target = values.blob(slots.get(6, 0), f"{path} target")
    acl = _acl(values, slots.get(2, 0), f"{path} acl")
    link = None
    if target is not None:
        if len(target) < 2:
            raise AdbFormatError(f"{path}: target too short")
        (kind,) = struct.unpack_from("<H", target)
        if kind != stat.S_IFLNK:
            raise AdbFormatError(f"{path}: target of file type {kind:#o} (only symlinks are read)")
        link = target[2:].decode()
        if not link:
            raise AdbFormatError(f"{path}: empty symlink target")
    elif digest is None or len(digest) != 32:
        raise AdbFormatError(f"{path}: a regular file without a SHA-256")
    return PackagedFile(path, acl, size, mtime, digest if link is None else None, link)


def read_package(data: bytes) -> Package:
    compression, stream = _container(data)
    schema, blocks = _blocks(stream)
    if schema != b"pckg":
        raise AdbFormatError(f"schema {schema!r}, not a package (pckg)")
    values = _Values(blocks[0].payload)
    package = values.slots(values.root(), "package")

    info_slots = values.slots(package.get(1, 0), "info")
    info: dict[str, object] = {}
    for number, key in _INFO_STRINGS.items():
        if number in info_slots:
            info[key] = values.text(info_slots[number], key)
    for key in ("name", "version"):
        if not info.get(key):
            raise AdbFormatError(f"the package has no {key}")
    info["hashes"] = values.blob(info_slots.get(_INFO_HASHES, 0), "hashes")
    info["build-time"] = values.integer(info_slots.get(_INFO_BUILD_TIME, 0), "build-time")
    info["installed-size"] = values.integer(info_slots.get(_INFO_INSTALLED_SIZE, 0), "installed-size")
    depends = []
    for i, dep in enumerate(values.array(info_slots.get(_INFO_DEPENDS, 0), "depends")):
        dep_slots = values.slots(dep, f"depends[{i}]")
        depends.append(values.text(dep_slots.get(1, 0), f"depends[{i}] name") or "")
    info["depends"] = depends

    directories: list[PackagedDirectory] = []
    for i, value in enumerate(values.array(package.get(2, 0), "paths"), start=1):
        slots = values.slots(value, f"paths[{i}]")
        name = values.text(slots.get(1, 0), f"paths[{i}] name") or ""
        if name:
            _check_relative(name, f"paths[{i}]")
        files = tuple(_file(values, name, v, f"paths[{i}] files[{j}]")
                      for j, v in enumerate(values.array(slots.get(3, 0), f"paths[{i}] files"), start=1))
        names = [f.path.rsplit("/", 1)[-1].encode() for f in files]
        if names != sorted(set(names)):
            raise AdbFormatError(f"{name or '/'}: files not sorted by name, or listed twice")
        directories.append(PackagedDirectory(name, _acl(values, slots.get(2, 0), f"{name or '/'} acl"), files))
    listed = [d.path.encode() for d in directories]
    if listed != sorted(set(listed)):
        raise AdbFormatError("directories not sorted by name, or listed twice")
    known = {""}
    for directory in directories:
        if directory.path and directory.path.rpartition("/")[0] not in known:
            raise AdbFormatError(f"{directory.path}: its parent directory is not listed before it")
        known.add(directory.path)

    scripts = {}
    for number, blob in values.slots(package.get(3, 0), "scripts").items():
        if number > len(_SCRIPTS):
            raise AdbFormatError(f"unknown script slot {number}")
        scripts[_SCRIPTS[number - 1]] = values.blob(blob, _SCRIPTS[number - 1]) or b""

    expected = [(d, f, file) for d, directory in enumerate(directories, start=1)
                for f, file in enumerate(directory.files, start=1) if file.link_target is None and file.size]
    data_blocks = [b.payload for b in blocks if b.kind == 2]
    if len(data_blocks) != len(expected):
        raise AdbFormatError(f"{len(data_blocks)} data blocks for {len(expected)} non-empty files")
    contents = {}
    for payload, (d, f, file) in zip(data_blocks, expected):
        if len(payload) < 8 or struct.unpack_from("<II", payload) != (d, f):
            raise AdbFormatError(f"the data block for {file.path} is out of order or mislabelled")
        content = payload[8:]
        if len(content) != file.size or hashlib.sha256(content).digest() != file.sha256:
            raise AdbFormatError(f"{file.path}: data does not match its size or SHA-256")
        contents[file.path] = content
    for directory in directories:
        for file in directory.files:
            if file.link_target is None and not file.size:
                if file.sha256 != hashlib.sha256(b"").digest():
                    raise AdbFormatError(f"{file.path}: empty file with another file's SHA-256")
                contents[file.path] = b""
    return Package(schema, compression, info, tuple(directories), scripts, contents)
