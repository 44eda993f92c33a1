"""``edge-runtime migrate``: create the database if needed and apply pending migrations."""

from __future__ import annotations

import argparse
import sys

from edge_runtime.cli.db_path import ensure_parent
from edge_runtime.local.database import open_database
from edge_runtime.local.migrations import known_migrations


def register(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    parser = subparsers.add_parser("migrate", help=help_text)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    ensure_parent(args.db)
    with open_database(args.db) as db:
        applied = db.connection.execute("SELECT id FROM schema_migrations ORDER BY id").fetchall()
    sys.stdout.write(f"{args.db}: {len(applied)}/{len(known_migrations())} migrations applied, up to date\n")
    return 0
