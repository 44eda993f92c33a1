"""The append-only Run event record shared by every subsystem that writes ``run_events``."""

from __future__ import annotations

from typing import Any

import msgspec

from edge_runtime.contract.validation import SafeInt


class RunEvent(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, kw_only=True):
    """One low-sensitivity, append-only fact about a Run.

    ``payload`` holds snake_case keys and is stored as JSON text. It never holds a lease token,
    a command line or process output. ``attempt_id`` is absent for Run-level events.
    """

    id: str
    run_id: str
    sequence: SafeInt
    type: str
    dedupe_key: str
    actor_type: str
    actor_id: str
    attempt_id: str | msgspec.UnsetType = msgspec.UNSET
    payload: dict[str, Any]
    created_at_ms: SafeInt
