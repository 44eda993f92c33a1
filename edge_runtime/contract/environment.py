"""A task's environment: variable names, a Run's own variables, the errors of the store's
variables, and how an Attempt's environment is composed (docs/environment.md). Pure: no I/O.

An Attempt never inherits the service's environment wholesale (the service may run as root with
whatever its starter had set): it gets the documented base (``BASE_NAMES``, taken from the
service's own environment when set), plus the names the ``pass_env`` setting lists, plus the
store's variables (its env entries, each name's enabled values joined: ``env_entries.py``), plus
the Run's own (``submit --env``), later ones winning, and always the Run's and Attempt's ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.redaction import MIN_SECRET_LENGTH
from edge_runtime.contract.task_notify import NOTIFY_VARIABLE

#: The variables an Attempt gets from the service's own environment without any setting.
BASE_NAMES = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "SHELL")
#: Set by the service for every Attempt; neither an env entry nor a Run's own variable may set them.
RUN_ID_NAME = "EDGE_RUNTIME_RUN_ID"
ATTEMPT_ID_NAME = "EDGE_RUNTIME_ATTEMPT_ID"
RESERVED_NAMES = frozenset({RUN_ID_NAME, ATTEMPT_ID_NAME, NOTIFY_VARIABLE})
#: The PATH an Attempt gets when the service itself has none.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

MAX_NAME_LENGTH = 128
#: The longest value of a Run's own variable (``--env``), in characters. An env entry's value is
#: bounded by what one environment string may be instead (``env_entries.MAX_ENV_STRING_BYTES``).
MAX_VALUE_LENGTH = 32 * 1024
#: Variables of one Run (``--env``), and names of the store's env entries, each at most.
MAX_VARIABLES = 256

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class VariableError(EdgeRuntimeError, code="ENVIRONMENT_ERROR"):
    """Base of the errors of the store's variables (env entries)."""


class InvalidVariableError(VariableError, code="INVALID_VARIABLE"):
    """A variable's name, value, remarks or labels are refused (the message says which rule);
    nothing was stored."""


class SecretTooShortError(InvalidVariableError, code="SECRET_TOO_SHORT"):
    """A secret's value is shorter than ``MIN_SECRET_LENGTH``: too short to mask safely; nothing was stored."""


class VariableTooLongError(InvalidVariableError, code="VARIABLE_TOO_LONG"):
    """A change would make a variable longer than one environment string may be, or the entries
    together larger than their limit (docs/environment.md); nothing was changed."""


class VariableNotFoundError(VariableError, code="VARIABLE_NOT_FOUND"):
    """No entry has this name."""


class EnvEntryNotFoundError(VariableError, code="ENV_ENTRY_NOT_FOUND"):
    """No entry has this id (a command naming several ids changes none when one is missing)."""


class EnvironmentRepositoryError(VariableError, code="ENVIRONMENT_REPOSITORY_FAILED"):
    """The store could not read or write the variables."""


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a task's variable name, or None."""
    if type(name) is not str or not _NAME.fullmatch(name) or len(name) > MAX_NAME_LENGTH:
        return (f"variable name {name!r} is invalid: letters, digits and _, not starting with a digit, "
                f"at most {MAX_NAME_LENGTH} characters")
    if name in RESERVED_NAMES:
        return f"variable {name} is set by the service for every Attempt and cannot be set"
    return None


def secret_problem(name: str, value: str) -> str | None:
    """Why ``value`` cannot be the value of a secret ``name`` (too short to mask), or None."""
    if len(value) < MIN_SECRET_LENGTH:
        return (f"the secret {name} has {len(value)} characters; a secret has at least {MIN_SECRET_LENGTH} (a shorter "
                f"value cannot be masked safely in what is shown): give a longer value, or store it without --secret")
    return None


def variable_problem(name: object, value: object) -> str | None:
    """Why ``name=value`` cannot be one of a Run's own variables (``--env``), or None."""
    problem = name_problem(name)
    if problem is not None:
        return problem
    if type(value) is not str:
        return f"the value of {name} must be a string"
    if "\x00" in value:
        return f"the value of {name} contains a NUL character"
    if len(value) > MAX_VALUE_LENGTH:
        return f"the value of {name} is longer than {MAX_VALUE_LENGTH} characters"
    return None


def env_problem(env: object) -> str | None:
    """Why a Run's own variables ``env`` are not valid, or None."""
    if not isinstance(env, dict):
        return "the environment must be a mapping of names to values"
    if len(env) > MAX_VARIABLES:
        return f"{len(env)} variables given; at most {MAX_VARIABLES} are allowed"
    for name, value in env.items():
        problem = variable_problem(name, value)
        if problem is not None:
            return problem
    return None


def parse_assignment(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` (as ``--env`` takes it) as ``(name, value)``.

    Raises:
        InvalidVariableError: no ``=``, or an invalid name or value.
    """
    name, sep, value = text.partition("=")
    if not sep:
        raise InvalidVariableError(f"--env {text!r}: expected NAME=VALUE")
    problem = variable_problem(name, value)
    if problem is not None:
        raise InvalidVariableError(problem)
    return name, value


def parse_assignments(items: Iterable[str] | None) -> dict[str, str]:
    """Repeated ``--env NAME=VALUE``: a later one for the same name wins."""
    return dict(parse_assignment(item) for item in items or ())


def compose_environment(
    service_env: Mapping[str, str],
    *,
    pass_env: Iterable[str] = (),
    shared: Mapping[str, str] | None = None,
    own: Mapping[str, str] | None = None,
    run_id: str,
    attempt_id: str,
) -> dict[str, str]:
    """An Attempt's environment: base, then ``pass_env``, the store's variables (``shared``: each
    name once, its enabled entries joined, from ``EnvironmentStore.task_values``) and the Run's own."""
    env = {name: service_env[name] for name in (*BASE_NAMES, *pass_env) if name in service_env}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(shared or {})
    env.update(own or {})
    env[RUN_ID_NAME] = run_id
    env[ATTEMPT_ID_NAME] = attempt_id
    return env
