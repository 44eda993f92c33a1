"""Which Debian version the router build's fetch may take for a pin (build/cross/debian_pins.py).

A Debian point release removes the pinned revision from the archive; the build may then take a
newer revision of the same upstream version, never another upstream version, and nothing but the
pin under EDGE_CROSS_EXACT_INPUTS=1. Pure functions: no network, no apt.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "build" / "cross" / "debian_pins.py"
_spec = importlib.util.spec_from_file_location("debian_pins", SCRIPT)
pins = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pins)


@pytest.mark.parametrize(("left", "right", "expected"), [
    ("3.11.2-6+deb12u8", "3.11.2-6+deb12u9", -1),
    ("3.11.2-6+deb12u10", "3.11.2-6+deb12u9", 1),       # numerically, not as text
    ("1:1.35.0-4+deb12u1+b1", "1:1.35.0-4+b3", 1),      # 'd' after 'b'
    ("1:1.35.0-4+deb12u1+b1", "1:1.35.0-4+deb12u1", 1),  # a binNMU sorts after its source upload
    ("1.0~rc1-1", "1.0-1", -1),                          # '~' sorts before the end
    ("1.0-1", "1:0.9-1", -1),                            # the epoch first
    ("1.2.13.dfsg-1", "1.2.13.dfsg-1", 0),
    ("1.2.13.dfsg-1", "1.2.13-1", 1),                    # a letter after the end of the other
    ("1.0a-1", "1.0+-1", -1),                            # letters before other characters
    ("1.2.3-1", "1.2.3-1.1", -1),
    ("007-1", "7-1", 0),                                  # leading zeros do not count
])
def test_compare_orders_versions_as_dpkg_does(left, right, expected) -> None:
    assert pins.compare(left, right) == expected
    assert pins.compare(right, left) == -expected


def test_the_pin_is_taken_while_the_archive_has_it() -> None:
    assert pins.choose("3.11.2-6+deb12u8", ["3.11.2-6+deb12u9", "3.11.2-6+deb12u8"], exact=False) == "3.11.2-6+deb12u8"
    assert pins.choose("3.11.2-6+deb12u8", ["3.11.2-6+deb12u8"], exact=True) == "3.11.2-6+deb12u8"


def test_after_a_point_release_the_newest_newer_revision_of_the_same_upstream_is_taken() -> None:
    available = ["3.11.2-6+deb12u9", "3.11.2-6+deb12u10", "3.11.4-1", "3.11.2-5"]
    assert pins.choose("3.11.2-6+deb12u8", available, exact=False) == "3.11.2-6+deb12u10"
    assert pins.choose("1:1.35.0-4+deb12u1+b1", ["1:1.35.0-4+deb12u2"], exact=False) == "1:1.35.0-4+deb12u2"
    assert pins.choose("1:1.2.13.dfsg-1", ["1:1.2.13.dfsg-1+deb12u1"], exact=False) == "1:1.2.13.dfsg-1+deb12u1"


@pytest.mark.parametrize("available", [
    ["3.11.4-1"],                 # another upstream version
    ["3.11.2.1-1"],               # an upstream version that merely starts the same
    ["1:3.11.2-6+deb12u9"],       # another epoch
    ["3.11.2-6+deb12u7", "3.11.2-5"],  # only older revisions
    [],
])
def test_nothing_but_a_newer_revision_of_the_same_upstream_may_stand_in(available) -> None:
    with pytest.raises(pins.PinRefused, match="update build/cross/inputs.lock"):
        pins.choose("3.11.2-6+deb12u8", available, exact=False)


def test_exact_inputs_refuse_any_other_version() -> None:
    with pytest.raises(pins.PinRefused, match="EDGE_CROSS_EXACT_INPUTS=1"):
        pins.choose("3.11.2-6+deb12u8", ["3.11.2-6+deb12u9"], exact=True)


def test_the_command_line_fetch_sh_uses() -> None:
    def choose(*args: str, stdin: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(SCRIPT), "choose", *args], input=stdin, capture_output=True,
                              text=True, timeout=60, check=False)

    taken = choose("1:1.35.0-4+deb12u1+b1", stdin="1:1.35.0-4+deb12u2\n\n")
    assert (taken.returncode, taken.stdout) == (0, "1:1.35.0-4+deb12u2\n")
    refused = choose("1:1.35.0-4+deb12u1+b1", "--exact", stdin="1:1.35.0-4+deb12u2\n")
    assert refused.returncode == 1 and refused.stdout == ""
    assert "EDGE_CROSS_EXACT_INPUTS=1" in refused.stderr
