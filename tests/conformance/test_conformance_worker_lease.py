"""Worker Session and Run Lease conformance: every body runs against Local and PostgreSQL.

Ported from tests/unit/test_local_worker_lease.py; what only Local has (raw bytes of the SQLite
files and WAL, SQLite busy handling, the injected clock's own validation, SQLite schema and
query plans) stays there; the PostgreSQL forms live in cluster/tests.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from edge_runtime.contract.run_lease import (
    EVENT_ATTEMPT_STARTING,
    EVENT_LEASE_CLAIMED,
    EVENT_LEASE_COMPLETED,
    EVENT_LEASE_RELEASED,
    ClaimedRunOutcome,
    LeasedRunOutcome,
    LeaseStatus,
    NoCapacityOutcome,
    NotClaimableOutcome,
    NotClaimableReason,
    RunLeaseRecord,
)
from edge_runtime.contract.worker_lease import (
    InvalidWorkerLeaseCommandError,
    RunNotStartableError,
    StartBarrierPassedError,
    WorkerLeaseFenceRejectedError,
    WorkerSessionRejectedError,
    capabilities_hash,
)
from edge_runtime.contract.worker_session import RegisteredOutcome, ReplayedOutcome, SessionStatus, WorkerSessionRecord
from tests.support.worker_lease import (
    CAPABILITIES,
    LEASE_MS,
    SESSION_MS,
    claim_cmd,
    complete_cmd,
    drain_cmd,
    heartbeat_cmd,
    offline_cmd,
    register_cmd,
    release_cmd,
    renew_cmd,
    start_cmd,
)


def seed_run(backend: Any, run_id: str, attempt_id: str | None = None, *, run_status: str = "dispatching",
             execution_owner: str = "runtime", cancel_requested_at_ms: int | None = None,
             attempt_status: str = "claimed") -> None:
    backend.create_run(run_id, status=run_status, execution_owner=execution_owner,
                       cancel_requested_at_ms=cancel_requested_at_ms)
    if attempt_id is not None:
        backend.create_attempt(attempt_id, run_id, status=attempt_status)


def seed_runs(backend: Any, count: int, prefix: str = "r") -> list[tuple[str, str]]:
    pairs = [(f"{prefix}{i}", f"{prefix}{i}-a") for i in range(count)]
    for run_id, attempt_id in pairs:
        seed_run(backend, run_id, attempt_id)
    return pairs


@pytest.fixture
def repo(backend: Any) -> Any:
    return backend.leases


def _register(repo: Any, **kwargs: Any) -> WorkerSessionRecord:
    outcome = repo.register(register_cmd(**kwargs))
    assert isinstance(outcome, RegisteredOutcome)
    return outcome.session


def _claim(repo: Any, session: WorkerSessionRecord, run_id: str, attempt_id: str, **kwargs: Any) -> RunLeaseRecord:
    outcome = repo.claim_run(claim_cmd(session, run_id, attempt_id, **kwargs))
    assert isinstance(outcome, ClaimedRunOutcome), outcome
    return outcome.lease


# =========================================================================== registration


def test_first_registration_is_generation_1_version_0(backend: Any, repo: Any) -> None:
    now = backend.now()
    outcome = repo.register(register_cmd(max_concurrent_runs=3))
    assert isinstance(outcome, RegisteredOutcome) and outcome.replaced_session is False
    session = outcome.session
    assert (session.generation, session.version, session.status) == (1, 0, SessionStatus.ONLINE)
    assert (session.max_concurrent_runs, session.available_slots) == (3, 3)
    assert (session.heartbeat_at_ms, session.lease_expires_at_ms) == (now, now + SESSION_MS)
    assert session.capabilities == CAPABILITIES and session.capabilities_hash == capabilities_hash(CAPABILITIES)
    assert repo.find_session("worker-a") == session


def test_identical_replay_returns_the_same_session_and_changes_nothing(backend: Any, repo: Any) -> None:
    session = _register(repo)
    backend.advance(1_000)
    before = backend.snapshot()
    outcome = repo.register(register_cmd(capabilities=dict(reversed(list(CAPABILITIES.items())))))
    assert isinstance(outcome, ReplayedOutcome) and outcome.replaced_session is False
    assert outcome.session == session
    assert backend.snapshot() == before


@pytest.mark.parametrize(("change", "message"), [
    ({"capabilities": {"arch": "arm"}}, "its capabilities differ"),
    ({"max_concurrent_runs": 5}, "its max_concurrent_runs differs"),
])
def test_conflicting_replay_is_rejected_and_changes_nothing(backend: Any, repo: Any, change: dict[str, Any],
                                                            message: str) -> None:
    _register(repo)
    before = backend.snapshot()
    with pytest.raises(WorkerSessionRejectedError, match=message):
        repo.register(register_cmd(**change))
    assert backend.snapshot() == before


def test_expired_same_session_is_rejected_exactly_at_expiry(backend: Any, repo: Any) -> None:
    _register(repo)
    backend.advance(SESSION_MS - 1)
    assert isinstance(repo.register(register_cmd()), ReplayedOutcome)
    backend.advance(1)
    before = backend.snapshot()
    with pytest.raises(WorkerSessionRejectedError, match="session lease has expired"):
        repo.register(register_cmd())
    assert backend.snapshot() == before


@pytest.mark.parametrize("transition", ["drain", "offline"])
def test_draining_or_offline_same_session_is_rejected(repo: Any, transition: str) -> None:
    session = _register(repo)
    if transition == "drain":
        repo.drain(drain_cmd(session))
    else:
        repo.offline(offline_cmd(session))
    with pytest.raises(WorkerSessionRejectedError, match=f"it is {'draining' if transition == 'drain' else 'offline'}"):
        repo.register(register_cmd())


def test_new_session_replaces_the_old_one_and_voids_its_fences(backend: Any, repo: Any) -> None:
    old = _register(repo)
    old = repo.heartbeat(heartbeat_cmd(old))
    backend.advance(5)
    outcome = repo.register(register_cmd(session_id="session-2", max_concurrent_runs=4, capabilities={"v": 2}))
    assert isinstance(outcome, RegisteredOutcome) and outcome.replaced_session is True
    new = outcome.session
    assert (new.session_id, new.generation, new.version) == ("session-2", old.generation + 1, old.version + 1)
    assert (new.max_concurrent_runs, new.available_slots, new.capabilities) == (4, 4, {"v": 2})
    assert new.created_at_ms == old.created_at_ms and new.updated_at_ms == backend.now()
    with pytest.raises(WorkerLeaseFenceRejectedError):
        repo.heartbeat(heartbeat_cmd(old))
    with pytest.raises(WorkerLeaseFenceRejectedError):
        repo.heartbeat(heartbeat_cmd(old, generation=new.generation, expected_version=new.version))
    seed_run(backend, "r1", "a1")
    before = backend.snapshot()
    with pytest.raises(WorkerLeaseFenceRejectedError, match="is not the current session"):
        repo.claim_run(claim_cmd(old, "r1", "a1"))
    assert backend.snapshot() == before
    third = repo.register(register_cmd())
    assert isinstance(third, RegisteredOutcome) and third.session.generation == 3


def test_a_new_session_may_follow_an_offline_or_expired_one(backend: Any, repo: Any) -> None:
    session = _register(repo)
    repo.offline(offline_cmd(session))
    second = _register(repo, session_id="session-2")
    assert (second.generation, second.status, second.available_slots) == (2, SessionStatus.ONLINE, 2)
    backend.advance(SESSION_MS)
    assert _register(repo, session_id="session-3").generation == 3


# =========================================================================== heartbeat, drain, offline


def test_heartbeat_extends_the_lease_and_records_slots(backend: Any, repo: Any) -> None:
    session = _register(repo)
    now = backend.advance(10_000)
    beat = repo.heartbeat(heartbeat_cmd(session, available_slots=1))
    assert (beat.version, beat.available_slots) == (1, 1)
    assert (beat.heartbeat_at_ms, beat.lease_expires_at_ms) == (now, now + SESSION_MS)
    assert repo.find_session("worker-a") == beat


@pytest.mark.parametrize("operation", ["heartbeat", "drain", "offline"])
@pytest.mark.parametrize("stale", [{"worker_id": "worker-b"}, {"session_id": "session-x"}, {"generation": 2},
                                   {"expected_version": 1}], ids=["worker", "session", "generation", "version"])
def test_session_mutations_with_a_stale_fence_are_rejected_and_change_nothing(backend: Any, repo: Any, operation: str,
                                                                             stale: dict[str, Any]) -> None:
    session = _register(repo)
    build = {"heartbeat": heartbeat_cmd, "drain": drain_cmd, "offline": offline_cmd}[operation]
    before = backend.snapshot()
    with pytest.raises(WorkerLeaseFenceRejectedError, match="no longer fences worker"):
        getattr(repo, operation)(build(session, **stale))
    assert backend.snapshot() == before


def test_a_replayed_heartbeat_is_stale_after_the_first_one(backend: Any, repo: Any) -> None:
    session = _register(repo)
    cmd = heartbeat_cmd(session)
    repo.heartbeat(cmd)
    before = backend.snapshot()
    with pytest.raises(WorkerLeaseFenceRejectedError):
        repo.heartbeat(cmd)
    assert backend.snapshot() == before


def test_heartbeat_over_capacity_or_after_expiry_is_refused(backend: Any, repo: Any) -> None:
    session = _register(repo, max_concurrent_runs=2)
    before = backend.snapshot()
    with pytest.raises(InvalidWorkerLeaseCommandError, match="available_slots 3 exceeds max_concurrent_runs 2"):
        repo.heartbeat(heartbeat_cmd(session, available_slots=3))
    backend.advance(SESSION_MS)
    with pytest.raises(WorkerSessionRejectedError, match="expired session lease"):
        repo.heartbeat(heartbeat_cmd(session))
    assert backend.snapshot() == before


def test_draining_reports_zero_capacity_and_cannot_claim(backend: Any, repo: Any) -> None:
    session = _register(repo, max_concurrent_runs=3)
    drained = repo.drain(drain_cmd(session))
    assert (drained.status, drained.available_slots, drained.version) == (SessionStatus.DRAINING, 0, 1)
    beat = repo.heartbeat(heartbeat_cmd(drained, available_slots=3))
    assert beat.available_slots == 0 and beat.status is SessionStatus.DRAINING
    seed_run(backend, "r1", "a1")
    before = backend.snapshot()
    with pytest.raises(WorkerSessionRejectedError, match="is draining"):
        repo.claim_run(claim_cmd(beat, "r1", "a1"))
    with pytest.raises(WorkerSessionRejectedError, match="is draining"):
        repo.drain(drain_cmd(beat))
    assert backend.snapshot() == before


def test_offline_reports_zero_capacity_ends_authority_now_and_cannot_claim_or_beat(backend: Any, repo: Any) -> None:
    session = _register(repo)
    now = backend.advance(1_000)
    off = repo.offline(offline_cmd(session))
    assert (off.status, off.available_slots, off.lease_expires_at_ms) == (SessionStatus.OFFLINE, 0, now)
    seed_run(backend, "r1", "a1")
    before = backend.snapshot()
    with pytest.raises(WorkerSessionRejectedError, match="is offline"):
        repo.claim_run(claim_cmd(off, "r1", "a1"))
    with pytest.raises(WorkerSessionRejectedError, match="is offline"):
        repo.heartbeat(heartbeat_cmd(off))
    with pytest.raises(WorkerSessionRejectedError, match="is offline"):
        repo.offline(offline_cmd(off))
    assert backend.snapshot() == before


def test_offline_is_allowed_after_the_session_lease_expired(backend: Any, repo: Any) -> None:
    session = _register(repo)
    backend.advance(SESSION_MS + 5)
    assert repo.offline(offline_cmd(session)).lease_expires_at_ms == session.lease_expires_at_ms


# =========================================================================== claim


def test_claim_writes_lease_projection_run_version_and_event_in_one_go(backend: Any, repo: Any) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    outcome = repo.claim_run(claim_cmd(session, "r1", "a1", event_id="evt-claim"))
    assert isinstance(outcome, ClaimedRunOutcome) and outcome.replayed is False
    assert outcome.lease_token == "token-1"
    lease = outcome.lease
    now = backend.now()
    assert (lease.status, lease.lease_generation, lease.version) == (LeaseStatus.LEASED, 1, 1)
    assert (lease.acquired_at_ms, lease.expires_at_ms, lease.offer_id) == (now, now + LEASE_MS, "offer-1")
    assert repo.find_lease("a1") == lease
    assert backend.projection("a1") == ("worker-a", "session-1", 1, 1, 1, lease.token_digest, "offer-1", now + LEASE_MS)
    assert backend.run_version("r1") == (1, 1)
    events = backend.events("r1")
    assert events == [outcome.event]
    event = events[0]
    assert (event.id, event.type, event.sequence, event.actor_type, event.actor_id) == (
        "evt-claim", EVENT_LEASE_CLAIMED, 1, "worker", "worker-a")
    assert event.dedupe_key == "run-lease:a1:1:claimed"
    # The Attempt and the worker are the event's own columns; the payload does not repeat them.
    assert (event.attempt_id, event.payload) == (
        "a1", {"session_generation": 1, "lease_generation": 1, "lease_version": 1, "offer_id": "offer-1"})
    assert backend.attempt_status("a1") == "claimed"
    assert repo.count_active_leases("worker-a") == 1


def test_claim_replay_with_same_digest_offer_and_fence_returns_the_same_lease(backend: Any, repo: Any) -> None:
    session = _register(repo, max_concurrent_runs=1)
    seed_run(backend, "r1", "a1")
    lease = _claim(repo, session, "r1", "a1")
    backend.advance(1_000)
    before = backend.snapshot()
    replay = repo.claim_run(claim_cmd(session, "r1", "a1"))
    assert isinstance(replay, ClaimedRunOutcome) and replay.replayed is True
    assert replay.lease == lease and replay.event is msgspec.UNSET
    assert backend.snapshot() == before


@pytest.mark.parametrize("other", [{"token": "token-2"}, {"offer_id": "offer-2"}], ids=["another-token", "another-offer"])
def test_anyone_else_sees_leased(backend: Any, repo: Any, other: dict[str, Any]) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    lease = _claim(repo, session, "r1", "a1")
    before = backend.snapshot()
    assert repo.claim_run(claim_cmd(session, "r1", "a1", **other)) == LeasedRunOutcome(lease=lease)
    assert backend.snapshot() == before


def test_another_worker_sees_leased(backend: Any, repo: Any) -> None:
    a = _register(repo)
    b = _register(repo, worker_id="worker-b")
    seed_run(backend, "r1", "a1")
    lease = _claim(repo, a, "r1", "a1")
    assert repo.claim_run(claim_cmd(b, "r1", "a1")) == LeasedRunOutcome(lease=lease)


@pytest.mark.parametrize(("seed", "reason"), [
    ({"cancel_requested_at_ms": 1_600_000_000_001}, NotClaimableReason.CANCEL_REQUESTED),
    ({"execution_owner": "legacy"}, NotClaimableReason.RUN_NOT_RUNTIME_OWNED),
    ({"run_status": "cancelled"}, NotClaimableReason.RUN_TERMINAL),
    ({"attempt_status": "starting"}, NotClaimableReason.ATTEMPT_NOT_CLAIMED),
    ({"attempt_status": "running"}, NotClaimableReason.ATTEMPT_NOT_CLAIMED),
    ({"attempt_status": "failed"}, NotClaimableReason.ATTEMPT_NOT_CLAIMED),
])
def test_unclaimable_runs_and_attempts_are_refused_and_nothing_is_written(backend: Any, repo: Any, seed: dict[str, Any],
                                                                         reason: NotClaimableReason) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1", **seed)
    before = backend.snapshot()
    assert repo.claim_run(claim_cmd(session, "r1", "a1")) == NotClaimableOutcome(reason=reason)
    assert backend.snapshot() == before


def test_missing_run_or_an_attempt_of_another_run_is_not_claimable(backend: Any, repo: Any) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    seed_run(backend, "r2", None)
    assert repo.claim_run(claim_cmd(session, "nope", "a1")) == NotClaimableOutcome(reason=NotClaimableReason.RUN_MISSING)
    assert repo.claim_run(claim_cmd(session, "r2", "a1")) == NotClaimableOutcome(reason=NotClaimableReason.ATTEMPT_MISSING)
    assert repo.claim_run(claim_cmd(session, "r1", "zz")) == NotClaimableOutcome(reason=NotClaimableReason.ATTEMPT_MISSING)


def test_expired_session_cannot_claim(backend: Any, repo: Any) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    backend.advance(SESSION_MS)
    with pytest.raises(WorkerSessionRejectedError, match="expired session lease"):
        repo.claim_run(claim_cmd(session, "r1", "a1"))


# =========================================================================== capacity


def test_active_leases_never_exceed_max_concurrent_runs(backend: Any, repo: Any) -> None:
    session = _register(repo, max_concurrent_runs=2)
    pairs = seed_runs(backend, 3)
    for run_id, attempt_id in pairs[:2]:
        _claim(repo, session, run_id, attempt_id, token=f"t-{run_id}")
    before = backend.snapshot()
    outcome = repo.claim_run(claim_cmd(session, *pairs[2], token="t-x"))
    assert outcome == NoCapacityOutcome(active_leases=2, max_concurrent_runs=2, available_slots=2)
    assert backend.snapshot() == before


def test_active_leases_never_exceed_the_last_reported_available_slots(backend: Any, repo: Any) -> None:
    session = _register(repo, max_concurrent_runs=4)
    session = repo.heartbeat(heartbeat_cmd(session, available_slots=1))
    pairs = seed_runs(backend, 2)
    lease = _claim(repo, session, *pairs[0], token="t0")
    assert repo.claim_run(claim_cmd(session, *pairs[1], token="t1")) == NoCapacityOutcome(
        active_leases=1, max_concurrent_runs=4, available_slots=1)
    repo.release(release_cmd(lease, "t0"))
    assert isinstance(repo.claim_run(claim_cmd(session, *pairs[1], token="t1")), ClaimedRunOutcome)
    session = repo.heartbeat(heartbeat_cmd(session, available_slots=0))
    assert isinstance(repo.claim_run(claim_cmd(session, *pairs[0], token="t2")), NoCapacityOutcome)


def test_expired_grants_still_count_against_capacity(backend: Any, repo: Any) -> None:
    session = _register(repo, max_concurrent_runs=1)
    pairs = seed_runs(backend, 2)
    _claim(repo, session, *pairs[0], token="t0")
    backend.advance(LEASE_MS + 1)
    session = repo.heartbeat(heartbeat_cmd(session, available_slots=1))
    assert isinstance(repo.claim_run(claim_cmd(session, *pairs[1], token="t1")), NoCapacityOutcome)
    assert repo.count_active_leases("worker-a") == 1


def test_capacity_is_counted_per_session(backend: Any, repo: Any) -> None:
    first = _register(repo, max_concurrent_runs=1)
    pairs = seed_runs(backend, 2)
    _claim(repo, first, *pairs[0], token="t0")
    second = _register(repo, session_id="session-2", max_concurrent_runs=1)
    assert repo.count_active_leases("worker-a") == 0
    assert isinstance(repo.claim_run(claim_cmd(second, *pairs[1], token="t1")), ClaimedRunOutcome)
    assert [lease.session_generation for lease in repo.list_active_leases("worker-a")] == [1, 2]


# =========================================================================== takeover


def test_an_expired_never_started_grant_is_taken_over_with_a_new_generation(backend: Any, repo: Any) -> None:
    a = _register(repo)
    b = _register(repo, worker_id="worker-b")
    seed_run(backend, "r1", "a1")
    old = _claim(repo, a, "r1", "a1", token="ta")
    backend.advance(LEASE_MS - 1)
    b = repo.heartbeat(heartbeat_cmd(b))
    assert isinstance(repo.claim_run(claim_cmd(b, "r1", "a1", token="tb")), LeasedRunOutcome)
    backend.advance(1)
    new = _claim(repo, b, "r1", "a1", token="tb")
    assert (new.worker_id, new.lease_generation, new.version) == ("worker-b", 2, old.version + 1)
    assert backend.projection("a1")[:5] == ("worker-b", "session-1", b.generation, 2, new.version)
    with pytest.raises(WorkerLeaseFenceRejectedError):
        repo.renew(renew_cmd(old, "ta"))
    assert [e.dedupe_key for e in backend.events("r1")] == ["run-lease:a1:1:claimed", "run-lease:a1:2:claimed"]


def test_a_started_attempt_is_never_claimable_again_even_after_expiry(backend: Any, repo: Any) -> None:
    a = _register(repo)
    b = _register(repo, worker_id="worker-b", lease_duration_ms=300_000)
    seed_run(backend, "r1", "a1")
    repo.begin_start(start_cmd(_claim(repo, a, "r1", "a1")))
    backend.advance(SESSION_MS * 2)
    assert repo.claim_run(claim_cmd(b, "r1", "a1", token="tb")) == NotClaimableOutcome(
        reason=NotClaimableReason.ATTEMPT_NOT_CLAIMED)


def test_a_released_grant_may_be_claimed_again_as_a_new_generation(backend: Any, repo: Any) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    released = repo.release(release_cmd(_claim(repo, session, "r1", "a1"))).lease
    again = _claim(repo, session, "r1", "a1", token="token-2", offer_id="offer-2")
    assert (again.lease_generation, again.version) == (2, released.version + 1)
    assert again.released_at_ms is msgspec.UNSET and again.release_reason is msgspec.UNSET


# =========================================================================== renew


def test_renew_extends_the_grant_and_its_projection(backend: Any, repo: Any) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    lease = _claim(repo, session, "r1", "a1")
    now = backend.advance(10_000)
    renewed = repo.renew(renew_cmd(lease))
    assert (renewed.version, renewed.renewed_at_ms, renewed.expires_at_ms) == (2, now, now + LEASE_MS)
    assert backend.projection("a1")[4:] == (2, lease.token_digest, "offer-1", now + LEASE_MS)
    assert repo.find_lease("a1") == renewed


@pytest.mark.parametrize("stale", [
    {"expected_version": 2}, {"lease_token": "token-x"}, {"session_generation": 2}, {"session_id": "session-x"},
    {"worker_id": "worker-b"}, {"attempt_id": "a2"},
], ids=["version", "token", "generation", "session", "worker", "attempt"])
@pytest.mark.parametrize("operation", ["renew", "release", "begin_start"])
def test_lease_mutations_with_a_stale_fence_are_rejected_and_change_nothing(backend: Any, repo: Any,
                                                                           stale: dict[str, Any], operation: str) -> None:
    session = _register(repo)
    _register(repo, worker_id="worker-b")
    seed_run(backend, "r1", "a1")
    seed_run(backend, "r2", "a2")
    lease = _claim(repo, session, "r1", "a1")
    build = {"renew": renew_cmd, "release": release_cmd, "begin_start": start_cmd}[operation]
    before = backend.snapshot()
    with pytest.raises(WorkerLeaseFenceRejectedError):
        getattr(repo, operation)(build(lease, **stale))
    assert backend.snapshot() == before


def test_renew_is_fenced_by_the_attempt_projection_too(backend: Any, repo: Any) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    lease = _claim(repo, session, "r1", "a1")
    backend.tamper_projection_version("a1", 7)
    before = backend.snapshot()
    with pytest.raises(WorkerLeaseFenceRejectedError, match="projection of attempt 'a1' does not match"):
        repo.renew(renew_cmd(lease))
    assert backend.snapshot() == before


def test_an_expired_grant_not_taken_over_may_still_be_renewed(backend: Any, repo: Any) -> None:
    session = _register(repo, lease_duration_ms=300_000)
    seed_run(backend, "r1", "a1")
    lease = _claim(repo, session, "r1", "a1")
    now = backend.advance(LEASE_MS * 2)
    assert repo.renew(renew_cmd(lease)).expires_at_ms == now + LEASE_MS


def test_a_draining_session_renews_but_an_offline_one_does_not(backend: Any, repo: Any) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    lease = _claim(repo, session, "r1", "a1")
    session = repo.drain(drain_cmd(session))
    lease = repo.renew(renew_cmd(lease))
    repo.offline(offline_cmd(session))
    with pytest.raises(WorkerSessionRejectedError, match="is offline"):
        repo.renew(renew_cmd(lease))


# =========================================================================== release and the start barrier


def test_release_while_claimed_clears_the_projection_and_appends_an_event(backend: Any, repo: Any) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    lease = _claim(repo, session, "r1", "a1")
    now = backend.advance(3)
    outcome = repo.release(release_cmd(lease, reason="shutdown", event_id="evt-rel"))
    released = outcome.lease
    assert (released.status, released.version, released.released_at_ms) == (LeaseStatus.RELEASED, 2, now)
    assert released.release_reason == "shutdown"
    assert backend.projection("a1") == (None,) * 8
    assert backend.attempt_status("a1") == "claimed"
    assert (outcome.event.id, outcome.event.type, outcome.event.sequence) == ("evt-rel", EVENT_LEASE_RELEASED, 2)
    assert outcome.event.payload["reason"] == "shutdown"
    assert repo.count_active_leases("worker-a") == 0
    with pytest.raises(WorkerLeaseFenceRejectedError):
        repo.release(release_cmd(released))


@pytest.mark.parametrize("attempt_status", ["starting", "running", "succeeded"])
def test_release_is_refused_once_the_attempt_left_claimed(backend: Any, repo: Any, attempt_status: str) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    lease = _claim(repo, session, "r1", "a1")
    backend.set_attempt_status("a1", attempt_status)
    before = backend.snapshot()
    with pytest.raises(StartBarrierPassedError, match=f"attempt 'a1' is {attempt_status}, not claimed"):
        repo.release(release_cmd(lease))
    assert backend.snapshot() == before


def test_begin_start_is_the_barrier_after_which_release_is_refused(backend: Any, repo: Any) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    lease = _claim(repo, session, "r1", "a1")
    now = backend.advance(2)
    outcome = repo.begin_start(start_cmd(lease, event_id="evt-start"))
    started = outcome.lease
    assert (started.version, started.started_at_ms, started.status) == (2, now, LeaseStatus.LEASED)
    assert backend.attempt_status("a1") == "starting"
    assert backend.projection("a1")[4] == 2
    assert (outcome.event.type, outcome.event.dedupe_key) == (EVENT_ATTEMPT_STARTING, "run-lease:a1:1:starting")
    before = backend.snapshot()
    with pytest.raises(StartBarrierPassedError, match="is starting, not claimed; its lease cannot be released"):
        repo.release(release_cmd(started))
    with pytest.raises(StartBarrierPassedError, match="cannot be started"):
        repo.begin_start(start_cmd(started))
    assert backend.snapshot() == before
    assert repo.renew(renew_cmd(started)).version == 3


def test_begin_start_refuses_an_expired_grant_and_a_cancel_requested_run(backend: Any, repo: Any) -> None:
    session = _register(repo, lease_duration_ms=300_000)
    seed_run(backend, "r1", "a1")
    lease = _claim(repo, session, "r1", "a1")
    backend.advance(LEASE_MS)
    before = backend.snapshot()
    with pytest.raises(WorkerLeaseFenceRejectedError, match="has expired; renew it before starting"):
        repo.begin_start(start_cmd(lease))
    assert backend.snapshot() == before
    lease = repo.renew(renew_cmd(lease))
    backend.request_cancel("r1", 1)
    with pytest.raises(RunNotStartableError, match="run 'r1' may not start: cancel_requested"):
        repo.begin_start(start_cmd(lease))
    assert backend.attempt_status("a1") == "claimed"
    assert repo.release(release_cmd(lease)).lease.status is LeaseStatus.RELEASED


def test_a_draining_session_may_still_start_what_it_already_claimed(backend: Any, repo: Any) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    lease = _claim(repo, session, "r1", "a1")
    repo.drain(drain_cmd(session))
    assert repo.begin_start(start_cmd(lease)).lease.started_at_ms is not msgspec.UNSET
    assert backend.attempt_status("a1") == "starting"


# =========================================================================== complete


def test_complete_after_a_restart_uses_the_grant_fence_not_the_current_session(backend: Any, repo: Any) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    lease = repo.begin_start(start_cmd(_claim(repo, session, "r1", "a1"))).lease
    now = backend.advance(SESSION_MS * 3)
    _register(repo, session_id="session-2")
    backend.set_attempt_status("a1", "succeeded")
    outcome = repo.complete(complete_cmd(lease, event_id="evt-done"))
    done = outcome.lease
    assert (done.status, done.completed_at_ms, done.version) == (LeaseStatus.COMPLETED, now, 3)
    assert backend.projection("a1") == (None,) * 8
    assert (outcome.event.type, outcome.event.payload["attempt_status"]) == (EVENT_LEASE_COMPLETED, "succeeded")
    assert repo.list_active_leases("worker-a") == []
    with pytest.raises(WorkerLeaseFenceRejectedError):
        repo.complete(complete_cmd(done))


@pytest.mark.parametrize("stale", [
    {"expected_version": 1}, {"token_digest": "0" * 64}, {"session_generation": 2}, {"lease_generation": 2},
    {"worker_id": "worker-b"},
], ids=["version", "digest", "session-generation", "lease-generation", "worker"])
def test_complete_with_a_stale_fence_is_rejected_and_changes_nothing(backend: Any, repo: Any,
                                                                    stale: dict[str, Any]) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    lease = repo.begin_start(start_cmd(_claim(repo, session, "r1", "a1"))).lease
    before = backend.snapshot()
    with pytest.raises(WorkerLeaseFenceRejectedError):
        repo.complete(complete_cmd(lease, **stale))
    assert backend.snapshot() == before


def test_a_completed_grant_is_never_claimed_again(backend: Any, repo: Any) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    repo.complete(complete_cmd(_claim(repo, session, "r1", "a1")))
    assert repo.claim_run(claim_cmd(session, "r1", "a1", token="t2")) == NotClaimableOutcome(
        reason=NotClaimableReason.LEASE_COMPLETED)


# =========================================================================== authority is not process state


def test_expired_or_offline_authority_is_never_reported_as_not_running(backend: Any, repo: Any) -> None:
    session = _register(repo)
    seed_run(backend, "r1", "a1")
    lease = repo.begin_start(start_cmd(_claim(repo, session, "r1", "a1"))).lease
    backend.set_attempt_status("a1", "running")
    now = backend.advance(SESSION_MS * 10)
    repo.offline(offline_cmd(session))
    _register(repo, session_id="session-2")
    stored = repo.find_lease("a1")
    assert stored == lease and stored.status is LeaseStatus.LEASED and not stored.is_live(now)
    assert repo.list_active_leases("worker-a") == [lease]
    assert backend.attempt_status("a1") == "running"
    assert backend.projection("a1")[4] == lease.version
    assert [e.type for e in backend.events("r1")] == [EVENT_LEASE_CLAIMED, EVENT_ATTEMPT_STARTING]
    wire = json.dumps([msgspec.to_builtins(x) for x in (stored, repo.find_session("worker-a"))])
    assert "not_running" not in wire and "stopped" not in wire and "lost" not in wire


def test_no_raw_token_reaches_the_stored_rows_or_events(backend: Any, repo: Any) -> None:
    tokens = [f"raw-bearer-token-{i:04d}-{'q' * 40}" for i in range(3)]
    session = _register(repo, max_concurrent_runs=3)
    for (run_id, attempt_id), token in zip(seed_runs(backend, 3), tokens):
        lease = _claim(repo, session, run_id, attempt_id, token=token)
        backend.advance(1)
        repo.renew(renew_cmd(lease, token))
    stored = json.dumps(backend.snapshot(), default=str)
    assert "raw-bearer-token" not in stored
    assert all(lease.token_digest in stored for lease in repo.list_active_leases("worker-a"))


def test_wrong_command_types_and_bad_ids_are_invalid_commands(repo: Any) -> None:
    with pytest.raises(InvalidWorkerLeaseCommandError, match="claim_run expects a ClaimRunCommand, got dict"):
        repo.claim_run({})
    with pytest.raises(InvalidWorkerLeaseCommandError, match="worker_id must not be empty"):
        repo.find_session("")
    with pytest.raises(InvalidWorkerLeaseCommandError, match="attempt_id must be at most 36 characters"):
        repo.find_lease("a" * 37)
