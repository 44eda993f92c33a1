"""Every stdlib module the build leaves out (build/excludes.toml) is justified here.

One source-tree run of the whole runtime (every edge_runtime module, every module its source
imports even inside functions, ``--help``, migrate, check, and the stdlib paths with optional C
helpers) with all excluded modules blocked. Then, per entry of excludes.toml:

- ``never``: the runtime did not even try to import it;
- ``fallback``: it tried, and the stdlib's fallback gave the same result as with the module present;
- ``frozen``: the module the runtime uses is the interpreter's frozen copy, not the archive's.

The built-binary smoke test (test_built_binary.py) then runs the real artifact without them.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import hmac
from pathlib import Path

import pytest

from tests.support.artifact_layout import run_probe


@pytest.fixture(scope="module")
def blocked_run(exclusions, tmp_path_factory) -> dict:
    entries = exclusions.load()
    blocked = sorted({name for e in entries if e.kind != "frozen" for name in e.module_names()})
    frozen = sorted({name for e in entries if e.kind == "frozen" for name in e.module_names()})
    tmp_path = tmp_path_factory.mktemp("blocked")
    options = {"blocked": blocked, "frozen": frozen, "db": str(tmp_path / "edge.db"), "fallbacks": True}
    return run_probe(options, tmp_path)


def _attempted(run: dict, module: str) -> list[str]:
    return [name for name in run["attempts"] if name == module or name.startswith(module + ".")]


def test_the_probe_ran_the_whole_runtime_with_the_exclusions_blocked(blocked_run, exclusions) -> None:
    steps = blocked_run["steps"]
    assert steps["import_errors"] == {}
    assert steps["mentioned_import_errors"] == {}
    assert "edge_runtime.cli.main" in steps["edge_runtime_modules"]
    assert steps["help"]["code"] == 0 and "usage: edge-runtime" in steps["help"]["stdout"]
    assert steps["migrate"]["code"] == 0, steps["migrate"]["stderr"]
    assert steps["check"]["code"] == 0, steps["check"]["stdout"] + steps["check"]["stderr"]
    assert blocked_run["flags"] == {"optimize": 2, "utf8_mode": 1}
    # A blocked module the probe's own interpreter had loaded before blocking proves nothing.
    excluded = {name for e in exclusions.load() if e.kind != "frozen" for name in e.module_names()}
    assert excluded.isdisjoint(blocked_run["preloaded"])


def test_every_entry_of_excludes_toml_is_well_formed_and_explained(exclusions) -> None:
    entries = exclusions.load()
    assert entries, "excludes.toml lists nothing"
    for entry in entries:
        assert entry.kind in exclusions.KINDS
        assert len(entry.why.strip()) >= 10, f"{entry.module}: say why it can go"
        assert entry.module_names(), f"{entry.module}: names no module"
    modules = [e.module for e in entries]
    assert len(modules) == len(set(modules)), "an entry is listed twice"


def _never_ids(exclusions_module) -> list[str]:
    return [e.module for e in exclusions_module.load() if e.kind == "never"]


def test_never_imported_modules_are_never_attempted(blocked_run, exclusions) -> None:
    attempted = {
        entry.module: sorted({a for name in entry.module_names() for a in _attempted(blocked_run, name)})
        for entry in exclusions.load()
        if entry.kind == "never"
    }
    offenders = {module: names for module, names in attempted.items() if names}
    assert offenders == {}, (
        "the runtime imports modules build/excludes.toml leaves out of the executable; "
        f"stop importing them or move the entry out of excludes.toml: {offenders}"
    )


def test_fallback_modules_have_a_working_fallback(blocked_run, exclusions) -> None:
    fallback_modules = [e.module for e in exclusions.load() if e.kind == "fallback"]
    assert fallback_modules  # the file has fallback entries; each is covered by one value below
    values = blocked_run["fallbacks"]
    # The same computations with every module present, in this (unblocked) process.
    assert values["sha256"] == hashlib.sha256(b"edge-runtime").hexdigest()  # _hashlib -> _sha256
    assert values["md5"] == hashlib.md5(b"edge-runtime").hexdigest()
    assert values["blake2b"] == hashlib.blake2b(b"edge-runtime", digest_size=8).hexdigest()
    assert values["hmac"] == hmac.new(b"key", b"edge-runtime", "sha256").hexdigest()
    assert values["token_hex_len"] == 32
    assert values["uuid4_version"] == 4  # _uuid
    assert values["heapq"] == heapq.nsmallest(2, [5, 1, 4, 2])  # _heapq
    assert values["bisect"] == bisect.bisect([1, 2, 4], 3)  # _bisect
    assert "ResourceWarning: probe" in values["warning"]  # tracemalloc
    assert values["shutil_which_sh"] is True  # bz2, lzma (shutil imports them guarded)
    assert values["toml"] == {"slots": 2, "name": "x"}
    assert values["decimal"] == [1, 1, 0]  # _decimal -> _pydecimal, through msgspec
    from tests.support.runtime_probe import _h11_exchange  # the same exchange here, with the real dataclasses

    assert values["h11"] == _h11_exchange()  # dataclasses -> edge_runtime.panel.h11_loader's stand-in
    assert values["tar_gz"] == [["data/scripts/a.js", True, "1;\n"]]  # grp: tarfile reads without it


def test_each_fallback_entry_was_exercised(blocked_run, exclusions) -> None:
    # A "fallback" entry whose import the probe never triggered would be an unproved claim.
    unexercised = [
        entry.module
        for entry in exclusions.load()
        if entry.kind == "fallback" and not any(_attempted(blocked_run, name) for name in entry.module_names())
    ]
    assert unexercised == []


def test_frozen_modules_come_from_the_interpreter(blocked_run) -> None:
    origins = blocked_run["frozen_origins"]
    assert origins and set(origins.values()) == {"frozen"}, origins


def test_wildcard_exclusion_keeps_what_utf8_mode_needs(exclusions) -> None:
    (encodings,) = [e for e in exclusions.load() if e.module == "encodings.*"]
    excluded = set(encodings.module_names())
    assert {"encodings.utf_8", "encodings.aliases", "encodings.ascii"}.isdisjoint(excluded)
    assert {"encodings.cp1252", "encodings.idna", "encodings.gb18030"} <= excluded


def test_a_keep_name_that_does_not_exist_is_refused(exclusions, tmp_path: Path) -> None:
    bad = tmp_path / "excludes.toml"
    bad.write_text('[[exclude]]\nmodule = "encodings.*"\nkeep = ["utf_9"]\nkind = "never"\nwhy = "a test entry, long enough"\n')
    (entry,) = exclusions.load(bad)
    with pytest.raises(exclusions.ExclusionsFileError, match=r"utf_9"):
        entry.module_names()
