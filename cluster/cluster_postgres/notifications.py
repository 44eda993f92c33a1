"""``ql3.notify_channels``, ``ql3.notify_rules``, ``ql3.notify_outbox`` (migration 0013): notifications
on PostgreSQL, with the Local repository's methods (docs/notifications.md).

Every rule is the contract's (``edge_runtime/contract/notifications.py``). The outbox rows of a
Run's end are written by :func:`enqueue_run_end`, which ``runs.end_run`` calls inside the
transaction that ends the Run. Any worker's sender may deliver any row: a claim takes due rows
``FOR UPDATE SKIP LOCKED`` and leases them (owner, expiry by database time, tries + 1), so two
workers never hold the same row, and a result is recorded only by the lease's owner at that try.
No role may DELETE: a removed channel is marked and its secrets cleared.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from cluster_postgres.errors import LOCK_NOTIFY_COALESCE, Transaction, reading, take_runtime_lock
from cluster_postgres.run_events import database_now
from edge_runtime.contract import notifications as rules
from edge_runtime.contract.ids import new_id
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
    OutboxRecord,
    OutboxStatus,
    Outcome,
)
from edge_runtime.contract.sql_vocabulary import sql_in, sql_literal


class ClusterNotifyStorageError(NotifyStoreError, code="CLUSTER_STORAGE_FAILED"):
    """PostgreSQL failed under a notification operation."""


_DUE = f"status IN {sql_in(OutboxStatus, {OutboxStatus.PENDING, OutboxStatus.SENDING})}"
_PENDING, _SENDING = sql_literal(OutboxStatus.PENDING), sql_literal(OutboxStatus.SENDING)
_SENT, _GIVEN_UP = sql_literal(OutboxStatus.SENT), sql_literal(OutboxStatus.GIVEN_UP)
_LIVE = "removed_at_ms IS NULL"
_DEFAULT_OWNER = ""
_OUTBOX_COLUMNS = ("id, channel_name, status, tries, created_at_ms, next_at_ms, run_id, outcome, title, coalesced, "
                   "since_ms, sent_at_ms, last_error, lease_owner, lease_expires_at_ms")


def _outbox_record(row: tuple[Any, ...]) -> OutboxRecord:
    (outbox_id, channel, status, tries, created, next_at, run_id, outcome, title, coalesced, since, sent_at, error,
     owner, expires) = row
    fields = {key: value for key, value in (
        ("run_id", run_id), ("outcome", outcome), ("title", title), ("since_ms", since), ("sent_at_ms", sent_at),
        ("last_error", error), ("lease_owner", owner), ("lease_expires_at_ms", expires)) if value is not None}
    if outcome is not None:
        fields["outcome"] = Outcome(outcome)
    return OutboxRecord(id=outbox_id, channel=channel, status=OutboxStatus(status), tries=tries,
                        created_at_ms=created, next_at_ms=next_at, coalesced=coalesced, **fields)


def _channel(row: tuple[Any, ...]) -> Channel:
    channel_id, name, kind, params, secret = row
    return Channel(id=channel_id, name=name, kind=ChannelKind(kind), params=dict(params), secret_params=dict(secret))


def _live_rules(cur: Any, owner: str) -> list[tuple[str, str, list[Outcome]]]:
    """(channel id, channel name, outcomes) of an owner's rules whose channel is still there."""
    row = cur.execute("SELECT rules FROM ql3.notify_rules WHERE owner = %s", (owner,)).fetchone()
    if row is None or not row[0]:
        return []
    ids = [rule["channelId"] for rule in row[0]]
    names = dict(cur.execute(f"SELECT id, name FROM ql3.notify_channels WHERE id = ANY(%s) AND {_LIVE}",
                             (ids,)).fetchall())
    return [(rule["channelId"], names[rule["channelId"]], [Outcome(o) for o in rule["on"]])
            for rule in row[0] if rule["channelId"] in names]


