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
