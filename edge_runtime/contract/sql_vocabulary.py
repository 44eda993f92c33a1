"""The contract's vocabularies (status names, outcomes) as SQL literals, for the SQL adapters.

A status name is typed once, in its enum; the Local (SQLite) and Cluster (PostgreSQL) adapters
write it into their SQL through these functions and never retype it
(``tests/unit/test_sql_status_literals.py`` fails on a quoted status name in an adapter's SQL).
The names stay literals rather than bound parameters because a partial index is used only for a
query term written like its own ``WHERE`` (SQLite and PostgreSQL both decide that when planning).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection

from edge_runtime.contract.cancellation_dispatch import DispatchStatus
from edge_runtime.contract.runs import (
    ACTIVE_ATTEMPT_STATUSES,
    ACTIVE_RUN_STATUSES,
    TERMINAL_ATTEMPT_STATUSES,
    AttemptStatus,
    RunStatus,
)

# A vocabulary value is a lowercase word; anything else (a quote above all) never reaches SQL text.
_SQL_SAFE_NAME = re.compile(r"[a-z][a-z_]*")


def sql_literal(member: enum.StrEnum) -> str:
    """``member``'s value as an SQL string literal: ``'queued'``."""
    if _SQL_SAFE_NAME.fullmatch(member.value) is None:
        raise ValueError(f"{type(member).__name__}.{member.name} = {member.value!r} is not an SQL-safe name")
    return f"'{member.value}'"


def sql_in(kind: type[enum.StrEnum], members: Collection[enum.StrEnum]) -> str:
    """An SQL ``IN`` list of ``members`` in the enum's declaration order: ``('pending', 'retry_wait')``.

    The order is fixed (not the set's) because the partial indexes list their names in declaration
    order, and SQLite matches a query term to a partial index only when it is written the same way.
    """
    unknown = set(members) - set(kind)
    if unknown or not members:
        raise ValueError(f"sql_in needs members of {kind.__name__}, got {sorted(members)!r}")
    return "(" + ", ".join(sql_literal(member) for member in kind if member in members) + ")"


ACTIVE_RUN_SQL = sql_in(RunStatus, ACTIVE_RUN_STATUSES)
ACTIVE_ATTEMPT_SQL = sql_in(AttemptStatus, ACTIVE_ATTEMPT_STATUSES)
ENDED_ATTEMPT_SQL = sql_in(AttemptStatus, TERMINAL_ATTEMPT_STATUSES)
#: A dispatch that is waiting for its (next) try: due once ``next_attempt_at_ms`` has passed.
WAITING_DISPATCH_SQL = sql_in(DispatchStatus, {DispatchStatus.PENDING, DispatchStatus.RETRY_WAIT})
#: A dispatch that is not settled yet (not ``dispatched``, not ``blocked``).
OPEN_DISPATCH_SQL = sql_in(DispatchStatus, {DispatchStatus.PENDING, DispatchStatus.LEASED, DispatchStatus.RETRY_WAIT})
