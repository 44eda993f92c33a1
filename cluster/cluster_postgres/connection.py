"""Opening a runtime connection to the Cluster Profile database (cluster-profile.md §2, §4)."""

from __future__ import annotations

from typing import Any

import psycopg

#: Sent by every runtime connection, and also set on the ql3_runtime role by ``bootstrap``.
RUNTIME_SETTINGS = {"statement_timeout": "5s", "lock_timeout": "1s", "idle_in_transaction_session_timeout": "10s"}
#: The channel a sleeping service LISTENs on (``cluster_postgres.store``). Every change a worker
#: should act on at once (submit, cancel, dispatch rearm) sends ``NOTIFY_WAKE`` inside its own
#: transaction, so the wake-up is delivered exactly when the change commits, and never without it.
WAKE_CHANNEL = "ql3_wake"
NOTIFY_WAKE = f"NOTIFY {WAKE_CHANNEL}"
_OPTIONS = " ".join(f"-c {name}={value}" for name, value in RUNTIME_SETTINGS.items())


def connect(dsn: str) -> psycopg.Connection[Any]:
    """A connection in autocommit mode (transactions are explicit) with the runtime timeouts.

    Statements are prepared after psycopg's default threshold; nothing else is started: no pool,
    no listener, no timer.
    """
    return psycopg.connect(dsn, autocommit=True, options=_OPTIONS)
