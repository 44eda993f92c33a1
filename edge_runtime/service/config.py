"""Service configuration: a TOML file of exact shape, then environment, then command-line flags.

Precedence (later wins): built-in defaults < ``--config FILE`` (or ``$EDGE_RUNTIME_CONFIG``) <
``EDGE_RUNTIME_<KEY>`` environment variables < flags. Unknown keys, wrong types and out-of-range
values are refused with the file (or variable) and the ``$.key`` named; nothing starts with a
half-understood configuration. The database path is not part of the file: every command finds the
database the same way (``--db`` / ``$EDGE_RUNTIME_DB`` / the per-user default), so the service and
the CLI can never disagree about it.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.retention import DEFAULT_RETAIN_DAYS, DEFAULT_RETAIN_RUNS, RetainDays, RetainRuns
from edge_runtime.contract.runs import TASK_USER_PATTERN
from edge_runtime.contract.validation import IDENTIFIER_PATTERN

CONFIG_ENV_VAR = "EDGE_RUNTIME_CONFIG"
ENV_PREFIX = "EDGE_RUNTIME_"

_Ms = Annotated[int, msgspec.Meta(ge=1, le=86_400_000)]

#: The scripts directory's name beside the database when ``scripts_dir`` is not set.
SCRIPTS_DIR_NAME = "scripts"

#: A configuration file is a few hundred bytes; anything this large is not one (``/dev/zero``).
MAX_CONFIG_BYTES = 64 * 1024


class ConfigError(EdgeRuntimeError, code="CONFIG_INVALID"):
    """The configuration file, an environment override or a flag is invalid."""


def _default_worker_id() -> str:
    return f"edge-{socket.gethostname() or 'device'}"[:128]


class ServiceConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Every tunable of ``edge-runtime serve``; the defaults suit a small router."""

    #: Stable name of this device's worker; a restart keeps it and opens a new session generation.
    worker_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=IDENTIFIER_PATTERN)] = (
        msgspec.field(default_factory=_default_worker_id)
    )
    #: How many Attempts run at once (the worker's max_concurrent_runs and reported slots).
    slots: Annotated[int, msgspec.Meta(ge=1, le=64)] = 2
    #: SIGTERM to SIGKILL grace period for a cancelled Attempt's process group.
    grace_ms: Annotated[int, msgspec.Meta(ge=0, le=3_600_000)] = 10_000
    #: Where per-Attempt logs go; default: a ``logs`` directory beside the database.
    log_dir: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | msgspec.UnsetType = msgspec.UNSET
    #: Size cap of one Attempt's log; output past it is dropped after a truncation marker.
    log_max_bytes: Annotated[int, msgspec.Meta(ge=4096, le=1 << 30)] = 1 << 20
    #: How long output is still captured after an Attempt ended, from processes it left running.
    log_linger_ms: Annotated[int, msgspec.Meta(ge=0, le=3_600_000)] = 30_000
    #: Lease taken on a cancellation dispatch while delivering it.
    dispatch_lease_ms: Annotated[int, msgspec.Meta(ge=1, le=300_000)] = 30_000
    #: Backoff after a retryable dispatch failure: base * 2**(n-1), capped.
    retry_base_ms: _Ms = 1_000
    retry_max_ms: _Ms = 300_000
    #: Worker session lease; the service heartbeats at a third of it.
    session_lease_ms: Annotated[int, msgspec.Meta(ge=1_000, le=300_000)] = 30_000
    #: Worker session lease while no Attempt runs (docs/storage.md: flash writes); unset: 5 minutes
    #: (``IDLE_SESSION_LEASE_MS``: a heartbeat every ~4.7 minutes, not every 10 s, on flash), except on
    #: the Cluster Profile, where a dead idle worker must be noticed as soon as a busy one
    #: (``session_lease_ms``). Never shorter than ``session_lease_ms``.
    idle_session_lease_ms: Annotated[int, msgspec.Meta(ge=1_000, le=300_000)] | msgspec.UnsetType = msgspec.UNSET
    #: Run lease per Attempt; renewed at a third of it while the Attempt runs.
    run_lease_ms: Annotated[int, msgspec.Meta(ge=1_000, le=300_000)] = 60_000
    #: Slow fallback poll in case a wake-up datagram was lost.
    poll_interval_ms: Annotated[int, msgspec.Meta(ge=100, le=3_600_000)] = 30_000
    #: Retention (docs/storage.md: storage bounds): finished Runs kept at most, and for at most so many days;
    #: older ones are deleted whole with their Attempts, events and logs. Unfinished Runs never are.
    retain_runs: RetainRuns = DEFAULT_RETAIN_RUNS
    retain_days: RetainDays = DEFAULT_RETAIN_DAYS
    #: All Attempt logs in log_dir together; the oldest are deleted first beyond it.
    log_total_max_bytes: Annotated[int, msgspec.Meta(ge=4096, le=1 << 40)] = 6 << 20
    #: Variables of the service's own environment an Attempt also gets, besides the documented
    #: base (docs/environment.md); ``EDGE_RUNTIME_PASS_ENV`` takes them comma-separated.
    pass_env: Annotated[list[Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]],
                        msgspec.Meta(max_length=256)] = msgspec.field(default_factory=list)
    #: The working directory of an Attempt whose Run names none; default: a ``work`` directory
    #: beside the database (created 0700 at start when missing).
    work_dir: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | msgspec.UnsetType = msgspec.UNSET
    #: Where a ``task`` command's relative script is found (docs/qinglong.md, "task"); default: a
    #: ``scripts`` directory beside the database (on a router ``/etc/edge-runtime/scripts``: on the
    #: flash that keeps the database, root's alone). ``import qinglong`` and ``scripts scan`` use it too.
    scripts_dir: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | msgspec.UnsetType = msgspec.UNSET
    #: The user a task runs as when its Run names none (docs/operating.md, "Task user"); unset:
    #: the service's own user (root on a router). Looked up when each Attempt starts: a name the
    #: device does not know fails the Attempt (``SERVICE_TASK_USER_UNKNOWN``).
    task_user: Annotated[str, msgspec.Meta(pattern=f"^{TASK_USER_PATTERN.pattern}$")] | msgspec.UnsetType = (
        msgspec.UNSET)
    #: Stop (SIGTERM, then SIGKILL after the grace) running Attempts when the service stops.
    stop_runs_on_exit: bool = False
    #: Serve the web panel (docs/panel.md) on ``HOST:PORT``; unset: no panel, none of it imported.
    #: The host is an IP literal (``127.0.0.1``, ``[::1]``, ``192.168.1.1``) or ``localhost``: a
    #: non-loopback address is served only when it is written here, never derived from a name.
    panel_listen: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        if self.retry_max_ms < self.retry_base_ms:
            raise ConfigError(f"retry_max_ms ({self.retry_max_ms}) must be >= retry_base_ms ({self.retry_base_ms})")
        if self.panel_listen is not msgspec.UNSET:
            parse_listen(self.panel_listen)

    def resolved_panel_listen(self) -> tuple[str, int] | None:
        """The panel's (host, port), None when no panel is served."""
        return None if self.panel_listen is msgspec.UNSET else parse_listen(self.panel_listen)

    def resolved_idle_session_lease_ms(self, default: int) -> int:
        return default if self.idle_session_lease_ms is msgspec.UNSET else self.idle_session_lease_ms

    def resolved_work_dir(self, db_path: str) -> Path:
        if self.work_dir is not msgspec.UNSET:
            return Path(self.work_dir).expanduser().resolve()
        return Path(db_path).expanduser().resolve().parent / "work"

    def resolved_scripts_dir(self, db_path: str) -> Path:
        """The scripts directory of the device service on ``db_path``: the setting, else
        ``scripts`` beside the database."""
        return self.scripts_dir_beside(Path(db_path).expanduser().resolve().parent)

    def scripts_dir_beside(self, parent: Path) -> Path:
        """The scripts directory: the setting, else ``scripts`` in ``parent``; absolute, not
        resolved (a symlink on it is followed, and checked, when a script is run)."""
        if self.scripts_dir is not msgspec.UNSET:
            return Path(os.path.abspath(Path(self.scripts_dir).expanduser()))
        return parent / SCRIPTS_DIR_NAME

    def resolved_log_dir(self, db_path: str) -> Path:
        if self.log_dir is not msgspec.UNSET:
            return Path(self.log_dir).expanduser()
        return Path(db_path).expanduser().resolve().parent / "logs"


