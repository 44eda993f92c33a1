"""The OpenAPI's handlers: QingLong's requests as the project's own operations.

The panel's server matches a request (:mod:`.open_routes`), checks the app's token and scope, then
calls the handler of the route with the match, the app and the body. A handler returns
``(HTTP status, body)``: ``{"code": 200, "data": ...}`` (``{"code": 200}`` when QingLong sends no
data). A refusal is raised as an error with its code (:func:`error_status` gives the HTTP status
and the panel answers ``{"code": <status>, "message": ...}``).

Every answer and error message passes :meth:`OpenApi.answer` / :meth:`OpenApi.error_message`:
the store's secrets masked in every string, as the panel's answers are (a cron's command or name
may repeat a secret's value). A client that sends such a masked text back (it GETs a cron and
PUTs it again) leaves the stored one as it is.

Each change goes through ``edge_runtime.operations`` and the ``Store`` port as the CLI's and the
panel's do: one short transaction each, the service woken after the commit. A bulk request names
every id first and changes nothing when one is unknown (QingLong ignores unknown ids silently).
``stop`` cancels the schedule's active Runs through the durable cancel path, which ends each
Run's whole process group (QingLong kills every process whose command line contains the
cron's text: unrelated processes too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from edge_runtime import __version__, operations
from edge_runtime.contract.environment import EnvEntryNotFoundError
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.redaction import store_redactor
from edge_runtime.contract.runs import ACTIVE_RUN_STATUSES, RunStateConflictError
from edge_runtime.contract.schedules import EditScheduleCommand, ScheduleNotFoundError, ScheduleOverlapError
from edge_runtime.contract.subscriptions import SubscriptionNotFoundError
from edge_runtime.contract.time_zones import TimeZone, time_zone
from edge_runtime.qinglong import crons, envs, logs, subscriptions
from edge_runtime.qinglong.crons import OpenRequestError
from edge_runtime.qinglong import open_routes
from edge_runtime.qinglong.open_routes import OpenMatch, OpenRefusal

#: The QingLong release whose OpenAPI shapes this face answers with (``GET /open/system``):
#: clients that choose a shape by version choose QingLong's current one.
QINGLONG_VERSION = "2.21.0"
#: The most of a log one response carries (its end; the start is left out and said so).
MAX_LOG_BYTES = 256 * 1024


def ok(data: Any = msgspec.UNSET) -> tuple[int, dict[str, Any]]:
    return 200, {"code": 200} if data is msgspec.UNSET else {"code": 200, "data": data}


def error_status(exc: EdgeRuntimeError) -> int:
    """The HTTP status (and QingLong ``code``) of a refusal: 400 for anything wrong with the
    request (an error whose class, or a class it derives from, says ``INVALID``: a secret too short
    and a value too long are invalid variables too)."""
    code = exc.code
    if code == "OPENAPI_REFUSED":
        return 403
    if code.endswith("NOT_FOUND"):
        return 404
    invalid = any("INVALID" in getattr(kind, "code", "") for kind in type(exc).__mro__)
    if invalid or code.endswith("AMBIGUOUS") or code == "SCHEDULE_NEVER_FIRES":
        return 400
    if code.endswith(("REPOSITORY_FAILED", "STORAGE_FAILED")):
        return 503 if exc.retryable else 500
    return 503 if exc.retryable else 409


class OpenApi:
    """The handlers over the panel's open Local store; ``log_dir``: the service's Attempt logs.

    The face ``serve`` hands the panel's server (which never imports this package): its route
    table and the shapes of a match, and how a refusal is answered, go with it."""

    match = staticmethod(open_routes.match)
    Match = OpenMatch
    Refusal = OpenRefusal
    error_status = staticmethod(error_status)

    def __init__(self, store: Any, *, log_dir: Path, scripts_dir: operations.ScriptsDir = None) -> None:
        """``scripts_dir``: where a ``task`` cron's script must be (checked when it is added or its
        command changes, as ``schedule add`` checks it); None checks nothing."""
        self.store, self.log_dir, self._scripts_dir = store, log_dir, scripts_dir
        self._zone: TimeZone | None = None

    def _offset(self, ms: int) -> int:
        """The device's UTC offset at ``ms`` (QingLong shows local times in its container's zone)."""
        if self._zone is None:
            self._zone = time_zone(self.store.schedules.device_zone())
        return self._zone.utc_offset(ms // 1000)

    def answer(self, handler: str, match: OpenMatch, app: Any, body: bytes) -> tuple[int, Any]:
        """The handler's ``(status, value)`` with the secrets masked in every string (read now: a
        secret set a moment ago is masked too)."""
        status, value = getattr(self, handler)(match, app, body)
        return status, store_redactor(self.store).value(value)

    def error_message(self, exc: EdgeRuntimeError) -> str:
        """A refusal's message, masked as answers are; withheld when the secrets cannot be read."""
        try:
            return store_redactor(self.store).text(str(exc))
        except EdgeRuntimeError as failed:
            return f"(message withheld: the secrets to mask it with could not be read [{failed.code}])"

    @staticmethod
    def _actor(app: Any) -> str:
        return f"openapi:{app.name}"

    # ----------------------------------------------------------------- crons: reads

    def _schedules(self, ids: list[int]) -> list[Any]:
        """The schedules of ``ids``, all of them or none (an unknown id is named)."""
        found, missing = [], []
        for number in ids:
            try:
                found.append(self.store.schedules.get_by_number(number))
            except ScheduleNotFoundError:
                missing.append(number)
        if missing:
            raise ScheduleNotFoundError(f"no cron with id {', '.join(map(str, missing))}; nothing was changed")
        return found

    def _cron(self, record: Any, *, recent: list[Any] | None = None) -> dict[str, Any]:
        runs = self.store.runs.list_runs(schedule_id=record.id, limit=crons.RECENT_RUNS) if recent is None else recent
        state = crons.cron_state(record, runs, self.store.runs.attempts, self._offset)
        return crons.cron_object(record, state, self._offset(record.updated_at_ms))

    def _active_by_schedule(self) -> dict[str, list[Any]]:
        """Every schedule's active Runs, in a handful of reads (a device runs a few at once)."""
        active: dict[str, list[Any]] = {}
        for status in sorted(ACTIVE_RUN_STATUSES):
            for run in self.store.runs.list_runs(status=status, limit=10_000):
                if run.schedule_id is not msgspec.UNSET:
                    active.setdefault(run.schedule_id, []).append(run)
        return active

    def list_crons(self, match: OpenMatch, _app: Any, _body: bytes) -> tuple[int, Any]:
        records = self.store.schedules.list()
        search = match.query.get("searchValue", "")
        if search:
            records = [r for r in records if crons.matches(r, search)]
        active = self._active_by_schedule()
        statuses = {r.id: crons.cron_status(active.get(r.id, []), r.waiting_fire_at_ms is not msgspec.UNSET, r.paused)
                    for r in records}
        # QingLong's order: enabled first, then by status (running, idle, queued), newest first.
        records.sort(key=lambda r: (-r.created_at_ms, -r.number))
        records.sort(key=lambda r: (int(r.paused), statuses[r.id]))
        page = crons.page_of(records, match.query)
        return ok({"data": [self._cron(r) for r in page], "total": len(records)})

    def get_cron(self, match: OpenMatch, _app: Any, _body: bytes) -> tuple[int, Any]:
        return ok(self._cron(self.store.schedules.get_by_number(match.id)))

    def cron_log(self, match: OpenMatch, _app: Any, _body: bytes) -> tuple[int, Any]:
        return self._latest_log(self.store.schedules.get_by_number(match.id))

    def _latest_log(self, record: Any) -> tuple[int, Any]:
        """The log of ``record``'s newest Run that has one, as QingLong's ``/log`` answers it."""
        runs = self.store.runs.list_runs(schedule_id=record.id, limit=crons.RECENT_RUNS)
        state = crons.cron_state(record, runs, self.store.runs.attempts, self._offset)
        running = state.status in (crons.RUNNING, crons.QUEUED)
        for run in runs:
            read = operations.read_log_tail(self.store, run.id, self.log_dir, max_bytes=MAX_LOG_BYTES)
            if read is not None:
                _, body = ok(_with_note(*read))
                return 200, {**body, "logStatus": "running" if running and run.status in ACTIVE_RUN_STATUSES
                             else "completed"}
        _, body = ok("running..." if running else "no log yet")
        return 200, {**body, "logStatus": "running" if running else "notFound"}

    def cron_logs(self, match: OpenMatch, _app: Any, _body: bytes) -> tuple[int, Any]:
        record = self.store.schedules.get_by_number(match.id)
        directory = logs.directory_name(record)
        runs = self.store.runs.list_runs(schedule_id=record.id, limit=logs.LOG_FILES_PER_CRON)
        return ok([{"filename": logs.file_name(run, self._offset(run.created_at_ms)), "directory": directory,
                    "time": run.created_at_ms} for run in runs if logs.has_log(run)])

    # ----------------------------------------------------------------- crons: changes

    def add_cron(self, _match: OpenMatch, _app: Any, body: bytes) -> tuple[int, Any]:
        request = crons.decode(body, crons.CronBody)
        crons.check_fields(request, None)
        options = operations.run_options(cwd=request.work_dir or None, cwd_name="work_dir")
        command = operations.add_schedule_command(request.schedule, crons.command_argv(request.command),
                                                  name=request.name, labels=crons.labels_of(request.labels),
                                                  options=options)
        record = operations.add_schedule(self.store, command, scripts_dir=self._scripts_dir)
        return ok(self._cron(record, recent=[]))

    def edit_cron(self, _match: OpenMatch, _app: Any, body: bytes) -> tuple[int, Any]:
        from edge_runtime.contract.cron import parse_schedule

        request = crons.decode(body, crons.CronEditBody)
        record = self.store.schedules.get_by_number(crons.parse_id(request.id))
        crons.check_fields(request, logs.directory_name(record))
        changes: dict[str, Any] = {}
        if parse_schedule(request.schedule).text != record.expression:  # the same rule keeps its next fire
            changes["expression"] = request.schedule
        # What the client read back (masked, where it repeats a secret's value) changes nothing.
        redactor = store_redactor(self.store)
        command = crons.command_text(record.command)
        if request.command.strip() not in (command, redactor.text(command)):
            changes["argv"] = crons.command_argv(request.command)
        name = None if record.name is msgspec.UNSET else record.name
        if request.name is not None and request.name != name and (name is None or request.name != redactor.text(name)):
            changes["name"] = request.name
        labels = crons.labels_of(request.labels)
        if labels is not None and labels != record.labels:
            changes["labels"] = labels
        if request.work_dir and request.work_dir != (None if record.cwd is msgspec.UNSET else record.cwd):
            changes.update(operations.run_options(cwd=request.work_dir, cwd_name="work_dir"))
        if changes:
            record = operations.edit_schedule(self.store, EditScheduleCommand(schedule_id=record.id, **changes),
                                              scripts_dir=self._scripts_dir)
        return ok(self._cron(record))

    def remove_crons(self, _match: OpenMatch, _app: Any, body: bytes) -> tuple[int, Any]:
        for record in self._schedules(crons.parse_ids(body)):
            self.store.schedules.remove(record.id)
        operations.wake_schedules(self.store)
        return ok()

    def _paused(self, body: bytes, paused: bool) -> tuple[int, Any]:
        for record in self._schedules(crons.parse_ids(body)):
            self.store.schedules.set_paused(record.id, paused)
        operations.wake_schedules(self.store)
        return ok()

    def enable_crons(self, _match: OpenMatch, _app: Any, body: bytes) -> tuple[int, Any]:
        return self._paused(body, False)

    def disable_crons(self, _match: OpenMatch, _app: Any, body: bytes) -> tuple[int, Any]:
        return self._paused(body, True)

    def run_crons(self, _match: OpenMatch, app: Any, body: bytes) -> tuple[int, Any]:
        for record in self._schedules(crons.parse_ids(body)):
            try:
                operations.run_schedule_now(self.store, record.id, actor_id=self._actor(app))
            except ScheduleOverlapError:
                pass  # running already: QingLong's run answers 200 for a running cron too; it shows status 0
        return ok()

    def stop_crons(self, _match: OpenMatch, app: Any, body: bytes) -> tuple[int, Any]:
        self._stop(self._schedules(crons.parse_ids(body)), app)
        return ok()

    def _stop(self, schedules: list[Any], app: Any) -> None:
        """Cancel the active Runs of ``schedules`` through the durable cancel path."""
        for record in schedules:
            for run in self.store.runs.list_runs(schedule_id=record.id, limit=crons.RECENT_RUNS):
                if run.status not in ACTIVE_RUN_STATUSES or run.cancel_requested_at_ms is not msgspec.UNSET:
                    continue
                try:
                    operations.cancel(self.store, run.id, reason=f"stopped through the OpenAPI by app {app.name}",
                                      actor_id=self._actor(app))
                except RunStateConflictError:
                    pass  # it ended meanwhile: nothing left to stop

    # ----------------------------------------------------------------- subscriptions

    def _pull_schedule(self, record: Any) -> Any:
        """``record``'s pull schedule, or None when it was removed by hand."""
        if record.schedule_id is msgspec.UNSET:
            return None
        try:
            return self.store.schedules.get(record.schedule_id)
        except ScheduleNotFoundError:
            return None

    def _subscription(self, record: Any) -> dict[str, Any]:
        pull = self._pull_schedule(record)
        state = None
        if pull is not None:
            runs = self.store.runs.list_runs(schedule_id=pull.id, limit=crons.RECENT_RUNS)
            state = crons.cron_state(pull, runs, self.store.runs.attempts, self._offset)
        return subscriptions.subscription_object(record, pull, state)

    def _subscriptions(self, ids: list[int]) -> list[tuple[Any, Any]]:
        """The subscriptions of ``ids`` with their pull schedules, all of them or none (an unknown
        id is named)."""
        found, missing = [], []
        for number in ids:
            try:
                found.append(self.store.subscriptions.get_by_number(number))
            except SubscriptionNotFoundError:
                missing.append(number)
        if missing:
            raise SubscriptionNotFoundError(f"no subscription with id {', '.join(map(str, missing))}; nothing was "
                                            f"changed")
        return [(record, self._pull_schedule(record)) for record in found]

    @staticmethod
    def _require_pull_schedules(chosen: list[tuple[Any, Any]], action: str) -> None:
        orphans = [record for record, pull in chosen if pull is None]
        if orphans:
            raise OpenRequestError(
                f"subscription {', '.join(str(r.number) for r in orphans)} has no pull schedule (it was removed on "
                f"the device): nothing to {action} here; on the device: edge-runtime subscription run ID")

    def list_subscriptions(self, match: OpenMatch, _app: Any, _body: bytes) -> tuple[int, Any]:
        records = self.store.subscriptions.list()
        search = match.query.get("searchValue", "")
        if search:
            records = [r for r in records if subscriptions.matches(r, search)]
        return ok([self._subscription(record) for record in records])

    def get_subscription(self, match: OpenMatch, _app: Any, _body: bytes) -> tuple[int, Any]:
        return ok(self._subscription(self.store.subscriptions.get_by_number(match.id)))

    def subscription_log(self, match: OpenMatch, _app: Any, _body: bytes) -> tuple[int, Any]:
        (_, pull), = self._subscriptions([match.id])
        if pull is None:
            return 200, {"code": 200, "data": "no log yet", "logStatus": "notFound"}
        return self._latest_log(pull)

    def run_subscriptions(self, _match: OpenMatch, app: Any, body: bytes) -> tuple[int, Any]:
        chosen = self._subscriptions(crons.parse_ids(body))
        self._require_pull_schedules(chosen, "run")
        for _, pull in chosen:
            try:
                operations.run_schedule_now(self.store, pull.id, actor_id=self._actor(app))
            except ScheduleOverlapError:
                pass  # pulling already: QingLong answers 200 and shows status 0
        return ok()

    def stop_subscriptions(self, _match: OpenMatch, app: Any, body: bytes) -> tuple[int, Any]:
        chosen = self._subscriptions(crons.parse_ids(body))
        self._stop([pull for _, pull in chosen if pull is not None], app)
        return ok()

    def _subscriptions_paused(self, body: bytes, paused: bool) -> tuple[int, Any]:
        chosen = self._subscriptions(crons.parse_ids(body))
        self._require_pull_schedules(chosen, "disable" if paused else "enable")
        for _, pull in chosen:
            self.store.schedules.set_paused(pull.id, paused)
        operations.wake_schedules(self.store)
        return ok()

    def enable_subscriptions(self, _match: OpenMatch, _app: Any, body: bytes) -> tuple[int, Any]:
        return self._subscriptions_paused(body, False)

    def disable_subscriptions(self, _match: OpenMatch, _app: Any, body: bytes) -> tuple[int, Any]:
        return self._subscriptions_paused(body, True)

    # ----------------------------------------------------------------- envs

    def _env(self, entry: Any) -> dict[str, Any]:
        return envs.env_object(entry, self._offset(entry.updated_at_ms))

    def list_envs(self, match: OpenMatch, _app: Any, _body: bytes) -> tuple[int, Any]:
        search = match.query.get("searchValue") or None
        return ok([self._env(entry) for entry in operations.env_list(self.store, search=search)])

    def get_env(self, match: OpenMatch, _app: Any, _body: bytes) -> tuple[int, Any]:
        return ok(self._env(operations.env_get(self.store, match.id)))

    def add_envs(self, _match: OpenMatch, _app: Any, body: bytes) -> tuple[int, Any]:
        from edge_runtime.contract.env_entries import NewEnvEntry

        requested = envs.new_entries(body)
        for entry in requested:
            envs.check_name(entry.name)
        entries = [NewEnvEntry(name=e.name, value=e.value, remarks=e.remarks or "", labels=tuple(e.labels or ()))
                   for e in requested]
        return ok([self._env(entry) for entry in operations.env_add(self.store, entries)])

    def edit_env(self, _match: OpenMatch, _app: Any, body: bytes) -> tuple[int, Any]:
        entry_id, request = envs.edit_request(body)
        envs.checked_value(request.value)
        current = operations.environment(self.store).get(entry_id)
        envs.check_name(current.name)
        envs.check_name(request.name)
        # What the client read back (``***`` for a secret, masked where it repeats one) changes nothing.
        redactor = store_redactor(self.store)
        shown = envs.MASK if current.value is msgspec.UNSET else redactor.text(current.value)
        value = None if request.value in (current.value, shown) else request.value
        remarks = None if request.remarks is msgspec.UNSET else (request.remarks or "")
        if remarks is not None and remarks == redactor.text(current.remarks):
            remarks = None
        entry = operations.env_update(self.store, entry_id, name=request.name, value=value, remarks=remarks,
                                      labels=request.labels)
        return ok(self._env(entry))

    def remove_envs(self, _match: OpenMatch, _app: Any, body: bytes) -> tuple[int, Any]:
        operations.env_remove(self.store, crons.parse_ids(body))
        return ok()

    def enable_envs(self, _match: OpenMatch, _app: Any, body: bytes) -> tuple[int, Any]:
        ids = crons.parse_ids(body)
        entries = operations.environment(self.store)
        for entry_id in ids:  # an unknown id is named by the enable itself, which changes nothing then
            try:
                envs.check_name(entries.get(entry_id).name)
            except EnvEntryNotFoundError:
                pass
        operations.env_enable(self.store, ids, True)
        return ok()

    def disable_envs(self, _match: OpenMatch, _app: Any, body: bytes) -> tuple[int, Any]:
        operations.env_enable(self.store, crons.parse_ids(body), False)
        return ok()

    def rename_envs(self, _match: OpenMatch, _app: Any, body: bytes) -> tuple[int, Any]:
        ids, name = envs.rename_request(body)
        envs.check_name(name)
        operations.env_rename(self.store, ids, name)
        return ok()

    # ----------------------------------------------------------------- logs, system

    def list_logs(self, _match: OpenMatch, _app: Any, _body: bytes) -> tuple[int, Any]:
        entries = []
        for record in self.store.schedules.list():
            runs = self.store.runs.list_runs(schedule_id=record.id, limit=logs.LOG_FILES_PER_CRON)
            entries.append((record, [(run, self._offset(run.created_at_ms)) for run in runs if logs.has_log(run)]))
        return ok(logs.tree(entries))

    def log_detail(self, match: OpenMatch, _app: Any, _body: bytes) -> tuple[int, Any]:
        directory, name = match.query.get("path", ""), match.query.get("file", "")
        number, short = logs.number_of_directory(directory), logs.short_id_of_file(name)
        if number is None or short is None:
            raise OpenRequestError("path and file must name a log of GET /open/logs (a cron's directory and a file in it)")
        try:
            record = self.store.schedules.get_by_number(number)
        except ScheduleNotFoundError:
            raise LogNotFoundError(f"no log {directory}/{name}") from None
        if logs.directory_name(record) != directory:
            raise LogNotFoundError(f"no log {directory}/{name}")
        for run in self.store.runs.list_runs(schedule_id=record.id, limit=logs.LOG_FILES_PER_CRON):
            if logs.file_name(run, self._offset(run.created_at_ms)) != name:
                continue
            read = operations.read_log_tail(self.store, run.id, self.log_dir, max_bytes=MAX_LOG_BYTES)
            if read is None:
                raise LogNotFoundError(f"log {directory}/{name} has no text (the Run never started, or its file "
                                       f"was removed by the log cap)")
            _, body = ok(logs.remove_ansi(_with_note(*read)))
            return 200, {**body, "logStatus": "running"} if run.status in ACTIVE_RUN_STATUSES else body
        raise LogNotFoundError(f"no log {directory}/{name}")

    def system(self, _match: OpenMatch, _app: Any, _body: bytes) -> tuple[int, Any]:
        return ok({"isInitialized": True, "version": QINGLONG_VERSION, "edgeRuntimeVersion": __version__})


class LogNotFoundError(EdgeRuntimeError, code="OPENAPI_LOG_NOT_FOUND"):
    """No log of that directory and file (HTTP 404)."""


def _with_note(text: str, dropped: int) -> str:
    if not dropped:
        return text
    return f"[the first {dropped} bytes of this log are left out]\n{text}"
