"""Opening a runtime connection to the Cluster Profile database (cluster-profile.md §2, §4)."""

from __future__ import annotations

from typing import Any

import psycopg

#: Sent by every runtime connection, and also set on the ql3_runtime role by ``bootstrap``.
RUNTIME_SETTINGS = {"statement_timeout": "5s", "lock_timeout": "1s", "idle_in_transaction_session_timeout": "10s"}
_OPTIONS = " ".join(f"-c {name}={value}" for name, value in RUNTIME_SETTINGS.items())


def connect(dsn: str) -> psycopg.Connection[Any]:
    """A connection in autocommit mode (transactions are explicit) with the runtime timeouts.

    Statements are prepared after psycopg's default threshold; nothing else is started: no pool,
    no listener, no timer.
    """
    return psycopg.connect(dsn, autocommit=True, options=_OPTIONS)
