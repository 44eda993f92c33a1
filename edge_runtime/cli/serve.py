"""``edge-runtime serve``: run the device service in the foreground until SIGTERM/SIGINT.

The composition root: the only place that picks the storage adapter (here the Local one: the
SQLite file at ``--db``, the guarded device clock, the wake socket) and hands it to the service.
"""

from __future__ import annotations

import argparse

from edge_runtime.cli.db_path import ensure_parent
from edge_runtime.contract.task_notify import NOTIFY_VARIABLE
from edge_runtime.service.config import CONFIG_ENV_VAR, ServiceConfig, load_config


def register(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    parser = subparsers.add_parser(
        "serve",
        help=help_text,
        description="Run queued commands as local processes, deliver cancel requests to their process "
        "groups and re-adopt running Attempts after a restart. Logs go to stderr, one line per event. "
        "Settings: a TOML file (--config or $" + CONFIG_ENV_VAR + "), then EDGE_RUNTIME_<KEY> "
        "environment variables, then these flags.",
    )
    add_service_flags(parser, worker_id_help="stable name of this device's worker",
                      slots_help="how many Attempts may run at once (default 2)",
                      log_dir_help="per-Attempt logs (default: 'logs' beside the database)",
                      wake_word="wake-up")
    parser.add_argument("--panel-listen", dest="panel_listen", metavar="HOST:PORT",
                        help="serve the web panel there (e.g. 127.0.0.1:5700; default: no panel; docs/panel.md)")
    parser.set_defaults(run=run)


def add_service_flags(parser: argparse.ArgumentParser, *, worker_id_help: str, slots_help: str, log_dir_help: str,
                      wake_word: str) -> None:
    """The flags every composition of the service takes (this ``serve`` and the cluster's), read
    back by :func:`service_overrides`."""
    parser.add_argument("--config", metavar="FILE", help=f"TOML configuration file (default: ${CONFIG_ENV_VAR})")
    parser.add_argument("--worker-id", dest="worker_id", help=worker_id_help)
    parser.add_argument("--slots", type=int, help=slots_help)
    parser.add_argument("--grace-ms", dest="grace_ms", type=int,
                        help="SIGTERM to SIGKILL grace period of a cancelled Attempt (default 10000)")
    parser.add_argument("--log-dir", dest="log_dir", help=log_dir_help)
    parser.add_argument("--log-max-bytes", dest="log_max_bytes", type=int, help="size cap of one Attempt's log")
    parser.add_argument("--poll-interval-ms", dest="poll_interval_ms", type=int,
                        help=f"slow fallback poll in case a {wake_word} was lost (default 30000)")
    parser.add_argument("--stop-runs-on-exit", dest="stop_runs_on_exit", action="store_const", const=True,
                        help="on SIGTERM/SIGINT also stop running Attempts (default: leave them to be re-adopted)")


#: The settings ``add_service_flags`` declares, by their ServiceConfig names.
_FLAG_KEYS = ("worker_id", "slots", "grace_ms", "log_dir", "log_max_bytes", "poll_interval_ms", "stop_runs_on_exit",
              "panel_listen")


def service_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The settings given as flags (None: not given), which win over the file and the environment."""
    return {key: getattr(args, key, None) for key in _FLAG_KEYS}



def run(args: argparse.Namespace) -> int:
    # Validate the whole configuration before touching the database or binding anything.
    config = load_config(args.config, overrides=service_overrides(args))
    ensure_parent(args.db)
    return build_service(args.db, config).run()


def build_service(db_path: str, config: ServiceConfig, *, journal=None, clock=None):
    """The device service on the Local store at ``db_path`` (``clock``: tests inject one), with
    the Local adapters behind the retention and scheduler ports."""
    # Imported here: the CLI's read commands never load the service.
    from edge_runtime.local.retention import LocalRetention, RetentionPolicy
    from edge_runtime.local.store import local_store_opener, route_sqlite_log
    from edge_runtime.service.journal import Journal
    from edge_runtime.service.service import DeviceService
    from edge_runtime.service.trusted_paths import open_verified

    journal = journal or Journal()
    if not route_sqlite_log(lambda code, message: journal.warning("sqlite.notice", code=code, detail=message)):
        journal.warning("sqlite.log_not_routed", detail="SQLite was initialised before the service started")

    def on_jump(jump) -> None:
        journal.warning("clock.jump_detected", direction=jump.direction, jump_ms=jump.jump_ms,
                        wall_ms=jump.wall_ms, guarded_ms=jump.guarded_ms, at_boot=jump.at_boot)

    open_local = local_store_opener(db_path, clock=clock, on_jump=on_jump)

    def open_store():
        # Root opens the database's -wal/-shm beside it: the directory must be trusted first, and
        # what apsw then opens by name must be what is in the directory that was checked.
        return open_verified(db_path, open_local, lambda store: store.close())

    def submit_handoff(journal, store):  # `submit` handed to this service (edge_runtime/local/handoff.py)
        from edge_runtime.cli.submit_handoff import SubmitHandoffServer

        floor = store.now_ms()  # read here, in the service's thread
        return SubmitHandoffServer(db_path=db_path, journal=journal, scripts_dir=str(config.resolved_scripts_dir(db_path)),
                                   open_store=lambda: _peer_store(store.db, store.where, floor))

    senders: list = []  # the notification sender, once the service started it

    def notify_sender(journal, store):  # the outbox's sender (docs/notifications.md)
        import os

        from edge_runtime.service.notify_sender import NotifySender

        floor = store.now_ms()  # read here, in the service's thread
        sender = NotifySender(open_store=lambda: _peer_store(store.db, store.where, floor), journal=journal,
                              owner=f"{config.worker_id}/{os.getpid()}")
        senders.append(sender)
        return sender

    def notify_wake(store, journal):  # each pass of the loop (a Run ended, a `notify send` poked it) wakes it
        from edge_runtime.service.notify_sender import NotifyWakeHook

        return NotifyWakeHook(senders)

    side_servers = {"submit_handoff": submit_handoff, "notify": notify_sender}
    capabilities = _task_capabilities(db_path, journal)
    if capabilities is not None:
        def task_messages(journal, store):  # a task's own `notify send` (edge_runtime/local/notify_handoff.py)
            from edge_runtime.cli.notify_handoff import TaskMessageServer

            floor = store.now_ms()  # read here, in the service's thread
            return TaskMessageServer(capabilities=capabilities, journal=journal,
                                     open_store=lambda: _peer_store(store.db, store.where, floor))

        side_servers["notify_task_messages"] = task_messages
    listen = config.resolved_panel_listen()
    if listen is not None:
        def panel(journal, store):  # the panel's modules are imported only when it is configured
            from edge_runtime.cli.subscription import panel_subscription_add
            from edge_runtime.panel.server import PanelServer
            from edge_runtime.qinglong.openapi import OpenApi  # QingLong's OpenAPI, on the panel's listener

            floor = store.now_ms()  # read here, in the service's thread
            return PanelServer(host=listen[0], port=listen[1], db_path=db_path, log_dir=config.resolved_log_dir(db_path),
                               config=config, journal=journal, open_store=lambda: _peer_store(store.db, store.where, floor),
                               open_api=lambda panel_store, log_dir: OpenApi(
                                   panel_store, log_dir=log_dir, scripts_dir=lambda: config.resolved_scripts_dir(db_path)),
                               subscription_add=panel_subscription_add(
                                   scripts_dir=lambda: config.resolved_scripts_dir(db_path), db_path=db_path))

        side_servers["panel"] = panel

    policy = RetentionPolicy(retain_runs=config.retain_runs, retain_days=config.retain_days,
                             log_total_max_bytes=config.log_total_max_bytes)
    log_dir = config.resolved_log_dir(db_path)
    return DeviceService(open_store, config, log_dir=log_dir, work_dir=config.resolved_work_dir(db_path),
                         scripts_dir=config.resolved_scripts_dir(db_path), journal=journal,
                         retention=lambda store, log_dir_fd: LocalRetention(store.db, policy, log_dir, log_dir_fd=log_dir_fd),
                         tick_hooks=(_scheduler, notify_wake),
                         side_servers=side_servers,
                         attempt_env=None if capabilities is None else (
                             lambda attempt_id: {NOTIFY_VARIABLE: capabilities.variable(attempt_id)}))


def _task_capabilities(db_path: str, journal):
    """The issuer of every Attempt's notify capability, or None (logged) when the device key beside
    the database is unusable: tasks then get no capability and their `notify send` says so."""
    from edge_runtime.local.notify_handoff import NotifyKeyError, TaskCapabilities

    try:
        return TaskCapabilities(db_path)
    except NotifyKeyError as exc:
        journal.error("notify.task_key_unusable", error=exc.code, detail=str(exc))
        return None


def _peer_store(db, where: str, floor_ms: int):
    """A side server's own connection (the panel's, the submit hand-off's), beside the service's
    in this process (``open_peer``: never
    the checks by descriptor, which would drop the service connection's locks), with a clock of
    its own floored at the service's time, as a CLI command's clock is floored at the watermark."""
    from edge_runtime.local.clock import SystemClock
    from edge_runtime.local.database import open_peer
    from edge_runtime.local.guarded_clock import GuardedClock
    from edge_runtime.local.store import LocalStore

    clock = GuardedClock(SystemClock())
    clock.raise_floor(floor_ms)
    return LocalStore(open_peer(db, clock=clock), where, clock)


def _scheduler(store, journal):  # the Local adapter behind the scheduler's port
    from edge_runtime.contract.time_zones import InvalidTimeZoneError
    from edge_runtime.contract.device import device_time_zone, read_boot_id
    from edge_runtime.local.schedules import LocalScheduleRepository
    from edge_runtime.service.scheduler import Scheduler

    try:  # the zone of schedules stored before zones were kept, read as the CLI reads it
        device_zone = device_time_zone()
    except InvalidTimeZoneError as exc:
        journal.warning("schedule.device_zone_invalid", detail=str(exc), using="UTC0")
        device_zone = "UTC0"
    boot_id = read_boot_id()
    return Scheduler(LocalScheduleRepository(store.db, device_zone=device_zone, boot_id=boot_id), journal, boot_id)
