"""The user commands of ``edge-runtime-cluster``: the edge CLI's own, on a PostgresStore.

``submit``, ``cancel``, ``show``, ``list``, ``events``, ``logs``, ``dispatch``, ``env`` and ``schedule`` are the modules of
``edge_runtime.cli``, unchanged: the same arguments, output (text and ``--json``), exit codes and
error codes. Only the composition differs: their ``stores`` is :data:`POSTGRES_STORES`, which opens
a ``PostgresStore`` on ``--dsn`` (or ``$EDGE_RUNTIME_CLUSTER_DSN``) instead of the SQLite file at
``--db``. A DSN is never printed: it may hold a password.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
from pathlib import Path

#: The edge CLI's commands that work on any store (the rest are the device's: serve, migrate and
#: check, whose cluster counterparts are this CLI's own).
USER_COMMANDS = ("submit", "cancel", "show", "list", "events", "logs", "dispatch", "env", "schedule")


class PostgresStores:
    """The cluster CLI's composition root of the user commands."""

    @staticmethod
    def open(args: argparse.Namespace, access: str) -> contextlib.closing:
        """A ``PostgresStore`` on the command's DSN (any ``access``: the schema is migrated by
        ``edge-runtime-cluster migrate``, never by a user command), closed after the command."""
        from cluster_postgres.store import PostgresStore

        return contextlib.closing(PostgresStore(command_dsn(args)))

    @staticmethod
    def log_dir(args: argparse.Namespace) -> Path:
        """This host's Attempt logs' directory as ``serve`` resolves it."""
        from cluster_postgres.serve import resolved_log_dir
        from edge_runtime.service.config import load_config

        return resolved_log_dir(load_config(), os.environ)


POSTGRES_STORES = PostgresStores()


def command_dsn(args: argparse.Namespace, env: dict[str, str] | os._Environ[str] | None = None) -> str:
    """``--dsn``, else ``$EDGE_RUNTIME_CLUSTER_DSN``: what ``serve`` reads, refused as ``serve``
    refuses it (a DSN that is given but malformed is ``CLUSTER_DSN_INVALID``, at connect)."""
    from cluster_postgres.serve import DSN_ENV_VAR
    from edge_runtime.service.config import ConfigError

    dsn = args.dsn or (os.environ if env is None else env).get(DSN_ENV_VAR)
    if not dsn:
        raise ConfigError(f"no database: give --dsn or set ${DSN_ENV_VAR}")
    return dsn


def register(commands: argparse._SubParsersAction) -> None:
    """Add the user commands, each with ``--dsn``, to ``edge-runtime-cluster``'s parser."""
    from cluster_postgres.serve import DSN_ENV_VAR
    from edge_runtime.cli.parser import COMMANDS

    for name in USER_COMMANDS:
        module_name, help_text = COMMANDS[name]
        importlib.import_module(f"edge_runtime.cli.{module_name}").register(commands, help_text, stores=POSTGRES_STORES)
        for parser in _leaves(commands.choices[name]):
            parser.add_argument("--dsn", help=f"ql3_runtime connection string (default: ${DSN_ENV_VAR}; a password "
                                "is better kept in ~/.pgpass: a command line is visible in ps)")


def _leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers that run a command: ``parser`` itself, or those of its sub-commands (dispatch)."""
    nested = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not nested:
        return [parser]
    return [leaf for action in nested for child in action.choices.values() for leaf in _leaves(child)]
