"""Errors of the device service itself (process control, wake socket, event loop)."""

from __future__ import annotations

from edge_runtime.contract.errors import EdgeRuntimeError


class ServiceError(EdgeRuntimeError):
    """Base of every device-service error."""

    code = "SERVICE_ERROR"


class SpawnError(ServiceError):
    """The Attempt's command could not be started (not found, not executable, no resources)."""

    code = "SERVICE_SPAWN_FAILED"


class ProcfsUnavailableError(ServiceError):
    """``/proc`` cannot be read, so no process identity can be recorded or checked."""

    code = "SERVICE_PROCFS_UNAVAILABLE"


class WakeSocketError(ServiceError):
    """The wake socket could not be bound (another service holds it, or the directory is unusable)."""

    code = "SERVICE_WAKE_SOCKET_FAILED"
