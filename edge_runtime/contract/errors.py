"""The root of the runtime's one exception hierarchy.

Every error the runtime raises on purpose derives from :class:`EdgeRuntimeError` and carries a
stable ``code`` (for logs, CLI exit messages and machines) and ``retryable``: true only where
trying the same thing again, unchanged, can succeed (the database was busy or locked).
Subsystems subclass it once (``CancellationDispatchError``, ``WorkerLeaseError``, ...) and name
leaf classes for what the caller should do about them. A subclass states its code where it is
declared, ``class RunNotFoundError(RunError, code="RUN_NOT_FOUND")``, so the name, the code and the
docstring read as one line of the hierarchy.
"""

from __future__ import annotations


class EdgeRuntimeError(Exception):
    """Base of every deliberate runtime error.

    Attributes:
        code: stable machine-readable code; never reworded once released.
        retryable: whether retrying the identical operation may succeed.
    """

    code: str = "EDGE_RUNTIME_ERROR"
    retryable: bool = False

    def __init_subclass__(cls, *, code: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code = code

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if retryable is not None:
            self.retryable = retryable

    def __str__(self) -> str:
        return self.message


class StoredRowError(EdgeRuntimeError, code="STORED_ROW_BROKEN"):
    """One stored row breaks a rule the runtime's own writes always keep, as only another program
    writing the database can leave it. The runtime sets that row aside (fails its Run, pauses its
    schedule) with this error's message and code, and goes on with every other; ``check`` names it.

    ``row_id`` is the id of the row to set aside (a Run's, a schedule's), "" where the message names it.
    """

    def __init__(self, message: str, *, row_id: str = "", retryable: bool | None = None) -> None:
        super().__init__(message, retryable=retryable)
        self.row_id = row_id

    def reason(self) -> str:
        """The text recorded where the row is set aside: the message and the stable code."""
        return f"{self.message} [{self.code}]"


class RunEventLogMismatchError(StoredRowError, code="RUN_EVENT_LOG_MISMATCH"):
    """A Run's event log holds rows its ``event_sequence`` does not count: no event can be appended
    to it (every change of the Run is one), so it can neither start, end nor be cancelled."""

    @classmethod
    def of(cls, run_id: str, counted: int, held: int) -> "RunEventLogMismatchError":
        """``counted``: the Run's ``event_sequence``; ``held``: a higher sequence its log holds."""
        return cls(f"the event log of run {run_id!r} holds events its Run did not count (it counts {counted}, "
                   f"the log holds sequence {held}): another program wrote them; no event can be added to "
                   f"it (a Run waiting to start is set aside, failed); `edge-runtime check` names it",
                   row_id=run_id)


class UnspawnableValueError(StoredRowError, code="SPAWN_VALUE_REFUSED"):
    """A value an Attempt's process would be given cannot be given to any process: a NUL byte in
    its command, its working directory or a variable, or a variable name holding ``=`` or empty.
    Only a row another program stored can hold one (every command that stores them refuses it)."""
