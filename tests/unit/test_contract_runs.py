"""The Run contract's own checks: a bad command is refused before any store sees it."""

from __future__ import annotations

import pytest

from edge_runtime.contract.runs import InvalidRunCommandError, SubmitRunCommand


@pytest.mark.parametrize(
    ("argv", "message"),
    [([], "the command must be a non-empty list of arguments"), ([""], "the program (first argument) must not be empty"),
     (["a"] * 257, "the command has 257 arguments; at most 256 are allowed")],
)
def test_submit_refuses_bad_commands_before_writing(argv, message) -> None:
    with pytest.raises(InvalidRunCommandError) as error:
        SubmitRunCommand(argv=argv)
    assert str(error.value) == message

