"""``edge-runtime-cluster serve``: the device service's loop on the PostgreSQL stores.

The cluster's composition root (cluster-profile.md §6): the only place that picks the PostgreSQL
adapter and hands an opener of its ``Store`` to the same ``DeviceService`` the edge ``serve``
runs (start queued Runs, deliver cancels, enforce SIGKILL deadlines, recovery, per-Attempt logs).
The service knows nothing of PostgreSQL; wake-up is ``LISTEN/NOTIFY``.

Schedules and Run timeouts are the device's scheduler hook over the store's
:mod:`cluster_postgres.schedules` (database time; each slot fired once across every worker;
cancels, for a timeout or an overlap ``replace``, through the dispatch). Retention is
:mod:`cluster_postgres.retention`: the history by the policy kept once in the database (pruned
through ``ql3.prune_history``: the runtime role has no DELETE), this host's log directory by
``log_total_max_bytes``. The settings of the edge ``serve`` apply (file, ``EDGE_RUNTIME_<KEY>``,
flags) except ``retain_runs`` and ``retain_days``, which the database holds
(``edge-runtime-cluster retention set``) and which are ignored here.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from cluster_postgres.connection import DSN_ENV_VAR, describe_dsn, given_dsn
from edge_runtime.cli.serve import add_service_flags, service_overrides
from edge_runtime.service.config import CONFIG_ENV_VAR, ConfigError, ServiceConfig, load_config

#: Per-Attempt logs when neither --log-dir nor the setting is given: under the state directory.
DEFAULT_LOG_SUBDIR = Path("edge-runtime-cluster") / "logs"


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "serve",
        help="run the worker service against the database (foreground, until SIGTERM/SIGINT)",
        description="Start queued Runs as processes of this host, deliver cancel requests to their process "
        "groups, enforce SIGKILL deadlines and recover Attempts, sharing the queue with every other worker "
        "of the database. Logs go to stderr, one line per event. Settings: a TOML file (--config or $"
        + CONFIG_ENV_VAR + "), then EDGE_RUNTIME_<KEY> environment variables, then these flags.",
    )
    parser.add_argument("--dsn", help=f"ql3_runtime connection string; several hosts with "
                        f"target_session_attrs=read-write follow a failover (default: ${DSN_ENV_VAR})")
    add_service_flags(parser,
                      worker_id_help="this host's worker name, unique among the database's workers "
                      "(default edge-<hostname>)",
                      slots_help="how many Attempts may run at once on this host (default 2)",
                      log_dir_help="per-Attempt logs (default: $XDG_STATE_HOME/edge-runtime-cluster/logs)",
                      wake_word="notification")


def run(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    dsn = given_dsn(args.dsn, env)
    # Validate the whole configuration before connecting.
    config = load_config(args.config, env=env, overrides=service_overrides(args))
    if config.panel_listen is not msgspec.UNSET:
        # The panel keeps its password and sessions in the device's database: refused rather than
        # ignored, so nobody believes a cluster worker serves it (docs/cluster.md).
        raise ConfigError(f"panel_listen {config.panel_listen!r}: the web panel is served by the device's "
                          "`edge-runtime serve` only; the Cluster Profile serves none (unset it)")
    return build_service(dsn, config, log_dir=resolved_log_dir(config, env)).run()


def resolved_log_dir(config: ServiceConfig, env: Mapping[str, str]) -> Path:
    """``log_dir`` when set, else ``$XDG_STATE_HOME`` (or ``~/.local/state``) + DEFAULT_LOG_SUBDIR."""
    if config.log_dir is not msgspec.UNSET:
        return Path(config.log_dir).expanduser()
    state_home = env.get("XDG_STATE_HOME") or "~/.local/state"
    try:
        return Path(state_home).expanduser() / DEFAULT_LOG_SUBDIR
    except RuntimeError:  # no $HOME and no passwd entry (procd, cron): "~" means nothing
        raise ConfigError(f"cannot expand {state_home!r}: $HOME is not set; give --log-dir") from None


def build_service(dsn: str, config: ServiceConfig, *, log_dir: Path, journal: Any = None) -> Any:
    """The device service on the PostgreSQL store at ``dsn``, with schedules, timeouts and retention."""
    from cluster_postgres.retention import PostgresRetention
    from cluster_postgres.store import postgres_store_opener
    from edge_runtime.contract.device import read_boot_id
    from edge_runtime.service.journal import Journal
    from edge_runtime.service.scheduler import Scheduler
    from edge_runtime.service.service import DeviceService

    journal = journal or Journal()
    if config.idle_session_lease_ms is msgspec.UNSET:
        # No long idle lease here: it saves flash writes on a device, while on a cluster the other
        # workers would wait that long to end the Attempts of a worker that died soon after idling.
        config = msgspec.structs.replace(config, idle_session_lease_ms=config.session_lease_ms)

    def report(level: str, event: str, **fields: Any) -> None:
        getattr(journal, "warning" if level == "warn" else level)(event, **fields)

    journal.info("cluster.composition", store=describe_dsn(dsn), worker=config.worker_id,
                 retention="on (the database's policy; this host's logs by log_total_max_bytes)",
                 schedules="on (database time)",
                 timeouts="on (database time)")
    opener = postgres_store_opener(dsn, worker_id=config.worker_id, report=report)
    # An Attempt never runs wherever `serve` was started: work_dir, else a `work` beside the logs.
    work_dir = (Path(config.work_dir).expanduser() if config.work_dir is not msgspec.UNSET
                else log_dir.parent / "work")
    # A `task` command's relative script: scripts_dir, else a `scripts` beside the logs (as `work`).
    scripts_dir = config.scripts_dir_beside(log_dir.parent)

    # The host's boot id only marks a start: @reboot is refused on the cluster, so none is armed.
    boot_id = read_boot_id()

    def scheduler(store: Any, journal: Journal) -> Scheduler:
        return Scheduler(store.schedules, journal, boot_id)

    def retention(store: Any, log_dir_fd: int | None) -> PostgresRetention:
        return PostgresRetention(store.retention, log_dir, log_total_max_bytes=config.log_total_max_bytes,
                                 log_dir_fd=log_dir_fd)

    senders: list = []  # the notification sender, once the service started it

    def notify_sender(journal: Journal, store: Any) -> Any:
        """The outbox's sender (docs/notifications.md), on a connection of its own; every worker
        runs one, and the claim's row locks keep them from sending a row twice."""
        import os

        from edge_runtime.service.notify_sender import NotifySender

        sender = NotifySender(open_store=opener, journal=journal, owner=f"{config.worker_id}/{os.getpid()}")
        senders.append(sender)
        return sender

    def notify_wake(store: Any, journal: Journal) -> Any:
        from edge_runtime.service.notify_sender import NotifyWakeHook

        return NotifyWakeHook(senders)

    return DeviceService(opener, config, log_dir=log_dir, work_dir=work_dir, scripts_dir=scripts_dir, journal=journal,
                         tick_hooks=(scheduler, notify_wake),
                         retention=retention, side_servers={"notify": notify_sender})
