"""The one check at the spawn boundary: what no process can be given fails its Attempt saying where,
never showing the value (it may be a secret)."""

from __future__ import annotations

import pytest

from edge_runtime.contract.errors import UnspawnableValueError
from edge_runtime.service.executor import refuse_unspawnable


@pytest.mark.parametrize(("argv", "env", "cwd", "where"), [
    (["echo", "tok\0en"], {}, None, "argument 1 of the command holds a NUL byte"),
    (["true"], {}, "/tmp/a\0b", "the working directory holds a NUL byte"),
    (["true"], {"COOKIE": "pt_key=abc\0def"}, None, "the variable COOKIE (an env entry, or the Run's own) holds a NUL byte"),
    (["true"], {"A=B": "1"}, None, "the variable name 'A=B' cannot be given to a process"),
    (["true"], {"": "1"}, None, "the variable name '' cannot be given to a process"),
])
def test_a_value_no_process_can_be_given_is_refused_naming_where(
        argv: list[str], env: dict[str, str], cwd: str | None, where: str) -> None:
    with pytest.raises(UnspawnableValueError) as refused:
        refuse_unspawnable(argv, env, cwd)
    assert str(refused.value).startswith(where) and refused.value.code == "SPAWN_VALUE_REFUSED"
    assert "abc" not in str(refused.value) and "tok" not in str(refused.value)
    assert refused.value.reason().endswith("[SPAWN_VALUE_REFUSED]")


def test_every_value_a_process_can_be_given_passes() -> None:
    refuse_unspawnable(["sh", "-c", "echo 'é' \t\n"], {"PATH": "/bin", "EMPTY": ""}, "/tmp")
