"""Env entries on every store (docs/environment.md): integer ids the store assigns and never
gives again, the list order (pinned first, then position, then id), what a task gets (each name
once, its enabled entries joined with ``&`` in list order), every bulk command in one transaction
that changes nothing when one id is missing, the limits (a join of exactly MAX_ARG_STRLEN bytes
fits, one byte more is refused; all entries together; their number), a secret's value never
listed but searched, and what shown output masks."""

from __future__ import annotations

from typing import Any

import pytest

from edge_runtime.contract.env_entries import (
    MAX_ENTRIES,
    MAX_ENTRIES_BYTES,
    MAX_ENV_STRING_BYTES,
    MAX_LABELS,
    MAX_REMARKS_LENGTH,
    NewEnvEntry,
)
from edge_runtime.contract.environment import (
    MAX_VARIABLES,
    EnvEntryNotFoundError,
    InvalidVariableError,
    SecretTooShortError,
    VariableNotFoundError,
    VariableTooLongError,
)
from edge_runtime.contract.redaction import MIN_SECRET_LENGTH, store_redactor

SECRET_1 = "pt_key=AAA111;pt_pin=alice;"
SECRET_2 = "pt_key=BBB222;pt_pin=bob;"


@pytest.fixture
def env(backend: Any) -> Any:
    return backend.environment


def _add(env: Any, *entries: tuple[str, str] | NewEnvEntry) -> list[Any]:
    return env.add([e if isinstance(e, NewEnvEntry) else NewEnvEntry(name=e[0], value=e[1]) for e in entries])


def _ids(env: Any, **filters: Any) -> list[int]:
    return [e.id for e in env.list(**filters)]


def _filler(name: str, size: int, values: int = 1) -> list[str]:
    """``values`` values whose join under ``name`` is exactly ``size`` bytes as an environment
    string; each begins with a 2-byte character (bytes count, not characters)."""
    room = size - len(name) - 2 - (values - 1)
    share = room // values
    return ["é" + "x" * (part - 2) for part in [share] * (values - 1) + [room - share * (values - 1)]]


def test_add_numbers_entries_from_1_in_order_and_never_shows_a_secrets_value(backend, env) -> None:
    made = env.add([NewEnvEntry(name="JD_COOKIE", value=SECRET_1, secret=True, remarks="account 1",
                                labels=("jd", "main", "jd")),
                    NewEnvEntry(name="JD_COOKIE", value="plain-2", enabled=False),
                    NewEnvEntry(name="OTHER", value="o")])
    assert [(e.id, e.name, e.position, e.enabled) for e in made] == [(1, "JD_COOKIE", 1, True),
                                                                     (2, "JD_COOKIE", 2, False), (3, "OTHER", 3, True)]
    first = made[0]
    assert first.secret and not isinstance(first.value, str) and SECRET_1 not in repr(made)
    assert (first.remarks, first.labels, first.pinned) == ("account 1", ("jd", "main"), False)
    assert made[1].value == "plain-2" and made[1].remarks == "" and made[1].labels == ()
    assert first.created_at_ms == first.updated_at_ms == backend.now()
    assert env.list() == made
    assert env.get(2) == made[1]
    assert _ids(env, name="JD_COOKIE") == [1, 2]
    with pytest.raises(EnvEntryNotFoundError) as missing:
        env.get(9)
    assert missing.value.code == "ENV_ENTRY_NOT_FOUND"
    assert SECRET_1 not in repr(env.list()) and SECRET_1 not in repr(env.get(1))


def test_a_task_sees_each_name_once_its_enabled_values_joined_in_list_order(env) -> None:
    _add(env, ("A", "v1"), ("A", "v2"), ("A", "v3"), ("B", "only"), ("C", "off"))
    assert env.task_values() == {"A": "v1&v2&v3", "B": "only", "C": "off"}
    env.disable([2, 5])
    assert env.task_values() == {"A": "v1&v3", "B": "only"}  # a name whose entries are all disabled is absent
    env.pin([3])
    assert env.task_values()["A"] == "v3&v1" and _ids(env) == [3, 1, 2, 4, 5]
    env.unpin([3])
    env.move(3, before=1)
    assert env.task_values()["A"] == "v3&v1" and _ids(env) == [3, 1, 2, 4, 5]
    env.enable([2])
    assert env.task_values() == {"A": "v3&v1&v2", "B": "only"}


