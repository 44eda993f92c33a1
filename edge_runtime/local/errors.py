"""Errors of the Local storage layer itself (opening, migrating), below any repository."""

from __future__ import annotations

from typing import Any

import apsw

from edge_runtime.contract.errors import EdgeRuntimeError


class LocalStorageError(EdgeRuntimeError, code="LOCAL_STORAGE_FAILED"):
    """The local database could not be used."""


class DatabaseUnusableError(LocalStorageError, code="LOCAL_DATABASE_UNUSABLE"):
    """The file is not a database, is corrupt or truncated, or cannot be opened. It was not modified."""


class MigrationError(LocalStorageError, code="LOCAL_MIGRATION_REFUSED"):
    """The database's applied migrations do not match this build; nothing was written.

    Raised for an applied migration whose file has changed since, for a migration this build does
    not know (a database from a newer release), and for a migration that failed to apply (which
    stays pending). The message names the migration id and the database path.
    """


def damaged_database_message(exc: BaseException) -> str:
    """What a query that met a damaged page says (SQLITE_CORRUPT, SQLITE_NOTADB): opening checks
    only what costs the same at any size, so damage inside the file surfaces where it is read."""
    return (f"the database file is damaged ({exc}); nothing was changed. Run `edge-runtime check` for a "
            f"full report, and restore a backup")


class DatabaseClosedError(LocalStorageError, code="LOCAL_DATABASE_CLOSED"):
    """The database handle was closed; open a new one."""


class ScrubRefusedError(LocalStorageError, code="LOCAL_SCRUB_REFUSED"):
    """The legacy-token scrub (``migrate --scrub-legacy-tokens``) or the drop of its backup was
    refused before it changed anything; the message says why and what to do."""


class ScrubRollbackRefusedError(ScrubRefusedError, code="LOCAL_SCRUB_ROLLBACK_REFUSED"):
    """``migrate --rollback-scrub`` was refused (nothing to roll back, the database was written
    after the scrub, or the backup is missing or changed); the database was left as it was."""


class WakeSocketError(LocalStorageError, code="SERVICE_WAKE_SOCKET_FAILED"):
    """The wake socket could not be bound (another service holds it, or the directory is unusable)."""


class InvalidClockValueError(LocalStorageError, code="LOCAL_CLOCK_INVALID"):
    """A clock returned something that is not a non-negative safe integer of milliseconds."""


class RunVersionConflict(LocalStorageError, code="LOCAL_RUN_VERSION_CONFLICT"):
    """The Run is missing or changed between the read and the compare-and-set.

    Only a bug or a foreign writer can cause it inside one write transaction.
    """


class StorageErrors:
    """The one storage-error mapper: turns what the database layer raises into ``target`` (a
    repository's own error class); every other error (the contract's refusals) passes unchanged.

    A busy or locked database is retryable; any other SQLite error, or a :class:`LocalStorageError`
    (a bad clock value, a version conflict, a closed database), is not. A plain class rather
    than ``@contextmanager``: it wraps every operation, and a generator costs several times more.
    Calling it returns itself, so ``with errors():`` reads like the other context managers.
    """

    __slots__ = ("_target",)

    def __init__(self, target: type[EdgeRuntimeError]) -> None:
        self._target = target

    def __call__(self) -> "StorageErrors":
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if exc_type is None or issubclass(exc_type, self._target):
            return False
        if issubclass(exc_type, (apsw.BusyError, apsw.LockedError)):
            raise self._target(f"database busy: {exc}", retryable=True) from exc
        if issubclass(exc_type, (apsw.CorruptError, apsw.NotADBError)):
            raise self._target(damaged_database_message(exc)) from exc
        if issubclass(exc_type, apsw.Error):
            raise self._target(f"database operation failed: {exc}") from exc
        if issubclass(exc_type, LocalStorageError):
            raise self._target(str(exc)) from exc
        return False
