"""Every contract Struct stays out of the cyclic garbage collector (see edge_runtime/contract/__init__.py)."""

from __future__ import annotations

import gc
import importlib
import pkgutil

import msgspec

import edge_runtime.contract as contract_package


def _contract_structs() -> list[type[msgspec.Struct]]:
    found = []
    for info in pkgutil.iter_modules(contract_package.__path__):
        module = importlib.import_module(f"edge_runtime.contract.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, msgspec.Struct) and value.__module__ == module.__name__:
                found.append(value)
    return found


def test_every_contract_struct_is_declared_gc_false() -> None:
    structs = _contract_structs()
    assert len(structs) > 20  # the discovery itself works
    tracked = [s.__qualname__ for s in structs if s.__struct_config__.gc]
    assert tracked == []


def test_instances_are_really_untracked() -> None:
    from edge_runtime.contract.cancellation_dispatch import ClaimCommand, DispatchRecord, DispatchStatus
    from edge_runtime.contract.run_events import RunEvent

    record = DispatchRecord(run_id="r", attempt_id="a", status=DispatchStatus.PENDING, version=0, dispatch_count=0,
                            next_attempt_at_ms=1, created_at_ms=1, updated_at_ms=1)
    event = RunEvent(id="e", run_id="r", sequence=1, type="t", dedupe_key="d", actor_type="worker", actor_id="w",
                     payload={"k": 1}, created_at_ms=1)
    assert not any(gc.is_tracked(x) for x in (ClaimCommand("r", "a", 1, "o", "t", 5), record, event))
