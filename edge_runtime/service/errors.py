"""Errors of the device service itself (process control, wake socket, event loop)."""

from __future__ import annotations

import errno

from edge_runtime.contract.errors import EdgeRuntimeError


class ServiceError(EdgeRuntimeError, code="SERVICE_ERROR"):
    """Base of every device-service error."""


#: Spawn failures for lack of a resource that comes back (descriptors, processes, memory):
#: the Run is requeued, never failed (a start stopped for lack of descriptors).
RETRYABLE_SPAWN_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM})


class SpawnError(ServiceError, code="SERVICE_SPAWN_FAILED"):
    """The Attempt's command could not be started (not found, not executable, no resources).

    ``started`` is true when a process did exist (it was killed at once because it could not be
    identified); ``retryable`` only when none did and the cause was a passing lack of resources.
    """

    def __init__(self, message: str, *, os_errno: int | None = None, started: bool = False) -> None:
        super().__init__(message, retryable=not started and os_errno in RETRYABLE_SPAWN_ERRNOS)
        self.started = started


class ProcfsUnavailableError(ServiceError, code="SERVICE_PROCFS_UNAVAILABLE"):
    """``/proc`` cannot be read, so no process identity can be recorded or checked."""
