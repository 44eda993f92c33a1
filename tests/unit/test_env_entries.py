"""The env entry rules of the contract (edge_runtime/contract/env_entries.py), pure: what a task
gets (QingLong's env.sh join), the list order, the byte count MAX_ARG_STRLEN applies to, what is
masked, the search, and the plans both stores execute (each test of the stores themselves is in
tests/conformance/test_conformance_environment.py)."""

from __future__ import annotations

import msgspec
import pytest

from edge_runtime.contract import env_entries as rules
from edge_runtime.contract.env_entries import (
    ENTRY_ORDER_SQL,
    MAX_ENV_STRING_BYTES,
    EnvEntry,
    NewEnvEntry,
    StoredEnvEntry,
    env_string_bytes,
    shown,
)
from edge_runtime.contract.environment import (
    EnvEntryNotFoundError,
    InvalidVariableError,
    VariableNotFoundError,
    VariableTooLongError,
)
from edge_runtime.contract.redaction import Redactor

NOW = 1_700_000_000_000


def _entry(entry_id: int, name: str, value: str, *, secret: bool = False, enabled: bool = True,
           position: int | None = None, pinned: bool = False, remarks: str = "") -> StoredEnvEntry:
    return StoredEnvEntry(id=entry_id, name=name, value=value, secret=secret, remarks=remarks, enabled=enabled,
                          position=entry_id if position is None else position, pinned=pinned, labels=(),
                          created_at_ms=1, updated_at_ms=1)


def test_a_task_gets_the_enabled_values_of_a_name_joined_with_an_ampersand_in_the_order_given() -> None:
    entries = [_entry(1, "JD_COOKIE", "it's \"1\""), _entry(2, "JD_COOKIE", "two", enabled=False),
               _entry(3, "JD_COOKIE", "三 3"), _entry(4, "OFF", "x", enabled=False), _entry(5, "B", "b")]
    assert rules.task_values(entries) == {"JD_COOKIE": "it's \"1\"&三 3", "B": "b"}


def test_the_list_order_is_declared_once_for_both_engines() -> None:
    assert ENTRY_ORDER_SQL == "pinned DESC, position, id"


def test_the_size_is_the_environment_string_in_utf8_bytes_with_its_nul() -> None:
    assert env_string_bytes("A", ["x"]) == len(b"A=x\0")
    assert env_string_bytes("A", ["值", "x"]) == len("A=值&x\0".encode())
    assert env_string_bytes("A", []) == len(b"A=\0")
    assert MAX_ENV_STRING_BYTES == 32 * 4096  # Linux's MAX_ARG_STRLEN


def test_shown_leaves_out_a_secrets_value_and_marks_one_too_short() -> None:
    assert not isinstance(shown(_entry(1, "T", "long-enough", secret=True)).value, str)
    assert shown(_entry(1, "T", "1234", secret=True)).too_short is True
    plain = shown(_entry(1, "T", "1234"))
    assert plain.value == "1234" and plain.too_short is msgspec.UNSET
    # The JSON shape: camelCase, a secret's value absent.
    assert msgspec.json.decode(msgspec.json.encode(shown(_entry(7, "T", "long-enough", secret=True)))) == {
        "id": 7, "name": "T", "secret": True, "remarks": "", "enabled": True, "position": 7, "pinned": False,
        "labels": [], "createdAtMs": 1, "updatedAtMs": 1}


def test_masking_a_shown_entry_keeps_its_type() -> None:
    masked = Redactor(["hunter2-secret"]).record(shown(_entry(1, "T", "x", remarks="was hunter2-secret")))
    assert isinstance(masked, EnvEntry) and masked.remarks == "was ***"


def test_search_ignores_case_and_reads_name_value_and_remarks() -> None:
    entries = [_entry(1, "JD_COOKIE", "pt_pin=Alice;", secret=True), _entry(2, "NOTE", "x", remarks="About ALICE"),
               _entry(3, "OTHER", "y")]
    assert [e.id for e in rules.matching(entries, search="alice")] == [1, 2]
    assert [e.id for e in rules.matching(entries, search=["other", "jd_"])] == [1, 3]
    assert [e.id for e in rules.matching(entries, name="NOTE", search="about")] == [2]
    assert rules.matching(entries, search="") == entries


