"""Write an apk v3 package, the format of apk-tools 3 (OpenWrt 25.12's package manager), from a tree.

No registry ships apk-tools 3, whose ``apk mkpkg`` makes these packages, so this writes the same
bytes ``apk mkpkg`` writes for what our OpenWrt package holds: directories, regular files and
symlinks, all owned by root, and the package's scripts. tests/artifact/test_apk_v3.py checks that
claim on every run against a package made by apk-tools' own mkpkg (tests/artifact/fixtures/), and
reads every package back with a reader written separately from this file (tests/support/adb_reader.py).
docs/building.md says how it was checked against the real ``apk`` as well.

The format (apk-tools' apk-v3(5) and src/adb.h, apk-tools 3.0):

- the file is ``ADBd`` and then a raw deflate stream (no zlib or gzip header; mkpkg's default
  compression) of: the file header ``ADB.`` and the schema ``pckg``; one ADB block (the metadata);
  one DATA block per non-empty regular file, in the order the metadata lists them;
- a block is a little-endian u32 (2 bits of type: 0 ADB, 2 DATA; 30 bits of size, the u32 itself
  included), its payload, and zeros up to a multiple of 8 bytes;
- the ADB block starts with an 8-byte header (compat version 0, version 0, 2 reserved bytes, the
  root value); then the values the root refers to. A value is a u32: 4 bits of type and 28 of
  either the value itself (small integers, null) or the offset of its data in the block: a blob
  (u8, u16 or u32 length first, by length), an integer too large for 28 bits (u32 or u64), or an
  object or array (a u32 count of slots, the count itself included, then one value per slot);
- mkpkg writes each piece of data once: a blob, object or array equal to one already written at a
  suitable alignment is referred to again. Arrays are sorted before they are written, so that
  readers may search them; objects drop their trailing null slots.

The metadata's schema (apk-tools' src/apk_adb.c): a package is {1 info, 2 paths, 3 scripts}; info
is {1 name, 2 version, 3 hashes (a unique id: the first 20 bytes of the SHA-256 of the ADB block
written with zeros there), 4 description, 5 arch, 6 license, 7 origin, 8 maintainer, 9 url,
12 installed-size, 15 depends}; paths is an array of directories {1 name (none for the root),
2 acl, 3 files}; a file is {1 name, 2 acl, 3 size, 4 mtime, 5 hash (SHA-256), 6 target (u16 file
type, then a symlink's target)}; an acl is {1 mode, 2 user, 3 group}; scripts is {1 trigger,
2 pre-install, 3 post-install, 4 pre-deinstall, 5 post-deinstall, 6 pre-upgrade, 7 post-upgrade}.
A DATA block is the u32 index of the directory and of the file (both from 1), then the content.

Usage, with ``apk mkpkg``'s own arguments (and, as mkpkg, every mtime set to $SOURCE_DATE_EPOCH
when it is set):
    apkv3.py --files DIR --output FILE --info name:N --info version:V [--info KEY:VALUE]...
             [--script TYPE:FILE]...
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import stat
import struct
import sys
import zlib
from pathlib import Path

# Value types: the top 4 bits of a value.
NULL = 0x00000000
INT = 0x10000000
INT_32 = 0x20000000
INT_64 = 0x30000000
BLOB_8 = 0x80000000
BLOB_16 = 0x90000000
BLOB_32 = 0xA0000000
OBJECT = 0xE0000000
VALUE_MASK = 0x0FFFFFFF

BLOCK_ADB = 0
BLOCK_DATA = 2
BLOCK_ALIGNMENT = 8
MAX_BLOCK = 0x3FFFFFFF - 4  # larger blocks need the extended header, which nothing of ours needs

SCHEMA_PACKAGE = b"pckg"
UNIQUE_ID_LENGTH = 20  # mkpkg's unique id: as long as a SHA-1, cut from a SHA-256

# Field numbers (apk-tools' src/apk_adb.h).
INFO_FIELDS = {
    "name": 1, "version": 2, "description": 4, "arch": 5, "license": 6, "origin": 7,
    "maintainer": 8, "url": 9, "depends": 15,
}
INFO_HASHES, INFO_INSTALLED_SIZE, INFO_MAX = 3, 12, 22
SCRIPT_FIELDS = {
    "trigger": 1, "pre-install": 2, "post-install": 3, "pre-deinstall": 4, "post-deinstall": 5,
    "pre-upgrade": 6, "post-upgrade": 7,
}

# apk's rules for a package name (alphanumeric first) and a version (apk-tools' version.c).
NAME = re.compile(rb"[A-Za-z0-9][A-Za-z0-9+_.-]*")
VERSION = re.compile(rb"[0-9]+(\.[0-9]+)*[a-z]?(_(alpha|beta|pre|rc|cvs|svn|git|hg|p)[0-9]*)*(-r[0-9]+)?")


class PackageError(Exception):
    """The tree or the package's fields cannot be written as an apk v3 package."""