def test_the_list_order_is_pinned_first_then_position_then_id(env) -> None:
    _add(env, ("A", "1"), ("B", "2"), ("C", "3"), ("D", "4"))
    env.pin([4, 2])
    assert _ids(env) == [2, 4, 1, 3]
    moved = env.move(1, before=3)
    assert moved.id == 1 and _ids(env) == [2, 4, 1, 3]
    env.move(3, before=1)
    assert _ids(env) == [2, 4, 3, 1]
    env.move(2, before=None)  # to the end: still first, as it is pinned
    assert _ids(env) == [4, 2, 3, 1]
    env.move(1, before=4)  # an unpinned entry stays below every pinned one
    assert _ids(env) == [4, 2, 1, 3]
    with pytest.raises(InvalidVariableError, match="before itself"):
        env.move(1, before=1)
    with pytest.raises(EnvEntryNotFoundError):
        env.move(1, before=99)
    # A new entry goes last.
    _add(env, ("E", "5"))
    assert _ids(env)[-1] == 5


def test_ids_are_never_given_again(env) -> None:
    _add(env, ("A", "1"), ("A", "2"), ("A", "3"))
    assert env.remove([3, 2]) == [2, 3]
    assert [e.id for e in _add(env, ("A", "again"))] == [4]
    env.remove_name("A")
    assert [e.id for e in _add(env, ("B", "b"))] == [5]


def test_add_takes_a_list_in_one_transaction_and_a_bad_entry_stores_none(env) -> None:
    _add(env, ("KEEP", "k"))
    with pytest.raises(SecretTooShortError, match="^entry 2 of 3: the secret T has 3 characters"):
        env.add([NewEnvEntry(name="A", value="1"), NewEnvEntry(name="T", value="abc", secret=True),
                 NewEnvEntry(name="B", value="2")])
    with pytest.raises(InvalidVariableError, match="^entry 1 of 2: variable name '1A'"):
        _add(env, ("1A", "x"), ("B", "2"))
    with pytest.raises(InvalidVariableError, match="no entries"):
        env.add([])
    assert _ids(env) == [1] and env.task_values() == {"KEEP": "k"}


@pytest.mark.parametrize("entry, problem", [
    (NewEnvEntry(name="1A", value="x"), "variable name"),
    (NewEnvEntry(name="A-B", value="x"), "variable name"),
    (NewEnvEntry(name="", value="x"), "variable name"),
    (NewEnvEntry(name="N" * 129, value="x"), "variable name"),
    (NewEnvEntry(name="EDGE_RUNTIME_RUN_ID", value="x"), "set by the service"),
    (NewEnvEntry(name="A", value="a\x00b"), "NUL"),
    (NewEnvEntry(name="A", value="\ud800"), "not valid UTF-8"),
    (NewEnvEntry(name="A", value="x", remarks="r" * (MAX_REMARKS_LENGTH + 1)), "remarks is longer"),
    (NewEnvEntry(name="A", value="x", labels=("",)), "label"),
    (NewEnvEntry(name="A", value="x", labels=("a\nb",)), "control characters"),
    (NewEnvEntry(name="A", value="x", labels=tuple(f"l{i}" for i in range(MAX_LABELS + 1))), "at most"),
])
def test_an_invalid_entry_is_refused_and_nothing_is_stored(env, entry, problem) -> None:
    with pytest.raises(InvalidVariableError, match=problem) as refused:
        env.add([entry])
    assert refused.value.code == "INVALID_VARIABLE"
    assert env.list() == []


