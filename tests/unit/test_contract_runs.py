"""The Run contract's own checks: a bad command is refused before any store sees it."""

from __future__ import annotations

import pytest

from edge_runtime.contract.runs import InvalidRunCommandError, InvalidRunNameError, RunOptions, SubmitRunCommand
from edge_runtime.contract.schedules import (
    AddScheduleCommand,
    EditScheduleCommand,
    InvalidScheduleCommandError,
    InvalidScheduleNameError,
)


@pytest.mark.parametrize(
    ("argv", "message"),
    [([], "the command must be a non-empty list of arguments"), ([""], "the program (first argument) must not be empty"),
     (["a"] * 257, "the command has 257 arguments; at most 256 are allowed")],
)
def test_submit_refuses_bad_commands_before_writing(argv, message) -> None:
    with pytest.raises(InvalidRunCommandError) as error:
        SubmitRunCommand(argv=argv)
    assert str(error.value) == message



# --------------------------------------------------------------------------- the Run options, declared once

_OWN_FIELDS = {
    SubmitRunCommand: {"argv": ["true"]},
    AddScheduleCommand: {"expression": "@daily", "argv": ["true"]},
    EditScheduleCommand: {"schedule_id": "s1"},
}


@pytest.mark.parametrize("command", list(_OWN_FIELDS))
def test_a_command_with_run_options_lists_its_own_fields_first(command) -> None:
    options = RunOptions.__struct_fields__
    assert issubclass(command, RunOptions)
    assert command.__struct_fields__[-len(options):] == options
    assert command.__struct_fields__[0] == next(iter(_OWN_FIELDS[command]))


@pytest.mark.parametrize(
    ("command", "error", "name_error"),
    [(SubmitRunCommand, InvalidRunCommandError, InvalidRunNameError),
     (AddScheduleCommand, InvalidScheduleCommandError, InvalidScheduleNameError),
     (EditScheduleCommand, InvalidScheduleCommandError, InvalidScheduleNameError)],
)
def test_each_command_refuses_a_bad_run_option_with_its_own_family_error(command, error, name_error) -> None:
    own = _OWN_FIELDS[command]
    with pytest.raises(error, match="^the working directory must be an absolute path$"):
        command(**own, cwd="relative")
    with pytest.raises(error, match="must be a string"):
        command(**own, env={"A": 1})
    with pytest.raises(error, match="^retries must be between 0 and 100, got 101$"):
        command(**own, retries=101)
    with pytest.raises(name_error):
        command(**own, name="")
    assert command(**own, cwd="/srv", env={"A": "1"}, retries=2, retry_delay_ms=5_000).cwd == "/srv"