#: The documented panel address: loopback only (docs/panel.md).
DEFAULT_PANEL_LISTEN = "127.0.0.1:5700"


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` for IPv6) as (IP literal, port). ``localhost`` is 127.0.0.1;
    no other name is resolved, so the address served is always the one written.

    Raises:
        ConfigError: not HOST:PORT, a host that is not an IP literal, or a port outside 0..65535 (0: any free port, named in the
            ``panel.started`` line).
    """
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"panel_listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_PANEL_LISTEN}")
    family = socket.AF_INET
    if host.startswith("[") and host.endswith("]"):
        host, family = host[1:-1], socket.AF_INET6
    if host == "localhost":
        host = "127.0.0.1"
    try:  # not ipaddress (64 KB of the artifact for one check): the C library's own parser
        address = socket.inet_ntop(family, socket.inet_pton(family, host))
    except (OSError, ValueError):
        raise ConfigError(f"panel_listen {text!r}: the host must be an IP address (127.0.0.1, [::1], 192.168.1.1) "
                          f"or localhost; an IPv6 address in brackets, [::1]:5700") from None
    return address, int(port_text)


def _read_regular_file(path: Path) -> bytes:
    """The file's bytes, refusing what is not a regular file of bounded size: ``/dev/zero`` would
    grow without end, a FIFO would hang the start (hence ``O_NONBLOCK`` on the open)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"config file {path} is not a regular file")
        data = os.read(fd, MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path} is larger than {MAX_CONFIG_BYTES} bytes")
    return data


def _decode_file(path: Path) -> dict[str, Any]:
    data = _read_regular_file(path)
    try:
        # Decode the shape first (unknown keys, types, ranges), then keep only what was written,
        # so the environment and flags can still override the file key by key.
        msgspec.toml.decode(data, type=ServiceConfig)
        raw = msgspec.toml.decode(data)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    return raw


_TEXT_FIELDS = frozenset({"worker_id", "log_dir", "work_dir", "scripts_dir", "panel_listen", "task_user"})


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for field in msgspec.structs.fields(ServiceConfig):
        variable = ENV_PREFIX + field.name.upper()
        if variable not in env:
            continue
        text = env[variable]
        if field.type is bool:
            lowered = text.strip().lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no"):
                raise ConfigError(f"{variable}={text!r}: expected true/false")
            overrides[field.name] = lowered in ("1", "true", "yes")
        elif field.name in _TEXT_FIELDS:
            overrides[field.name] = text
        elif field.name == "pass_env":
            overrides[field.name] = [name.strip() for name in text.split(",") if name.strip()]
        else:
            try:
                overrides[field.name] = int(text.strip(), 10)
            except ValueError:
                raise ConfigError(f"{variable}={text!r}: expected a whole number") from None
    return overrides


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ServiceConfig:
    """Assemble the configuration: defaults, file, environment, then ``overrides`` (flags).

    Args:
        path: a TOML file; ``$EDGE_RUNTIME_CONFIG`` when None; no file when neither is set.
        env: the environment (``os.environ`` by default).
        overrides: flag values; None entries are ignored.

    Raises:
        ConfigError: unreadable file, unknown key, wrong type or out-of-range value, naming where.
    """
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    file_path = path if path is not None else env.get(CONFIG_ENV_VAR) or None
    if file_path is not None:
        merged.update(_decode_file(Path(file_path).expanduser()))
    merged.update(_env_overrides(env))
    merged.update({key: value for key, value in (overrides or {}).items() if value is not None})
    try:
        return msgspec.convert(merged, type=ServiceConfig)
    except ConfigError as exc:  # a rule of ServiceConfig.__post_init__: its message names the setting
        raise ConfigError(f"invalid configuration: {exc}") from None
    except msgspec.ValidationError as exc:
        message = str(exc)
        key = message.rpartition("at `$.")[2].rstrip("`").split("[")[0].split(".")[0] if "at `$." in message else ""
        if key:
            where = f"--{key.replace('_', '-')}, ${ENV_PREFIX}{key.upper()} or the config file's {key}"
            raise ConfigError(f"invalid configuration: setting {key} ({where}): {message}") from None
        raise ConfigError(f"invalid configuration (file, environment or flags): {exc}") from None
