"""Helpers shared by the CLI commands: opening the store, printing, waking the service.

Nothing here imports the Local adapter at import time (the Local openers are in
``edge_runtime.cli.local_database``, imported when a Local store is opened): the user commands'
modules also serve ``edge-runtime-cluster``, which must never load it.

The user commands (submit, cancel, show, list, events, logs, dispatch, env) are written against the
service's ``Store`` port (edge_runtime/contract/ports.py) and get their store from ``args.stores``,
which their ``register`` sets: ``LOCAL_STORES`` (the SQLite file at ``--db``) here, a PostgreSQL
opener in ``edge-runtime-cluster``. One implementation of each command, two composition roots.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError

_json_encoder = msgspec.json.Encoder()


#: How a user command uses its store: READ never creates, switches to WAL nor migrates it; WRITE
#: needs an existing one (migrated on Local); CREATE may create it.
READ, WRITE, CREATE = "read", "write", "create"


class LocalStores:
    """The edge CLI's composition root of the user commands: the Local store at ``--db``."""

    @staticmethod
    def open(args: argparse.Namespace, access: str) -> contextlib.closing:
        """The ``LocalStore`` of ``args.db`` for ``access``, closed when the ``with`` block ends."""
        from edge_runtime.cli.local_database import open_guarded_with_clock, open_read_only
        from edge_runtime.local.clock import SystemClock
        from edge_runtime.local.store import LocalStore

        if access == READ:
            db, clock = open_read_only(args), SystemClock()
        else:
            db, clock = open_guarded_with_clock(args.db, create=access == CREATE, make_parent=access == CREATE)
        return contextlib.closing(LocalStore(db, args.db, clock))

    @staticmethod
    def log_dir(args: argparse.Namespace) -> Path:
        """The Attempt logs' directory as ``serve`` resolves it (configuration, else beside ``--db``)."""
        from edge_runtime.service.config import load_config

        return load_config().resolved_log_dir(args.db)


LOCAL_STORES = LocalStores()


def add_run_argument(parser: argparse.ArgumentParser) -> None:
    """The positional Run id of the commands about one Run."""
    parser.add_argument("run_id", metavar="RUN", help="the Run id, or a unique prefix or suffix of it (12 characters at most)")


def resolve_run_id(store: Any, form: str) -> str:
    """The full id of the Run that ``form`` names: a full id as it is, else a unique prefix or
    suffix of at most ``MAX_SHORT_ID_LENGTH`` characters (as ``list`` shows it).

    Raises:
        RunNotFoundError: no Run matches. AmbiguousRunIdError: several do (named).
    """
    from edge_runtime.contract.runs import MAX_SHORT_ID_LENGTH, AmbiguousRunIdError, RunNotFoundError

    if not isinstance(form, str) or len(form) > MAX_SHORT_ID_LENGTH or not form:
        return form
    found = store.runs.find_run_ids(form, 6)
    if not found:
        raise RunNotFoundError(f"no run with id {form!r} (nor one whose id begins or ends with it)")
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise AmbiguousRunIdError(f"{form!r} names several runs: {shown}; give more characters")
    return found[0]


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (camelCase contract structs)")


def print_json(value: Any, secrets: Sequence[str] = ()) -> None:
    """``value`` as one line of JSON; with ``secrets``, every secret's value in its strings masked."""
    if secrets:
        value = _masked(msgspec.to_builtins(value), secrets)
    sys.stdout.write(_json_encoder.encode(value).decode() + "\n")


def secret_values(store: Any) -> tuple[str, ...]:
    """The values printed output must mask: the store's secrets (none where it keeps no variables)."""
    environment = getattr(store, "environment", None)
    return () if environment is None else tuple(environment.secret_values())


def masked(record: Any, secrets: Sequence[str]) -> Any:
    """A contract record with every secret's value masked in its strings, as the same type (what
    the text output of one record prints)."""
    if not secrets:
        return record
    return msgspec.convert(_masked(msgspec.to_builtins(record), secrets), type=type(record))


def _masked(value: Any, secrets: Sequence[str]) -> Any:
    """Builtins ``value`` with a secret's value masked wherever a string value holds it: a Run's
    own command, ``--env`` or cancel reason may repeat one. Keys are names (a record's fields, a
    variable's name), never masked: the shape of the output stays what a script expects."""
    from edge_runtime.contract.environment import mask_text

    if isinstance(value, str):
        return mask_text(value, secrets)
    if isinstance(value, list):
        return [_masked(item, secrets) for item in value]
    if isinstance(value, dict):
        return {k: _masked(v, secrets) for k, v in value.items()}
    return value


def format_ms(value: Any) -> str:
    """A millisecond timestamp in the device's local time with its offset
    (``2026-12-03 08:00:00 +08:00``), or '-' when absent; ``--json`` keeps the milliseconds."""
    if not isinstance(value, int) or isinstance(value, bool):
        return "-"
    return _with_offset(dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC).astimezone())


def format_ms_at_offset(value: int, offset_s: int) -> str:
    """A millisecond timestamp as a clock ``offset_s`` seconds east of UTC shows it (a schedule's
    own zone), in :func:`format_ms`'s form."""
    return _with_offset(dt.datetime.fromtimestamp(value / 1000, dt.timezone(dt.timedelta(seconds=offset_s))))


def _with_offset(local: dt.datetime) -> str:
    offset = local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M:%S} {offset[:3]}:{offset[3:]}"


#: C0 controls, DEL and C1 controls: a stored name or reason could otherwise move the cursor,
#: rewrite the terminal's title or hide text when printed. Escaped as JSON escapes them.
_CONTROL_ESCAPES = {c: f"\\u{c:04x}" for c in (*range(0x20), *range(0x7F, 0xA0))} | {
    0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"
}


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\u001b``), for plain-text output."""
    return text.translate(_CONTROL_ESCAPES)


def present(value: Any, default: str = "-") -> str:
    return default if value is msgspec.UNSET or value is None else printable(str(value))


#: What ``submit`` and ``schedule add`` say on stderr when no service took the wake-up (exit 0).
NO_SERVICE_NOTE = "Note: no service is running for this database; the Run will wait until one starts\n"


def wake_service(wake: Callable[[], int | None], *, note_when_none: bool = False) -> None:
    """Tell a running service that new work was committed, so it acts now instead of at its next poll.

    Best effort by design: when no service runs, the committed work simply waits for one (with
    ``note_when_none``, the user is told so when ``wake`` says 0 services took it). It runs
    after the commit, so a failure is at most a warning: the command has succeeded either way.
    """
    try:
        woken = wake()
    except (OSError, EdgeRuntimeError) as exc:
        sys.stderr.write(f"Warning: committed, but could not wake the service ({exc}); it acts at its next poll\n")
        return
    if note_when_none and woken == 0:
        sys.stderr.write(NO_SERVICE_NOTE)
