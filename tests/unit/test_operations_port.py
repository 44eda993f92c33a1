"""The user operations (edge_runtime/operations.py), shared by the CLI, the panel and the QingLong
face, name the port they need at the seam: ``UserStore`` (contract/ports.py), a part of ``Store``."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from edge_runtime import operations
from edge_runtime.contract import ports, redaction


def _taking_a_store() -> dict[str, object]:
    return {name: function for name, function in vars(operations).items()
            if inspect.isfunction(function) and function.__module__ == operations.__name__
            and "store" in inspect.signature(function).parameters}


def test_every_operation_that_takes_a_store_names_the_user_store_port() -> None:
    taking = _taking_a_store()
    assert {"submit", "cancel", "read_log_chunk", "run_schedule_now"} <= set(taking)
    named = {name: function.__annotations__.get("store") for name, function in taking.items()}
    assert {name: kind for name, kind in named.items() if kind != "UserStore"} == {}


def test_the_port_names_everything_the_operations_use_of_a_store() -> None:
    # The operations, and the redactor they hand the store to (its secrets mask every output).
    used: set[str] = set()
    for source in (operations.__file__, redaction.__file__):
        tree = ast.parse(Path(source).read_text(encoding="utf-8"))
        used |= {node.attr for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "store"}
        used |= {node.args[1].value for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                 and isinstance(node.args[0], ast.Name) and node.args[0].id == "store"}
    members = set(ports.UserStore.__annotations__)
    members |= {name for name in vars(ports.UserStore) if not name.startswith("_")}
    assert {"runs", "wake_workers", "schedules", "environment"} <= used
    assert used - members == set()


def test_every_store_is_a_user_store() -> None:
    assert ports.UserStore in ports.Store.__mro__
