"""Local notifications: the ``notify_channels``, ``notify_rules`` and ``notify_outbox`` tables.

Every rule is the contract's (``edge_runtime/contract/notifications.py``). The outbox rows of a
Run's end are written by :func:`enqueue_run_end`, called by ``runs.end_run`` inside the very
transaction that ends the Run: the end and its messages are durable together, or neither is.
A channel's secret parameters leave this module for two callers only: the sender (the service,
and ``notify channel test``), which needs them to send, and :meth:`secret_values`, which every
printing command masks with.
"""

from __future__ import annotations

from typing import Any

import apsw
import msgspec

from edge_runtime.contract import notifications as rules
from edge_runtime.contract.notifications import (
    Channel,
    ChannelKind,
    ChannelRecord,
    ClaimedMessage,
    CoalesceStep,
    InvalidNotifyRuleError,
    NotifyChannelExistsError,
    NotifyChannelNotFoundError,
    NotifyRule,
    NotifyStoreError,
    NotifyTaskLimitError,
    NotifyTokenInvalidError,
    OutboxRecord,
    OutboxStatus,
    Outcome,
)
from edge_runtime.contract.ids import new_id
from edge_runtime.contract.runs import AttemptStatus
from edge_runtime.contract.sql_vocabulary import sql_in, sql_literal
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.errors import StorageErrors

notify_errors = StorageErrors(NotifyStoreError)

_encode = msgspec.json.encode
_decode_map = msgspec.json.Decoder(dict[str, str]).decode
_decode_outcomes = msgspec.json.Decoder(list[Outcome]).decode

_DUE = f"status IN {sql_in(OutboxStatus, {OutboxStatus.PENDING, OutboxStatus.SENDING})}"
_PENDING, _SENDING = sql_literal(OutboxStatus.PENDING), sql_literal(OutboxStatus.SENDING)
_SENT, _GIVEN_UP = sql_literal(OutboxStatus.SENT), sql_literal(OutboxStatus.GIVEN_UP)
_OUTBOX_COLUMNS = ("id, channel_name, status, tries, created_at_ms, next_at_ms, run_id, outcome, title, coalesced, "
                   "since_ms, sent_at_ms, last_error, lease_owner, lease_expires_at_ms")


_new_id = new_id


def _outbox_record(row: tuple[Any, ...]) -> OutboxRecord:
    (outbox_id, channel, status, tries, created, next_at, run_id, outcome, title, coalesced, since, sent_at, error,
     owner, expires) = row
    fields: dict[str, Any] = {}
    for key, value in (("run_id", run_id), ("outcome", outcome), ("title", title), ("since_ms", since),
                       ("sent_at_ms", sent_at), ("last_error", error), ("lease_owner", owner),
                       ("lease_expires_at_ms", expires)):
        if value is not None:
            fields[key] = value
    if outcome is not None:
        fields["outcome"] = Outcome(outcome)
    return OutboxRecord(id=outbox_id, channel=channel, status=OutboxStatus(status), tries=tries,
                        created_at_ms=created, next_at_ms=next_at, coalesced=coalesced, **fields)


