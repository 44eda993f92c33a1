"""Stateful property test: the Local repository against a pure in-memory model of spec §3.

The model below is written from the spec, not from the repository: it keeps the Run, its Attempts,
the dispatch record and the event ids in plain Python and applies the claim / record_result rules
step by step. Hypothesis drives random sequences of claims, results (every result kind, with right
and wrong fences and reused event ids), forward clock moves (including steps that land exactly on
a lease expiry or a due time) and cancel-request / status changes made by "a tool" through SQL.
After every step the stored record, the Run's version and sequence, and the event log must match
the model, and every stored record must satisfy the contract invariants.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from edge_runtime.contract.cancellation_dispatch import (
    MAX_LEASE_DURATION_MS,
    MAX_RETRY_DELAY_MS,
    BindingConflictError,
    ClaimCommand,
    DispatchRecord,
    DispatchResult,
    DispatchStatus,
    FenceRejectedError,
    RecordResultCommand,
    RepositoryError,
    digest_lease_token,
    dispatch_record_problem,
)
from edge_runtime.contract.run_events import RunEvent
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.run_events import list_run_events

UNSET = msgspec.UNSET
START_MS = 1_700_000_000_000
RUN = "run-1"
OTHER_RUN = "run-2"
TAKEN_EVENT_ID = "evt-taken"

RUN_STATUSES = ["created", "queued", "dispatching", "running", "waiting_approval", "retry_wait", "lost",
                "succeeded", "failed", "cancelled"]
ACTIVE_RUN = {"created", "queued", "dispatching", "running", "waiting_approval", "retry_wait", "lost"}
ATTEMPT_STATUSES = ["claimed", "starting", "running", "succeeded", "failed", "cancelled", "lost"]
ACTIVE_ATTEMPT = {"claimed", "starting", "running"}

# Written out from spec §2 rather than imported, so the model does not share the code under test.
RETRYABLE = {"controller_missing", "handle_missing", "dispatch_error"}
BLOCKING = {"identity_mismatch", "pid_mismatch", "unsupported", "invalid"}
NOT_INVOKED = {"controller_missing", "handle_missing"}

OWNERS = ["worker-a", "worker-b", "worker-c"]
#: Every result kind, with the retryable ones weighted up: blocked and dispatched are final, and
#: sequences that stay in the lease / retry cycle longer explore more of it.
RESULTS = st.sampled_from(list(DispatchResult) + [r for r in DispatchResult if r.value in RETRYABLE] * 2)
TOKENS = ["tok-1", "tok-2", "tok-3", "tok-\u00e9"]


class _Raised(Exception):
    """The model's way of saying: this operation fails with ``kind`` and changes nothing."""

    def __init__(self, kind: type[Exception]) -> None:
        super().__init__(kind.__name__)
        self.kind = kind


