"""A task's environment: shared variables, secrets and how an Attempt's environment is composed
(docs/environment.md). Pure: no I/O.

An Attempt never inherits the service's environment wholesale (the service may run as root with
whatever its starter had set): it gets the documented base (``BASE_NAMES``, taken from the
service's own environment when set), plus the names the ``pass_env`` setting lists, plus the shared
variables (``env set``), plus the Run's own (``submit --env``), later ones winning, and always the
Run's and Attempt's ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Protocol

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.redaction import MIN_SECRET_LENGTH
from edge_runtime.contract.validation import SafeInt

#: The variables an Attempt gets from the service's own environment without any setting.
BASE_NAMES = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "SHELL")
#: Set by the service for every Attempt; neither a shared variable nor a Run's own may set them.
RUN_ID_NAME = "EDGE_RUNTIME_RUN_ID"
ATTEMPT_ID_NAME = "EDGE_RUNTIME_ATTEMPT_ID"
RESERVED_NAMES = frozenset({RUN_ID_NAME, ATTEMPT_ID_NAME})
#: The PATH an Attempt gets when the service itself has none.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

MAX_NAME_LENGTH = 128
MAX_VALUE_LENGTH = 32 * 1024
#: Variables of one Run (``--env``) and shared ones (``env set``), each at most.
MAX_VARIABLES = 256

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class VariableError(EdgeRuntimeError, code="ENVIRONMENT_ERROR"):
    """Base of the shared-variable errors."""


class InvalidVariableError(VariableError, code="INVALID_VARIABLE"):
    """A variable's name or value is refused (the message says which rule); nothing was stored."""


class SecretTooShortError(InvalidVariableError, code="SECRET_TOO_SHORT"):
    """A secret's value is shorter than ``MIN_SECRET_LENGTH``: too short to mask safely; nothing was stored."""


class VariableNotFoundError(VariableError, code="VARIABLE_NOT_FOUND"):
    """No variable has this name."""


class EnvironmentRepositoryError(VariableError, code="ENVIRONMENT_REPOSITORY_FAILED"):
    """The store could not read or write the variables."""


def variable_problem(name: object, value: object) -> str | None:
    """Why ``name=value`` cannot be a task's variable, or None."""
    if type(name) is not str or not _NAME.fullmatch(name) or len(name) > MAX_NAME_LENGTH:
        return (f"variable name {name!r} is invalid: letters, digits and _, not starting with a digit, "
                f"at most {MAX_NAME_LENGTH} characters")
    if name in RESERVED_NAMES:
        return f"variable {name} is set by the service for every Attempt and cannot be set"
    if type(value) is not str:
        return f"the value of {name} must be a string"
    if "\x00" in value:
        return f"the value of {name} contains a NUL character"
    if len(value) > MAX_VALUE_LENGTH:
        return f"the value of {name} is longer than {MAX_VALUE_LENGTH} characters"
    return None


def secret_problem(name: str, value: str) -> str | None:
    """Why ``value`` cannot be the secret ``name`` (beyond :func:`variable_problem`), or None."""
    if len(value) < MIN_SECRET_LENGTH:
        return (f"the secret {name} has {len(value)} characters; a secret has at least {MIN_SECRET_LENGTH} "
                f"(a shorter value cannot be masked safely in what is shown): set a longer value, or set it "
                f"without --secret")
    return None


def check_variable(name: object, value: object, *, secret: bool) -> None:
    """What every store checks before ``set`` stores anything.

    Raises:
        InvalidVariableError: an invalid name or value. SecretTooShortError: a secret too short to mask.
    """
    problem = variable_problem(name, value)
    if problem is not None:
        raise InvalidVariableError(problem)
    if secret:
        problem = secret_problem(name, value)  # type: ignore[arg-type]  (checked above)
        if problem is not None:
            raise SecretTooShortError(problem)


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


class SharedVariable(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, kw_only=True):
    """A shared variable as it is shown: a secret's value is never part of it (absent).
    ``too_short``: a secret stored before secrets had a minimum length, shorter than it (it is
    masked whole wherever it appears, and ``check`` names it); absent otherwise."""

    name: str
    secret: bool
    value: str | msgspec.UnsetType = msgspec.UNSET
    updated_at_ms: SafeInt
    too_short: bool | msgspec.UnsetType = msgspec.UNSET


class EnvironmentStore(Protocol):
    """The shared variables, kept by the store (``Store.environment``)."""

    def set(self, name: str, value: str, *, secret: bool) -> SharedVariable:
        """Create or replace a variable (its secret flag too), after :func:`check_variable`.

        Raises:
            InvalidVariableError: refused (SecretTooShortError: a secret too short); nothing stored.
        """

    def remove(self, name: str) -> None:
        """Raises VariableNotFoundError."""

    def list(self) -> list[SharedVariable]:
        """Every variable by name, secrets without their value (``too_short`` where one is)."""

    def task_values(self) -> dict[str, str]:
        """Every variable with its value: what an Attempt gets (the service only)."""

    def secret_values(self) -> list[str]:
        """The secrets' values: what shown output masks (``redaction.store_redactor``)."""


def compose_environment(
    service_env: Mapping[str, str],
    *,
    pass_env: Iterable[str] = (),
    shared: Mapping[str, str] | None = None,
    own: Mapping[str, str] | None = None,
    run_id: str,
    attempt_id: str,
) -> dict[str, str]:
    """An Attempt's environment: base, then ``pass_env``, shared variables and the Run's own."""
    env = {name: service_env[name] for name in (*BASE_NAMES, *pass_env) if name in service_env}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(shared or {})
    env.update(own or {})
    env[RUN_ID_NAME] = run_id
    env[ATTEMPT_ID_NAME] = attempt_id
    return env
