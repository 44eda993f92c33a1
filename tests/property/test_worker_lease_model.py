"""Hypothesis stateful test: the Local repository against a pure model of spec §5.

The model is written from the spec, not from the repository: dictionaries of sessions, grants and
Attempt states, and the decision each operation must take. Fences are drawn from the current
values and their stale neighbours, so rejections are exercised as often as successes. After
every step the stored rows must equal the model, and no session may ever hold more active
grants than ``min(max_concurrent_runs, available_slots)`` allowed at the moment of each claim.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from edge_runtime.contract import run_lease as rl
from edge_runtime.contract import worker_session as ws
from edge_runtime.contract.worker_lease import (
    InvalidWorkerLeaseCommandError,
    RunNotStartableError,
    StartBarrierPassedError,
    WorkerLeaseFenceRejectedError,
    WorkerSessionRejectedError,
    digest_run_lease_token,
)
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository

WORKERS = ("w0", "w1")
SESSION_IDS = ("s0", "s1", "s2")
ATTEMPTS = ("a0", "a1", "a2", "a3")
TOKENS = ("t0", "t1")
OFFERS = ("o0", "o1")
CAPS = ({"k": 1}, {"k": 2})
OFFSETS = st.sampled_from((0, 0, 0, 0, -1, 1))
#: None stands for "the current value" (the worker's session id, the holder's token), so that most
#: commands carry a valid fence and the interesting decisions behind the fence are reached.
SIDS = st.sampled_from((None, None, None, None, None, *SESSION_IDS))
#: None stands for "an Attempt that currently has a leased grant", when there is one.
HELD_ATTEMPTS = st.sampled_from((None, None, None, *ATTEMPTS))
HOLDER_TOKENS = st.sampled_from((None, None, None, None, *TOKENS))


@dataclass
class Session:
    session_id: str
    generation: int
    status: str
    version: int
    caps: int
    max_runs: int
    slots: int
    heartbeat_at: int
    expires_at: int


@dataclass
class Grant:
    worker_id: str
    session_id: str
    generation: int
    lease_generation: int
    version: int
    token: str
    offer: str
    status: str
    expires_at: int
    started: bool = False


@dataclass
class Model:
    now: int = 1_000_000
    sessions: dict[str, Session] = field(default_factory=dict)
    grants: dict[str, Grant] = field(default_factory=dict)
    attempts: dict[str, str] = field(default_factory=lambda: {a: "claimed" for a in ATTEMPTS})
    cancelled: set[str] = field(default_factory=set)
    events: int = 0

    def active(self, worker: str, generation: int, other_than: str | None = None) -> int:
        return sum(
            1
            for attempt, g in self.grants.items()
            if g.status == "leased" and g.worker_id == worker and g.generation == generation and attempt != other_than
        )


def _kind(call: Any) -> tuple[str, Any]:
    try:
        result = call()
    except WorkerLeaseFenceRejectedError as exc:
        return ("start_barrier" if isinstance(exc, StartBarrierPassedError) else "fence"), None
    except WorkerSessionRejectedError:
        return "session_rejected", None
    except RunNotStartableError:
        return "not_startable", None
    except InvalidWorkerLeaseCommandError:
        return "invalid", None
    if isinstance(result, (ws.WorkerSessionRecord, rl.RunLeaseRecord, rl.LeaseTransitionOutcome)):
        return "ok", result
    if isinstance(result, rl.ClaimedRunOutcome) and result.replayed:
        return "replayed", result
    return result.status, result


class WorkerLeaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="worker-lease-model-")
        self.clock = ManualClock(1_000_000)
        self.db = open_database(Path(self.directory) / "model.db", clock=self.clock)
        self.repo = LocalWorkerLeaseRepository(self.db)
        self.model = Model()
        with self.db.connection:
            for attempt in ATTEMPTS:
                run = f"r-{attempt}"
                self.db.connection.execute(
                    "INSERT INTO runs (id, status, created_at_ms) VALUES (?, 'dispatching', 0)", (run,)
                )
                self.db.connection.execute(
                    "INSERT INTO run_attempts (id, run_id, attempt, status, created_at_ms) VALUES (?, ?, 1, 'claimed', 0)",
                    (attempt, run),
                )

    def teardown(self) -> None:
        self.db.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    @initialize(max_runs=st.sampled_from((1, 2, 3)))
    def register_both_workers(self, max_runs: int) -> None:
        for worker in WORKERS:
            self.register(worker, "s0", 0, max_runs, 30_000)

    # ------------------------------------------------------------- environment

    @rule(ms=st.sampled_from((0, 1, 999, 5_000, 16_000)))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.model.now += ms

    @rule(attempt=st.sampled_from(ATTEMPTS))
    def request_cancel(self, attempt: str) -> None:
        self.db.connection.execute("UPDATE runs SET cancel_requested_at_ms = 1 WHERE id = ?", (f"r-{attempt}",))
        self.model.cancelled.add(attempt)

    # ------------------------------------------------------------- sessions

    @rule(worker=st.sampled_from(WORKERS), sid=SIDS, caps=st.sampled_from((0, 0, 1)),
          max_runs=st.sampled_from((1, 2, 3)), duration=st.sampled_from((10_000, 30_000)))
    def register(self, worker: str, sid: str | None, caps: int, max_runs: int, duration: int) -> None:
        m = self.model
        sid = self._sid(worker, sid)
        cur = m.sessions.get(worker)
        fresh = dict(session_id=sid, status="online", caps=caps, max_runs=max_runs, slots=max_runs,
                     heartbeat_at=m.now, expires_at=m.now + duration)
        if cur is None:
            expected, new = "registered", Session(generation=1, version=0, **fresh)
        elif cur.session_id == sid:
            same = cur.status == "online" and cur.expires_at > m.now and cur.caps == caps and cur.max_runs == max_runs
            expected, new = ("replayed", cur) if same else ("session_rejected", cur)
        else:
            expected, new = "registered", Session(generation=cur.generation + 1, version=cur.version + 1, **fresh)
        cmd = ws.RegisterWorkerCommand(worker_id=worker, session_id=sid, capabilities=CAPS[caps],
                                       max_concurrent_runs=max_runs, lease_duration_ms=duration)
        kind, result = _kind(lambda: self.repo.register(cmd))
        assert kind == expected
        if kind == "registered":
            assert result.replaced_session is (cur is not None)
        m.sessions[worker] = new

    def _session_fence(self, worker: str, sid: str, dg: int, dv: int) -> tuple[int, int]:
        cur = self.model.sessions.get(worker)
        return (max(1, (cur.generation if cur else 1) + dg), max(0, (cur.version if cur else 0) + dv))

    def _session_fence_holds(self, worker: str, sid: str, gen: int, ver: int) -> Session | None:
        cur = self.model.sessions.get(worker)
        if cur is None or cur.session_id != sid or cur.generation != gen or cur.version != ver:
            return None
        return cur

    def _sid(self, worker: str, sid: str | None) -> str:
        cur = self.model.sessions.get(worker)
        return sid if sid is not None else (cur.session_id if cur else "s0")

    @rule(worker=st.sampled_from(WORKERS), sid=SIDS, dg=OFFSETS, dv=OFFSETS,
          slots=st.sampled_from((0, 1, 2, 3)), op=st.sampled_from(("heartbeat", "heartbeat", "drain", "offline")))
    def session_transition(self, worker: str, sid: str | None, dg: int, dv: int, slots: int, op: str) -> None:
        m = self.model
        sid = self._sid(worker, sid)
        gen, ver = self._session_fence(worker, sid, dg, dv)
        cur = self._session_fence_holds(worker, sid, gen, ver)
        fence = dict(worker_id=worker, session_id=sid, generation=gen, expected_version=ver)
        if op == "heartbeat":
            call = lambda: self.repo.heartbeat(ws.HeartbeatCommand(**fence, available_slots=slots, lease_duration_ms=20_000))  # noqa: E731
        elif op == "drain":
            call = lambda: self.repo.drain(ws.DrainCommand(**fence))  # noqa: E731
        else:
            call = lambda: self.repo.offline(ws.OfflineCommand(**fence))  # noqa: E731
        if cur is None:
            expected = "fence"
        elif op == "heartbeat":
            if cur.status == "offline" or cur.expires_at <= m.now:
                expected = "session_rejected"
            elif slots > cur.max_runs:
                expected = "invalid"
            else:
                expected = "ok"
                m.sessions[worker] = replace(cur, version=ver + 1, slots=slots if cur.status == "online" else 0,
                                             heartbeat_at=m.now, expires_at=m.now + 20_000)
        elif op == "drain":
            if cur.status != "online" or cur.expires_at <= m.now:
                expected = "session_rejected"
            else:
                expected = "ok"
                m.sessions[worker] = replace(cur, version=ver + 1, status="draining", slots=0)
        else:
            if cur.status == "offline":
                expected = "session_rejected"
            else:
                expected = "ok"
                m.sessions[worker] = replace(cur, version=ver + 1, status="offline", slots=0,
                                             expires_at=max(cur.heartbeat_at, min(cur.expires_at, m.now)))
        kind, _ = _kind(call)
        assert kind == expected

    # ------------------------------------------------------------- run leases

    def _current(self, worker: str, sid: str, gen: int) -> Session | None:
        cur = self.model.sessions.get(worker)
        if cur is None or cur.session_id != sid or cur.generation != gen:
            return None
        return cur

    @rule(worker=st.sampled_from(WORKERS), sid=SIDS, dg=OFFSETS,
          attempt=st.sampled_from(ATTEMPTS), token=st.sampled_from(TOKENS), offer=st.sampled_from(OFFERS))
    def claim(self, worker: str, sid: str | None, dg: int, attempt: str, token: str, offer: str) -> None:
        m = self.model
        sid = self._sid(worker, sid)
        gen, _ = self._session_fence(worker, sid, dg, 0)
        cur = self._current(worker, sid, gen)
        grant = m.grants.get(attempt)
        expected: str
        if cur is None:
            expected = "fence"
        elif cur.status != "online" or cur.expires_at <= m.now:
            expected = "session_rejected"
        elif attempt in m.cancelled or m.attempts[attempt] != "claimed":
            expected = "not_claimable"
        elif grant is not None and grant.status == "completed":
            expected = "not_claimable"
        elif grant is not None and grant.status == "leased" and grant.expires_at > m.now:
            same = (grant.worker_id, grant.session_id, grant.generation, grant.offer, grant.token) == (
                worker, sid, gen, offer, token)
            expected = "replayed" if same else "leased"
        else:
            active = m.active(worker, gen, other_than=attempt)
            if active >= cur.max_runs or active >= cur.slots:
                expected = "no_capacity"
            else:
                expected = "claimed"
                # The capacity promise, checked against the model at the moment of the claim.
                assert active + 1 <= min(cur.max_runs, cur.slots)
                m.grants[attempt] = Grant(
                    worker_id=worker, session_id=sid, generation=gen,
                    lease_generation=1 if grant is None else grant.lease_generation + 1,
                    version=1 if grant is None else grant.version + 1,
                    token=token, offer=offer, status="leased", expires_at=m.now + 15_000,
                )
                m.events += 1
        cmd = rl.ClaimRunCommand(worker_id=worker, session_id=sid, session_generation=gen, run_id=f"r-{attempt}",
                                 attempt_id=attempt, offer_id=offer, lease_token=token, lease_duration_ms=15_000,
                                 event_id=f"e{m.events}-{attempt}-claim")
        kind, _ = _kind(lambda: self.repo.claim_run(cmd))
        assert kind == expected

    def _attempt(self, attempt: str | None) -> str:
        if attempt is not None:
            return attempt
        held = sorted(a for a, g in self.model.grants.items() if g.status == "leased")
        return held[self.model.events % len(held)] if held else ATTEMPTS[0]

    def _grant_fence(self, attempt: str, use_holder: bool, dv: int, token: str | None) -> dict[str, Any]:
        grant = self.model.grants.get(attempt)
        if token is None:
            token = grant.token if grant is not None else TOKENS[0]
        cur = self.model.sessions.get("w0")
        if use_holder and grant is not None:
            base = dict(worker_id=grant.worker_id, session_id=grant.session_id, session_generation=grant.generation,
                        expected_version=max(1, grant.version + dv))
        else:
            base = dict(worker_id="w0", session_id=cur.session_id if cur else "s0",
                        session_generation=cur.generation if cur else 1, expected_version=max(1, 1 + dv))
        return dict(base, attempt_id=attempt, lease_token=token)

    def _grant_fence_holds(self, fence: dict[str, Any]) -> Grant | None:
        grant = self.model.grants.get(fence["attempt_id"])
        if grant is None or grant.status != "leased":
            return None
        if (grant.worker_id, grant.session_id, grant.generation, grant.version, grant.token) != (
            fence["worker_id"], fence["session_id"], fence["session_generation"], fence["expected_version"],
            fence["lease_token"],
        ):
            return None
        return grant

    @rule(attempt=HELD_ATTEMPTS, use_holder=st.sampled_from((True, True, True, False)), dv=OFFSETS,
          token=HOLDER_TOKENS, op=st.sampled_from(("renew", "release", "begin_start")))
    def lease_transition(self, attempt: str | None, use_holder: bool, dv: int, token: str | None, op: str) -> None:
        m = self.model
        attempt = self._attempt(attempt)
        fence = self._grant_fence(attempt, use_holder, dv, token)
        session = self._current(fence["worker_id"], fence["session_id"], fence["session_generation"])
        grant = self._grant_fence_holds(fence)
        expected = "ok"
        if session is None:
            expected = "fence"
        elif op != "release" and (session.status == "offline" or session.expires_at <= m.now):
            expected = "session_rejected"
        elif grant is None:
            expected = "fence"
        elif op == "renew":
            m.grants[attempt] = replace(grant, version=grant.version + 1, expires_at=m.now + 15_000)
        elif op == "begin_start" and grant.expires_at <= m.now:
            expected = "fence"
        elif op == "begin_start" and attempt in m.cancelled:
            expected = "not_startable"
        elif m.attempts[attempt] != "claimed" or grant.started:
            expected = "start_barrier"
        elif op == "release":
            m.grants[attempt] = replace(grant, version=grant.version + 1, status="released")
            m.events += 1
        else:
            m.grants[attempt] = replace(grant, version=grant.version + 1, started=True)
            m.attempts[attempt] = "starting"
            m.events += 1
        event_id = f"e{m.events}-{attempt}-{op}"
        if op == "renew":
            call = lambda: self.repo.renew(rl.RenewRunLeaseCommand(**fence, lease_duration_ms=15_000))  # noqa: E731
        elif op == "release":
            call = lambda: self.repo.release(rl.ReleaseRunLeaseCommand(**fence, reason="declined", event_id=event_id))  # noqa: E731
        else:
            call = lambda: self.repo.begin_start(rl.BeginStartCommand(**fence, event_id=event_id))  # noqa: E731
        kind, _ = _kind(call)
        assert kind == expected, (op, fence)

    @rule(attempt=HELD_ATTEMPTS, dv=OFFSETS, dg=OFFSETS, token=HOLDER_TOKENS)
    def complete(self, attempt: str | None, dv: int, dg: int, token: str | None) -> None:
        m = self.model
        attempt = self._attempt(attempt)
        grant = m.grants.get(attempt)
        if token is None:
            token = grant.token if grant is not None else TOKENS[0]
        worker = grant.worker_id if grant else "w0"
        gen = max(1, (grant.generation if grant else 1) + dg)
        lease_gen = grant.lease_generation if grant else 1
        ver = max(1, (grant.version if grant else 1) + dv)
        holds = (
            grant is not None and grant.status == "leased" and grant.generation == gen and grant.version == ver
            and grant.token == token
        )
        if holds:
            expected = "ok"
            m.grants[attempt] = replace(grant, version=ver + 1, status="completed")
            m.events += 1
        else:
            expected = "fence"
        cmd = rl.CompleteRunLeaseCommand(worker_id=worker, session_generation=gen, attempt_id=attempt,
                                         lease_generation=lease_gen, expected_version=ver,
                                         token_digest=digest_run_lease_token(token),
                                         event_id=f"e{m.events}-{attempt}-complete")
        kind, _ = _kind(lambda: self.repo.complete(cmd))
        assert kind == expected

    # ------------------------------------------------------------- invariants

    @invariant()
    def stored_rows_equal_the_model(self) -> None:
        m = self.model
        for worker in WORKERS:
            stored = self.repo.find_session(worker)
            want = m.sessions.get(worker)
            if want is None:
                assert stored is None
                continue
            assert (stored.session_id, stored.generation, stored.status, stored.version, stored.max_concurrent_runs,
                    stored.available_slots, stored.lease_expires_at_ms, stored.capabilities) == (
                want.session_id, want.generation, want.status, want.version, want.max_runs, want.slots,
                want.expires_at, CAPS[want.caps])
            # Never more active grants in the current session than its maximum.
            assert self.repo.count_active_leases(worker) == m.active(worker, want.generation)
            assert m.active(worker, want.generation) <= want.max_runs
        for attempt in ATTEMPTS:
            stored_lease = self.repo.find_lease(attempt)
            grant = m.grants.get(attempt)
            if grant is None:
                assert stored_lease is None
                continue
            assert (stored_lease.worker_id, stored_lease.session_generation, stored_lease.lease_generation,
                    stored_lease.version, stored_lease.status, stored_lease.expires_at_ms,
                    stored_lease.started_at_ms is not rl.msgspec.UNSET, stored_lease.token_digest) == (
                grant.worker_id, grant.generation, grant.lease_generation, grant.version, grant.status,
                grant.expires_at, grant.started, digest_run_lease_token(grant.token))
            row = self.db.connection.execute(
                "SELECT status, lease_version FROM run_attempts WHERE id = ?", (attempt,)
            ).fetchone()
            assert row == (m.attempts[attempt], grant.version if grant.status == "leased" else None)
        events = self.db.connection.execute("SELECT count(*) FROM run_events").fetchone()[0]
        assert events == m.events


WorkerLeaseMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestWorkerLeaseModel = WorkerLeaseMachine.TestCase
