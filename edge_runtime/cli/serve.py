"""``edge-runtime serve``: run the device service in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse

from edge_runtime.cli.db_path import ensure_parent
from edge_runtime.service.config import CONFIG_ENV_VAR, load_config


def register(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    parser = subparsers.add_parser(
        "serve",
        help=help_text,
        description="Run queued commands as local processes, deliver cancel requests to their process "
        "groups and re-adopt running Attempts after a restart. Logs go to stderr, one line per event. "
        "Settings: a TOML file (--config or $" + CONFIG_ENV_VAR + "), then EDGE_RUNTIME_<KEY> "
        "environment variables, then these flags.",
    )
    parser.add_argument("--config", metavar="FILE", help=f"TOML configuration file (default: ${CONFIG_ENV_VAR})")
    parser.add_argument("--worker-id", dest="worker_id", help="stable name of this device's worker")
    parser.add_argument("--slots", type=int, help="how many Attempts may run at once (default 2)")
    parser.add_argument("--grace-ms", dest="grace_ms", type=int,
                        help="SIGTERM to SIGKILL grace period of a cancelled Attempt (default 10000)")
    parser.add_argument("--log-dir", dest="log_dir", help="per-Attempt logs (default: 'logs' beside the database)")
    parser.add_argument("--log-max-bytes", dest="log_max_bytes", type=int, help="size cap of one Attempt's log")
    parser.add_argument("--poll-interval-ms", dest="poll_interval_ms", type=int,
                        help="slow fallback poll in case a wake-up was lost (default 30000)")
    parser.add_argument("--stop-runs-on-exit", dest="stop_runs_on_exit", action="store_const", const=True,
                        help="on SIGTERM/SIGINT also stop running Attempts (default: leave them to be re-adopted)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Validate the whole configuration before touching the database or binding anything.
    config = load_config(
        args.config,
        overrides={
            "worker_id": args.worker_id,
            "slots": args.slots,
            "grace_ms": args.grace_ms,
            "log_dir": args.log_dir,
            "log_max_bytes": args.log_max_bytes,
            "poll_interval_ms": args.poll_interval_ms,
            "stop_runs_on_exit": args.stop_runs_on_exit,
        },
    )
    from edge_runtime.local.retention import LocalRetention, RetentionPolicy
    from edge_runtime.service.service import DeviceService  # the CLI's read commands never load it

    ensure_parent(args.db)
    policy = RetentionPolicy(retain_runs=config.retain_runs, retain_days=config.retain_days,
                             log_total_max_bytes=config.log_total_max_bytes)
    log_dir = config.resolved_log_dir(args.db)
    return DeviceService(args.db, config, retention=lambda db: LocalRetention(db, policy, log_dir),
                         tick_hooks=(_scheduler,)).run()


def _scheduler(db, journal):  # the composition root: the local adapter behind the scheduler's port
    from edge_runtime.local.schedules import LocalScheduleRepository
    from edge_runtime.service.scheduler import Scheduler

    return Scheduler(LocalScheduleRepository(db), journal)
