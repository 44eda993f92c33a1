"""An env entry as QingLong's env object, and QingLong's env requests as the entries' operations.

QingLong's env is an entry here (docs/environment.md): its ``id`` the entry's id, ``status`` 0
when enabled and 1 when disabled, ``isPinned`` its pin, ``position`` its place in the list (here
smaller comes first; QingLong's larger: no client reads it), ``labels``, ``remarks`` (``""`` when
none, never null). QingLong has no secret flag: an entry added through the OpenAPI is plain, as
QingLong shows every value; an entry made secret on the device (``env edit ID --secret``) shows
its value as ``***``, and a client that sends that ``***`` back changes nothing of it.

An app cannot set, rename to, change or enable a variable that makes a program load or run other
code (:data:`CODE_LOADING_NAMES`, and every ``LD_*``): QingLong exports ``LD_PRELOAD``,
``NODE_OPTIONS`` or ``PATH`` as any other env, so a token meant for cookies runs code as root in
every task (``NODE_OPTIONS=--import data:...``). Such a variable is set on the device
(``edge-runtime env add``), by whoever may run code there anyway.
"""

from __future__ import annotations

from typing import Any

import msgspec

from edge_runtime.contract.redaction import MASK
from edge_runtime.qinglong.crons import OpenRefusedError, OpenRequestError, decode, iso, js_date, parse_id, parse_ids

#: Variables that make a shell, the dynamic loader or an interpreter load or run other code (the
#: dynamic loader's are every ``LD_*``): refused to apps, whatever their scopes.
CODE_LOADING_NAMES = frozenset({
    "PATH", "IFS", "ENV", "BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "GCONV_PATH",
    "NODE_OPTIONS", "NODE_PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE",
    "PYTHONBREAKPOINT", "PYTHONWARNINGS", "PYTHONPLATLIBDIR", "PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB",
    "RUBYOPT", "RUBYLIB",
})


class EnvBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One env of ``POST /open/envs`` (a closed object, as QingLong's schema)."""

    name: str
    value: str
    remarks: str | None = None
    labels: list[str] | None = None


class EnvEditBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``PUT /open/envs``: the env's ``id`` (a number, or a numeric string), its name and value;
    ``remarks`` left out keeps them, ``null`` empties them (as QingLong stores it); ``labels``
    left out or ``null`` keeps them, a list replaces them."""

    id: int | str
    name: str
    value: str
    remarks: str | None | msgspec.UnsetType = msgspec.UNSET
    labels: list[str] | None = None


class EnvNameBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``PUT /open/envs/name``: a new name for ``ids`` (qinglongsdk sends a bare id there: taken)."""

    ids: list[Any] | int | str
    name: str


def checked_value(value: str) -> str:
    if not value:
        raise OpenRequestError("value must not be empty (QingLong's rule)")
    return value


def new_entries(body: bytes) -> list[EnvBody]:
    """``POST /open/envs``'s list: at least one env."""
    entries = decode(body, list[EnvBody])
    if not entries:
        raise OpenRequestError("the request body must list at least one env")
    for entry in entries:
        checked_value(entry.value)
    return entries


def rename_request(body: bytes) -> tuple[list[int], str]:
    request = decode(body, EnvNameBody)
    ids = request.ids if isinstance(request.ids, list) else [request.ids]
    return parse_ids(msgspec.json.encode(ids)), request.name


def edit_request(body: bytes) -> tuple[int, EnvEditBody]:
    request = decode(body, EnvEditBody)
    return parse_id(request.id), request


def env_object(entry: Any, offset_s: int) -> dict[str, Any]:
    """QingLong's env object of an entry (as ``env list --json`` gives it: a secret without its
    value)."""
    return {
        "id": entry.id,
        "name": entry.name,
        "value": MASK if entry.value is msgspec.UNSET else entry.value,
        "remarks": entry.remarks,
        "status": 0 if entry.enabled else 1,
        "position": entry.position,
        "timestamp": js_date(entry.updated_at_ms, offset_s),
        "isPinned": int(entry.pinned),
        "labels": list(entry.labels),
        "createdAt": iso(entry.created_at_ms),
        "updatedAt": iso(entry.updated_at_ms),
    }


def check_name(name: object) -> None:
    """Refuse (403) a variable an app may not touch: one that makes programs load other code."""
    if type(name) is str and (name in CODE_LOADING_NAMES or name.startswith("LD_")):
        raise OpenRefusedError(f"{name} makes programs load or run other code: an app cannot set, change or enable "
                               f"it (QingLong lets any env token do so, and so run code as root in every task); "
                               f"set it on the device with edge-runtime env add")