class AdbWriter:
    """The ADB block being written: values appended at their alignment, equal data written once."""

    def __init__(self) -> None:
        self.buffer = bytearray(8)  # the header; its root value is set by set_root
        self._written: dict[bytes, int] = {}

    def _append(self, data: bytes, alignment: int, shared: bool = True) -> int:
        if shared:
            offset = self._written.get(data)
            if offset is not None and offset % alignment == 0:
                return offset
        self.buffer += bytes(-len(self.buffer) % alignment)
        offset = len(self.buffer)
        if offset > VALUE_MASK:
            raise PackageError("the package's metadata is larger than a value can point into")
        self.buffer += data
        if shared:
            self._written[data] = offset
        return offset

    def blob(self, data: bytes, shared: bool = True) -> int:
        if not data:
            return NULL
        if len(data) > 0xFFFF:
            kind, header, alignment = BLOB_32, struct.pack("<I", len(data)), 4
        elif len(data) > 0xFF:
            kind, header, alignment = BLOB_16, struct.pack("<H", len(data)), 2
        else:
            kind, header, alignment = BLOB_8, struct.pack("<B", len(data)), 1
        return kind | self._append(header + data, alignment, shared)

    def integer(self, value: int) -> int:
        if value < 0:
            raise PackageError(f"{value}: the format has no negative integers")
        if value >= 1 << 32:
            return INT_64 | self._append(struct.pack("<Q", value), 4)
        if value > VALUE_MASK:
            return INT_32 | self._append(struct.pack("<I", value), 4)
        return INT | value

    def object(self, slots: list[int]) -> int:
        """An object (or array: mkpkg writes both with the object type) of ``slots``, numbered from 1."""
        count = len(slots)
        while count and slots[count - 1] == NULL:
            count -= 1
        if not count:
            return NULL
        return OBJECT | self._append(struct.pack(f"<{count + 1}I", count + 1, *slots[:count]), 4)

    def set_root(self, value: int) -> None:
        struct.pack_into("<I", self.buffer, 4, value)


def _sorted_names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory), key=os.fsencode)


def _raise(error: OSError) -> None:
    raise error


def _subdirectories(root: Path) -> list[str]:
    found = []
    for current, dirs, _files in os.walk(root, onerror=_raise):  # an unreadable directory stops the package
        for name in dirs:
            path = Path(current, name)
            if path.is_symlink():
                continue
            found.append(path.relative_to(root).as_posix())
    return sorted(found, key=os.fsencode)


def _sha256(path: Path) -> bytes:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.digest()


class _Tree:
    """The files of the package, written into the ADB block as mkpkg walks them."""

    def __init__(self, writer: AdbWriter, root: Path, mtime: int | None) -> None:
        self.writer, self.root, self.mtime = writer, root, mtime
        self.installed_size = 0
        self.directories: list[tuple[bytes, int, list[tuple[bytes, Path, int]]]] = []

    def _acl(self, mode: int) -> int:
        owner = self.writer.blob(b"root")
        group = self.writer.blob(b"root")
        return self.writer.object([self.writer.integer(mode), owner, group])

    def _file(self, path: Path) -> tuple[int, int]:
        """The file's value and the size of its data block's content (0: none)."""
        info = path.lstat()
        target = b""
        if stat.S_ISREG(info.st_mode):
            if info.st_nlink > 1:
                raise PackageError(f"{path}: hard links are not supported")
            self.installed_size += info.st_size
        elif stat.S_ISLNK(info.st_mode):
            target = struct.pack("<H", stat.S_IFLNK) + os.fsencode(os.readlink(path))
        else:
            raise PackageError(f"{path}: only regular files, directories and symlinks can be packaged")
        w = self.writer
        name = w.blob(os.fsencode(path.name))
        digest = w.blob(_sha256(path)) if not target else NULL
        link = w.blob(target)
        mtime = w.integer(self.mtime if self.mtime is not None else int(info.st_mtime))
        size = w.integer(info.st_size)
        acl = self._acl(stat.S_IMODE(info.st_mode))
        value = w.object([name, acl, size, mtime, digest, link])
        return value, (info.st_size if not target else 0)

    def add_directory(self, relative: str | None) -> None:
        directory = self.root / relative if relative else self.root
        files = []
        for entry in _sorted_names(directory):
            path = directory / entry
            if path.is_dir() and not path.is_symlink():
                continue
            value, data_size = self._file(path)
            files.append((os.fsencode(entry), path, value, data_size))
        files.sort(key=lambda item: item[0])
        w = self.writer
        name = w.blob(os.fsencode(relative) if relative else b"")
        acl = self._acl(stat.S_IMODE(directory.lstat().st_mode))
        listing = w.object([value for _, _, value, _ in files])
        value = w.object([name, acl, listing])
        self.directories.append((os.fsencode(relative) if relative else b"", value,
                                 [(entry, path, size) for entry, path, _, size in files]))


def _block(kind: int, payload_size: int) -> tuple[bytes, bytes]:
    """A block's header and the padding after its payload."""
    if payload_size > MAX_BLOCK:
        raise PackageError(f"a block of {payload_size} bytes needs the extended block header")
    raw = 4 + payload_size
    return struct.pack("<I", (kind << 30) | raw), bytes(-raw % BLOCK_ALIGNMENT)