def test_update_changes_the_fields_given_and_checks_them(backend, env) -> None:
    _add(env, ("A", "old"))
    created = env.get(1).created_at_ms
    backend.advance(1000)
    changed = env.update(1, value="new", remarks="note", labels=["x", "y"])
    assert (changed.value, changed.remarks, changed.labels, changed.name) == ("new", "note", ("x", "y"), "A")
    assert changed.created_at_ms == created and changed.updated_at_ms == backend.now()
    assert env.update(1, name="B", labels=[]).name == "B" and env.task_values() == {"B": "new"}
    # Made secret: its value leaves every listing; a value too short to mask is refused.
    with pytest.raises(SecretTooShortError):
        env.update(1, secret=True)
    hidden = env.update(1, value="long-enough-secret", secret=True)
    assert hidden.secret and not isinstance(hidden.value, str)
    with pytest.raises(SecretTooShortError):
        env.update(1, value="short")
    assert env.task_values() == {"B": "long-enough-secret"}
    assert env.update(1, secret=False, value="plain").value == "plain"
    with pytest.raises(EnvEntryNotFoundError):
        env.update(7, value="x")
    with pytest.raises(InvalidVariableError, match="variable name"):
        env.update(1, name="bad name")
    assert env.get(1).name == "B"


def test_every_bulk_command_changes_nothing_when_one_id_is_missing(env) -> None:
    _add(env, ("A", "1"), ("B", "2"))
    env.disable([2])
    before = env.list()
    for command in (lambda: env.remove([1, 9]), lambda: env.enable([2, 9]), lambda: env.disable([1, 9]),
                    lambda: env.pin([1, 8, 9]), lambda: env.unpin([9]), lambda: env.rename([1, 9], "C")):
        with pytest.raises(EnvEntryNotFoundError, match="nothing was changed") as missing:
            command()
        assert missing.value.code == "ENV_ENTRY_NOT_FOUND"
        assert env.list() == before
    with pytest.raises(EnvEntryNotFoundError, match="entries with id 8, 9"):
        env.pin([1, 8, 9])
    with pytest.raises(InvalidVariableError, match="no entry ids"):
        env.enable([])


def test_rename_and_bulk_flags_return_the_entries(env) -> None:
    _add(env, ("A", "1"), ("B", "2"), ("C", "3"))
    renamed = env.rename([3, 1], "JD_COOKIE")
    assert [(e.id, e.name) for e in renamed] == [(1, "JD_COOKIE"), (3, "JD_COOKIE")]
    assert env.task_values() == {"JD_COOKIE": "1&3", "B": "2"}
    assert [e.enabled for e in env.disable([1, 3])] == [False, False]
    assert [e.pinned for e in env.pin([2])] == [True]


def test_remove_by_name_removes_every_entry_and_a_missing_name_is_an_error(env) -> None:
    _add(env, ("A", "1"), ("B", "2"), ("A", "3"))
    assert env.remove_name("A") == [1, 3]
    assert env.task_values() == {"B": "2"}
    with pytest.raises(VariableNotFoundError) as missing:
        env.remove_name("A")
    assert missing.value.code == "VARIABLE_NOT_FOUND"


def test_set_gives_a_name_exactly_one_value_keeping_its_first_entry(env) -> None:
    _add(env, ("A", "1"), ("A", "2"), ("B", "b"))
    env.update(2, remarks="kept")
    env.pin([2])
    env.disable([2])
    kept = env.set("A", "long-enough-secret", secret=True)
    assert (kept.id, kept.remarks, kept.pinned, kept.enabled, kept.secret) == (2, "kept", True, True, True)
    assert _ids(env, name="A") == [2] and env.task_values() == {"A": "long-enough-secret", "B": "b"}
    assert env.set("NEW", "n", secret=False).id == 4
    with pytest.raises(SecretTooShortError):
        env.set("B", "short", secret=True)
    assert env.task_values()["B"] == "b"


