"""No tracker numbers in the repository: code, tests, docs and build files name the rule they
follow (or link the docs section), never a ticket of a tracker that does not ship with a clone.

Every file git tracks (or would: new and not ignored) is read as text, whatever its kind. The
only files let through are migrations already shipped: their bytes are checksummed into every
database they were applied to, and an edited file makes ``verify_applied`` refuse those
databases (docs/storage.md), so their comments stay as written.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The word issue (or issues, any case), a space and a number, with or without ``#``: a reference
#: to a tracker's ticket.
TRACKER_REF = re.compile(r"\bissues? #?\d+", re.IGNORECASE)

#: Shipped migrations (local_migrations/, checksummed once applied) that predate this rule.
FROZEN = frozenset({
    "local_migrations/0007_schedules.sql",
    "local_migrations/0008_history_indexes.sql",
    "local_migrations/0009_runs_cover_attempts_and_leases.sql",
})


def _tracked_files() -> list[str]:
    try:
        # Tracked files, and new ones git does not ignore (so a reference fails before its commit).
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"not a git checkout ({error})")
    return [name for name in out.decode("utf-8", "surrogateescape").split("\0") if name]


def _references(text: str) -> list[tuple[int, str]]:
    return [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in TRACKER_REF.finditer(text)]


def test_the_pattern_finds_tracker_numbers_and_nothing_else() -> None:
    word = "is" + "sue"  # spelt apart, so this file holds no reference itself
    refs = [f"{word} 9", f"{word.title()} 13", f"{word}s 9", f"{word} #12"]
    text = f"a ({refs[0]})\n{refs[1]}, fewer writes\n{refs[2]} and 10\nsee {refs[3]}\nre-{word}s its cancel\n{word}d 3\n"
    assert _references(text) == [(1, refs[0]), (2, refs[1]), (3, refs[2]), (4, refs[3])]
    assert _references(f"t{word} 5, re{word} 7") == []


def test_the_frozen_files_are_shipped_migrations() -> None:
    tracked = set(_tracked_files())
    for name in FROZEN:
        assert name.startswith("local_migrations/") and name.endswith(".sql"), name
        assert name in tracked, f"{name} is no longer tracked: drop it from FROZEN"


def test_no_tracked_file_refers_to_a_tracker_number() -> None:
    found = []
    for name in _tracked_files():
        path = ROOT / name
        if name in FROZEN or not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if b"\0" in data:  # binary
            continue
        found += [f"{name}:{line}: {ref}" for line, ref in _references(data.decode("utf-8", "replace"))]
    assert not found, "name the rule (or link docs/*.md) instead of a tracker number:\n" + "\n".join(found)