def _dependencies(writer: AdbWriter, text: str) -> int:
    entries = []
    for name in text.split():
        if not NAME.fullmatch(name.encode()):
            raise PackageError(f"depends: {name!r}: only plain package names are supported")
        entries.append((name.encode(), writer.object([writer.blob(name.encode())])))
    entries = sorted(dict(entries).items())
    return writer.object([value for _, value in entries])


def build(files: Path, info: dict[str, str], scripts: dict[str, bytes], mtime: int | None) -> tuple[bytes, list]:
    """The ADB block and, in order, the DATA blocks' (directory, file, path, size) of the package."""
    for key in ("name", "version"):
        if key not in info:
            raise PackageError(f"required info field '{key}' not provided")
    if not NAME.fullmatch(info["name"].encode()):
        raise PackageError(f"name: {info['name']!r} is not a valid package name")
    if not VERSION.fullmatch(info["version"].encode()):
        raise PackageError(f"version: {info['version']!r} is not a valid apk version")
    w = AdbWriter()
    fields = [NULL] * (INFO_MAX - 1)
    for key, index in sorted(INFO_FIELDS.items(), key=lambda item: item[1]):
        if key in info:
            fields[index - 1] = _dependencies(w, info[key]) if key == "depends" else w.blob(info[key].encode())

    tree = _Tree(w, files, mtime)
    tree.add_directory(None)
    for relative in _subdirectories(files):
        tree.add_directory(relative)
    fields[INFO_INSTALLED_SIZE - 1] = w.integer(tree.installed_size or 1)
    unique_id = fields[INFO_HASHES - 1] = w.blob(bytes(UNIQUE_ID_LENGTH), shared=False)
    package = [w.object(fields)]
    directories = sorted(tree.directories, key=lambda item: item[0])
    package.append(w.object([value for _, value, _ in directories]))
    if scripts:
        slots = [NULL] * len(SCRIPT_FIELDS)
        for key, index in sorted(SCRIPT_FIELDS.items(), key=lambda item: item[1]):
            if key in scripts:
                slots[index - 1] = w.blob(scripts[key])
        package.append(w.object(slots))
    w.set_root(w.object(package))
    id_offset = (unique_id & VALUE_MASK) + 1
    w.buffer[id_offset:id_offset + UNIQUE_ID_LENGTH] = hashlib.sha256(w.buffer).digest()[:UNIQUE_ID_LENGTH]

    data = []
    for dir_index, (_, _, entries) in enumerate(directories, start=1):
        for file_index, (_, path, size) in enumerate(entries, start=1):
            if size:
                data.append((dir_index, file_index, path, size))
    return bytes(w.buffer), data


def write(output: Path, files: Path, info: dict[str, str], scripts: dict[str, bytes], mtime: int | None) -> int:
    """Write the package to ``output`` (through a temporary file renamed into place); its size."""
    adb, data = build(files, info, scripts, mtime)
    temp = output.with_name(f".{output.name}.tmp")
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY)
    try:
        with open(temp, "wb") as out:
            out.write(b"ADBd")
            header, padding = _block(BLOCK_ADB, len(adb))
            out.write(compressor.compress(b"ADB." + SCHEMA_PACKAGE + header + adb + padding))
            for dir_index, file_index, path, size in data:
                header, padding = _block(BLOCK_DATA, 8 + size)
                out.write(compressor.compress(header + struct.pack("<II", dir_index, file_index)))
                with open(path, "rb") as source:
                    content = source.read()
                if len(content) != size:
                    raise PackageError(f"{path} changed while it was being packaged")
                out.write(compressor.compress(content + padding))
            out.write(compressor.flush())
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, output)
    finally:
        temp.unlink(missing_ok=True)
    return output.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write an apk v3 package (as apk mkpkg does).")
    parser.add_argument("--files", "-F", type=Path, required=True, help="the tree to package")
    parser.add_argument("--output", "-o", type=Path, required=True)
    parser.add_argument("--info", "-I", action="append", default=[], metavar="KEY:VALUE")
    parser.add_argument("--script", "-s", action="append", default=[], metavar="TYPE:FILE")
    args = parser.parse_args(argv)
    try:
        info = {}
        for item in args.info:
            key, sep, value = item.partition(":")
            if not sep or key not in INFO_FIELDS:
                raise PackageError(f"invalid info field: {item!r}")
            info[key] = value
        scripts = {}
        for item in args.script:
            key, sep, path = item.partition(":")
            if not sep or key not in SCRIPT_FIELDS:
                raise PackageError(f"invalid script type: {item!r}")
            scripts[key] = Path(path).read_bytes()
        epoch = os.environ.get("SOURCE_DATE_EPOCH")
        size = write(args.output, args.files, info, scripts, int(epoch) if epoch else None)
    except (PackageError, OSError, ValueError) as error:
        sys.stderr.write(f"Error: {error}\n")
        return 1
    print(f"{args.output}: {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
