"""The shared variables on every store (docs/environment.md): ``set`` creates or replaces one (its
secret flag too), ``list`` gives every variable by name and never a secret's value, ``remove``
deletes one and says when there is none, the limits are the contract's (a secret too short to mask
is refused; one stored before that rule is listed as too short and still masked), and what an
Attempt gets (``task_values``) and what printed output masks (``secret_values``) follow every change."""

from __future__ import annotations

from typing import Any

import pytest

from edge_runtime.contract.environment import (
    MAX_VALUE_LENGTH,
    MAX_VARIABLES,
    InvalidVariableError,
    SecretTooShortError,
    VariableNotFoundError,
)
from edge_runtime.contract.redaction import MIN_SECRET_LENGTH, store_redactor


@pytest.fixture
def env(backend: Any) -> Any:
    return backend.environment


def test_set_list_and_replace_never_return_a_secrets_value(backend, env) -> None:
    plain = env.set("PLAIN", "visible", secret=False)
    secret = env.set("TOKEN", "hunter2-secret", secret=True)
    assert (plain.name, plain.secret, plain.value) == ("PLAIN", False, "visible")
    assert (secret.name, secret.secret) == ("TOKEN", True) and not isinstance(secret.value, str)
    assert plain.updated_at_ms == backend.now()
    listed = env.list()
    assert [(v.name, v.secret) for v in listed] == [("PLAIN", False), ("TOKEN", True)]
    assert listed[0].value == "visible" and not isinstance(listed[1].value, str)
    assert env.task_values() == {"PLAIN": "visible", "TOKEN": "hunter2-secret"}
    assert env.secret_values() == ["hunter2-secret"]
    # Replacing changes the value and the flag in place: one variable per name.
    env.set("TOKEN", "now-plain", secret=False)
    env.set("PLAIN", "now-secret", secret=True)
    assert [(v.name, v.secret, v.value if isinstance(v.value, str) else None) for v in env.list()] == [
        ("PLAIN", True, None), ("TOKEN", False, "now-plain")]
    assert env.secret_values() == ["now-secret"]


def test_remove_deletes_it_and_a_missing_name_is_an_error(env) -> None:
    env.set("A", "1", secret=False)
    env.set("B", "two-secret", secret=True)
    env.remove("B")
    assert [v.name for v in env.list()] == ["A"]
    assert env.task_values() == {"A": "1"} and env.secret_values() == []
    with pytest.raises(VariableNotFoundError):
        env.remove("B")
    with pytest.raises(VariableNotFoundError):
        env.remove("NEVER_SET")
    env.set("B", "back", secret=False)  # a removed name can be set again
    assert env.task_values() == {"A": "1", "B": "back"}


@pytest.mark.parametrize("name, value, problem", [
    ("1A", "x", "variable name"),
    ("A-B", "x", "variable name"),
    ("", "x", "variable name"),
    ("N" * 129, "x", "variable name"),
    ("EDGE_RUNTIME_RUN_ID", "x", "set by the service"),
    ("A", "a\x00b", "NUL"),
    ("A", "v" * (MAX_VALUE_LENGTH + 1), "longer than"),
])
def test_an_invalid_variable_is_refused_and_nothing_is_stored(env, name, value, problem) -> None:
    with pytest.raises(InvalidVariableError, match=problem):
        env.set(name, value, secret=False)
    assert env.list() == []


def test_at_most_max_variables_but_replacing_one_is_still_allowed(env) -> None:
    for index in range(MAX_VARIABLES):
        env.set(f"V{index}", "x", secret=False)
    with pytest.raises(InvalidVariableError, match="remove one first"):
        env.set("ONE_MORE", "x", secret=False)
    env.set("V0", "replaced", secret=True)
    env.remove("V1")
    env.set("ONE_MORE", "x", secret=False)
    assert len(env.list()) == MAX_VARIABLES


def test_a_secret_shorter_than_the_minimum_is_refused_and_nothing_is_stored(backend, env) -> None:
    env.set("TOKEN", "long-enough-value", secret=True)
    short = "x" * (MIN_SECRET_LENGTH - 1)
    with pytest.raises(SecretTooShortError, match=f"has {MIN_SECRET_LENGTH - 1} characters; a secret has at least "
                                                  f"{MIN_SECRET_LENGTH}") as refused:
        env.set("TOKEN", short, secret=True)
    assert refused.value.code == "SECRET_TOO_SHORT" and isinstance(refused.value, InvalidVariableError)
    with pytest.raises(SecretTooShortError):
        env.set("NEW", "", secret=True)
    assert env.task_values() == {"TOKEN": "long-enough-value"}  # the old value stands, nothing else stored
    # Characters, not bytes, and only for a secret: the same short value as a plain variable is fine.
    env.set("CJK", "密" * MIN_SECRET_LENGTH, secret=True)
    env.set("PLAIN", short, secret=False)
    assert sorted(env.secret_values()) == sorted(["long-enough-value", "密" * MIN_SECRET_LENGTH])


def test_a_short_secret_stored_before_the_minimum_is_listed_as_too_short_and_still_masked(backend, env) -> None:
    backend.store_secret_as_is("OLD", "1234")
    env.set("GOOD", "long-enough-value", secret=True)
    env.set("PLAIN", "1", secret=False)
    listed = {v.name: v for v in env.list()}
    assert listed["OLD"].too_short is True and not isinstance(listed["OLD"].value, str)
    assert not isinstance(listed["GOOD"].too_short, bool) and not isinstance(listed["PLAIN"].too_short, bool)
    assert env.task_values()["OLD"] == "1234"  # tasks still get it
    assert store_redactor(backend).text("pin 1234 and long-enough-value") == "pin *** and ***"
    env.set("OLD", "now-long-enough", secret=True)
    assert not any(v.too_short is True for v in env.list())
