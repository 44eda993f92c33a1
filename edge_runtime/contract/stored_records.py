"""The rule every store applies to the records it reads and writes, decided once.

A stored row that does not make a record (an unknown status, a wrong type, a broken JSON column)
or makes one that breaks a contract invariant fails closed with the store's own error and is never
repaired; a record that breaks an invariant is never written (only a bug in the store reaches
that). Both adapters (edge_runtime/local, cluster/cluster_postgres) read and write through these
two functions, so a damaged row reads the same on SQLite and on PostgreSQL: ``stored dispatch of
run 'r1' breaks an invariant: ...``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    R = TypeVar("R")

#: What building a record of a malformed row raises: an unknown enum value or mapping key, a
#: value of the wrong type, undecodable JSON (msgspec's errors are ValueErrors).
MALFORMED_ROW_ERRORS = (KeyError, ValueError, TypeError)


def stored_record(build: Callable[[], R], what: str, key: object, error: Callable[[str], Exception],
                  problem_of: Callable[[R], str | None] | None = None) -> R:
    """The record ``build`` makes of a stored row, checked by ``problem_of`` (the contract's
    invariant check of that record, or None where the record type has none beyond its fields).

    ``what`` and ``key`` name the row in the message (``"lease of attempt"``, ``"a1"``; formatted
    only when there is one: every read passes here); ``error`` is the store's repository error.
    Raises it for a malformed row and for one that breaks an invariant.
    """
    try:
        record = build()
    except MALFORMED_ROW_ERRORS as exc:
        raise error(f"stored {what} {key!r} is malformed: {exc}") from None
    problem = None if problem_of is None else problem_of(record)
    if problem is not None:
        raise error(f"stored {what} {key!r} breaks an invariant: {problem}")
    return record


def record_to_write(record: R, problem: str | None, what: str, key: object, error: Callable[[str], Exception]) -> R:
    """``record`` when its invariant check found no ``problem``; else the store's ``error``: a
    broken record is refused before it is written."""
    if problem is not None:
        raise error(f"refusing to write {what} {key!r}: {problem}")
    return record
