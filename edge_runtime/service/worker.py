"""This service's worker session and the Run Leases it holds (the Worker/Run Lease authority).

A thin layer over the ``WorkerLeaseStore`` port that keeps what only this process may know:
the session id, the session record's version (the heartbeat fence) and the raw bearer token of
each grant, which lives only in memory (``RunGrant``) and never in a log, an event or a repr.

Concurrency is bounded here: a claim succeeds only while the session's active leases are below
both its ``max_concurrent_runs`` and the ``available_slots`` of its last heartbeat, counted by the
repository under the write lock, so two services (or two loops) can never over-commit the device.
"""

from __future__ import annotations

import secrets
import time
import uuid

import msgspec

from edge_runtime.contract.run_lease import (
    BeginStartCommand,
    ClaimedRunOutcome,
    ClaimRunCommand,
    CompleteRunLeaseCommand,
    LeaseStatus,
    ReleaseReason,
    ReleaseRunLeaseCommand,
    RenewRunLeaseCommand,
    NoCapacityOutcome,
    RunLeaseRecord,
    StartRunCommand,
)
from edge_runtime.contract.ids import new_id
from edge_runtime.contract.ports import WorkerLeaseStore
from edge_runtime.contract.worker_lease import (
    MAX_SESSION_LEASE_DURATION_MS,
    WorkerLeaseFenceRejectedError,
    WorkerSessionRejectedError,
)
from edge_runtime.contract.runs import RunStatus
from edge_runtime.contract.worker_session import (
    HeartbeatCommand,
    OfflineCommand,
    RegisterWorkerCommand,
    SessionStatus,
    WorkerSessionRecord,
)


#: The session lease a service takes while it watches no Attempt (docs/storage.md: flash writes). An idle
#: session renews it with the same margin as a busy one (see ``next_heartbeat_at_ms``), so an
#: idle service writes one heartbeat about every 4.7 minutes instead of every 10 s.
IDLE_SESSION_LEASE_MS = MAX_SESSION_LEASE_DURATION_MS


def new_event_id() -> str:
    return new_id()


class _Fence:
    """A session fence (worker, session id, generation) for repository calls that take one."""

    __slots__ = ("worker_id", "session_id", "session_generation")

    def __init__(self, worker_id: str, session_id: str, session_generation: int) -> None:
        self.worker_id = worker_id
        self.session_id = session_id
        self.session_generation = session_generation


class RunGrant:
    """A Run Lease this session holds, with its raw token (memory only).

    ``asked_at`` and ``held_until`` place the lease's term on this host's monotonic clock, for
    decisions taken while the store cannot be asked for its time (the database is away):
    ``asked_at`` is when the request that set ``lease`` was sent, before the store stamped it, so
    ``held_until = asked_at + term`` comes no later than the lease's expiry by the store's time.
    """

    __slots__ = ("lease", "_token", "asked_at", "held_until")

    def __init__(self, lease: RunLeaseRecord, token: str, *, asked_at: float) -> None:
        self._token = token
        self.hold(lease, asked_at)

    def hold(self, lease: RunLeaseRecord, asked_at: float) -> None:
        """Take ``lease`` (as returned for a request sent at monotonic ``asked_at``)."""
        self.lease = lease
        start = lease.renewed_at_ms if lease.renewed_at_ms is not msgspec.UNSET else lease.acquired_at_ms
        self.asked_at = asked_at
        self.held_until = asked_at + max(0, lease.expires_at_ms - start) / 1000

    @property
    def token(self) -> str:
        return self._token

    def __repr__(self) -> str:
        return f"RunGrant(attempt_id={self.lease.attempt_id!r}, version={self.lease.version}, token=<redacted>)"


