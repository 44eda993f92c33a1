"""The user commands of ``edge-runtime-cluster`` on a PostgresStore: the edge CLI's own, and ``retention``.

``submit``, ``cancel``, ``show``, ``list``, ``events``, ``logs``, ``dispatch``, ``env`` and ``schedule`` are the modules of
``edge_runtime.cli``, unchanged: the same arguments, output (text and ``--json``), exit codes and
error codes. Only the composition differs: their ``stores`` is :data:`POSTGRES_STORES`, which opens
a ``PostgresStore`` on ``--dsn`` (or ``$EDGE_RUNTIME_CLUSTER_DSN``) instead of the SQLite file at
``--db``. A DSN is never printed: it may hold a password.

``retention show|set`` is the cluster's own: the policy is one row of the database
(:mod:`cluster_postgres.retention`), the same for every worker.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cluster_postgres.connection import DSN_ENV_VAR, given_dsn

if TYPE_CHECKING:
    from cluster_postgres.retention import RetentionSettings

#: The edge CLI's commands that work on any store (the rest are the device's: serve, migrate and
#: check, whose cluster counterparts are this CLI's own).
USER_COMMANDS = ("submit", "cancel", "show", "list", "events", "logs", "dispatch", "env", "schedule", "notify")


class PostgresStores:
    """The cluster CLI's composition root of the user commands."""

    @staticmethod
    def open(args: argparse.Namespace, access: str) -> contextlib.closing:
        """A ``PostgresStore`` on the command's DSN (any ``access``: the schema is migrated by
        ``edge-runtime-cluster migrate``, never by a user command), closed after the command."""
        from cluster_postgres.store import PostgresStore

        return contextlib.closing(PostgresStore(given_dsn(args.dsn, os.environ)))

    @staticmethod
    def log_dir(args: argparse.Namespace) -> Path:
        """This host's Attempt logs' directory as ``serve`` resolves it."""
        from cluster_postgres.serve import resolved_log_dir
        from edge_runtime.service.config import load_config

        return resolved_log_dir(load_config(), os.environ)

    @staticmethod
    def scripts_dir(args: argparse.Namespace) -> None:
        """None: a ``task`` command's script is on the host of whichever worker runs it, so it is
        not checked at submit (a missing one fails the Run, saying so)."""
        return None


POSTGRES_STORES = PostgresStores()


def register(commands: argparse._SubParsersAction) -> None:
    """Add the user commands, each with ``--dsn``, to ``edge-runtime-cluster``'s parser."""
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


# ----------------------------------------------------------------------- retention


def register_retention(commands: argparse._SubParsersAction) -> None:
    """Add ``retention show|set`` to ``edge-runtime-cluster``'s parser."""
    from edge_runtime.cli.common import add_json_flag

    parser = commands.add_parser("retention", help="show or set how much finished history the database keeps",
                                 description="The policy is kept once in the database; every worker prunes by "
                                 "it, by database time. Unfinished Runs are never removed.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    show = actions.add_parser("show", help="the policy and what the history holds now")
    change = actions.add_parser("set", help="change the policy (only what is given)")
    change.add_argument("--runs", type=int, metavar="N", help="keep at most N finished Runs")
    change.add_argument("--days", type=int, metavar="D", help="keep no finished Run older than D days")
    for sub in (show, change):
        add_json_flag(sub)
        sub.add_argument("--dsn", help=f"ql3_runtime connection string (default: ${DSN_ENV_VAR})")


def run_retention(args: argparse.Namespace) -> int:
    from cluster_postgres.store import PostgresStore
    from edge_runtime.cli.common import print_json

    store = PostgresStore(given_dsn(args.dsn, os.environ))
    try:
        if args.action == "set":
            settings = store.retention.set_policy(retain_runs=args.runs, retain_days=args.days)
        else:
            settings = store.retention.settings()
    finally:
        store.close()
    if args.json:
        print_json(settings)
    else:
        sys.stdout.write(describe_retention(settings))
    return 0


def describe_retention(s: RetentionSettings) -> str:
    from edge_runtime.cli.common import format_ms

    sizes = "  ".join(f"{table}={size}" for table, size in s.table_bytes.items())
    return (f"retain runs  {s.retain_runs} (finished Runs kept at most)\n"
            f"retain days  {s.retain_days} (no finished Run kept longer)\n"
            f"updated      {format_ms(s.updated_at_ms)}\n"
            f"finished     {s.finished_runs} (oldest {format_ms(s.oldest_finished_at_ms)}); "
            f"{s.runs_beyond_policy} beyond the policy, pruned by the workers\n"
            f"active       {s.active_runs} (never pruned)\n"
            f"bytes        {sizes}\n")
