"""Worker Session and Run Lease contract, shared part (spec §5, ADR-0057 Local Profile).

Two authorities: the *Worker Session Lease* proves that a worker's current session (by worker id,
session id and generation) may still report capacity; the *Run Lease* proves that one session
holds a fenced, versioned grant to execute one Attempt. This module holds what both halves
share: hard limits, bounded identifier types, the error hierarchy, the bearer-token digest and
the canonical capabilities with their hash. The commands, records and outcomes live in
:mod:`edge_runtime.contract.worker_session` and :mod:`edge_runtime.contract.run_lease`.

Neither authority is ever evidence that a process stopped: an offline session or an expired
lease only says the control-plane authority lapsed. No API here reports "not running".

This module owns no connection, clock, timer or process.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.validation import (
    MAX_SAFE_INTEGER,
    Command,
    bounded_int_type,
    identifier_problem,
    identifier_type,
    is_digest,
    token_digester,
)

# --------------------------------------------------------------------------- limits

#: Domain separation: a Run Lease digest can never equal a CancellationDispatch lease digest.
RUN_LEASE_TOKEN_DOMAIN = b"qinglong.run-lease.v1\x00"

#: A router runs a handful of commands at once; the cap bounds a bogus registration.
MAX_CONCURRENT_RUNS = 64
MAX_SESSION_LEASE_DURATION_MS = 300_000
MAX_RUN_LEASE_DURATION_MS = 300_000
#: Canonical capabilities JSON is stored in one row; keep it small on flash.
MAX_CAPABILITIES_BYTES = 4_096
MAX_CAPABILITIES_DEPTH = 4
MAX_CAPABILITY_KEY_LENGTH = 64
MAX_CAPABILITY_STRING_LENGTH = 256

WORKER_ID_MAX_LENGTH = 128
SESSION_ID_MAX_LENGTH = 64
OFFER_ID_MAX_LENGTH = 64

WorkerId = identifier_type(WORKER_ID_MAX_LENGTH)
SessionId = identifier_type(SESSION_ID_MAX_LENGTH)
OfferId = identifier_type(OFFER_ID_MAX_LENGTH)
Capacity = bounded_int_type(1, MAX_CONCURRENT_RUNS)
Slots = bounded_int_type(0, MAX_CONCURRENT_RUNS)
SessionLeaseDurationMs = bounded_int_type(1, MAX_SESSION_LEASE_DURATION_MS)
RunLeaseDurationMs = bounded_int_type(1, MAX_RUN_LEASE_DURATION_MS)


# --------------------------------------------------------------------------- errors


class WorkerLeaseError(EdgeRuntimeError, code="WORKER_LEASE_ERROR"):
    """Base of every Worker Session / Run Lease error."""


class InvalidWorkerLeaseCommandError(WorkerLeaseError, code="INVALID_WORKER_LEASE_COMMAND"):
    """The command is malformed: fix the input; retrying it unchanged never helps."""


class WorkerSessionRejectedError(WorkerLeaseError, code="WORKER_SESSION_REJECTED"):
    """The session may not do this: conflicting, draining, offline or expired.

    Register again with a new session id (which replaces the old one) to regain authority.
    """


class WorkerLeaseFenceRejectedError(WorkerLeaseError, code="WORKER_LEASE_FENCE_REJECTED"):
    """The caller's fence (worker, session, generation, version, token) no longer holds.

    Another session, a newer version or another grant owns the row; re-read before acting.
    """


class StartBarrierPassedError(WorkerLeaseFenceRejectedError, code="WORKER_LEASE_START_BARRIER_PASSED"):
    """The Attempt is no longer ``claimed``: it crossed (or never reached) the start barrier.

    Release is refused after it, and a second start is refused: completion, loss and
    cancellation of a started Attempt go through their own transactions.
    """


class RunNotStartableError(WorkerLeaseError, code="WORKER_LEASE_RUN_NOT_STARTABLE"):
    """The Run is cancel-requested, terminal or no longer runtime-owned; do not start it.

    Release the lease (the Attempt is still ``claimed``) and end the Attempt instead.
    """


class WorkerLeaseRepositoryError(WorkerLeaseError, code="WORKER_LEASE_REPOSITORY_FAILED"):
    """The store failed, or holds a row that breaks the contract (which fails closed).

    ``retryable`` is true only when the database was busy or locked.
    """


class LeaseCommand(Command):
    """Base of the Worker Session and Run Lease commands."""

    error = InvalidWorkerLeaseCommandError


#: Raise :class:`InvalidWorkerLeaseCommandError` for a non-None problem (a repository's plain argument).
reject = LeaseCommand.reject


# --------------------------------------------------------------------------- token digest


#: ``digest_run_lease_token(token)``: the digest of a Run Lease bearer token (never equal to a
#: CancellationDispatch token's: another domain).
digest_run_lease_token = token_digester(RUN_LEASE_TOKEN_DOMAIN, InvalidWorkerLeaseCommandError)
#: Whether a value has the shape of a token or hash digest (64 lowercase hex characters).
is_token_digest = is_digest


def digest_problem(name: str, value: object) -> str | None:
    if not is_token_digest(value):
        return f"{name} must be 64 lowercase hex characters"
    return None


# --------------------------------------------------------------------------- capabilities


def _capability_value_problem(path: str, value: object, depth: int) -> str | None:
    kind = type(value)
    if kind is str:
        if len(value) > MAX_CAPABILITY_STRING_LENGTH:
            return f"{path} must be at most {MAX_CAPABILITY_STRING_LENGTH} characters"
        return None
    if kind is bool:
        return None
    if kind is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return None
        return f"{path} must be a safe integer"
    if kind is list:
        if depth >= MAX_CAPABILITIES_DEPTH:
            return f"{path} nests deeper than {MAX_CAPABILITIES_DEPTH} levels"
        for index, item in enumerate(value):
            problem = _capability_value_problem(f"{path}[{index}]", item, depth + 1)
            if problem is not None:
                return problem
        return None
    if kind is dict:
        if depth >= MAX_CAPABILITIES_DEPTH:
            return f"{path} nests deeper than {MAX_CAPABILITIES_DEPTH} levels"
        return _capability_object_problem(path, value, depth + 1)
    # Floats have no single canonical text and null is "absent": neither is a capability value.
    return f"{path} must be a string, integer, boolean, list or object, got {kind.__name__}"


def _capability_object_problem(path: str, value: dict[Any, Any], depth: int) -> str | None:
    for key, item in value.items():
        problem = identifier_problem(f"{path} key", key, MAX_CAPABILITY_KEY_LENGTH)
        if problem is not None:
            return problem
        problem = _capability_value_problem(f"{path}.{key}", item, depth)
        if problem is not None:
            return problem
    return None


def capabilities_problem(capabilities: object) -> str | None:
    """Why ``capabilities`` is not a valid capabilities object, or None."""
    if type(capabilities) is not dict:
        return f"capabilities must be an object, got {type(capabilities).__name__}"
    problem = _capability_object_problem("capabilities", capabilities, 1)
    if problem is not None:
        return problem
    if len(canonical_capabilities_unchecked(capabilities)) > MAX_CAPABILITIES_BYTES:
        return f"capabilities must be at most {MAX_CAPABILITIES_BYTES} bytes of canonical JSON"
    return None


def canonical_capabilities_unchecked(capabilities: dict[str, Any]) -> bytes:
    # Sorted keys at every level and msgspec's compact separators: one text per value.
    return msgspec.json.encode(capabilities, order="sorted")


def canonical_capabilities(capabilities: dict[str, Any]) -> bytes:
    """The canonical JSON of ``capabilities``: keys sorted at every level, no whitespace.

    Raises:
        InvalidWorkerLeaseCommandError: not a valid capabilities object.
    """
    reject(capabilities_problem(capabilities))
    return canonical_capabilities_unchecked(capabilities)


def capabilities_hash(capabilities: dict[str, Any]) -> str:
    """SHA-256 of the canonical capabilities JSON, as 64 lowercase hex characters.

    Raises:
        InvalidWorkerLeaseCommandError: not a valid capabilities object.
    """
    return hashlib.sha256(canonical_capabilities(capabilities)).hexdigest()
