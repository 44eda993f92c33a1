"""Renewing the Run Leases of the Attempts this service started (each ``RunningAttempt.grant``).

After the start barrier a grant cannot be taken over, so a failed renewal is not fatal: the grant
is let go and the Attempt runs on, unless the store has ended it meanwhile (its lease lapsed and
the orphan sweep ended it ``lost``): then its process is no one's to run and is fenced. A renewal
also moves on the bound by which a still unrecorded identity must be recorded.
"""

from __future__ import annotations

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.service.attempts.fences import Fences
from edge_runtime.service.attempts.identity import Identities
from edge_runtime.service.attempts.tools import Tools


class Renewals:
    """Renews the grants of the watched Attempts when due."""

    def __init__(self, tools: Tools, *, identities: Identities, fences: Fences) -> None:
        _, self._worker, _, self._journal, self._watched = tools
        self._identities, self._fences = identities, fences

    def renew_due(self, now_ms: int) -> None:
        for running in list(self._watched.values()):
            grant = running.grant
            if grant is None or self._worker.next_renewal_at_ms(grant) > now_ms:
                continue
            try:
                self._worker.renew(grant)
                self._identities.extend(running, grant)
            except EdgeRuntimeError as exc:
                running.grant = None
                self._journal.warning("lease.renew_failed", attempt=running.attempt_id, error=exc.code,
                                      detail=str(exc))
                self._fences.fence_if_ended(running, "its Run Lease is gone")

    def next_renewal_at_ms(self) -> int | None:
        return min(
            (self._worker.next_renewal_at_ms(r.grant) for r in self._watched.values() if r.grant is not None),
            default=None,
        )
