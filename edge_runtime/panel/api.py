"""The panel's handlers: JSON in, the CLI's ``--json`` structs out, through ``edge_runtime.operations``.

Each handler gets the panel's open Local store, the matched route's ``{id}`` and query, and the
request body; it returns ``(status, value)``, ``value`` encoded as JSON (camelCase contract
structs, absent fields left out). A refusal is the operation's own error, with its own code:
``{"error": {"code": ..., "message": ...}}`` (:func:`error_status` picks the HTTP status).
Every answer and every error message passes :meth:`Api.answer` / :meth:`Api.error_message`
first: the store's secrets masked in every string, whichever handler made it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from edge_runtime import operations
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.redaction import store_redactor
from edge_runtime.contract.runs import InvalidRunCommandError, RunStatus

#: The body of a request (the page's JSON; the login's password).
MAX_BODY_BYTES = 64 * 1024
#: The most bytes of a log one request returns; a tail asks again from ``nextOffset``.
MAX_LOG_CHUNK = 64 * 1024
#: ``GET /api/runs`` returns at most this many (the CLI's ``list --limit`` bound).
MAX_LIST_LIMIT = 10_000
#: The actor recorded on the Runs, cancels and schedule fires the panel makes.
ACTOR = "panel"


class PanelRequestError(EdgeRuntimeError, code="INVALID_REQUEST"):
    """The request's body or query is not what the API takes."""


