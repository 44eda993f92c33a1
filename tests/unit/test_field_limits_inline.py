"""The declared field limits decide the same whether a value is recognised inline or by its
field's check: ``field_problem`` recognises valid identifiers and integers without calling the
check, and every other value must still get the check's own answer."""

from __future__ import annotations

from typing import Annotated

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from edge_runtime.contract.validation import (
    IDENTIFIER_PATTERN,
    field_problem,
    identifier_problem,
    int_problem,
)

Ident = Annotated[str, msgspec.Meta(pattern=IDENTIFIER_PATTERN, max_length=8)]
Small = Annotated[int, msgspec.Meta(ge=1, le=100)]


class Checked(msgspec.Struct, frozen=True):
    ident: Ident
    optional_ident: Ident | msgspec.UnsetType = msgspec.UNSET
    number: Small = 1
    optional_number: Small | None = None


def _expected(ident: object, optional_ident: object, number: object, optional_number: object) -> tuple[str, str] | None:
    for name, problem in (
        ("ident", identifier_problem("ident", ident, 8)),
        ("optional_ident", None if optional_ident is msgspec.UNSET else identifier_problem("optional_ident", optional_ident, 8)),
        ("number", int_problem("number", number, 1, 100)),
        ("optional_number", None if optional_number is None else int_problem("optional_number", optional_number, 1, 100)),
    ):
        if problem is not None:
            return name, problem
    return None


_TEXT = st.text(alphabet=st.sampled_from(["a", "Z", "-", " ", "\x00", "\x1f", "\x7f", "\x80", "é", "\u2028", "中"]),
                max_size=10)
_VALUES = st.one_of(_TEXT, st.integers(-5, 200), st.booleans(), st.none(), st.floats(allow_nan=False))


@given(_VALUES, st.one_of(st.just(msgspec.UNSET), _VALUES), _VALUES, _VALUES)
def test_inline_recognition_answers_as_the_checks_do(ident, optional_ident, number, optional_number) -> None:
    record = msgspec.structs.replace(Checked(ident="x"))  # a real struct with the declared annotations
    for name, value in (("ident", ident), ("optional_ident", optional_ident), ("number", number),
                        ("optional_number", optional_number)):
        msgspec.structs.force_setattr(record, name, value)
    assert field_problem(record) == _expected(ident, optional_ident, number, optional_number)


def test_a_valid_record_has_no_problem_and_each_broken_limit_is_named() -> None:
    record = Checked(ident="run-1", optional_ident="ok", number=100, optional_number=1)
    assert field_problem(record) is None
    for name, value, fragment in (("ident", "a\x1fb", "control characters"), ("ident", "", "empty"),
                                  ("optional_ident", "x" * 9, "at most 8"), ("number", True, "integer"),
                                  ("optional_number", 0, "between 1 and 100")):
        broken = msgspec.structs.replace(record)
        msgspec.structs.force_setattr(broken, name, value)
        found = field_problem(broken)
        assert found is not None and found[0] == name and fragment in found[1], found
