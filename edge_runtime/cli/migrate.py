"""``edge-runtime migrate``: create the database if needed and apply pending migrations; opt-in,
the legacy raw-token scrub, its rollback and the drop of its backup (docs/storage.md: retiring legacy raw tokens)."""

from __future__ import annotations

import argparse
import sys

from edge_runtime.cli.db_path import ensure_parent
from edge_runtime.local.database import ensure_incremental_vacuum, open_database
from edge_runtime.local.migrations import applied_migrations, known_migrations


def register(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    parser = subparsers.add_parser("migrate", help=help_text)
    scrub = parser.add_mutually_exclusive_group()
    scrub.add_argument(
        "--scrub-legacy-tokens",
        action="store_true",
        help="back the database up beside it (0600), rewrite every raw lease token to its digest, then VACUUM",
    )
    scrub.add_argument(
        "--rollback-scrub", action="store_true", help="restore the scrub's backup, if nothing was written since"
    )
    scrub.add_argument(
        "--drop-scrub-backup", action="store_true", help="overwrite the scrub's backup with zeros and delete it"
    )
    parser.set_defaults(run=run)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    from edge_runtime.cli.db_path import require_trusted_database_directory

    require_trusted_database_directory(args.db)  # every command that writes: the check serve applies
    if args.drop_scrub_backup:
        from edge_runtime.local.legacy_token_scrub import drop_scrub_backup

        backup, size = drop_scrub_backup(args.db)
        _say(f"{backup}: overwritten ({size:,} bytes) and deleted" if size else f"{backup}: no scrub backup")
        return 0
    ensure_parent(args.db)
    if args.rollback_scrub:
        from edge_runtime.local.legacy_token_scrub import rollback_scrub

        backup = rollback_scrub(args.db)
        _say(
            f"{args.db}: restored from {backup}; it holds the raw lease tokens again. The backup is kept "
            f"(`edge-runtime migrate --drop-scrub-backup` deletes it)"
        )
        return 0
    if args.scrub_legacy_tokens:
        from edge_runtime.local.legacy_token_scrub import scrub_legacy_tokens

        scrub_legacy_tokens(args.db, progress=_say)
        return 0
    with open_database(args.db) as db:
        applied = applied_migrations(db.connection)
        if ensure_incremental_vacuum(db.connection):  # a file from before 0006: rewritten once
            sys.stdout.write(f"{args.db}: switched to auto_vacuum=INCREMENTAL (free pages are returned)\n")
    known = {m.id for m in known_migrations()}
    sys.stdout.write(f"{args.db}: {len(applied & known)}/{len(known)} migrations applied, up to date\n")
    return 0
