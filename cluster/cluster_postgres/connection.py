"""Opening a runtime connection to the Cluster Profile database (cluster-profile.md §2, §4)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

#: Where the DSN comes from when ``--dsn`` is not given, for ``serve`` and every user command (a
#: password is better in ~/.pgpass or $PGPASSFILE than in either: a command line is visible to
#: every user in ``ps``).
DSN_ENV_VAR = "EDGE_RUNTIME_CLUSTER_DSN"
#: Sent by every runtime connection, and also set on the ql3_runtime role by ``bootstrap``.
RUNTIME_SETTINGS = {"statement_timeout": "5s", "lock_timeout": "1s", "idle_in_transaction_session_timeout": "10s"}
#: The name of the channel a sleeping service LISTENs on (``cluster_postgres.store``): a secret of
#: the database (migration 0008) that only the runtime role may read, since any role may NOTIFY
#: any channel it can name. Every change a worker should act on at once (submit, cancel, dispatch
#: rearm, the schedule commands) runs ``NOTIFY_WAKE`` inside its own transaction, so the wake-up
#: is delivered exactly when the change commits, and never without it; the statement reads the
#: name itself, so no notifying statement's text carries it (a missing row fails the change:
#: pg_notify refuses a NULL channel).
WAKE_CHANNEL_SQL = "SELECT name FROM ql3.wake_channel WHERE id = 1"
NOTIFY_WAKE = f"SELECT pg_notify(({WAKE_CHANNEL_SQL}), '')"
_OPTIONS = " ".join(f"-c {name}={value}" for name, value in RUNTIME_SETTINGS.items())
#: Used unless the DSN says otherwise. A network that vanishes without a reset (a cut link, a host
#: powered off) would otherwise leave a worker blocked in one read for the kernel's many minutes:
#: data unacknowledged for 15 s, an idle connection with 3 unanswered keepalives (10 s idle, 3 s
#: apart) or a connect that takes 5 s now fails, and the worker retries (docs/cluster.md).
NETWORK_DEFAULTS = {"connect_timeout": "5", "keepalives": "1", "keepalives_idle": "10", "keepalives_interval": "3",
                    "keepalives_count": "3", "tcp_user_timeout": "15000"}


#: What of a DSN may be shown in a log or an error: never the password or other secrets.
_SHOWN = ("host", "hostaddr", "port", "dbname", "user")


def given_dsn(dsn: str | None, env: Mapping[str, str]) -> str:
    """``--dsn`` (``dsn``), else ``$EDGE_RUNTIME_CLUSTER_DSN`` of ``env``: the one rule ``serve``
    and the user commands follow. A DSN that is given but malformed is refused at connect
    (``CLUSTER_DSN_INVALID``).

    Raises:
        ConfigError: neither gives one (``CONFIG_INVALID``).
    """
    if dsn:
        return dsn
    found = env.get(DSN_ENV_VAR)
    if not found:
        from edge_runtime.service.config import ConfigError

        raise ConfigError(f"no database: give --dsn or set ${DSN_ENV_VAR}")
    return found


def parse_dsn(dsn: str) -> dict[str, str]:
    """The DSN's parameters. Every command parses its DSN here first, so that no parse error of
    libpq, which quotes the text around the mistake (``invalid percent-encoded token:
    "S3cr%zzPass"``), can reach a user or a log.

    Raises:
        ClusterDsnError: ``dsn`` is not a connection string (the message never quotes it).
    """
    from cluster_postgres.errors import ClusterDsnError

    try:
        return conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        raise ClusterDsnError("the DSN is not a valid PostgreSQL connection string (key=value pairs or a "
                              "postgresql:// URI; not shown, as it may hold a password)") from None


def describe_dsn(dsn: str) -> str:
    """The DSN's host, port, database and user, for the log (no password, no other option).

    Raises:
        ClusterDsnError: ``dsn`` is not a connection string (see :func:`parse_dsn`).
    """
    parts = parse_dsn(dsn)
    return " ".join(f"{key}={parts[key]}" for key in _SHOWN if parts.get(key))


def connect(dsn: str) -> psycopg.Connection[Any]:
    """A connection in autocommit mode (transactions are explicit) with the runtime timeouts.

    Statements are prepared after psycopg's default threshold; nothing else is started: no pool,
    no listener, no timer.
    """
    given = parse_dsn(dsn)
    network = {key: value for key, value in NETWORK_DEFAULTS.items() if key not in given}
    return psycopg.connect(dsn, autocommit=True, options=_OPTIONS, **network)