class LocalNotificationRepository:
    """Channels, rules and the outbox of one database."""

    __slots__ = ("_db",)

    def __init__(self, db: LocalDatabase) -> None:
        self._db = db

    # ----------------------------------------------------------------- channels

    def add_channel(self, name: str, kind: str, params: dict[str, str], secret_params: dict[str, str]) -> ChannelRecord:
        checked_kind, plain, secret = rules.check_channel(name, kind, params, secret_params)
        with notify_errors(), self._db.write() as now:
            connection = self._db.connection
            if connection.execute("SELECT 1 FROM notify_channels WHERE name = ?", (name,)).fetchone():
                raise NotifyChannelExistsError(f"a channel named {name!r} exists already; remove it first")
            count = connection.execute("SELECT count(*) FROM notify_channels").fetchone()[0]
            if count >= rules.MAX_CHANNELS:
                raise rules.InvalidNotifyChannelError(f"at most {rules.MAX_CHANNELS} channels")
            connection.execute(
                "INSERT INTO notify_channels (id, name, kind, params, secret_params, created_at_ms) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (_new_id(), name, checked_kind.value, _encode(plain).decode(), _encode(secret).decode(), now))
        return self._shown(self.channel(name), created_at_ms=now)

    def remove_channel(self, name: str) -> None:
        """Remove it and its rules; its unsent messages are given up when their turn comes."""
        with notify_errors(), self._db.write():
            if self._db.connection.execute("DELETE FROM notify_channels WHERE name = ? RETURNING id",
                                           (name,)).fetchone() is None:
                raise NotifyChannelNotFoundError(f"no channel named {name!r}")

    def channel(self, name: str) -> Channel:
        """The channel with its secrets (for sending)."""
        with notify_errors():
            row = self._db.connection.execute(
                "SELECT id, name, kind, params, secret_params FROM notify_channels WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotifyChannelNotFoundError(f"no channel named {name!r}")
        return _channel(row)

    def channel_by_id(self, channel_id: str) -> Channel | None:
        with notify_errors():
            row = self._db.connection.execute(
                "SELECT id, name, kind, params, secret_params FROM notify_channels WHERE id = ?",
                (channel_id,)).fetchone()
        return None if row is None else _channel(row)

    def list_channels(self) -> list[ChannelRecord]:
        with notify_errors():
            rows = self._db.connection.execute(
                "SELECT id, name, kind, params, secret_params, created_at_ms FROM notify_channels ORDER BY name"
            ).fetchall()
        defaults = {rule.channel: rule.on for rule in self.rules_of(None)}
        return [self._shown(_channel(row[:5]), created_at_ms=row[5], default_on=defaults.get(row[1])) for row in rows]

    @staticmethod
    def _shown(channel: Channel, *, created_at_ms: int, default_on: list[Outcome] | None = None) -> ChannelRecord:
        """What is shown of a channel: its secret parameters by name only."""
        return ChannelRecord(name=channel.name, kind=channel.kind, params=dict(channel.params),
                             secret_params=sorted(channel.secret_params), created_at_ms=created_at_ms,
                             default_on=default_on)

    def secret_values(self) -> list[str]:
        """Every channel's secret parameter values: what every output masks."""
        with notify_errors():
            rows = self._db.connection.execute("SELECT secret_params FROM notify_channels").fetchall()
        return [form for (text,) in rows for value in _decode_map(text).values() if value
                for form in rules.secret_forms(value)]

    # ----------------------------------------------------------------- rules

    def rules_of(self, schedule_id: str | None) -> list[NotifyRule]:
        """A schedule's own rules, or (None) the device's default ones."""
        with notify_errors():
            rows = self._db.connection.execute(
                "SELECT c.name, r.on_outcomes FROM notify_rules r JOIN notify_channels c ON c.id = r.channel_id "
                "WHERE r.schedule_id IS ? ORDER BY c.name", (schedule_id,)).fetchall()
        return [NotifyRule(channel=name, on=_decode_outcomes(on)) for name, on in rows]

    def set_rules(self, schedule_id: str | None, new_rules: list[NotifyRule]) -> list[NotifyRule]:
        """Replace a schedule's rules (or the device's default ones) with ``new_rules``."""
        rules.check_rules(new_rules)
        with notify_errors(), self._db.write() as now:
            connection = self._db.connection
            if schedule_id is not None and connection.execute(
                    "SELECT 1 FROM schedules WHERE id = ?", (schedule_id,)).fetchone() is None:
                raise InvalidNotifyRuleError(f"no schedule {schedule_id!r}")
            resolved = []
            for rule in new_rules:
                row = connection.execute("SELECT id FROM notify_channels WHERE name = ?", (rule.channel,)).fetchone()
                if row is None:
                    raise NotifyChannelNotFoundError(f"no channel named {rule.channel!r} (add it with `notify channel add`)")
                resolved.append((row[0], rule))
            connection.execute("DELETE FROM notify_rules WHERE schedule_id IS ?", (schedule_id,))
            for channel_id, rule in resolved:
                connection.execute(
                    "INSERT INTO notify_rules (schedule_id, channel_id, on_outcomes, created_at_ms) VALUES (?, ?, ?, ?)",
                    (schedule_id, channel_id, _encode([o.value for o in rule.on]).decode(), now))
        return self.rules_of(schedule_id)

    # ----------------------------------------------------------------- the outbox

    def enqueue_message(self, title: str, body: str, channel_names: list[str] | None, *,
                        attempt_id: str | None = None) -> list[OutboxRecord]:
        """A message of its own (``notify send``), to the named channels, else to the channels of
        the device's default rules; never coalesced. With ``attempt_id`` (a task's message, handed
        to the service) only while that Attempt runs, as its Run's, and at most
        ``MAX_TASK_MESSAGES`` of that Attempt through each channel.

        Raises:
            NotifyTokenInvalidError: the Attempt is not running (anymore).
            NotifyTaskLimitError: a channel has taken the Attempt's most messages already.
        """
        with notify_errors(), self._db.write() as now:
            connection = self._db.connection
            run_id = since_ms = None
            if attempt_id is not None:
                row = connection.execute(
                    "SELECT run_id, created_at_ms FROM run_attempts WHERE id = ? AND status IN (?, ?)",
                    (attempt_id, AttemptStatus.STARTING.value, AttemptStatus.RUNNING.value)).fetchone()
                if row is None:
                    raise NotifyTokenInvalidError("the Attempt of this token is not running; nothing queued")
                run_id, since_ms = row
            if channel_names:
                targets = []
                for name in channel_names:
                    row = connection.execute("SELECT id, name FROM notify_channels WHERE name = ?", (name,)).fetchone()
                    if row is None:
                        raise NotifyChannelNotFoundError(f"no channel named {name!r}")
                    targets.append(tuple(row))
            else:
                targets = [tuple(row) for row in connection.execute(
                    "SELECT c.id, c.name FROM notify_rules r JOIN notify_channels c ON c.id = r.channel_id "
                    "WHERE r.schedule_id IS NULL ORDER BY c.name")]
                if not targets:
                    raise NotifyChannelNotFoundError(
                        "no channel named and no default rule: name one with --channel, or set `notify default`")
            if attempt_id is not None:
                for channel_id, name in targets:
                    # The Attempts of a Run never overlap: a Run's own rows since this one began are its.
                    sent = connection.execute(
                        "SELECT count(*) FROM notify_outbox WHERE run_id = ? AND rule_id IS NULL AND outcome IS NULL "
                        "AND channel_id = ? AND created_at_ms >= ?", (run_id, channel_id, since_ms)).fetchone()[0]
                    if sent >= rules.MAX_TASK_MESSAGES:
                        raise NotifyTaskLimitError(
                            f"this Attempt has sent {rules.MAX_TASK_MESSAGES} messages through channel {name} already, "
                            f"the most an Attempt may; nothing queued")
            ids = [_insert(connection, now, channel_id=channel_id, channel_name=name, run_id=run_id, rule_id=None,
                           outcome=None, title=title, body=body) for channel_id, name in targets]
        return [self.outbox_row(outbox_id) for outbox_id in ids]

    def outbox_row(self, outbox_id: str) -> OutboxRecord:
        with notify_errors():
            row = self._db.connection.execute(
                f"SELECT {_OUTBOX_COLUMNS} FROM notify_outbox WHERE id = ?", (outbox_id,)).fetchone()
        return _outbox_record(row)

    def list_outbox(self, *, limit: int = 50, run_id: str | None = None,
                    status: OutboxStatus | None = None) -> list[OutboxRecord]:
        with notify_errors():
            rows = self._db.connection.execute(
                f"SELECT {_OUTBOX_COLUMNS} FROM notify_outbox WHERE (?1 IS NULL OR run_id = ?1) "
                f"AND (?2 IS NULL OR status = ?2) ORDER BY created_at_ms DESC, rowid DESC LIMIT ?3",
                (run_id, None if status is None else status.value, limit)).fetchall()
        return [_outbox_record(row) for row in rows]

    def next_due_at_ms(self) -> int | None:
        with notify_errors():
            return self._db.connection.execute(f"SELECT min(next_at_ms) FROM notify_outbox WHERE {_DUE}").fetchone()[0]

    def claim_due(self, owner: str, *, limit: int = 4) -> list[ClaimedMessage]:
        """Take the lease of up to ``limit`` due rows (pending and due, or sending with an expired
        lease), one short transaction; a row whose sender died during its last allowed try is
        given up instead."""
        with notify_errors(), self._db.write() as now:
            connection = self._db.connection
            connection.execute(
                f"UPDATE notify_outbox SET status = {_GIVEN_UP}, lease_owner = NULL, "
                "lease_expires_at_ms = NULL, last_error = 'the sender stopped during the last try; "
                "whether it arrived is unknown' "
                f"WHERE status = {_SENDING} AND next_at_ms <= ? AND tries >= ?",
                (now, rules.MAX_TRIES))
            expires = now + rules.OUTBOX_LEASE_MS
            rows = connection.execute(
                f"UPDATE notify_outbox SET status = {_SENDING}, lease_owner = ?1, "
                "lease_expires_at_ms = ?2, next_at_ms = ?2, tries = tries + 1 "
                f"WHERE id IN (SELECT id FROM notify_outbox WHERE {_DUE} AND next_at_ms <= ?3 "
                "ORDER BY next_at_ms LIMIT ?4) "
                "RETURNING id, idempotency_key, tries, channel_id, channel_name, run_id, outcome, title, body, "
                "coalesced, since_ms, created_at_ms",
                (owner, expires, now, limit)).fetchall()
        return [ClaimedMessage(id=r[0], idempotency_key=r[1], tries=r[2], channel_id=r[3], channel_name=r[4],
                               run_id=r[5], outcome=None if r[6] is None else Outcome(r[6]), title=r[7], body=r[8],
                               coalesced=r[9], since_ms=r[10], created_at_ms=r[11]) for r in rows]

    def record_sent(self, message: ClaimedMessage, owner: str) -> bool:
        """The provider took it; False when the lease was lost meanwhile (nothing written)."""
        with notify_errors(), self._db.write() as now:
            return self._db.connection.execute(
                f"UPDATE notify_outbox SET status = {_SENT}, sent_at_ms = ?, lease_owner = NULL, "
                "lease_expires_at_ms = NULL, last_error = NULL "
                f"WHERE id = ? AND status = {_SENDING} AND lease_owner = ? AND tries = ? RETURNING 1",
                (now, message.id, owner, message.tries)).fetchone() is not None

    def record_failure(self, message: ClaimedMessage, owner: str, error: str, *, retryable: bool) -> OutboxStatus | None:
        """A failed try: ``pending`` again after the backoff, or ``given_up`` (not retryable, or
        the last try); None when the lease was lost meanwhile (nothing written)."""
        error = error[:rules.MAX_ERROR_CHARS]
        give_up = not retryable or message.tries >= rules.MAX_TRIES
        with notify_errors(), self._db.write() as now:
            status = OutboxStatus.GIVEN_UP if give_up else OutboxStatus.PENDING
            next_at = now if give_up else now + rules.retry_delay_ms(message.tries)
            row = self._db.connection.execute(
                "UPDATE notify_outbox SET status = ?, next_at_ms = ?, lease_owner = NULL, lease_expires_at_ms = NULL, "
                f"last_error = ? WHERE id = ? AND status = {_SENDING} AND lease_owner = ? AND tries = ? "
                "RETURNING 1",
                (status.value, next_at, error, message.id, owner, message.tries)).fetchone()
        return None if row is None else status


def _channel(row: tuple[Any, ...]) -> Channel:
    channel_id, name, kind, params, secret = row
    return Channel(id=channel_id, name=name, kind=ChannelKind(kind), params=_decode_map(params),
                   secret_params=_decode_map(secret))


def _insert(connection: apsw.Connection, now: int, *, channel_id: str, channel_name: str, run_id: str | None,
            rule_id: int | None, outcome: Outcome | None, title: str | None = None, body: str | None = None,
            coalesce_key: str | None = None, coalesced: int = 0, since_ms: int | None = None,
            window_ends_at_ms: int | None = None, next_at_ms: int | None = None) -> str:
    outbox_id = _new_id()
    connection.execute(
        "INSERT INTO notify_outbox (id, idempotency_key, run_id, rule_id, channel_id, channel_name, outcome, title, "
        "body, status, tries, next_at_ms, coalesce_key, coalesced, since_ms, window_ends_at_ms, created_at_ms) "
        f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, {_PENDING}, 0, ?, ?, ?, ?, ?, ?)",
        (outbox_id, f"edge-runtime-{outbox_id}", run_id, rule_id, channel_id, channel_name,
         None if outcome is None else outcome.value, title, body, now if next_at_ms is None else next_at_ms,
         coalesce_key, coalesced, since_ms, window_ends_at_ms, now))
    return outbox_id


def enqueue_run_end(connection: apsw.Connection, run_id: str, now: int) -> int:
    """Write the outbox rows of a Run that just ended, inside the caller's transaction (the one
    that ended it); how many rows were written or counted into a summary.

    The rules are the Run's schedule's own, else the device's default; each one whose outcomes
    hold the Run's is coalesced per rule and source (the schedule, else the Run's name, else the
    Run), as ``contract.notifications.coalesce_step`` decides.
    """
    if connection.execute("SELECT 1 FROM notify_rules LIMIT 1").fetchone() is None:
        return 0  # the common case on a device without notifications: one read of an empty table
    schedule_id, name, status, cancel_reason, attempt_status = connection.execute(
        "SELECT r.schedule_id, r.name, r.status, r.cancel_reason, "
        "(SELECT a.status FROM run_attempts a WHERE a.run_id = r.id ORDER BY a.attempt DESC LIMIT 1) "
        "FROM runs r WHERE r.id = ?", (run_id,)).fetchone()
    outcome = rules.run_outcome(status, cancel_reason=cancel_reason, last_attempt_status=attempt_status)
    found = []
    if schedule_id is not None:
        found = connection.execute(
            "SELECT r.id, r.channel_id, c.name, r.on_outcomes FROM notify_rules r "
            "JOIN notify_channels c ON c.id = r.channel_id WHERE r.schedule_id = ?", (schedule_id,)).fetchall()
    if not found:
        found = connection.execute(
            "SELECT r.id, r.channel_id, c.name, r.on_outcomes FROM notify_rules r "
            "JOIN notify_channels c ON c.id = r.channel_id WHERE r.schedule_id IS NULL").fetchall()
    source = f"schedule:{schedule_id}" if schedule_id is not None else f"name:{name}" if name else f"run:{run_id}"
    written = 0
    for rule_id, channel_id, channel_name, on in found:
        if outcome not in _decode_outcomes(on):
            continue
        key = f"{rule_id}:{source}"[:256]
        last = connection.execute(
            "SELECT id, status, tries, coalesced, window_ends_at_ms FROM notify_outbox WHERE coalesce_key = ? "
            "ORDER BY created_at_ms DESC, rowid DESC LIMIT 1", (key,)).fetchone()
        step = rules.coalesce_step(
            now, window_ends_at_ms=None if last is None else last[4],
            summary_waiting=last is not None and last[3] > 0 and last[1] == OutboxStatus.PENDING and last[2] == 0)
        if step is CoalesceStep.SEND_NOW:
            _insert(connection, now, channel_id=channel_id, channel_name=channel_name, run_id=run_id, rule_id=rule_id,
                    outcome=outcome, coalesce_key=key, window_ends_at_ms=now + rules.COALESCE_WINDOW_MS)
        elif step is CoalesceStep.COUNT:
            connection.execute(
                "UPDATE notify_outbox SET coalesced = coalesced + 1, run_id = ?, outcome = ? WHERE id = ?",
                (run_id, outcome.value, last[0]))
        else:
            _insert(connection, now, channel_id=channel_id, channel_name=channel_name, run_id=run_id, rule_id=rule_id,
                    outcome=outcome, coalesce_key=key, coalesced=1, since_ms=now, next_at_ms=last[4],
                    window_ends_at_ms=last[4] + rules.COALESCE_WINDOW_MS)
        written += 1
    return written
