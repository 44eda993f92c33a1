"""The start sequence's Local-only cases (each Run once): a commit that fails (an injected apsw error)
rolls ``start_run`` and ``abandon_start`` back whole. Every other start-sequence rule runs on each
adapter in tests/conformance/test_conformance_run_start.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

from edge_runtime.contract.runs import SubmitRunCommand
from edge_runtime.contract.worker_lease import WorkerLeaseRepositoryError
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
from edge_runtime.service.worker import RunGrant, WorkerSession

RUN_LEASE_MS = 60_000
SESSION_LEASE_MS = 120_000


def session(db: LocalDatabase, worker_id: str = "w", slots: int = 2) -> WorkerSession:
    worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id=worker_id, slots=slots, session_lease_ms=SESSION_LEASE_MS,
                           run_lease_ms=RUN_LEASE_MS)
    worker.register()
    return worker


def state(db: LocalDatabase) -> tuple[Any, ...]:
    """Everything the start sequence may write."""
    c = db.connection
    return tuple(
        c.execute(sql).fetchall()
        for sql in (
            "SELECT id, status, version, event_sequence FROM runs ORDER BY id",
            "SELECT id, status FROM run_attempts ORDER BY id",
            "SELECT id FROM run_events ORDER BY id",
            "SELECT attempt_id, status, version FROM run_dispatch_leases ORDER BY attempt_id",
        )
    )


@pytest.fixture
def runs(db: LocalDatabase) -> LocalRunRepository:
    return LocalRunRepository(db)


def submit(runs: LocalRunRepository) -> str:
    return runs.submit(SubmitRunCommand(argv=["true"])).id


@pytest.mark.parametrize("error", [apsw.BusyError, apsw.IOError, apsw.FullError], ids=["busy", "io", "full"])
def test_a_failed_start_transaction_leaves_the_run_queued(
    db: LocalDatabase, runs: LocalRunRepository, fail_next_commit: Any, error: type[BaseException]
) -> None:
    worker = session(db)
    run_id = submit(runs)
    before = state(db)
    fail_next_commit(error)
    with pytest.raises(WorkerLeaseRepositoryError):
        worker.start(run_id)
    assert state(db) == before
    assert isinstance(worker.start(run_id), RunGrant)  # the next pass takes it


@pytest.mark.parametrize("error", [apsw.BusyError, apsw.IOError, apsw.FullError], ids=["busy", "io", "full"])
def test_a_failed_abandon_changes_nothing_and_can_be_retried(
    db: LocalDatabase, runs: LocalRunRepository, fail_next_commit: Any, error: type[BaseException]
) -> None:
    worker = session(db)
    run_id = submit(runs)
    grant = worker.start(run_id)
    before = state(db)
    fail_next_commit(error)
    with pytest.raises(WorkerLeaseRepositoryError):
        worker.abandon_start(grant, "x")
    assert state(db) == before
    assert worker.abandon_start(grant, "x").value == "queued"


def _functions_containing(predicate: Any) -> set[str]:
    """``module:Class.function`` of every function in edge_runtime/ whose own body (not a nested
    function's) has a node for which ``predicate`` holds."""
    import ast
    from pathlib import Path

    import edge_runtime

    root = Path(edge_runtime.__file__).parent
    found = set()
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).with_suffix("").as_posix().replace("/", ".")

        def visit(node: ast.AST, scope: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    visit(child, f"{scope}.{child.name}" if scope else child.name)
                    continue
                if predicate(child):
                    found.add(f"{module}:{scope}")
                visit(child, scope)

        visit(ast.parse(path.read_text()), "")
    return found


def test_only_the_fenced_start_creates_an_attempt() -> None:
    """The start sequence: "taking work is fenced": no public operation of the runtime creates an Attempt
    but ``start_run``, which checks the caller's session (generation and version) in the same
    transaction (a fenced-out caller writes nothing: tests/conformance/test_conformance_run_start.py)."""
    import ast

    inserts = _functions_containing(
        lambda n: isinstance(n, ast.Constant) and isinstance(n.value, str) and "INSERT INTO run_attempts" in n.value)
    assert inserts == {"local.run_start:_insert_attempt"}
    callers = _functions_containing(
        lambda n: isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "_insert_attempt")
    assert callers == {"local.run_start:RunStarts.start_run"}
    assert not hasattr(LocalRunRepository, "create_attempt")
    cluster_runs = Path(__file__).resolve().parents[2] / "cluster" / "cluster_postgres" / "runs.py"
    assert "def create_attempt" not in cluster_runs.read_text(encoding="utf-8")  # nor the PostgreSQL one
