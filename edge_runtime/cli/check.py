"""``edge-runtime check``: integrity, migrations, durability settings and stored invariants.

Read-only: it never migrates, so a database with pending migrations is reported as such.
"""

from __future__ import annotations

import argparse
import sys

import msgspec

from edge_runtime.local.database import open_database
from edge_runtime.local.health import check_health
from edge_runtime.local.retention import RetentionPolicy
from edge_runtime.service.config import ConfigError, load_config


def register(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    parser = subparsers.add_parser("check", help=help_text)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--config", metavar="FILE",
                        help="the serve configuration whose retention to report (default: $EDGE_RUNTIME_CONFIG)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    policy, log_dir, config_problem = None, None, None
    try:
        config = load_config(args.config)
    except ConfigError as exc:  # the database is still checked; `serve` would refuse to start
        config_problem = str(exc)
    else:
        policy = RetentionPolicy(retain_runs=config.retain_runs, retain_days=config.retain_days,
                                 log_total_max_bytes=config.log_total_max_bytes)
        log_dir = config.resolved_log_dir(args.db)
    with open_database(args.db, create=False, read_only=True) as db:
        report = check_health(db, policy, log_dir, config_problem=config_problem)
        report = msgspec.structs.replace(report, checks=[*report.checks, _notify_transport(db)])
        report = msgspec.structs.replace(report, ok=all(c.ok for c in report.checks))
    if args.json:
        sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    else:
        for item in report.checks:
            sys.stdout.write(f"{'ok  ' if item.ok else 'FAIL'} {item.name}: {item.detail}\n")
        sys.stdout.write(f"{report.database}: {'ready' if report.ok else 'NOT READY'}\n")
    return 0 if report.ok else 1


def _notify_transport(db):
    """Which transports and TLS notifications can use here (docs/notifications.md); not ready when a
    channel is configured and nothing here speaks HTTPS."""
    from edge_runtime.local.health import HealthCheck
    from edge_runtime.service.notify_transport import detect

    transports = detect()
    if db.pending:
        return HealthCheck("notify_transport", True, transports.describe())
    from edge_runtime.local.notifications import LocalNotificationRepository

    channels = LocalNotificationRepository(db).list_channels()
    ok = not channels or transports.https()
    detail = transports.describe()
    if not ok:
        detail += f"; {len(channels)} channel(s) configured and no HTTPS transport: install curl (opkg install curl ca-bundle)"
    return HealthCheck("notify_transport", ok, detail)
