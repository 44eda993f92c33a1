"""Errors of the Local storage layer itself (opening, migrating), below any repository."""

from __future__ import annotations

from edge_runtime.contract.errors import EdgeRuntimeError


class LocalStorageError(EdgeRuntimeError):
    """The local database could not be used."""

    code = "LOCAL_STORAGE_FAILED"


class DatabaseUnusableError(LocalStorageError):
    """The file is not a database, is corrupt or truncated, or cannot be opened. It was not modified."""

    code = "LOCAL_DATABASE_UNUSABLE"


class MigrationError(LocalStorageError):
    """The database's applied migrations do not match this build; nothing was written.

    Raised for an applied migration whose file has changed since, for a migration this build does
    not know (a database from a newer release), and for a migration that failed to apply (which
    stays pending). The message names the migration id and the database path.
    """

    code = "LOCAL_MIGRATION_REFUSED"


class DatabaseClosedError(LocalStorageError):
    """The database handle was closed; open a new one."""

    code = "LOCAL_DATABASE_CLOSED"


class ScrubRefusedError(LocalStorageError):
    """The legacy-token scrub (``migrate --scrub-legacy-tokens``) or the drop of its backup was
    refused before it changed anything; the message says why and what to do."""

    code = "LOCAL_SCRUB_REFUSED"


class ScrubRollbackRefusedError(ScrubRefusedError):
    """``migrate --rollback-scrub`` was refused (nothing to roll back, the database was written
    after the scrub, or the backup is missing or changed); the database was left as it was."""

    code = "LOCAL_SCRUB_ROLLBACK_REFUSED"


class WakeSocketError(LocalStorageError):
    """The wake socket could not be bound (another service holds it, or the directory is unusable)."""

    code = "SERVICE_WAKE_SOCKET_FAILED"
