"""Env entries: the store's variables as QingLong keeps them (docs/environment.md). Pure: no I/O.

An entry is one value of a name, with an integer id the store assigns (1 and up, never reused:
QingLong's clients handle integer ids), a secret flag, remarks, an enabled flag, a position,
a pinned flag, labels and its times. Several entries may share a name, one account each. A task
sees each name once: the values of its enabled entries joined with ``&`` in list order
(QingLong's ``env.sh`` rule), under its Run's own ``--env``.

Every rule is decided here, once, for both stores: an adapter (``edge_runtime/local/environment.py``,
``cluster_postgres/environment.py``) reads the live entries in list order (``ENTRY_ORDER_SQL``)
inside its own write transaction, hands them with the store's time to a ``plan_*`` function, and
writes the :class:`EnvChanges` it returns. A refused change raises before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import msgspec

from edge_runtime.contract.environment import (
    MAX_VARIABLES,
    EnvEntryNotFoundError,
    InvalidVariableError,
    SecretTooShortError,
    VariableNotFoundError,
    VariableTooLongError,
    name_problem,
    secret_problem,
)
from edge_runtime.contract.redaction import MIN_SECRET_LENGTH
from edge_runtime.contract.validation import MAX_SAFE_INTEGER, SafeInt, bounded_int_type

# ------------------------------------------------------------------------------------ limits

#: Linux's MAX_ARG_STRLEN (32 pages of 4 KiB): the most bytes one string of a new program's
#: environment may have, ``NAME=`` and the terminating NUL included (execve fails with E2BIG
#: above it). A name's joined value must fit in one, and so must each entry's value alone.
MAX_ENV_STRING_BYTES = 131072
#: Every entry together, each counted as the environment string it would be alone (``NAME=value``
#: and its NUL). Linux bounds a new program's arguments and environment together by a quarter of
#: its stack limit (2 MiB with the usual 8 MiB ``ulimit -s``, never less than 128 KiB): half of
#: that leaves room for the base variables, a Run's own and its command. It also bounds what the
#: database keeps on a router's flash.
MAX_ENTRIES_BYTES = 1024 * 1024
#: Entries at most (one account each: a long cookie list is a few hundred).
MAX_ENTRIES = 1000
MAX_REMARKS_LENGTH = 1024
MAX_LABELS = 16
MAX_LABEL_LENGTH = 64
#: What separates a name's values in what a task sees (QingLong's ``env.sh``).
JOIN_SEPARATOR = "&"
#: The list order, the one rule every store and output follows: pinned entries first, then by
#: position (``move`` sets it, a new entry goes last), then by id. QingLong's own order is the
#: same (pinned first, then its position, larger first, then creation).
ENTRY_ORDER_SQL = "pinned DESC, position, id"

EntryId = bounded_int_type(1, MAX_SAFE_INTEGER)


# ------------------------------------------------------------------------------------ records


class NewEnvEntry(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, kw_only=True):
    """An entry to add (``EnvironmentStore.add``): checked whole before anything is stored."""

    name: str
    value: str
    secret: bool = False
    remarks: str = ""
    enabled: bool = True
    pinned: bool = False
    labels: tuple[str, ...] = ()


class StoredEnvEntry(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An entry as the store keeps it, its value included whatever its secret flag: only the
    adapters and the plans hold one; what is shown is an :class:`EnvEntry`. ``id`` 0 is a new
    entry the store has not numbered yet."""

    id: int
    name: str
    value: str
    secret: bool
    remarks: str
    enabled: bool
    position: int
    pinned: bool
    labels: tuple[str, ...]
    created_at_ms: int
    updated_at_ms: int


