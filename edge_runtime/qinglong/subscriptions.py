"""A subscription as QingLong's subscription object (``/open/subscriptions``).

A QingLong subscription is a subscription here: its integer ``id`` is the subscription's
``number``; ``type`` is ``public-repo`` (git) or ``file``; ``alias`` its folder; ``schedule``,
``is_disabled``, ``status``, ``pid`` and ``log_path`` are its pull schedule's, read as a cron's are
(:func:`edge_runtime.qinglong.crons.cron_state`): a subscription whose pull schedule was removed by
hand has none, is disabled and pulls only when asked on the device. ``pull_type`` and
``pull_option`` (QingLong's private-repository credentials) are always null: this device pulls
public sources only, and never sends a credential back.

Only reads, run, stop, enable and disable are served: adding, changing or removing a subscription
chooses what code the device fetches and schedules, so it is done on the device
(:data:`edge_runtime.qinglong.open_routes.REFUSED` says so with 403).
"""

from __future__ import annotations

from typing import Any

import msgspec

from edge_runtime.contract.schedules import ScheduleRecord
from edge_runtime.contract.subscriptions import SubscriptionKind, SubscriptionRecord
from edge_runtime.qinglong.crons import DISABLED, CronState, iso

#: QingLong's ``type`` of each kind of source.
QINGLONG_TYPE = {SubscriptionKind.GIT: "public-repo", SubscriptionKind.FILE: "file"}

_NO_PULL_SCHEDULE = CronState(DISABLED, None, "", 0, 0)


def _optional(value: Any) -> Any:
    return None if value is msgspec.UNSET else value


def subscription_object(record: SubscriptionRecord, pull: ScheduleRecord | None,
                        state: CronState | None) -> dict[str, Any]:
    """QingLong's subscription object of ``record``; ``pull``: its pull schedule (None: removed
    by hand) and ``state`` that schedule's Run-derived fields."""
    state = _NO_PULL_SCHEDULE if pull is None or state is None else state
    return {
        "id": record.number,
        "name": record.name,
        "type": QINGLONG_TYPE[record.kind],
        "schedule_type": "crontab",
        "schedule": None if pull is None else pull.expression,
        "interval_schedule": None,
        "url": record.url,
        "whitelist": _optional(record.whitelist),
        "blacklist": _optional(record.blacklist),
        "dependences": _optional(record.dependence),
        "branch": _optional(record.branch),
        "status": state.status,
        "pull_type": None,
        "pull_option": None,
        "pid": state.pid,
        "is_disabled": 1 if pull is None or pull.paused else 0,
        "log_path": state.log_path,
        "alias": record.folder,
        "command": None,
        "extensions": " ".join(record.extensions),
        "sub_before": None,
        "sub_after": None,
        "proxy": None,
        "autoAddCron": int(record.auto_add),
        "autoDelCron": int(record.auto_remove),
        "createdAt": iso(record.created_at_ms),
        "updatedAt": iso(record.updated_at_ms),
    }


def matches(record: SubscriptionRecord, search: str) -> bool:
    """QingLong's ``searchValue`` over a subscription: a text in its name, URL or folder
    (case-insensitive)."""
    wanted = search.casefold()
    return any(wanted in text.casefold() for text in (record.name, record.url, record.folder))