class PostgresNotifications:
    """Channels, rules and the outbox, on the caller's connection (one short transaction each)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def _tx(self) -> Transaction:
        return Transaction(self._conn, ClusterNotifyStorageError)

    # ----------------------------------------------------------------- channels

    def add_channel(self, name: str, kind: str, params: dict[str, str], secret_params: dict[str, str]) -> ChannelRecord:
        checked_kind, plain, secret = rules.check_channel(name, kind, params, secret_params)
        with self._tx():
            cur = self._conn.cursor()
            now = database_now(cur)
            if cur.execute(f"SELECT 1 FROM ql3.notify_channels WHERE name = %s AND {_LIVE}", (name,)).fetchone():
                raise NotifyChannelExistsError(f"a channel named {name!r} exists already; remove it first")
            if cur.execute(f"SELECT count(*) FROM ql3.notify_channels WHERE {_LIVE}").fetchone()[0] >= rules.MAX_CHANNELS:
                raise rules.InvalidNotifyChannelError(f"at most {rules.MAX_CHANNELS} channels")
            cur.execute("INSERT INTO ql3.notify_channels (id, name, kind, params, secret_params, created_at_ms) "
                        "VALUES (%s, %s, %s, %s, %s, %s)", (new_id(), name, checked_kind.value, Jsonb(plain),
                                                            Jsonb(secret), now))
        return ChannelRecord(name=name, kind=checked_kind, params=plain, secret_params=sorted(secret),
                             created_at_ms=now)

    def remove_channel(self, name: str) -> None:
        with self._tx():
            cur = self._conn.cursor()
            now = database_now(cur)
            if cur.execute(f"UPDATE ql3.notify_channels SET removed_at_ms = %s, secret_params = '{{}}' "
                           f"WHERE name = %s AND {_LIVE} RETURNING id", (now, name)).fetchone() is None:
                raise NotifyChannelNotFoundError(f"no channel named {name!r}")

    def channel(self, name: str) -> Channel:
        with reading(ClusterNotifyStorageError):
            row = self._conn.execute(f"SELECT id, name, kind, params, secret_params FROM ql3.notify_channels "
                                     f"WHERE name = %s AND {_LIVE}", (name,)).fetchone()
        if row is None:
            raise NotifyChannelNotFoundError(f"no channel named {name!r}")
        return _channel(row)

    def channel_by_id(self, channel_id: str) -> Channel | None:
        with reading(ClusterNotifyStorageError):
            row = self._conn.execute(f"SELECT id, name, kind, params, secret_params FROM ql3.notify_channels "
                                     f"WHERE id = %s AND {_LIVE}", (channel_id,)).fetchone()
        return None if row is None else _channel(row)

    def list_channels(self) -> list[ChannelRecord]:
        with reading(ClusterNotifyStorageError):
            rows = self._conn.execute(f"SELECT id, name, kind, params, secret_params, created_at_ms "
                                      f"FROM ql3.notify_channels WHERE {_LIVE} ORDER BY name").fetchall()
        defaults = {rule.channel: rule.on for rule in self.rules_of(None)}
        return [ChannelRecord(name=r[1], kind=ChannelKind(r[2]), params=dict(r[3]), secret_params=sorted(r[4]),
                              created_at_ms=r[5], default_on=defaults.get(r[1])) for r in rows]

    def secret_values(self) -> list[str]:
        with reading(ClusterNotifyStorageError):
            rows = self._conn.execute(f"SELECT secret_params FROM ql3.notify_channels WHERE {_LIVE}").fetchall()
        return [form for (secret,) in rows for value in secret.values() if value for form in rules.secret_forms(value)]

    # ----------------------------------------------------------------- rules

    def rules_of(self, schedule_id: str | None) -> list[NotifyRule]:
        with reading(ClusterNotifyStorageError):
            found = _live_rules(self._conn.cursor(), schedule_id or _DEFAULT_OWNER)
        return sorted((NotifyRule(channel=name, on=on) for _, name, on in found), key=lambda r: r.channel)

    def set_rules(self, schedule_id: str | None, new_rules: list[NotifyRule]) -> list[NotifyRule]:
        rules.check_rules(new_rules)
        with self._tx():
            cur = self._conn.cursor()
            now = database_now(cur)
            if schedule_id is not None and cur.execute(
                    "SELECT 1 FROM ql3.schedules WHERE id = %s", (schedule_id,)).fetchone() is None:
                raise InvalidNotifyRuleError(f"no schedule {schedule_id!r}")
            stored = []
            for rule in new_rules:
                row = cur.execute(f"SELECT id FROM ql3.notify_channels WHERE name = %s AND {_LIVE}",
                                  (rule.channel,)).fetchone()
                if row is None:
                    raise NotifyChannelNotFoundError(f"no channel named {rule.channel!r} (add it with `notify channel add`)")
                stored.append({"channelId": row[0], "on": [o.value for o in rule.on]})
            cur.execute("INSERT INTO ql3.notify_rules (owner, rules, updated_at_ms) VALUES (%s, %s, %s) "
                        "ON CONFLICT (owner) DO UPDATE SET rules = excluded.rules, updated_at_ms = excluded.updated_at_ms",
                        (schedule_id or _DEFAULT_OWNER, Jsonb(stored), now))
        return self.rules_of(schedule_id)

    # ----------------------------------------------------------------- the outbox

    def enqueue_message(self, title: str, body: str, channel_names: list[str] | None, *,
                        attempt_id: str | None = None) -> list[OutboxRecord]:
        if attempt_id is not None:
            # A task's own message reaches a Local service only (its socket is on the device).
            raise rules.NotifyError("a task's own message through the service is kept by the Local store only")
        with self._tx():
            cur = self._conn.cursor()
            now = database_now(cur)
            if channel_names:
                targets = []
                for name in channel_names:
                    row = cur.execute(f"SELECT id, name FROM ql3.notify_channels WHERE name = %s AND {_LIVE}",
                                      (name,)).fetchone()
                    if row is None:
                        raise NotifyChannelNotFoundError(f"no channel named {name!r}")
                    targets.append(tuple(row))
            else:
                targets = [(channel_id, name) for channel_id, name, _ in _live_rules(cur, _DEFAULT_OWNER)]
                if not targets:
                    raise NotifyChannelNotFoundError(
                        "no channel named and no default rule: name one with --channel, or set `notify default`")
            ids = [_insert(cur, now, channel_id=channel_id, channel_name=name, run_id=None, outcome=None, title=title,
                           body=body) for channel_id, name in targets]
        return [self.outbox_row(outbox_id) for outbox_id in ids]

    def outbox_row(self, outbox_id: str) -> OutboxRecord:
        with reading(ClusterNotifyStorageError):
            row = self._conn.execute(f"SELECT {_OUTBOX_COLUMNS} FROM ql3.notify_outbox WHERE id = %s",
                                     (outbox_id,)).fetchone()
        return _outbox_record(row)

    def list_outbox(self, *, limit: int = 50, run_id: str | None = None,
                    status: OutboxStatus | None = None) -> list[OutboxRecord]:
        with reading(ClusterNotifyStorageError):
            rows = self._conn.execute(
                f"SELECT {_OUTBOX_COLUMNS} FROM ql3.notify_outbox WHERE (%(run)s::text IS NULL OR run_id = %(run)s) "
                "AND (%(status)s::text IS NULL OR status = %(status)s) ORDER BY created_at_ms DESC, id DESC "
                "LIMIT %(limit)s", {"run": run_id, "status": None if status is None else status.value,
                                    "limit": limit}).fetchall()
        return [_outbox_record(row) for row in rows]

    def next_due_at_ms(self) -> int | None:
        with reading(ClusterNotifyStorageError):
            return self._conn.execute(f"SELECT min(next_at_ms) FROM ql3.notify_outbox WHERE {_DUE}").fetchone()[0]

    def claim_due(self, owner: str, *, limit: int = 4) -> list[ClaimedMessage]:
        """As on Local; the due rows are locked ``SKIP LOCKED``: a row another worker is claiming
        is left to it, never waited for nor taken twice."""
        with self._tx():
            cur = self._conn.cursor()
            now = database_now(cur)
            cur.execute(
                f"UPDATE ql3.notify_outbox SET status = {_GIVEN_UP}, lease_owner = NULL, lease_expires_at_ms = NULL, "
                "last_error = 'the sender stopped during the last try; whether it arrived is unknown' "
                f"WHERE id IN (SELECT id FROM ql3.notify_outbox WHERE status = {_SENDING} AND next_at_ms <= %s "
                "AND tries >= %s FOR UPDATE SKIP LOCKED)", (now, rules.MAX_TRIES))
            expires = now + rules.OUTBOX_LEASE_MS
            rows = cur.execute(
                f"UPDATE ql3.notify_outbox SET status = {_SENDING}, lease_owner = %(owner)s, "
                "lease_expires_at_ms = %(expires)s, next_at_ms = %(expires)s, tries = tries + 1 "
                f"WHERE id IN (SELECT id FROM ql3.notify_outbox WHERE {_DUE} AND next_at_ms <= %(now)s "
                "ORDER BY next_at_ms LIMIT %(limit)s FOR UPDATE SKIP LOCKED) "
                "RETURNING id, idempotency_key, tries, channel_id, channel_name, run_id, outcome, title, body, "
                "coalesced, since_ms, created_at_ms",
                {"owner": owner, "expires": expires, "now": now, "limit": limit}).fetchall()
        return [ClaimedMessage(id=r[0], idempotency_key=r[1], tries=r[2], channel_id=r[3], channel_name=r[4],
                               run_id=r[5], outcome=None if r[6] is None else Outcome(r[6]), title=r[7], body=r[8],
                               coalesced=r[9], since_ms=r[10], created_at_ms=r[11]) for r in rows]

    def record_sent(self, message: ClaimedMessage, owner: str) -> bool:
        with self._tx():
            cur = self._conn.cursor()
            now = database_now(cur)
            return cur.execute(
                f"UPDATE ql3.notify_outbox SET status = {_SENT}, sent_at_ms = %s, lease_owner = NULL, "
                "lease_expires_at_ms = NULL, last_error = NULL "
                f"WHERE id = %s AND status = {_SENDING} AND lease_owner = %s AND tries = %s RETURNING 1",
                (now, message.id, owner, message.tries)).fetchone() is not None

    def record_failure(self, message: ClaimedMessage, owner: str, error: str, *, retryable: bool) -> OutboxStatus | None:
        error = error[:rules.MAX_ERROR_CHARS]
        give_up = not retryable or message.tries >= rules.MAX_TRIES
        status = OutboxStatus.GIVEN_UP if give_up else OutboxStatus.PENDING
        with self._tx():
            cur = self._conn.cursor()
            now = database_now(cur)
            next_at = now if give_up else now + rules.retry_delay_ms(message.tries)
            row = cur.execute(
                "UPDATE ql3.notify_outbox SET status = %s, next_at_ms = %s, lease_owner = NULL, "
                f"lease_expires_at_ms = NULL, last_error = %s WHERE id = %s AND status = {_SENDING} "
                "AND lease_owner = %s AND tries = %s RETURNING 1",
                (status.value, next_at, error, message.id, owner, message.tries)).fetchone()
        return None if row is None else status


def _insert(cur: Any, now: int, *, channel_id: str, channel_name: str, run_id: str | None, outcome: Outcome | None,
            title: str | None = None, body: str | None = None, coalesce_key: str | None = None, coalesced: int = 0,
            since_ms: int | None = None, window_ends_at_ms: int | None = None, next_at_ms: int | None = None) -> str:
    outbox_id = new_id()
    cur.execute(
        "INSERT INTO ql3.notify_outbox (id, idempotency_key, run_id, channel_id, channel_name, outcome, title, body, "
        "status, tries, next_at_ms, coalesce_key, coalesced, since_ms, window_ends_at_ms, created_at_ms) "
        f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, {_PENDING}, 0, %s, %s, %s, %s, %s, %s)",
        (outbox_id, f"edge-runtime-{outbox_id}", run_id, channel_id, channel_name,
         None if outcome is None else outcome.value, title, body, now if next_at_ms is None else next_at_ms,
         coalesce_key, coalesced, since_ms, window_ends_at_ms, now))
    return outbox_id


def enqueue_run_end(cur: Any, run_id: str, now: int) -> int:
    """The outbox rows of a Run that just ended, inside the caller's transaction (the one that
    ended it, holding the Run's row lock), as on Local. Coalescing takes the runtime lock
    ``notify_coalesce`` first: two Runs of one schedule ending at once on two workers count into
    one summary, never two."""
    if cur.execute("SELECT 1 FROM ql3.notify_rules WHERE rules <> '[]'::jsonb LIMIT 1").fetchone() is None:
        return 0
    schedule_id, name, status, cancel_reason, attempt_status = cur.execute(
        "SELECT r.schedule_id, r.name, r.status, r.cancel_reason, "
        "(SELECT a.status FROM ql3.run_attempts a WHERE a.run_id = r.id ORDER BY a.attempt DESC LIMIT 1) "
        "FROM ql3.runs r WHERE r.id = %s", (run_id,)).fetchone()
    outcome = rules.run_outcome(status, cancel_reason=cancel_reason, last_attempt_status=attempt_status)
    owner = schedule_id if schedule_id is not None else _DEFAULT_OWNER
    found = _live_rules(cur, owner) if schedule_id is not None else []
    rule_owner = owner if found else _DEFAULT_OWNER
    if not found:
        found = _live_rules(cur, _DEFAULT_OWNER)
    source = f"schedule:{schedule_id}" if schedule_id is not None else f"name:{name}" if name else f"run:{run_id}"
    written = 0
    for channel_id, channel_name, on in found:
        if outcome not in on:
            continue
        if not written:
            take_runtime_lock(cur, LOCK_NOTIFY_COALESCE, ClusterNotifyStorageError)
        key = f"{rule_owner or 'default'}:{channel_id}:{source}"[:256]
        last = cur.execute(
            "SELECT id, status, tries, coalesced, window_ends_at_ms FROM ql3.notify_outbox WHERE coalesce_key = %s "
            "ORDER BY created_at_ms DESC, id DESC LIMIT 1", (key,)).fetchone()
        step = rules.coalesce_step(
            now, window_ends_at_ms=None if last is None else last[4],
            summary_waiting=last is not None and last[3] > 0 and last[1] == OutboxStatus.PENDING and last[2] == 0)
        if step is CoalesceStep.SEND_NOW:
            _insert(cur, now, channel_id=channel_id, channel_name=channel_name, run_id=run_id, outcome=outcome,
                    coalesce_key=key, window_ends_at_ms=now + rules.COALESCE_WINDOW_MS)
        elif step is CoalesceStep.COUNT:
            cur.execute("UPDATE ql3.notify_outbox SET coalesced = coalesced + 1, run_id = %s, outcome = %s "
                        "WHERE id = %s", (run_id, outcome.value, last[0]))
        else:
            _insert(cur, now, channel_id=channel_id, channel_name=channel_name, run_id=run_id, outcome=outcome,
                    coalesce_key=key, coalesced=1, since_ms=now, next_at_ms=last[4],
                    window_ends_at_ms=last[4] + rules.COALESCE_WINDOW_MS)
        written += 1
    return written
