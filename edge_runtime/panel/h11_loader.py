"""h11 where the stdlib's ``dataclasses`` is left out (the built artifacts, build/excludes.toml).

h11 uses ``dataclasses`` for one thing: ``@dataclass(init=False, frozen=True)`` (and one
``@dataclass(frozen=True)`` without fields) on its event classes, which declare their own
``__slots__``, ``__init__`` (through ``object.__setattr__``) and ``__hash__``. ``dataclasses``
itself would bring ``inspect``, ``ast`` and ``dis`` into the artifact, about 78 KB of xz, more than
the router builds have to spare. So where it cannot be imported, :func:`load_h11` puts a stand-in
module whose ``dataclass`` gives exactly what those classes get from ``dataclass`` (field order,
``__repr__``, ``__eq__``, frozen ``__setattr__``/``__delattr__``, ``__hash__`` unless the class
sets one, an ``__init__`` for the one class without fields), in its place before h11 is imported (tests/panel/test_h11_loader.py and tests/artifact/test_exclusions.py compare the two).
Wherever ``dataclasses`` exists (a venv) it is used, untouched.
"""

from __future__ import annotations

import sys
import types
from typing import Any


FrozenInstanceError = type("FrozenInstanceError", (AttributeError,), {})  # as in dataclasses


def dataclass(cls: type | None = None, /, *, init: bool = True, frozen: bool = False, **_options: Any):
    """The subset of ``dataclasses.dataclass`` h11's event classes use."""

    def wrap(klass: type) -> type:
        names = tuple(n for k in reversed(klass.__mro__) for n in k.__dict__.get("__annotations__", ()))
        own = klass.__dict__

        def values(self: Any) -> tuple:
            return tuple(getattr(self, name) for name in names)

        if init and "__init__" not in own:  # h11's one such class has no fields
            klass.__init__ = lambda self: None
        klass.__repr__ = lambda self: f"{type(self).__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"
        klass.__eq__ = lambda self, other: values(self) == values(other) if other.__class__ is self.__class__ else NotImplemented
        if frozen:
            def refuse(self: Any, name: str, *value: Any) -> None:
                raise FrozenInstanceError(f"cannot assign to field {name!r}")
            klass.__setattr__ = klass.__delattr__ = refuse
        if "__hash__" not in own:
            klass.__hash__ = (lambda self: hash(values(self))) if frozen else None
        return klass

    return wrap if cls is None else wrap(cls)


def load_h11() -> types.ModuleType:
    """``h11``, imported with the real ``dataclasses`` when there is one, else with the stand-in."""
    try:
        import dataclasses  # noqa: F401  (a venv has it; the artifacts leave it out)
    except ImportError:
        stand_in = sys.modules["dataclasses"] = types.ModuleType("dataclasses", "h11_loader's stand-in")
        stand_in.dataclass, stand_in.FrozenInstanceError = dataclass, FrozenInstanceError
    import h11

    return h11