class EnvEntry(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False, kw_only=True):
    """An entry as it is shown: a secret's value is never part of it (absent). ``too_short``: a
    secret stored before secrets had a minimum length, shorter than it (masked whole wherever it
    appears, and ``check`` names it); absent otherwise."""

    id: EntryId
    name: str
    value: str | msgspec.UnsetType = msgspec.UNSET
    secret: bool
    remarks: str
    enabled: bool
    position: SafeInt
    pinned: bool
    labels: tuple[str, ...]
    created_at_ms: SafeInt
    updated_at_ms: SafeInt
    too_short: bool | msgspec.UnsetType = msgspec.UNSET


def shown(entry: StoredEnvEntry) -> EnvEntry:
    """What may be shown of ``entry``: everything but a secret's value."""
    extra: dict[str, object] = {}
    if not entry.secret:
        extra["value"] = entry.value
    elif len(entry.value) < MIN_SECRET_LENGTH:
        extra["too_short"] = True
    return EnvEntry(id=entry.id, name=entry.name, secret=entry.secret, remarks=entry.remarks, enabled=entry.enabled,
                    position=entry.position, pinned=entry.pinned, labels=entry.labels,
                    created_at_ms=entry.created_at_ms, updated_at_ms=entry.updated_at_ms, **extra)