def test_a_join_of_exactly_max_arg_strlen_fits_and_one_byte_more_is_refused(env) -> None:
    values = _filler("BIG", MAX_ENV_STRING_BYTES, values=2)
    _add(env, ("BIG", values[0]), ("BIG", values[1]))
    joined = env.task_values()["BIG"]
    assert len(f"BIG={joined}".encode()) + 1 == MAX_ENV_STRING_BYTES
    # Adding one more value, lengthening one, enabling one, renaming one into it: each refused.
    refusals = [lambda: _add(env, ("BIG", "")), lambda: env.update(1, value=values[0] + "x")]
    _add(env, NewEnvEntry(name="BIG", value="y", enabled=False), ("OTHER", "z"))
    refusals += [lambda: env.enable([3]), lambda: env.rename([4], "BIG")]
    before = env.list()
    for refusal in refusals:
        with pytest.raises(VariableTooLongError, match=f"BIG would be {MAX_ENV_STRING_BYTES + 1}|BIG would be "
                                                       f"{MAX_ENV_STRING_BYTES + 2}") as refused:
            refusal()
        assert refused.value.code == "VARIABLE_TOO_LONG" and "MAX_ARG_STRLEN" in str(refused.value)
        assert env.list() == before
    # One value alone beyond the limit is refused as it is stored, whether enabled or not.
    alone = _filler("SOLO", MAX_ENV_STRING_BYTES + 1)[0]
    with pytest.raises(VariableTooLongError, match=f"it would be {MAX_ENV_STRING_BYTES + 1} bytes"):
        env.add([NewEnvEntry(name="SOLO", value=alone, enabled=False)])
    env.add([NewEnvEntry(name="SOLO", value=alone[:-1], enabled=False)])


def test_a_store_beyond_a_limit_may_still_shrink(backend, env) -> None:
    """Only growth is refused: entries another writer stored beyond a limit can be reduced."""
    values = _filler("OLD", MAX_ENV_STRING_BYTES + 100, values=2)
    for value in values:
        backend.store_entry_as_is("OLD", value)
    env.update(1, value=values[0][:-50])  # still beyond, but shorter
    env.update(1, remarks="now shorter")
    with pytest.raises(VariableTooLongError):
        env.update(1, value=values[0][:-40])
    env.disable([2])
    assert env.task_values()["OLD"] == values[0][:-50]


def test_all_entries_together_and_their_number_are_bounded(env) -> None:
    size = MAX_ENV_STRING_BYTES - 8  # room for NAME= and a NUL
    count = MAX_ENTRIES_BYTES // size
    env.add([NewEnvEntry(name=f"V{i}", value=_filler(f"V{i}", size)[0], enabled=False) for i in range(count)])
    left = MAX_ENTRIES_BYTES - count * size
    with pytest.raises(VariableTooLongError, match=f"the entries together would be {MAX_ENTRIES_BYTES + 1} bytes"):
        _add(env, ("LAST", _filler("LAST", left + 1)[0]))
    _add(env, ("LAST", _filler("LAST", left)[0]))
    env.remove(_ids(env))
    env.add([NewEnvEntry(name="N", value="") for _ in range(MAX_ENTRIES)])
    with pytest.raises(InvalidVariableError, match=f"there are {MAX_ENTRIES} entries already"):
        _add(env, ("N", ""))
    assert len(env.list()) == MAX_ENTRIES


def test_at_most_max_variables_names(env) -> None:
    env.add([NewEnvEntry(name=f"V{i}", value="x") for i in range(MAX_VARIABLES)])
    with pytest.raises(InvalidVariableError, match="variable names already; remove one first"):
        _add(env, ("ONE_MORE", "x"))
    _add(env, ("V0", "another account"))  # a name already there is no new name
    env.remove_name("V1")
    _add(env, ("ONE_MORE", "x"))
    assert len({e.name for e in env.list()}) == MAX_VARIABLES


def test_search_finds_a_secret_by_its_value_and_never_returns_it(env) -> None:
    env.add([NewEnvEntry(name="JD_COOKIE", value=SECRET_1, secret=True, remarks="first"),
             NewEnvEntry(name="JD_COOKIE", value=SECRET_2, secret=True, enabled=False),
             NewEnvEntry(name="NOTE", value="plain value", remarks="about Bob")])
    found = env.list(search="pt_pin=bob")
    assert [e.id for e in found] == [2] and not isinstance(found[0].value, str)
    assert SECRET_2 not in repr(found)
    assert _ids(env, search="BOB") == [2, 3]  # case ignored; remarks too
    assert _ids(env, search="jd_cookie") == [1, 2]
    assert _ids(env, search=["alice", "plain"]) == [1, 3]
    assert _ids(env, name="JD_COOKIE", search="first") == [1]
    assert env.list(search="nowhere") == []