class WorkerSession:
    """The current session of this device's worker and the operations fenced by it."""

    __slots__ = ("_repo", "worker_id", "session_id", "_session", "_slots", "_session_lease_ms", "_run_lease_ms",
                 "_idle_session_lease_ms")

    def __init__(
        self, leases: WorkerLeaseStore, *, worker_id: str, slots: int, session_lease_ms: int, run_lease_ms: int,
        idle_session_lease_ms: int = IDLE_SESSION_LEASE_MS,
    ) -> None:
        self._repo = leases
        self.worker_id = worker_id
        self.session_id = str(uuid.uuid4())
        self._session: WorkerSessionRecord | None = None
        self._slots = slots
        self._session_lease_ms = session_lease_ms
        self._idle_session_lease_ms = max(session_lease_ms, idle_session_lease_ms)
        self._run_lease_ms = run_lease_ms

    @property
    def session(self) -> WorkerSessionRecord:
        if self._session is None:
            raise RuntimeError("the worker session is not registered")
        return self._session

    @property
    def generation(self) -> int:
        return self.session.generation

    @property
    def owner(self) -> str:
        """The owner name this session uses for cancellation-dispatch leases (<= 128 chars)."""
        return f"{self.worker_id[:100]}#{self.generation}"

    # ----------------------------------------------------------------- session

    def register(self) -> WorkerSessionRecord:
        """Open a new session: generation+1 over any earlier session of this worker."""
        outcome = self._repo.register(
            RegisterWorkerCommand(
                worker_id=self.worker_id,
                session_id=self.session_id,
                capabilities={"executor": "local_process"},
                max_concurrent_runs=self._slots,
                lease_duration_ms=self._session_lease_ms,
            )
        )
        self._session = outcome.session
        return outcome.session

    def heartbeat(self, available_slots: int, *, idle: bool = False) -> WorkerSessionRecord:
        """Renew the session lease: for ``session_lease_ms`` while Attempts are watched, for
        the idle lease (``idle_session_lease_ms``) while none is (``idle``)."""
        session = self.session
        self._session = self._repo.heartbeat(
            HeartbeatCommand(
                **self._session_at_version(),
                available_slots=max(0, min(available_slots, session.max_concurrent_runs)),
                lease_duration_ms=self._idle_session_lease_ms if idle else self._session_lease_ms,
            )
        )
        return self._session

    def next_heartbeat_at_ms(self, busy_since_ms: int | None = None) -> int:
        """When the session lease is due for renewal.

        Always before less than two thirds of ``session_lease_ms`` is left, whichever lease (busy
        or idle) the last heartbeat took: two heartbeats at the busy cadence can still be missed.
        While Attempts are watched (``busy_since_ms``: since when), also a third of
        ``session_lease_ms`` after the later of the last heartbeat and that moment: a busy
        service notices a lost session that soon, and a Run shorter than that costs no heartbeat.
        """
        session = self.session
        due = session.lease_expires_at_ms - (2 * self._session_lease_ms) // 3
        if busy_since_ms is not None:
            due = min(due, max(session.heartbeat_at_ms, busy_since_ms) + max(1, self._session_lease_ms // 3))
        return max(session.heartbeat_at_ms + 1, due)

    def check_current(self) -> None:
        """Read, never write, whether this session is still its worker's current one: between
        heartbeats (up to minutes apart while idle) this is how a replaced service notices.

        Raises:
            WorkerLeaseFenceRejectedError: another session of this worker replaced this one.
            WorkerSessionRejectedError: this session was set offline.
        """
        stored = self._repo.find_session(self.worker_id)
        if stored is None or stored.session_id != self.session_id or stored.generation != self.generation:
            now = "no session" if stored is None else f"generation {stored.generation}"
            raise WorkerLeaseFenceRejectedError(
                f"session {self.session_id!r} of worker {self.worker_id!r} was replaced (the worker now has {now})")
        if stored.status is SessionStatus.OFFLINE:
            raise WorkerSessionRejectedError(f"session {self.session_id!r} of worker {self.worker_id!r} is offline")

    def check_interval_ms(self) -> int:
        """How often :meth:`check_current` reads: the busy heartbeat cadence."""
        return max(1, self._session_lease_ms // 3)

    def offline(self) -> None:
        self._session = self._repo.offline(OfflineCommand(**self._session_at_version()))

    def _session_at_version(self) -> dict[str, object]:
        """The fence of a session command (heartbeat, offline): this session at the version of
        it this service last saw, so that a write it has not seen refuses the command."""
        session = self.session
        return {"worker_id": self.worker_id, "session_id": self.session_id, "generation": session.generation,
                "expected_version": session.version}

    # ----------------------------------------------------------------- run leases

    def claim(self, run_id: str, attempt_id: str) -> RunGrant | None:
        """Take the Run Lease of a ``claimed`` Attempt; None when not claimable or no capacity."""
        asked_at = time.monotonic()
        outcome = self._repo.claim_run(ClaimRunCommand(**self._lease_offer(run_id, attempt_id), event_id=new_event_id()))
        if isinstance(outcome, ClaimedRunOutcome):
            return RunGrant(outcome.lease, outcome.lease_token, asked_at=asked_at)
        return None

    def start(self, run_id: str) -> RunGrant | NoCapacityOutcome | None:
        """Take a queued Run in one fenced transaction: a new Attempt, its Run Lease, the start
        barrier (``start_run``). The grant of the ``starting`` Attempt; a ``NoCapacityOutcome``
        when this session's leases fill its capacity; None when the Run is no longer startable.
        Nothing is written unless a grant is returned.

        An idle session holds the long idle lease. It takes the busy one (a heartbeat) before its
        first start: a service killed while it spawns leaves a ``starting`` Attempt that only the
        end of its session lease lets the orphan sweep end, and that must come within the busy
        lease, not minutes later. One write per idle-to-busy change.

        Raises:
            WorkerLeaseFenceRejectedError, WorkerSessionRejectedError: this session was replaced,
                or is no longer online and live: this service must take nothing.
        """
        session = self.session
        if session.lease_expires_at_ms - session.heartbeat_at_ms > self._session_lease_ms:
            session = self.heartbeat(session.available_slots)
        asked_at = time.monotonic()
        outcome = self._repo.start_run(
            StartRunCommand(**self._lease_offer(run_id, new_id()), session_version=session.version)
        )
        if isinstance(outcome, ClaimedRunOutcome):
            return RunGrant(outcome.lease, outcome.lease_token, asked_at=asked_at)
        return outcome if isinstance(outcome, NoCapacityOutcome) else None

    def _lease_offer(self, run_id: str, attempt_id: str) -> dict[str, object]:
        """What a claim and a start both ask the lease authority for: a Run Lease on the Attempt
        for this session, under a fresh offer id and bearer token (memory only), for the run lease
        term."""
        return {"worker_id": self.worker_id, "session_id": self.session_id, "session_generation": self.generation,
                "run_id": run_id, "attempt_id": attempt_id, "offer_id": str(uuid.uuid4()),
                "lease_token": secrets.token_urlsafe(32), "lease_duration_ms": self._run_lease_ms}

    def abandon_start(self, grant: RunGrant, reason: str) -> RunStatus:
        """Undo a start that spawned no process: the Run goes back to the queue (or ends
        ``cancelled``), the grant is completed. Fenced by the grant, so it works after a takeover."""
        return self._repo.abandon_start(grant.lease, reason=reason, actor_id=self.owner)

    def abandon_unconfirmed(self, lease: RunLeaseRecord, reason: str) -> RunStatus:
        """Undo a start of this session whose commit was never confirmed to it (the connection was
        lost during COMMIT): it holds no token for the grant and spawned nothing. Fenced by the
        grant as stored, like ``abandon_start``."""
        return self._repo.abandon_start(lease, reason=reason, actor_id=self.owner)

    def current_session_leases(self) -> list[RunLeaseRecord]:
        """Active grants of this session as the lease authority stores them."""
        generation = self.generation
        return [lease for lease in self._repo.list_active_leases(self.worker_id)
                if lease.session_generation == generation]

    def sweep_orphans(self, abandon_after_ms: int) -> list[tuple[str, RunStatus]]:
        """End Attempts stranded before a process was recorded, by any session (see ``run_start``)."""
        return self._repo.sweep_orphans(self._fence(), abandon_after_ms=abandon_after_ms)

    def free_slots(self) -> int:
        """This session's capacity left, as the lease authority counts it."""
        return self._repo.free_slots(self.worker_id, self.generation)

    def _fence(self) -> _Fence:
        session = self.session
        return _Fence(self.worker_id, self.session_id, session.generation)

    def _held(self, grant: RunGrant) -> dict[str, object]:
        """The fence of a grant this session holds (see ``_HeldGrantCommand``)."""
        return {"worker_id": self.worker_id, "session_id": self.session_id, "session_generation": self.generation,
                "attempt_id": grant.lease.attempt_id, "lease_token": grant.token,
                "expected_version": grant.lease.version}

    def begin_start(self, grant: RunGrant) -> None:
        """The start barrier: the Attempt goes ``claimed`` -> ``starting``."""
        outcome = self._repo.begin_start(
            BeginStartCommand(
                **self._held(grant),
                event_id=new_event_id(),
            )
        )
        grant.lease = outcome.lease

    def release(self, grant: RunGrant, reason: ReleaseReason) -> None:
        outcome = self._repo.release(
            ReleaseRunLeaseCommand(
                **self._held(grant),
                reason=reason,
                event_id=new_event_id(),
            )
        )
        grant.lease = outcome.lease

    def renew(self, grant: RunGrant) -> None:
        asked_at = time.monotonic()
        lease = self._repo.renew(
            RenewRunLeaseCommand(
                **self._held(grant),
                lease_duration_ms=self._run_lease_ms,
            )
        )
        grant.hold(lease, asked_at)

    def next_renewal_at_ms(self, grant: RunGrant) -> int:
        lease = grant.lease
        start = lease.renewed_at_ms if lease.renewed_at_ms is not msgspec.UNSET else lease.acquired_at_ms
        return start + max(1, (lease.expires_at_ms - start) // 3)

    def complete(self, attempt_id: str) -> bool:
        """Close the Attempt's grant (ours, or one adopted from an earlier session).

        Fenced by the stored grant itself, so it works without the raw token after a restart.
        False when there is no active grant to close (already completed, or never granted).
        """
        lease = self._repo.find_lease(attempt_id)
        if lease is None or lease.status is not LeaseStatus.LEASED or lease.worker_id != self.worker_id:
            return False
        self._repo.complete(
            CompleteRunLeaseCommand(
                worker_id=lease.worker_id,
                session_generation=lease.session_generation,
                attempt_id=attempt_id,
                lease_generation=lease.lease_generation,
                expected_version=lease.version,
                token_digest=lease.token_digest,
                event_id=new_event_id(),
            )
        )
        return True

    def lease_of(self, attempt_id: str) -> RunLeaseRecord | None:
        """The Attempt's Run Lease in any status (any worker's), or None."""
        return self._repo.find_lease(attempt_id)

    def earlier_session_leases(self) -> list[RunLeaseRecord]:
        """Active grants of this worker from sessions before the current one (restart recovery)."""
        generation = self.generation
        return [lease for lease in self._repo.list_active_leases(self.worker_id) if lease.session_generation < generation]
