"""Which Debian version of a pinned package build/cross/fetch.sh may take (stdlib only: it runs on
the build Python, /usr/bin/python3.11, before any venv exists).

deb.debian.org keeps only the newest revision of a package in a release: a point release (say
python3.11 3.11.2-6+deb12u8 -> +deb12u9) removes the pinned one, and a build pinned to it would
fail on a fresh machine. The rule, in one place:

- the pinned version when the archive still has it;
- otherwise, unless exact inputs are demanded (``EDGE_CROSS_EXACT_INPUTS=1``), the newest *newer
  Debian revision of the same upstream version* (same epoch, same upstream part). fetch.sh then
  checks what that revision brings: a source package's orig tarball (the upstream source, all the
  build uses of it) must have the pinned SHA-256; a binary package is taken as apt verified it
  through Debian's signed Release -> Packages chain, and its own SHA-256 is recorded;
- nothing else: another upstream version, another epoch or an older revision is refused.

Usage (fetch.sh): ``debian_pins.py choose PINNED [--exact]`` with the archive's versions on
standard input, one a line; prints the version to take, or exits 1 saying why none may be taken.
"""

from __future__ import annotations

import sys
from typing import NamedTuple


class PinRefused(Exception):
    """No version the archive has may stand in for the pin."""


class DebianVersion(NamedTuple):
    epoch: int
    upstream: str
    revision: str


def parse(version: str) -> DebianVersion:
    """Split ``[epoch:]upstream[-revision]`` the way dpkg does (the revision after the last '-')."""
    epoch, colon, rest = version.partition(":")
    if not colon:
        epoch, rest = "0", version
    if not epoch.isdigit() or not rest:
        raise ValueError(f"not a Debian version: {version!r}")
    upstream, dash, revision = rest.rpartition("-")
    if not dash:
        upstream, revision = rest, ""
    return DebianVersion(int(epoch), upstream, revision)


def _order(char: str) -> int:
    """dpkg's weight of a non-digit: '~' sorts before everything, even the end; letters before the rest."""
    if char == "":
        return 0
    if char == "~":
        return -1
    if char.isascii() and char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(left: str, right: str) -> int:
    """dpkg's verrevcmp: alternating runs of non-digits (by _order) and digits (numerically)."""
    i = j = 0
    digits = "0123456789"
    while i < len(left) or j < len(right):
        while (i < len(left) and left[i] not in digits) or (j < len(right) and right[j] not in digits):
            a = _order(left[i]) if i < len(left) and left[i] not in digits else 0
            b = _order(right[j]) if j < len(right) and right[j] not in digits else 0
            if a != b:
                return -1 if a < b else 1
            i += 1
            j += 1
        start_i, start_j = i, j
        while i < len(left) and left[i] in digits:
            i += 1
        while j < len(right) and right[j] in digits:
            j += 1
        a_num, b_num = int(left[start_i:i] or "0"), int(right[start_j:j] or "0")
        if a_num != b_num:
            return -1 if a_num < b_num else 1
    return 0


def compare(left: str, right: str) -> int:
    """-1, 0 or 1 as ``left`` sorts before, with or after ``right`` (dpkg --compare-versions)."""
    a, b = parse(left), parse(right)
    if a.epoch != b.epoch:
        return -1 if a.epoch < b.epoch else 1
    return _compare_part(a.upstream, b.upstream) or _compare_part(a.revision, b.revision)


def choose(pinned: str, available: list[str], exact: bool) -> str:
    """The version to download for ``pinned`` among the archive's ``available`` ones (see the module doc)."""
    if pinned in available:
        return pinned
    offered = ", ".join(available) or "none"
    if exact:
        raise PinRefused(f"{pinned} is no longer in the archive (it has: {offered}) and "
                         "EDGE_CROSS_EXACT_INPUTS=1 refuses any other version")
    pin = parse(pinned)
    newer = [v for v in available
             if parse(v)[:2] == pin[:2] and compare(v, pinned) > 0]
    if not newer:
        raise PinRefused(f"{pinned} is no longer in the archive and it has no newer Debian revision of "
                         f"upstream {pin.upstream} (it has: {offered}): update build/cross/inputs.lock")
    best = newer[0]
    for version in newer[1:]:
        if compare(version, best) > 0:
            best = version
    return best


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "choose" or argv[2:] not in ([], ["--exact"]):
        sys.stderr.write("usage: debian_pins.py choose PINNED [--exact] < versions\n")
        return 2
    available = [line.strip() for line in sys.stdin if line.strip()]
    try:
        print(choose(argv[1], available, exact=argv[2:] == ["--exact"]))
    except PinRefused as refused:
        sys.stderr.write(f"Error: {refused}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