def test_an_exact_value_finds_the_same_account_and_never_returns_a_secret(env) -> None:
    env.add([NewEnvEntry(name="JD_COOKIE", value=SECRET_1, secret=True),
             NewEnvEntry(name="JD_COOKIE", value=SECRET_2, secret=True, enabled=False),
             NewEnvEntry(name="NOTE", value=SECRET_1)])
    found = env.list(name="JD_COOKIE", value=SECRET_2)
    assert [e.id for e in found] == [2] and SECRET_2 not in repr(found)
    assert _ids(env, value=SECRET_1) == [1, 3]
    assert env.list(name="JD_COOKIE", value=SECRET_1[:-1]) == []  # a part is no match
    assert env.list(name="JD_COOKIE", value=SECRET_1.upper()) == []  # nor another case


def test_secret_values_mask_every_secret_entry_and_an_all_secret_join(backend, env) -> None:
    env.add([NewEnvEntry(name="JD_COOKIE", value=SECRET_1, secret=True),
             NewEnvEntry(name="JD_COOKIE", value=SECRET_2, secret=True),
             NewEnvEntry(name="MIXED", value="secret-part-1", secret=True),
             NewEnvEntry(name="MIXED", value="https://example.com/plain"),
             NewEnvEntry(name="OFF", value="disabled-secret", secret=True, enabled=False)])
    assert sorted(env.secret_values()) == sorted([SECRET_1, SECRET_2, "secret-part-1", "disabled-secret",
                                                  f"{SECRET_1}&{SECRET_2}"])
    mask = store_redactor(backend).text
    assert mask(f"all={SECRET_1}&{SECRET_2} one={SECRET_2}") == "all=*** one=***"
    assert mask("mixed=secret-part-1&https://example.com/plain") == "mixed=***&https://example.com/plain"
    assert mask("old log: disabled-secret") == "old log: ***"


def test_a_short_secret_stored_before_the_minimum_is_listed_as_too_short_and_still_masked(backend, env) -> None:
    backend.store_entry_as_is("OLD", "1234", secret=True)
    env.add([NewEnvEntry(name="GOOD", value="long-enough-value", secret=True), NewEnvEntry(name="PLAIN", value="1")])
    listed = {v.name: v for v in env.list()}
    assert listed["OLD"].too_short is True and not isinstance(listed["OLD"].value, str)
    assert not isinstance(listed["GOOD"].too_short, bool) and not isinstance(listed["PLAIN"].too_short, bool)
    assert env.task_values()["OLD"] == "1234"  # tasks still get it
    assert store_redactor(backend).text("pin 1234 and long-enough-value") == "pin *** and ***"
    env.update(listed["OLD"].id, remarks="still editable")  # its value unchanged: no new check
    env.update(listed["OLD"].id, value="now-long-enough")
    assert not any(v.too_short is True for v in env.list())


def test_a_secret_shorter_than_the_minimum_is_refused_and_characters_count(env) -> None:
    short = "x" * (MIN_SECRET_LENGTH - 1)
    with pytest.raises(SecretTooShortError, match=f"has {MIN_SECRET_LENGTH - 1} characters; a secret has at least "
                                                  f"{MIN_SECRET_LENGTH}") as refused:
        env.add([NewEnvEntry(name="TOKEN", value=short, secret=True)])
    assert refused.value.code == "SECRET_TOO_SHORT" and isinstance(refused.value, InvalidVariableError)
    env.add([NewEnvEntry(name="CJK", value="密" * MIN_SECRET_LENGTH, secret=True),
             NewEnvEntry(name="PLAIN", value=short)])
    assert env.secret_values() == ["密" * MIN_SECRET_LENGTH]
