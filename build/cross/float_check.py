"""Float sanity of a target's CPython (make cross-test): the artifact's own libpython and musl.

On mipsel soft-float, code and C library built by two toolchains with different float ABIs once
returned garbage from modf/round/sqrt (the service then failed in datetime with "microsecond must
be in 0..999999"). Each check compares with a value computed exactly (integers, decimal strings),
not with the same library that could be wrong. Exit 1 naming every failed check.
"""

import datetime
import math
import struct
import sys
import time

failures = []
checks = []


def check(name, got, want):
    checks.append(name)
    if got != want:
        failures.append(f"{name}: got {got!r}, want {want!r}")


check("modf", math.modf(2.75), (0.75, 2.0))
check("modf negative", math.modf(-1.5), (-0.5, -1.0))
check("round half even", (round(2.5), round(3.5), round(-0.5)), (2, 4, 0))
check("round ndigits", round(1.23456, 3), 1.235)
check("sqrt", math.sqrt(2.0), 1.4142135623730951)
check("sqrt exact", math.sqrt(1e10), 100000.0)
check("floor/ceil", (math.floor(-2.5), math.ceil(-2.5)), (-3, -2))
check("fmod", math.fmod(7.5, 2.0), 1.5)
check("frexp", math.frexp(48.0), (0.75, 6))
check("ldexp", math.ldexp(0.75, 6), 48.0)
check("exp/log", (math.exp(0.0), math.log(math.e)), (1.0, 1.0))
check("pow", 2.0 ** -3, 0.125)
check("division", 1.0 / 3.0, float.fromhex("0x1.5555555555555p-2"))
check("int to float", float(2**53 + 1), 9007199254740992.0)
check("float to int", int(1e15 + 0.5), 1000000000000000)
check("repr round-trip", repr(0.1 + 0.2), "0.30000000000000004")
check("parse", float("1796098950.276"), 1796098950276 / 1000)
check("IEEE bits", struct.pack(">d", 1.5).hex(), "3ff8000000000000")
check("fsum", math.fsum([0.1] * 10), 1.0)
# What the service does with every timestamp: milliseconds to datetime and back.
ms = 1796098950276
stamp = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
check("datetime from ms", (stamp.second, stamp.microsecond), (30, 276000))
check("datetime to ms", round(stamp.timestamp() * 1000), ms)
now = time.time()
check("time.time sane", 1.5e9 < now < 4.2e9 and math.modf(now)[0] < 1.0, True)

if failures:
    print("float check FAILED:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"float check passed: {len(checks)} checks on {sys.implementation.cache_tag} ({sys.platform})")