class EnvChanges(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """What a plan writes: ``inserts`` (numbered by the store in this order), whole rows to
    ``updates`` by id, ``removals`` by id. The caller gets back the rows of ``returned`` (ids of
    ``updates``, in that order) and then the inserted ones."""

    inserts: tuple[StoredEnvEntry, ...] = ()
    updates: tuple[StoredEnvEntry, ...] = ()
    removals: tuple[int, ...] = ()
    returned: tuple[int, ...] = ()

    def result(self, inserted_ids: Sequence[int]) -> list[EnvEntry]:
        """The entries the caller gets, once the store numbered the inserts ``inserted_ids``."""
        rows = {row.id: row for row in self.updates}
        numbered = [msgspec.structs.replace(row, id=new) for row, new in zip(self.inserts, inserted_ids, strict=True)]
        return [shown(rows[entry_id]) for entry_id in self.returned] + [shown(row) for row in numbered]


# ------------------------------------------------------------------------------------ what tasks get


def env_string_bytes(name: str, values: Sequence[str]) -> int:
    """The bytes of the environment string a task gets for ``name`` with ``values`` joined:
    ``NAME=``, the values and their separators, and the terminating NUL (what MAX_ARG_STRLEN counts)."""
    return len(name) + 1 + sum(_utf8_length(v) for v in values) + max(len(values) - 1, 0) + 1


def task_values(entries: Iterable[StoredEnvEntry]) -> dict[str, str]:
    """What an Attempt gets from ``entries`` (in list order): each name once, the values of its
    enabled entries joined with ``&``; a name whose entries are all disabled is absent."""
    values: dict[str, list[str]] = {}
    for entry in entries:
        if entry.enabled:
            values.setdefault(entry.name, []).append(entry.value)
    return {name: JOIN_SEPARATOR.join(parts) for name, parts in values.items()}


def secret_values(entries: Iterable[StoredEnvEntry]) -> list[str]:
    """What shown output masks (``redaction.store_redactor``): every secret entry's value,
    enabled or not (an older log may hold it), and the joined value of a name whose enabled
    entries are several and all secret. A name mixing secret and plain entries adds no joined
    value: its parts would mask the plain entries' values everywhere."""
    found: list[str] = []
    by_name: dict[str, list[StoredEnvEntry]] = {}
    for entry in entries:
        if entry.secret:
            found.append(entry.value)
        if entry.enabled:
            by_name.setdefault(entry.name, []).append(entry)
    found += [JOIN_SEPARATOR.join(e.value for e in group) for group in by_name.values()
              if len(group) > 1 and all(e.secret for e in group)]
    return found


def matching(entries: Iterable[StoredEnvEntry], *, name: str | None = None,
             search: str | Sequence[str] | None = None, value: str | None = None) -> list[StoredEnvEntry]:
    """The entries of ``name`` (all when None) whose name, value or remarks contain ``search``
    (or one of several texts; case ignored), and whose value is exactly ``value`` when given (an
    importer or client that must not add the same account twice). A secret's value is searched
    and compared too, so a cookie is found by its account (``pt_pin=...``); the caller shows the
    entry, never that value."""
    texts = None if search is None else [t.lower() for t in ([search] if isinstance(search, str) else search)]
    return [e for e in entries if (name is None or e.name == name) and (value is None or e.value == value) and (
        texts is None or any(t in e.name.lower() or t in e.value.lower() or t in e.remarks.lower() for t in texts))]


# ------------------------------------------------------------------------------------ checks


def _utf8_length(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _text_problem(what: str, text: object, max_length: int | None) -> str | None:
    if type(text) is not str:
        return f"{what} must be a string"
    if "\x00" in text:
        return f"{what} contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return f"{what} is not valid UTF-8 text"
    if max_length is not None and len(text) > max_length:
        return f"{what} is longer than {max_length} characters"
    return None


def _checked_name(name: object) -> str:
    problem = name_problem(name)
    if problem is not None:
        raise InvalidVariableError(problem)
    return name  # type: ignore[return-value]  (checked)


def _checked_value(name: str, value: object, *, secret: bool) -> str:
    problem = _text_problem(f"the value of {name}", value, None)
    if problem is not None:
        raise InvalidVariableError(problem)
    alone = env_string_bytes(name, [value])  # type: ignore[list-item]  (checked)
    if alone > MAX_ENV_STRING_BYTES:
        raise VariableTooLongError(
            f"the value of {name} is {alone - len(name) - 2} bytes: as {name}=value it would be {alone} bytes "
            f"with its terminating NUL, and Linux allows one environment string at most {MAX_ENV_STRING_BYTES} "
            f"(MAX_ARG_STRLEN); nothing was changed")
    if secret:
        _check_secret(name, value)  # type: ignore[arg-type]
    return value  # type: ignore[return-value]


def _check_secret(name: str, value: str) -> None:
    problem = secret_problem(name, value)
    if problem is not None:
        raise SecretTooShortError(problem)


def _checked_flag(what: str, flag: object) -> bool:
    if type(flag) is not bool:
        raise InvalidVariableError(f"{what} must be true or false, not {flag!r}")
    return flag


def _checked_remarks(remarks: object) -> str:
    problem = _text_problem("remarks", remarks, MAX_REMARKS_LENGTH)
    if problem is not None:
        raise InvalidVariableError(problem)
    return remarks  # type: ignore[return-value]


def _checked_labels(labels: object) -> tuple[str, ...]:
    """Each label 1..MAX_LABEL_LENGTH characters without control characters; repeats dropped
    (the first kept); at most MAX_LABELS."""
    if isinstance(labels, str) or not isinstance(labels, Iterable):
        raise InvalidVariableError("labels must be a list of texts")
    kept: list[str] = []
    for label in labels:
        problem = _text_problem(f"label {label!r}", label, MAX_LABEL_LENGTH)
        if problem is None and (not label or any(ord(c) < 0x20 or c == "\x7f" for c in label)):
            problem = f"label {label!r} must be 1 to {MAX_LABEL_LENGTH} characters without control characters"
        if problem is not None:
            raise InvalidVariableError(problem)
        if label not in kept:
            kept.append(label)
    if len(kept) > MAX_LABELS:
        raise InvalidVariableError(f"{len(kept)} labels given; an entry has at most {MAX_LABELS}")
    return tuple(kept)


def _limits(before: Sequence[StoredEnvEntry], after: Sequence[StoredEnvEntry]) -> None:
    """Refuse a change that makes a name's joined value, all entries together, or their number
    larger than its limit. Only growth is refused: a database whose entries were already beyond
    a limit (written by an earlier release) can still be shrunk one change at a time."""
    joined_before, joined_after = _joined_bytes(before), _joined_bytes(after)
    for name, size in joined_after.items():
        if size > MAX_ENV_STRING_BYTES and size > joined_before.get(name, 0):
            raise VariableTooLongError(
                f"{name} would be {size} bytes in a task's environment ({name}=, the values of its enabled entries "
                f"joined with & and the terminating NUL); Linux allows one environment string at most "
                f"{MAX_ENV_STRING_BYTES} bytes (MAX_ARG_STRLEN): shorten, disable or remove an entry of {name} "
                f"first; nothing was changed")
    total_before, total_after = _total_bytes(before), _total_bytes(after)
    if total_after > MAX_ENTRIES_BYTES and total_after > total_before:
        raise VariableTooLongError(
            f"the entries together would be {total_after} bytes (each counted as NAME=value with its NUL); they "
            f"may be at most {MAX_ENTRIES_BYTES}: remove entries first; nothing was changed")
    if len(after) > MAX_ENTRIES and len(after) > len(before):
        raise InvalidVariableError(f"there are {MAX_ENTRIES} entries already; remove one first")
    names_before, names_after = {e.name for e in before}, {e.name for e in after}
    if len(names_after) > MAX_VARIABLES and len(names_after) > len(names_before):
        raise InvalidVariableError(f"there are {MAX_VARIABLES} variable names already; remove one first")


def _joined_bytes(entries: Sequence[StoredEnvEntry]) -> dict[str, int]:
    values: dict[str, list[str]] = {}
    for entry in entries:
        if entry.enabled:
            values.setdefault(entry.name, []).append(entry.value)
    return {name: env_string_bytes(name, parts) for name, parts in values.items()}


def _total_bytes(entries: Sequence[StoredEnvEntry]) -> int:
    return sum(env_string_bytes(e.name, [e.value]) for e in entries)


def _changes(current: Sequence[StoredEnvEntry], changes: EnvChanges) -> EnvChanges:
    """``changes`` once the state they leave is within every limit."""
    replaced = {row.id for row in changes.updates} | set(changes.removals)
    after = [e for e in current if e.id not in replaced] + list(changes.updates) + list(changes.inserts)
    _limits(current, after)
    return changes


def _by_ids(current: Sequence[StoredEnvEntry], ids: Iterable[object]) -> list[StoredEnvEntry]:
    """The entries ``ids`` name, in list order, each once.

    Raises:
        InvalidVariableError: no ids, or one that is not an id. EnvEntryNotFoundError: one names no entry.
    """
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise InvalidVariableError("entry ids must be a list of integers")
    wanted: list[int] = []
    for entry_id in ids:
        if type(entry_id) is not int or not 1 <= entry_id <= MAX_SAFE_INTEGER:
            raise InvalidVariableError(f"{entry_id!r} is not an entry id (an integer of 1 or more)")
        if entry_id not in wanted:
            wanted.append(entry_id)
    if not wanted:
        raise InvalidVariableError("no entry ids given")
    found = [e for e in current if e.id in wanted]
    missing = sorted(set(wanted) - {e.id for e in found})
    if missing:
        listed = ", ".join(map(str, missing))
        raise EnvEntryNotFoundError(f"no env entr{'y' if len(missing) == 1 else 'ies'} with id {listed}; "
                                    f"nothing was changed")
    return found


def _next_position(current: Sequence[StoredEnvEntry]) -> int:
    return max((e.position for e in current), default=0) + 1


# ------------------------------------------------------------------------------------ plans


def plan_add(current: Sequence[StoredEnvEntry], entries: Sequence[NewEnvEntry], now_ms: int) -> EnvChanges:
    """Append ``entries`` at the end of the list, in their order (all or none)."""
    if not entries:
        raise InvalidVariableError("no entries given")
    position = _next_position(current)
    rows = []
    for index, entry in enumerate(entries):
        try:
            if not isinstance(entry, NewEnvEntry):
                raise InvalidVariableError("an entry to add must be a NewEnvEntry")
            name = _checked_name(entry.name)
            secret = _checked_flag("secret", entry.secret)
            rows.append(StoredEnvEntry(
                id=0, name=name, value=_checked_value(name, entry.value, secret=secret), secret=secret,
                remarks=_checked_remarks(entry.remarks), enabled=_checked_flag("enabled", entry.enabled),
                position=position + index, pinned=_checked_flag("pinned", entry.pinned),
                labels=_checked_labels(entry.labels), created_at_ms=now_ms, updated_at_ms=now_ms))
        except InvalidVariableError as exc:
            if len(entries) == 1:
                raise
            raise type(exc)(f"entry {index + 1} of {len(entries)}: {exc}") from None
    return _changes(current, EnvChanges(inserts=tuple(rows)))


def plan_update(current: Sequence[StoredEnvEntry], entry_id: int, now_ms: int, *, name: str | None = None,
                value: str | None = None, secret: bool | None = None, remarks: str | None = None,
                labels: Sequence[str] | None = None) -> EnvChanges:
    """Change the fields given (None: unchanged) of one entry. A secret's length is checked when
    its value changes or it becomes secret: a secret stored before the minimum keeps its remarks
    editable."""
    (entry,) = _by_ids(current, [entry_id])
    new_name = entry.name if name is None else _checked_name(name)
    new_secret = entry.secret if secret is None else _checked_flag("secret", secret)
    if value is not None:
        new_value = _checked_value(new_name, value, secret=new_secret)
    else:
        new_value = entry.value
        if new_name != entry.name:
            _checked_value(new_name, new_value, secret=False)
        if new_secret and not entry.secret:
            _check_secret(new_name, new_value)
    row = msgspec.structs.replace(
        entry, name=new_name, value=new_value, secret=new_secret,
        remarks=entry.remarks if remarks is None else _checked_remarks(remarks),
        labels=entry.labels if labels is None else _checked_labels(labels), updated_at_ms=now_ms)
    return _changes(current, EnvChanges(updates=(row,), returned=(row.id,)))


def plan_remove(current: Sequence[StoredEnvEntry], ids: Iterable[int]) -> EnvChanges:
    """Remove the entries ``ids`` (all or none)."""
    found = _by_ids(current, ids)
    return EnvChanges(removals=tuple(e.id for e in found))


def plan_remove_name(current: Sequence[StoredEnvEntry], name: str) -> EnvChanges:
    """Remove every entry of ``name``.

    Raises:
        VariableNotFoundError: it has none.
    """
    _checked_name(name)
    found = [e.id for e in current if e.name == name]
    if not found:
        raise VariableNotFoundError(f"no variable named {name!r}")
    return EnvChanges(removals=tuple(found))


def _flags(current: Sequence[StoredEnvEntry], ids: Iterable[int], now_ms: int, **flags: bool) -> EnvChanges:
    rows = []
    for entry in _by_ids(current, ids):
        if any(getattr(entry, key) != flag for key, flag in flags.items()):
            entry = msgspec.structs.replace(entry, **flags, updated_at_ms=now_ms)
        rows.append(entry)
    return _changes(current, EnvChanges(updates=tuple(rows), returned=tuple(e.id for e in rows)))


def plan_enable(current: Sequence[StoredEnvEntry], ids: Iterable[int], now_ms: int, *, enabled: bool) -> EnvChanges:
    """Enable (or disable) the entries ``ids``: a task gets an enabled one's value."""
    return _flags(current, ids, now_ms, enabled=enabled)


def plan_pin(current: Sequence[StoredEnvEntry], ids: Iterable[int], now_ms: int, *, pinned: bool) -> EnvChanges:
    """Pin (or unpin) the entries ``ids``: pinned ones come first in the list and in the join."""
    return _flags(current, ids, now_ms, pinned=pinned)


def plan_rename(current: Sequence[StoredEnvEntry], ids: Iterable[int], name: str, now_ms: int) -> EnvChanges:
    """Give the entries ``ids`` the name ``name``."""
    name = _checked_name(name)
    rows = []
    for entry in _by_ids(current, ids):
        _checked_value(name, entry.value, secret=False)
        rows.append(msgspec.structs.replace(entry, name=name, updated_at_ms=now_ms)
                    if entry.name != name else entry)
    return _changes(current, EnvChanges(updates=tuple(rows), returned=tuple(e.id for e in rows)))


def plan_move(current: Sequence[StoredEnvEntry], entry_id: int, before: int | None, now_ms: int) -> EnvChanges:
    """Move one entry just before the entry ``before`` in the list (None: to its end), by
    numbering the positions of the list anew (1, 2, ...; only rows whose position changes are
    written). A pinned entry still comes before every unpinned one."""
    (moving,) = _by_ids(current, [entry_id])
    order = [e for e in current if e.id != entry_id]
    if before is None:
        index = len(order)
    else:
        if before == entry_id:
            raise InvalidVariableError(f"entry {entry_id} cannot move before itself")
        (target,) = _by_ids(current, [before])
        index = order.index(target)
    order.insert(index, moving)
    rows = []
    for position, entry in enumerate(order, start=1):
        if entry.id == entry_id:
            rows.insert(0, msgspec.structs.replace(entry, position=position, updated_at_ms=now_ms))
        elif entry.position != position:
            rows.append(msgspec.structs.replace(entry, position=position))
    return EnvChanges(updates=tuple(rows), returned=(entry_id,))


def plan_set(current: Sequence[StoredEnvEntry], name: str, value: str, now_ms: int, *, secret: bool) -> EnvChanges:
    """Make ``value`` the one value of ``name``: its first entry in list order keeps its id,
    position, pin, remarks and labels and gets the value, the secret flag and enabled; its other
    entries are removed. A name without entries gets a new one at the end."""
    name = _checked_name(name)
    secret = _checked_flag("secret", secret)
    value = _checked_value(name, value, secret=secret)
    same = [e for e in current if e.name == name]
    if not same:
        return plan_add(current, [NewEnvEntry(name=name, value=value, secret=secret)], now_ms)
    first = msgspec.structs.replace(same[0], value=value, secret=secret, enabled=True, updated_at_ms=now_ms)
    return _changes(current, EnvChanges(updates=(first,), removals=tuple(e.id for e in same[1:]),
                                        returned=(first.id,)))


# ------------------------------------------------------------------------------------ the port


class EnvironmentStore(Protocol):
    """The env entries, kept by the store (``Store.environment``). Ids are integers; a command
    naming several ids is one transaction and changes none when one names no entry. Every
    shown entry leaves out a secret's value."""

    def list(self, *, name: str | None = None, search: str | Sequence[str] | None = None,
             value: str | None = None) -> list[EnvEntry]:
        """The entries in list order: of ``name`` only, and/or those whose name, value or remarks
        contain ``search``, and/or whose value is exactly ``value`` (see :func:`matching`: a
        secret's value is searched and compared, never returned)."""
        ...

    def get(self, entry_id: int) -> EnvEntry:
        """Raises EnvEntryNotFoundError."""
        ...

    def add(self, entries: Sequence[NewEnvEntry]) -> list[EnvEntry]:
        """Append the entries at the end of the list in their order, in one transaction (all or
        none); the new entries, in that order.

        Raises:
            InvalidVariableError: one is refused (which one is named; SecretTooShortError,
                VariableTooLongError); nothing stored.
        """
        ...

    def update(self, entry_id: int, *, name: str | None = None, value: str | None = None,
               secret: bool | None = None, remarks: str | None = None,
               labels: Sequence[str] | None = None) -> EnvEntry:
        """Change the fields given (None: unchanged); ``labels`` replaces them."""
        ...

    def remove(self, ids: Sequence[int]) -> list[int]:
        """Remove the entries; their ids (never given to another entry)."""
        ...

    def remove_name(self, name: str) -> list[int]:
        """Remove every entry of ``name``; their ids. Raises VariableNotFoundError (none)."""
        ...

    def enable(self, ids: Sequence[int]) -> list[EnvEntry]: ...
    def disable(self, ids: Sequence[int]) -> list[EnvEntry]: ...
    def pin(self, ids: Sequence[int]) -> list[EnvEntry]: ...
    def unpin(self, ids: Sequence[int]) -> list[EnvEntry]: ...

    def rename(self, ids: Sequence[int], name: str) -> list[EnvEntry]: ...

    def move(self, entry_id: int, *, before: int | None) -> EnvEntry:
        """Move the entry just before ``before`` in the list (None: to its end)."""
        ...

    def set(self, name: str, value: str, *, secret: bool) -> EnvEntry:
        """Make ``value`` the one value of ``name`` (:func:`plan_set`), in one transaction."""
        ...

    def task_values(self) -> dict[str, str]:
        """Each name with its enabled entries' values joined: what an Attempt gets (the service only)."""
        ...

    def secret_values(self) -> list[str]:
        """What shown output masks (:func:`secret_values`)."""
        ...


class PlannedEntryChanges:
    """The env entries' changes of the port, each one of the plans above run by an adapter: the
    adapter gives ``_write(plan)`` (its one transaction: the entries it changed) and
    ``_apply(plan)`` (the changes and the ids of the inserted entries); what each change does is
    decided here, never in an adapter."""

    __slots__ = ()

    def _write(self, plan: Callable[[list[StoredEnvEntry], int], EnvChanges]) -> list[EnvEntry]:
        raise NotImplementedError

    def _apply(self, plan: Callable[[list[StoredEnvEntry], int], EnvChanges]) -> tuple[EnvChanges, list[int]]:
        raise NotImplementedError

    def add(self, entries: Sequence[NewEnvEntry]) -> list[EnvEntry]:
        return self._write(lambda current, now: plan_add(current, entries, now))

    def update(self, entry_id: int, *, name: str | None = None, value: str | None = None,
               secret: bool | None = None, remarks: str | None = None,
               labels: Sequence[str] | None = None) -> EnvEntry:
        return self._write(lambda current, now: plan_update(
            current, entry_id, now, name=name, value=value, secret=secret, remarks=remarks, labels=labels))[0]

    def remove(self, ids: Sequence[int]) -> list[int]:
        return list(self._apply(lambda current, _now: plan_remove(current, ids))[0].removals)

    def remove_name(self, name: str) -> list[int]:
        return list(self._apply(lambda current, _now: plan_remove_name(current, name))[0].removals)

    def enable(self, ids: Sequence[int]) -> list[EnvEntry]:
        return self._write(lambda current, now: plan_enable(current, ids, now, enabled=True))

    def disable(self, ids: Sequence[int]) -> list[EnvEntry]:
        return self._write(lambda current, now: plan_enable(current, ids, now, enabled=False))

    def pin(self, ids: Sequence[int]) -> list[EnvEntry]:
        return self._write(lambda current, now: plan_pin(current, ids, now, pinned=True))

    def unpin(self, ids: Sequence[int]) -> list[EnvEntry]:
        return self._write(lambda current, now: plan_pin(current, ids, now, pinned=False))

    def rename(self, ids: Sequence[int], name: str) -> list[EnvEntry]:
        return self._write(lambda current, now: plan_rename(current, ids, name, now))

    def move(self, entry_id: int, *, before: int | None) -> EnvEntry:
        return self._write(lambda current, now: plan_move(current, entry_id, before, now))[0]

    def set(self, name: str, value: str, *, secret: bool) -> EnvEntry:
        return self._write(lambda current, now: plan_set(current, name, value, now, secret=secret))[0]