@dataclass
class Model:
    now: int = START_MS
    run_owner: str = "runtime"
    run_status: str = "running"
    cancel_requested_at_ms: int | None = START_MS - 5_000
    run_version: int = 0
    event_sequence: int = 0
    #: attempt id -> [run id, status]
    attempts: dict[str, list[str]] = field(default_factory=lambda: {
        "att-1": [RUN, "running"], "att-2": [RUN, "running"], "att-3": [OTHER_RUN, "running"]})
    dispatch: DispatchRecord | None = None
    event_ids: set[str] = field(default_factory=lambda: {TAKEN_EVENT_ID})
    events: list[RunEvent] = field(default_factory=list)

    # ---------------------------------------------------------------- claim (spec §3)

    def claim(self, cmd: ClaimCommand) -> tuple[str, DispatchRecord | None]:
        attempt = self.attempts.get(cmd.attempt_id)
        eligible = (
            cmd.run_id == RUN
            and self.run_owner == "runtime"
            and self.run_status in ACTIVE_RUN
            and self.cancel_requested_at_ms is not None
            and self.cancel_requested_at_ms == cmd.requested_at_ms
            and attempt is not None
            and attempt[0] == cmd.run_id
            and attempt[1] in ACTIVE_ATTEMPT
        )
        if not eligible:
            return "not_eligible", None
        current = self.dispatch
        if current is None:
            current = DispatchRecord(
                run_id=cmd.run_id, attempt_id=cmd.attempt_id, status=DispatchStatus.PENDING, version=0,
                dispatch_count=0, next_attempt_at_ms=cmd.requested_at_ms, created_at_ms=self.now,
                updated_at_ms=self.now,
            )
        elif current.attempt_id != cmd.attempt_id:
            raise _Raised(BindingConflictError)
        status = current.status.value
        if status in ("dispatched", "blocked"):
            self.dispatch = current
            return status, current
        if status == "leased" and current.lease_expires_at_ms > self.now:
            return "leased", current
        if status in ("pending", "retry_wait") and current.next_attempt_at_ms > self.now:
            self.dispatch = current  # step 2 persists the new pending row
            return "not_due", current
        taken = DispatchRecord(
            run_id=current.run_id,
            attempt_id=current.attempt_id,
            status=DispatchStatus.LEASED,
            version=current.version + 1,
            dispatch_count=current.dispatch_count + 1,
            lease_owner=cmd.owner,
            lease_token_digest=digest_lease_token(cmd.lease_token),
            lease_expires_at_ms=self.now + cmd.lease_duration_ms,
            last_result=current.last_result,
            last_dispatched_at_ms=current.last_dispatched_at_ms,
            created_at_ms=current.created_at_ms,
            updated_at_ms=self.now,
        )
        self.dispatch = taken
        return "claimed", taken

    # ---------------------------------------------------------------- record_result (spec §3)

    def record_result(self, cmd: RecordResultCommand) -> tuple[DispatchRecord, RunEvent]:
        current = self.dispatch
        if (
            cmd.run_id != RUN
            or current is None
            or current.attempt_id != cmd.attempt_id
            or current.status is not DispatchStatus.LEASED
            or current.version != cmd.expected_version
            or current.lease_owner != cmd.owner
            or current.lease_token_digest != digest_lease_token(cmd.lease_token)
        ):
            raise _Raised(FenceRejectedError)
        if cmd.event_id in self.event_ids:
            raise _Raised(RepositoryError)  # duplicate event id: everything rolls back
        result = cmd.result.value
        if result in RETRYABLE:
            status, event_type = DispatchStatus.RETRY_WAIT, "run.cancel_dispatch_failed"
        elif result in BLOCKING:
            status, event_type = DispatchStatus.BLOCKED, "run.cancel_dispatch_blocked"
        else:
            status, event_type = DispatchStatus.DISPATCHED, "run.cancel_dispatched"
        updated = DispatchRecord(
            run_id=current.run_id,
            attempt_id=current.attempt_id,
            status=status,
            version=current.version + 1,
            dispatch_count=current.dispatch_count,
            next_attempt_at_ms=self.now + cmd.retry_delay_ms if result in RETRYABLE else UNSET,
            last_result=DispatchResult(result),
            last_dispatched_at_ms=current.last_dispatched_at_ms if result in NOT_INVOKED else self.now,
            created_at_ms=current.created_at_ms,
            updated_at_ms=self.now,
        )
        self.run_version += 1
        self.event_sequence += 1
        event = RunEvent(
            id=cmd.event_id,
            run_id=RUN,
            sequence=self.event_sequence,
            type=event_type,
            dedupe_key=f"cancel-dispatch:{cmd.attempt_id}:{updated.dispatch_count}",
            actor_type="worker",
            actor_id=cmd.owner,
            attempt_id=cmd.attempt_id,
            payload={"attempt_id": cmd.attempt_id, "dispatch_count": updated.dispatch_count, "result": result},
            created_at_ms=self.now,
        )
        self.dispatch = updated
        self.event_ids.add(cmd.event_id)
        self.events.append(event)
        return updated, event


class DispatchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="dispatch-model-"))
        self.clock = ManualClock(START_MS)
        self.db = open_database(self.directory / "model.db", clock=self.clock)
        self.repo = LocalCancellationDispatchRepository(self.db)
        self.model = Model()
        self.leases: list[tuple[str, str, str, int]] = []  # (attempt, owner, token, version) ever claimed
        self.event_counter = 0
        c = self.db.connection
        for run_id in (RUN, OTHER_RUN):
            c.execute(
                "INSERT INTO runs (id, execution_owner, status, version, event_sequence, cancel_requested_at_ms, "
                "created_at_ms) VALUES (?, 'runtime', 'running', 0, 0, ?, 1)",
                (run_id, self.model.cancel_requested_at_ms),
            )
        for number, (attempt_id, (run_id, status)) in enumerate(self.model.attempts.items(), start=1):
            c.execute(
                "INSERT INTO run_attempts (id, run_id, attempt, status, created_at_ms) VALUES (?, ?, ?, ?, 1)",
                (attempt_id, run_id, number, status),
            )
        c.execute(
            "INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, actor_id, payload, "
            "created_at_ms) VALUES (?, ?, 1, 'run.created', 'created', 'system', 'test', '{}', 1)",
            (TAKEN_EVENT_ID, OTHER_RUN),
        )

    def teardown(self) -> None:
        self.db.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # ---------------------------------------------------------------- helpers

    def _both(self, model_op: Any, repo_op: Any) -> tuple[Any, Any]:
        """Run the model and the repository; they must both succeed or both raise the same error."""
        try:
            expected = model_op()
        except _Raised as raised:
            try:
                actual = repo_op()
            except raised.kind as error:
                assert error.retryable is False
                return None, None
            raise AssertionError(f"model raised {raised.kind.__name__}, repository returned {actual!r}")
        return expected, repo_op()

    def _requested_at(self, choice: str) -> int:
        base = self.model.cancel_requested_at_ms
        base = START_MS - 5_000 if base is None else base
        return {"same": base, "later": base + 1, "earlier": max(0, base - 1)}[choice]

    # ---------------------------------------------------------------- rules

    @rule(
        attempt_id=st.sampled_from(["att-1"] * 3 + ["att-2", "att-3", "att-9"]),
        run_id=st.sampled_from([RUN] * 9 + ["run-9"]),
        requested=st.sampled_from(["same"] * 8 + ["later", "earlier"]),
        owner=st.sampled_from(OWNERS),
        token=st.sampled_from(TOKENS),
        duration=st.sampled_from([1, 2, 500, 30_000, MAX_LEASE_DURATION_MS]),
    )
    def claim(self, attempt_id: str, run_id: str, requested: str, owner: str, token: str, duration: int) -> None:
        cmd = ClaimCommand(run_id=run_id, attempt_id=attempt_id, requested_at_ms=self._requested_at(requested),
                           owner=owner, lease_token=token, lease_duration_ms=duration)
        expected, actual = self._both(lambda: self.model.claim(cmd), lambda: self.repo.claim(cmd))
        if expected is None:
            return
        status, record = expected
        assert actual.status == status
        if status == "not_eligible":
            return
        assert actual.dispatch == record
        if status == "claimed":
            assert actual.lease_token == token
            self.leases.append((attempt_id, owner, token, record.version))

    @rule(
        owner=st.sampled_from(OWNERS),
        token=st.sampled_from(TOKENS),
        duration=st.sampled_from([1, 2, 500, 30_000, MAX_LEASE_DURATION_MS]),
    )
    def claim_as_the_dispatcher_would(self, owner: str, token: str, duration: int) -> None:
        """The common case: the bound Attempt, the Run's current cancel request."""
        self.claim("att-1", RUN, "same", owner, token, duration)

    @precondition(lambda self: self.model.dispatch is not None and self.model.dispatch.status is DispatchStatus.LEASED)
    @rule(data=st.data(), result=RESULTS,
          delay=st.sampled_from([1, 2, 1_000, 30_000, MAX_RETRY_DELAY_MS]))
    def record_result_as_the_lease_holder(self, data: st.DataObject, result: DispatchResult, delay: int) -> None:
        self.record_result(data, result, delay, "fresh", fence="right")

    @rule(
        data=st.data(),
        result=RESULTS,
        delay=st.sampled_from([1, 2, 1_000, 30_000, MAX_RETRY_DELAY_MS]),
        event=st.sampled_from(["fresh"] * 8 + ["taken", "reused"]),
    )
    def record_result(
        self, data: st.DataObject, result: DispatchResult, delay: int, event: str, fence: str | None = None
    ) -> None:
        current = self.model.dispatch
        right = (
            [(current.attempt_id, current.lease_owner, self._token_of(current), current.version)]
            if current is not None and current.status is DispatchStatus.LEASED
            else []
        )
        kind = fence or data.draw(st.sampled_from(["right"] * 3 + ["stale", "random"]) if right else
                         st.sampled_from(["stale", "random"]), label="fence")
        if kind == "right":
            attempt_id, owner, token, version = right[0]
        elif kind == "stale" and self.leases:
            attempt_id, owner, token, version = data.draw(st.sampled_from(self.leases), label="stale lease")
        else:
            attempt_id = data.draw(st.sampled_from(["att-1", "att-2"]), label="attempt")
            owner = data.draw(st.sampled_from(OWNERS), label="owner")
            token = data.draw(st.sampled_from(TOKENS), label="token")
            version = data.draw(st.integers(1, 12), label="version")
        if event == "taken":
            event_id = TAKEN_EVENT_ID
        elif event == "reused" and len(self.model.event_ids) > 1:
            event_id = data.draw(st.sampled_from(sorted(self.model.event_ids)), label="reused event id")
        else:
            self.event_counter += 1
            event_id = f"evt-{self.event_counter}"
        extra = {"retry_delay_ms": delay} if result.value in RETRYABLE else {}
        cmd = RecordResultCommand(run_id=RUN, attempt_id=attempt_id, owner=owner, lease_token=token,
                                  expected_version=version, result=result, event_id=event_id, **extra)
        expected, actual = self._both(lambda: self.model.record_result(cmd), lambda: self.repo.record_result(cmd))
        if expected is None:
            return
        record, event_row = expected
        assert actual.dispatch == record
        assert actual.event == event_row

    def _token_of(self, record: DispatchRecord) -> str:
        for token in TOKENS:
            if digest_lease_token(token) == record.lease_token_digest:
                return token
        raise AssertionError("the current lease's token is not one the test issued")

    @rule(ms=st.one_of(st.sampled_from([0, 1, 2, 999, 1_000]), st.integers(0, 2 * MAX_LEASE_DURATION_MS)))
    def advance(self, ms: int) -> None:
        self.model.now += ms
        self.clock.advance(ms)

    @precondition(lambda self: self.model.dispatch is not None)
    @rule(offset=st.sampled_from([-1, 0, 0, 1]))
    def move_to_the_dispatch_boundary(self, offset: int) -> None:
        """Land exactly on (or one ms around) the lease expiry or the due time; forward only."""
        record = self.model.dispatch
        boundary = record.lease_expires_at_ms if record.status is DispatchStatus.LEASED else record.next_attempt_at_ms
        if boundary is UNSET:
            return
        target = boundary + offset
        if target > self.model.now:
            self.model.now = target
            self.clock.set(target)

    @rule(
        change=st.sampled_from(["restore"] * 4 + ["cancel_request", "run", "attempt"]),
        cancel=st.sampled_from(["none", "now", "later", "keep", "earlier"]),
        run_status=st.sampled_from(RUN_STATUSES),
        run_owner=st.sampled_from(["runtime", "runtime", "legacy"]),
        attempt_id=st.sampled_from(["att-1", "att-1", "att-2", "att-3"]),
        attempt_status=st.sampled_from(ATTEMPT_STATUSES),
    )
    def tool_changes_the_run(
        self, change: str, cancel: str, run_status: str, run_owner: str, attempt_id: str, attempt_status: str
    ) -> None:
        """What other parts of the runtime (or an operator's tool) do to the Run and its Attempts.

        ``restore`` puts the Run and every Attempt back to active and runtime-owned, keeping the
        cancel request, so eligible claims stay common.
        """
        model, connection = self.model, self.db.connection
        if change == "restore":
            model.run_status, model.run_owner = "running", "runtime"
            for attempt in model.attempts.values():
                attempt[1] = "running"
            if model.cancel_requested_at_ms is None:
                model.cancel_requested_at_ms = model.now
        elif change == "cancel_request":
            model.cancel_requested_at_ms = {
                "none": None,
                "now": model.now,
                "later": model.now + 10_000,
                "keep": model.cancel_requested_at_ms,
                "earlier": START_MS - 60_000,
            }[cancel]
        elif change == "run":
            model.run_status, model.run_owner = run_status, run_owner
        else:
            model.attempts[attempt_id][1] = attempt_status
        connection.execute(
            "UPDATE runs SET status = ?, execution_owner = ?, cancel_requested_at_ms = ? WHERE id = ?",
            (model.run_status, model.run_owner, model.cancel_requested_at_ms, RUN),
        )
        for attempt_id_, (_, status) in model.attempts.items():
            connection.execute("UPDATE run_attempts SET status = ? WHERE id = ?", (status, attempt_id_))

    # ---------------------------------------------------------------- invariants

    @invariant()
    def store_matches_model(self) -> None:
        connection = self.db.connection
        assert not connection.in_transaction
        stored = self.repo.find_by_run_id(RUN)
        assert stored == self.model.dispatch
        if stored is not None:
            assert dispatch_record_problem(stored) is None
            (raw,) = connection.execute(
                "SELECT lease_token FROM run_cancellation_dispatches WHERE run_id = ?", (RUN,)
            ).fetchone()
            assert raw == (None if stored.lease_token_digest is UNSET else "sha256:" + stored.lease_token_digest)
        assert connection.execute("SELECT version, event_sequence FROM runs WHERE id = ?", (RUN,)).fetchone() == (
            self.model.run_version,
            self.model.event_sequence,
        )
        assert connection.execute("SELECT count(*) FROM run_cancellation_dispatches").fetchone()[0] == (
            0 if self.model.dispatch is None else 1
        )

    @invariant()
    def event_log_matches_model(self) -> None:
        assert list_run_events(self.db.connection, RUN) == self.model.events


DispatchMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestDispatchModel = DispatchMachine.TestCase