class _Body(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class LoginBody(_Body):
    password: str


class RunBody(_Body):
    command: list[str]
    name: str | None = None
    timeout: str | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    retries: int | None = None
    retryDelay: str | None = None  # noqa: N815  (the JSON field's name)
    #: The device user it runs as (docs/operating.md, "Task user"); checked at once.
    user: str | None = None


class CancelBody(_Body):
    reason: str | None = None


class ScheduleBody(RunBody, kw_only=True):
    cron: str
    overlap: str = "skip"
    tz: str | None = None
    labels: list[str] | None = None
    #: Its notification rules, ``CHANNEL[:on=OUTCOME,...]`` (``schedule add --notify``).
    notify: list[str] | None = None


class ScheduleEditBody(_Body):
    """Only the fields given change (``schedule edit``); ``env`` and ``labels`` replace the
    schedule's own as a whole (empty: none)."""

    cron: str | None = None
    tz: str | None = None
    command: list[str] | None = None
    name: str | None = None
    timeout: str | None = None
    overlap: str | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    retries: int | None = None
    retryDelay: str | None = None  # noqa: N815
    #: The device user its Runs run as (checked at once, as ``schedule edit --user`` checks it).
    user: str | None = None
    labels: list[str] | None = None
    #: Replaces its notification rules (``[]``: none, the default rule applies).
    notify: list[str] | None = None


class EnvBody(_Body):
    """A new env entry, or the fields of one to change (absent: unchanged)."""

    name: str | None = None
    value: str | None = None
    secret: bool | None = None
    remarks: str | None = None
    labels: list[str] | None = None


class MoveBody(_Body):
    #: The entry it goes just before; absent: to the end.
    before: int | None = None


class AppBody(_Body):
    name: str
    scopes: list[str]
    tokenTtl: str | None = None  # noqa: N815


class NameBody(_Body):
    name: str


class ChannelBody(_Body):
    channel: str


class CronView(msgspec.Struct, rename="camel", kw_only=True):
    """A schedule as the panel's crons page shows it: the record, the zone its times are in (its
    own, else the device's) and that zone's UTC offset at its next and last fire, in seconds, so
    the page shows both in the schedule's zone, whatever kind of zone text it is."""

    schedule: Any
    zone: str
    next_offset_s: int
    last_offset_s: int | msgspec.UnsetType = msgspec.UNSET
    #: Its own notification rules as ``schedule add --notify`` takes them (none: the default rule).
    notify: list[str] = msgspec.field(default_factory=list)


class Health(msgspec.Struct, rename="camel", kw_only=True):
    """``GET /api/health``: the worker session, slots, clock, sizes and retention of the device."""

    worker_id: str
    session: Any
    session_live: bool
    slots: int
    slots_in_use: int
    now_ms: int
    clock_watermark_ms: int
    clock_jumps: int
    database_bytes: int
    wal_bytes: int
    log_bytes: int
    log_total_max_bytes: int
    retain_runs: int
    retain_days: int


def decode(body: bytes, kind: type) -> Any:
    try:
        return msgspec.json.decode(body or b"{}", type=kind)
    except msgspec.DecodeError as exc:
        raise PanelRequestError(f"the request body: {exc}") from None


def error_status(exc: EdgeRuntimeError) -> int:
    code = exc.code
    if code == "LOGIN_FAILED":
        return 401
    if code.endswith("NOT_FOUND"):
        return 404
    if "INVALID" in code or code.endswith(("AMBIGUOUS", "NEVER_FIRES")):
        return 400
    if code.endswith(("REPOSITORY_FAILED", "STORAGE_FAILED")):
        return 503 if exc.retryable else 500
    if exc.retryable:
        return 503
    return 409


def _int(query: dict[str, str], name: str, default: int | None, low: int, high: int) -> int | None:
    text = query.get(name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise PanelRequestError(f"{name} must be a whole number {low}..{high}")
    return int(text)


def _entry_id(text: str) -> int:
    if not text.isdigit() or len(text) > 15:
        raise PanelRequestError("an env entry's id is a whole number")
    return int(text)


def _options(body: RunBody | ScheduleBody | ScheduleEditBody) -> dict[str, Any]:
    if body.retries is not None and not 0 <= body.retries <= 100:
        raise InvalidRunCommandError("retries must be 0..100")
    env = None if body.env is None else [f"{k}={v}" for k, v in body.env.items()]
    return operations.run_options(env=env, cwd=body.cwd, retries=body.retries, retry_delay=body.retryDelay,
                                  cwd_name="cwd", task_user=body.user, user_exists=operations.device_user_exists)


class Api:
    """The handlers over one open Local store (the panel thread's own connection)."""

    def __init__(self, store: Any, *, db_path: str, log_dir: Path, config: Any,
                 subscription_add: Callable[[Any, bytes], Any] | None = None) -> None:
        self.store, self.db_path, self.log_dir, self.config = store, db_path, log_dir, config
        self._subscription_add = subscription_add

    def answer(self, handler: str, item_id: str | None, query: dict[str, str], body: bytes) -> tuple[int, Any]:
        """The handler's ``(status, value)``, ``value`` as builtins with the secrets masked in
        every string before it is encoded (read now: a secret set a moment ago is masked too)."""
        status, value = getattr(self, handler)(item_id, query, body)
        return status, store_redactor(self.store).value(msgspec.to_builtins(value))

    def _scripts_dir(self) -> Path:
        """This service's scripts directory, where a ``task`` command's script must be."""
        return self.config.resolved_scripts_dir(self.db_path)

    def error_message(self, exc: EdgeRuntimeError) -> str:
        """A refusal's message as answered, masked as answers are (it may quote a stored reason).
        When the secrets cannot be read, the message is withheld; its code still says what failed."""
        try:
            return store_redactor(self.store).text(str(exc))
        except EdgeRuntimeError as failed:
            return f"(message withheld: the secrets to mask it with could not be read [{failed.code}])"

    def list_runs(self, _id: str | None, query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        schedule = query.get("schedule") or None
        status = query.get("status") or None
        if status is not None and status not in {s.value for s in RunStatus}:
            raise PanelRequestError(f"status must be one of {', '.join(s.value for s in RunStatus)}")
        limit = _int(query, "limit", 50, 1, MAX_LIST_LIMIT)
        before = _int(query, "before", None, 0, 1 << 53)
        runs = self.store.runs.list_runs(limit=limit, status=None if status is None else RunStatus(status),
                                         schedule_id=schedule, before_ms=before)
        return 200, runs

    def run_detail(self, run_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, self.store.runs.detail(run_id)

    def run_log(self, run_id: str, query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, operations.read_log_chunk(
            self.store, run_id, self.log_dir, attempt=_int(query, "attempt", None, 1, 1 << 31),
            offset=_int(query, "offset", 0, 0, 1 << 53), max_bytes=MAX_LOG_CHUNK)

    def submit(self, _id: str | None, _query: dict[str, str], body: bytes) -> tuple[int, Any]:
        request = decode(body, RunBody)
        command = operations.submit_command(request.command, name=request.name, timeout=request.timeout,
                                            options=_options(request))
        return 201, operations.submit(self.store, command, actor_id=ACTOR, scripts_dir=self._scripts_dir)

    def cancel(self, run_id: str, _query: dict[str, str], body: bytes) -> tuple[int, Any]:
        request = decode(body, CancelBody)
        return 200, operations.cancel(self.store, run_id, reason=request.reason, actor_id=ACTOR)

    def list_schedules(self, _id: str | None, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, self.store.schedules.list()

    def add_schedule(self, _id: str | None, _query: dict[str, str], body: bytes) -> tuple[int, Any]:
        request = decode(body, ScheduleBody)
        command = operations.add_schedule_command(request.cron, request.command, name=request.name,
                                                  overlap=request.overlap, timeout=request.timeout,
                                                  time_zone=request.tz, labels=request.labels,
                                                  options=_options(request))
        rules = None if request.notify is None else operations.notify_rules(request.notify)
        if rules:
            operations.require_channels(self.store, rules)
        record = operations.add_schedule(self.store, command, scripts_dir=self._scripts_dir)
        if rules:
            operations.notifications(self.store).set_rules(record.id, rules)
        return 201, record

    def list_crons(self, _id: str | None, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        from edge_runtime.contract.notifications import rule_text

        schedules = self.store.schedules
        rules_of = getattr(self.store, "notifications", None)
        views = []
        for record in schedules.list():
            zone = schedules.zone_of(record)
            last = None if record.last_fire_at_ms is msgspec.UNSET else record.last_fire_at_ms
            views.append(CronView(schedule=record, zone=zone.text if record.time_zone is msgspec.UNSET else record.time_zone,
                                  next_offset_s=zone.utc_offset(record.next_fire_at_ms // 1000),
                                  last_offset_s=msgspec.UNSET if last is None else zone.utc_offset(last // 1000),
                                  notify=[] if rules_of is None else [rule_text(r) for r in rules_of.rules_of(record.id)]))
        return 200, views

    def edit_schedule(self, schedule_id: str, _query: dict[str, str], body: bytes) -> tuple[int, Any]:
        from edge_runtime.contract.durations import parse_duration_ms
        from edge_runtime.contract.schedules import EditScheduleCommand, InvalidScheduleCommandError, Overlap

        request = decode(body, ScheduleEditBody)
        fields: dict[str, Any] = {"expression": request.cron, "time_zone": request.tz, "argv": request.command,
                                  "name": request.name, "labels": request.labels}
        if request.timeout is not None:
            fields["timeout_ms"] = parse_duration_ms(request.timeout)
        if request.overlap is not None:
            try:
                fields["overlap"] = Overlap(request.overlap)
            except ValueError:
                raise InvalidScheduleCommandError(
                    f"overlap must be one of {', '.join(o.value for o in Overlap)}") from None
        options = _options(request)
        if request.env is not None and not request.env:
            options["env"] = {}  # an empty object removes the schedule's own variables
        given = {k: v for k, v in fields.items() if v is not None}
        rules = None if request.notify is None else operations.notify_rules(request.notify)
        # Only the rules changed (as schedule edit --notify alone): the schedule itself stays as it is.
        command = None if rules is not None and not given and not options else \
            EditScheduleCommand(schedule_id=schedule_id, **given, **options)
        if rules:
            operations.require_channels(self.store, rules)  # before anything changes
        record = self.store.schedules.get(schedule_id) if command is None else \
            operations.edit_schedule(self.store, command, scripts_dir=self._scripts_dir)
        if rules is not None:
            operations.notifications(self.store).set_rules(schedule_id, rules)
        return 200, record

    def _paused(self, schedule_id: str, paused: bool) -> tuple[int, Any]:
        record = self.store.schedules.set_paused(schedule_id, paused)
        operations.wake_schedules(self.store)
        return 200, record

    def pause_schedule(self, schedule_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return self._paused(schedule_id, True)

    def resume_schedule(self, schedule_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return self._paused(schedule_id, False)

    def run_schedule(self, schedule_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, operations.run_schedule_now(self.store, schedule_id, actor_id=ACTOR)

    def remove_schedule(self, schedule_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        self.store.schedules.remove(schedule_id)
        operations.wake_schedules(self.store)
        return 200, {"removed": schedule_id}

    # ---------------------------------------------------------------- env entries

    def list_envs(self, _id: str | None, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, operations.env_list(self.store)

    def add_env(self, _id: str | None, _query: dict[str, str], body: bytes) -> tuple[int, Any]:
        from edge_runtime.contract.env_entries import NewEnvEntry

        request = decode(body, EnvBody)
        if request.name is None or request.value is None:
            raise PanelRequestError("an env entry needs a name and a value")
        entry = NewEnvEntry(name=request.name, value=request.value, secret=bool(request.secret),
                            remarks=request.remarks or "", labels=tuple(request.labels or ()))
        return 201, operations.env_add(self.store, [entry])[0]

    def edit_env(self, entry_id: str, _query: dict[str, str], body: bytes) -> tuple[int, Any]:
        request = decode(body, EnvBody)
        return 200, operations.env_update(self.store, _entry_id(entry_id), name=request.name, value=request.value,
                                          secret=request.secret, remarks=request.remarks, labels=request.labels)

    def enable_env(self, entry_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, operations.env_enable(self.store, [_entry_id(entry_id)], True)[0]

    def disable_env(self, entry_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, operations.env_enable(self.store, [_entry_id(entry_id)], False)[0]

    def pin_env(self, entry_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, operations.env_pin(self.store, [_entry_id(entry_id)], True)[0]

    def unpin_env(self, entry_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, operations.env_pin(self.store, [_entry_id(entry_id)], False)[0]

    def move_env(self, entry_id: str, _query: dict[str, str], body: bytes) -> tuple[int, Any]:
        request = decode(body, MoveBody)
        return 200, operations.env_move(self.store, _entry_id(entry_id), before=request.before)

    def remove_env(self, entry_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, {"removed": operations.env_remove(self.store, [_entry_id(entry_id)])}

    # ---------------------------------------------------------------- subscriptions

    def list_subscriptions(self, _id: str | None, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, operations.subscription_views(self.store)

    def add_subscription(self, _id: str | None, _query: dict[str, str], body: bytes) -> tuple[int, Any]:
        from edge_runtime.contract.subscriptions import SubscriptionError

        if self._subscription_add is None:
            raise SubscriptionError("adding a subscription is not offered by this panel; use edge-runtime subscription add")
        return 201, self._subscription_add(self.store, body)

    def _subscription(self, form: str) -> Any:
        return operations.subscriptions(self.store).get(operations.resolve_subscription_id(self.store, form))

    def run_subscription(self, subscription_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, operations.run_subscription_now(self.store, self._subscription(subscription_id), actor_id=ACTOR)

    def pause_subscription(self, subscription_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, operations.pause_subscription(self.store, self._subscription(subscription_id), True)

    def resume_subscription(self, subscription_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, operations.pause_subscription(self.store, self._subscription(subscription_id), False)

    def remove_subscription(self, subscription_id: str, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        # Its scripts' schedules and folder stay (the CLI's remove without --purge).
        return 200, operations.remove_subscription(self.store, self._subscription(subscription_id), purge=False)

    # ---------------------------------------------------------------- OpenAPI apps

    def _apps(self) -> Any:
        from edge_runtime.local.panel_apps import LocalPanelApps

        return LocalPanelApps(self.store.db)

    def list_apps(self, _id: str | None, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        return 200, self._apps().list()

    def add_app(self, _id: str | None, _query: dict[str, str], body: bytes) -> tuple[int, Any]:
        """A new app; its ``client_secret`` is in this answer only (only its digest is kept)."""
        from edge_runtime.contract.durations import parse_duration_ms
        from edge_runtime.contract.panel_apps import DEFAULT_TOKEN_TTL_MS, check_app_name, check_token_ttl_ms, parse_scopes

        request = decode(body, AppBody)
        name = check_app_name(request.name)
        scopes = parse_scopes(",".join(request.scopes))
        ttl_ms = check_token_ttl_ms(DEFAULT_TOKEN_TTL_MS if request.tokenTtl is None
                                    else parse_duration_ms(request.tokenTtl))
        return 201, self._apps().add(name, scopes, ttl_ms)

    def remove_app(self, _id: str | None, _query: dict[str, str], body: bytes) -> tuple[int, Any]:
        name = decode(body, NameBody).name
        self._apps().remove(name)
        return 200, {"removed": name}

    # ---------------------------------------------------------------- notifications

    def notify_overview(self, _id: str | None, query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        """The channels (a secret parameter by its name only), the default rules and the latest
        messages of the outbox."""
        from edge_runtime.contract.notifications import rule_text

        repository = operations.notifications(self.store)
        return 200, {"channels": repository.list_channels(),
                     "defaultRules": [rule_text(r) for r in repository.rules_of(None)],
                     "outbox": repository.list_outbox(limit=_int(query, "limit", 20, 1, 200))}

    def notify_test(self, _id: str | None, _query: dict[str, str], body: bytes) -> tuple[int, Any]:
        return 201, operations.queue_test_message(self.store, decode(body, ChannelBody).channel)

    # ---------------------------------------------------------------- the device

    def check(self, _id: str | None, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        """What ``edge-runtime check`` says of this database, its retention and its logs."""
        from edge_runtime.local.health import check_health
        from edge_runtime.local.retention import RetentionPolicy

        config = self.config
        policy = RetentionPolicy(retain_runs=config.retain_runs, retain_days=config.retain_days,
                                 log_total_max_bytes=config.log_total_max_bytes)
        return 200, check_health(self.store.db, policy, self.log_dir)

    def health(self, _id: str | None, _query: dict[str, str], _body: bytes) -> tuple[int, Any]:
        from edge_runtime.local.guarded_clock import CLOCK_JUMP_EVENT, watermark_ms
        from edge_runtime.local.retention import log_dir_contents

        store, config = self.store, self.config
        connection = store.db.connection
        now = store.now_ms()
        session = store.leases.find_session(config.worker_id)
        page, pages = (connection.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_size", "page_count"))
        try:
            wal = os.stat(f"{self.db_path}-wal").st_size
        except FileNotFoundError:
            wal = 0
        contents = log_dir_contents(self.log_dir)
        jumps = connection.execute("SELECT count(*) FROM device_events WHERE type = ?", (CLOCK_JUMP_EVENT,)).fetchone()[0]
        return 200, Health(
            worker_id=config.worker_id, session=session, session_live=session is not None and session.is_live(now),
            slots=config.slots, slots_in_use=store.leases.count_active_leases(config.worker_id), now_ms=now,
            clock_watermark_ms=watermark_ms(store.db), clock_jumps=jumps, database_bytes=page * pages, wal_bytes=wal,
            log_bytes=0 if contents is None else contents[0], log_total_max_bytes=config.log_total_max_bytes,
            retain_runs=config.retain_runs, retain_days=config.retain_days,
        )
