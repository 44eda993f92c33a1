"""``edge-runtime-cluster``: bootstrap, migrate and check a Cluster Profile database; serve it; its retention; the user commands.

The user commands (submit, cancel, show, list, events, logs, dispatch, env, schedule) are the edge CLI's own, on
the database (``cluster_postgres.commands``).

Errors go to stderr as one line, ``Error: <message> [<CODE>]``, exit code 1; bad usage exits 2.
A DSN is never printed (it may hold a password).
"""

from __future__ import annotations

import argparse
import json
import sys

import psycopg

from cluster_postgres import __version__
from edge_runtime.contract.errors import EdgeRuntimeError


def _parser() -> argparse.ArgumentParser:
    from edge_runtime.cli.parser import CliParser

    # The edge CLI's parser class: a usage error is one line and exit code 2, as in edge-runtime.
    parser = CliParser(prog="edge-runtime-cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"edge-runtime-cluster {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=CliParser)
    boot = commands.add_parser("bootstrap", help="create the three roles, the database and its grants (idempotent)")
    boot.add_argument("--admin-dsn", required=True, help="a role with CREATEROLE and CREATEDB")
    boot.add_argument("--database", required=True, help="database to create or keep, e.g. qinglong")
    mig = commands.add_parser("migrate", help="apply pending migrations (connect as ql3_migration_owner)")
    mig.add_argument("--dsn", required=True)
    check = commands.add_parser("check", help="readiness: migration checksums, privilege matrix, settings; exit 1 when not ready")
    check.add_argument("--dsn", required=True)
    check.add_argument("--json", action="store_true", help="print the checks as JSON")
    from cluster_postgres import commands as user_commands
    from cluster_postgres import serve

    serve.register(commands)
    user_commands.register_retention(commands)
    user_commands.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The console script's entry point. A Ctrl-C while it loads or runs ends it quietly, exit code
    130 (``edge-runtime-cluster logs RUN | less``), as in ``edge-runtime``."""
    from edge_runtime.cli import EXIT_INTERRUPTED, drop_stdout

    try:
        return _main(argv)
    except KeyboardInterrupt:
        drop_stdout()
        return EXIT_INTERRUPTED


def _main(argv: list[str] | None) -> int:
    from cluster_postgres.commands import USER_COMMANDS
    from edge_runtime.cli.main import execute, require_utf8, wants_json
    from edge_runtime.cli.parser import CliParser

    argv = sys.argv[1:] if argv is None else list(argv)
    for position, token in enumerate(argv, 1):
        require_utf8(f"argument {position}", token)
    CliParser.json_errors = wants_json(argv)
    args = _parser().parse_args(argv)
    if args.command in USER_COMMANDS:
        return execute(lambda: args.run(args), json_errors=bool(getattr(args, "json", False)) or CliParser.json_errors)
    as_json = bool(getattr(args, "json", False))
    try:
        from cluster_postgres.connection import describe_dsn

        for dsn in (getattr(args, "dsn", None), getattr(args, "admin_dsn", None)):
            if dsn:
                describe_dsn(dsn)  # refused here, never quoted: libpq's parse errors repeat a password
        if args.command == "serve":
            from cluster_postgres import serve

            return serve.run(args)
        if args.command == "retention":
            from cluster_postgres.commands import run_retention

            return run_retention(args)
        if args.command == "bootstrap":
            from cluster_postgres.readiness import bootstrap

            for line in bootstrap(args.admin_dsn, args.database):
                print(line)
        elif args.command == "migrate":
            from cluster_postgres.migrations import migrate

            applied = migrate(args.dsn)
            print(f"applied {len(applied)} migration(s){': ' + ', '.join(applied) if applied else ''}")
        else:
            from cluster_postgres.readiness import readiness

            checks = readiness(args.dsn)
            ready = all(c.ok for c in checks)
            if as_json:
                print(json.dumps({"ready": ready, "checks": [c._asdict() for c in checks]}, indent=2))
            else:
                for c in checks:
                    print(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}")
            if not ready:
                _error(as_json, "CLUSTER_NOT_READY", "the database is not ready")
                return 1
    except EdgeRuntimeError as exc:
        _error(as_json, exc.code, str(exc))
        return 1
    except ValueError as exc:
        _error(as_json, "USAGE", f"{exc} (try: edge-runtime-cluster {args.command} --help)", usage=True)
        return 2
    except psycopg.Error as exc:
        state = getattr(exc, "sqlstate", None) or "connection"
        _error(as_json, "CLUSTER_STORAGE_FAILED", f"database failed ({state}): {str(exc).strip().splitlines()[0]}")
        return 1
    return 0


def _error(as_json: bool, code: str, message: str, *, usage: bool = False) -> None:
    """One error on stderr: ``Error: <message> [<CODE>]`` (bad usage: without the code), or with
    ``--json`` the one JSON object every command prints, ``{"error": {"code", "message"}}``."""
    if as_json:
        print(json.dumps({"error": {"code": code, "message": message}}, separators=(",", ":"), ensure_ascii=False),
              file=sys.stderr)
    else:
        print(f"Error: {message}" if usage else f"Error: {message} [{code}]", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