def test_plan_move_numbers_the_list_anew_and_writes_only_what_changed() -> None:
    entries = [_entry(1, "A", "1"), _entry(2, "A", "2"), _entry(3, "A", "3"), _entry(4, "A", "4")]
    changes = rules.plan_move(entries, 4, 2, NOW)
    assert [(r.id, r.position) for r in changes.updates] == [(4, 2), (2, 3), (3, 4)]
    assert changes.updates[0].updated_at_ms == NOW and changes.updates[1].updated_at_ms == 1
    assert changes.returned == (4,)
    assert [(r.id, r.position) for r in rules.plan_move(entries, 1, None, NOW).updates] == [
        (1, 4), (2, 1), (3, 2), (4, 3)]


def test_plan_add_appends_after_the_last_position() -> None:
    changes = rules.plan_add([_entry(1, "A", "1", position=40)], [NewEnvEntry(name="B", value="b"),
                                                                  NewEnvEntry(name="C", value="c", pinned=True)], NOW)
    assert [(r.name, r.position, r.pinned, r.created_at_ms) for r in changes.inserts] == [
        ("B", 41, False, NOW), ("C", 42, True, NOW)]
    assert [e.id for e in changes.result([7, 8])] == [7, 8]


def test_plan_set_keeps_the_first_entry_and_removes_the_others() -> None:
    entries = [_entry(5, "A", "first", position=2, pinned=True, enabled=False), _entry(2, "A", "second", position=1),
               _entry(3, "B", "b")]
    changes = rules.plan_set(entries, "A", "only", NOW, secret=False)
    assert [(r.id, r.value, r.enabled, r.pinned) for r in changes.updates] == [(5, "only", True, True)]
    assert changes.removals == (2,)


def test_refusals_name_what_is_wrong() -> None:
    entries = [_entry(1, "A", "1")]
    with pytest.raises(EnvEntryNotFoundError, match="^no env entry with id 9; nothing was changed$"):
        rules.plan_remove(entries, [1, 9])
    with pytest.raises(InvalidVariableError, match="not an entry id"):
        rules.plan_enable(entries, [True], NOW, enabled=True)
    with pytest.raises(InvalidVariableError, match="must be a list"):
        rules.plan_remove(entries, "A")  # a name is not a list of ids (remove_name takes it)
    with pytest.raises(VariableNotFoundError, match="no variable named 'B'"):
        rules.plan_remove_name(entries, "B")
    big = "x" * (MAX_ENV_STRING_BYTES - len("A=&\0") - 1)
    with pytest.raises(VariableTooLongError, match=f"^A would be {MAX_ENV_STRING_BYTES + 1} bytes in a task's "
                                                   f"environment"):
        rules.plan_add(entries, [NewEnvEntry(name="A", value=big + "x")], NOW)
    rules.plan_add(entries, [NewEnvEntry(name="A", value=big)], NOW)


def test_a_flag_must_be_a_boolean() -> None:
    with pytest.raises(InvalidVariableError, match="enabled must be true or false, not 1"):
        rules.plan_add([], [NewEnvEntry(name="A", value="x", enabled=1)], NOW)  # type: ignore[arg-type]
    with pytest.raises(InvalidVariableError, match="secret must be true or false"):
        rules.plan_update([_entry(1, "A", "long-enough")], 1, NOW, secret="yes")  # type: ignore[arg-type]


def test_the_tables_limits_are_the_contracts() -> None:
    from pathlib import Path

    from edge_runtime.contract.env_entries import MAX_REMARKS_LENGTH
    from edge_runtime.contract.environment import MAX_NAME_LENGTH

    root = Path(__file__).resolve().parents[2]
    sql = (root / "local_migrations" / "0014_env_entries.sql").read_text()
    assert f"length(name) BETWEEN 1 AND {MAX_NAME_LENGTH})" in sql
    assert f"length(CAST(value AS BLOB)) <= {MAX_ENV_STRING_BYTES})" in sql
    assert f"length(remarks) <= {MAX_REMARKS_LENGTH})" in sql
