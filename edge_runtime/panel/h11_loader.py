"""h11 where the stdlib's ``dataclasses`` is left out (the built artifacts, build/excludes.toml).

h11 uses ``dataclasses`` for one thing: ``@dataclass(init=False, frozen=True)`` (and one
``@dataclass(frozen=True)`` without fields) on its event classes, which declare their own
``__slots__``, ``__init__`` (through ``object.__setattr__``) and ``__hash__``. ``dataclasses``
itself would bring ``inspect``, ``ast`` and ``dis`` into the artifact, about 78 KB of xz, more than
the router builds have to spare. So where it cannot be imported, :func:`load_h11` puts
:data:`frozen_records`, which gives exactly what those classes get from ``dataclass`` (field order,
``__repr__``, ``__eq__``, frozen ``__setattr__``/``__delattr__``, ``__hash__`` unless the class
sets one, ``__match_args__``, a plain ``__init__`` where ``init`` is true and the class has
none), in its place before h11 is imported (tests/panel/test_h11_loader.py compares the two).
Wherever ``dataclasses`` exists (a venv) it is used, untouched.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class FrozenInstanceError(AttributeError):
    """Assigning to a field of a frozen record (as ``dataclasses.FrozenInstanceError``)."""


def _fields(cls: type) -> tuple[str, ...]:
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        for name in klass.__dict__.get("__annotations__", {}):
            if name not in names:
                names.append(name)
    return tuple(names)


def dataclass(cls: type | None = None, /, *, init: bool = True, repr: bool = True, eq: bool = True,
              frozen: bool = False, **_options: Any):
    """The subset of ``dataclasses.dataclass`` h11's event classes use."""

    def wrap(klass: type) -> type:
        names = _fields(klass)
        own = klass.__dict__

        def values(self: Any) -> tuple:
            return tuple(getattr(self, name) for name in names)

        if init and "__init__" not in own:
            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
                if len(args) > len(names) or set(kwargs) - set(names[len(args):]):
                    raise TypeError(f"{klass.__name__}() takes the fields {names}")
                for name, value in (*zip(names, args), *kwargs.items()):
                    object.__setattr__(self, name, value)
            klass.__init__ = __init__
        if repr and "__repr__" not in own:
            klass.__repr__ = lambda self: (f"{type(self).__qualname__}("
                                           + ", ".join(f"{n}={getattr(self, n)!r}" for n in names) + ")")
        if eq and "__eq__" not in own:
            klass.__eq__ = lambda self, other: (values(self) == values(other) if other.__class__ is self.__class__
                                                else NotImplemented)
        if frozen:
            def refuse(self: Any, name: str, *value: Any) -> None:
                raise FrozenInstanceError(f"cannot assign to field {name!r}")
            klass.__setattr__ = refuse
            klass.__delattr__ = refuse
        if "__hash__" not in own and eq:
            klass.__hash__ = (lambda self: hash(values(self))) if frozen else None
        klass.__match_args__ = names
        return klass

    return wrap if cls is None else wrap(cls)


def frozen_records() -> types.ModuleType:
    """A module standing in for ``dataclasses`` with :func:`dataclass` and its error."""
    module = types.ModuleType("dataclasses", "edge_runtime.panel.h11_loader's stand-in (see its docstring)")
    module.dataclass = dataclass
    module.FrozenInstanceError = FrozenInstanceError
    return module


def load_h11() -> types.ModuleType:
    """``h11``, imported with the real ``dataclasses`` when there is one, else with the stand-in."""
    try:
        import dataclasses  # noqa: F401  (a venv has it; the artifacts leave it out)
    except ImportError:
        sys.modules["dataclasses"] = frozen_records()
    import h11

    return h11
