"""A session against a shared server works in a private database and drops it at the end
(cluster-profile.md §7), also when the session fails; one a killed session left is reaped."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from tests.support.pg_test_database import PREFIX, private_database, reap_orphans


def _databases(admin: Any) -> set[str]:
    return {name for (name,) in admin.execute("SELECT datname FROM pg_database").fetchall()}


@pytest.fixture
def admin(pg_database: Any) -> Any:
    with psycopg.connect(pg_database.admin_dsn, autocommit=True) as conn:
        yield conn


@pytest.mark.parametrize("ending", ["the session ends", "the session fails"])
def test_a_session_gets_a_private_migrated_database_and_drops_it_at_the_end(admin: Any, ending: str) -> None:
    session = private_database()
    database = next(session)
    assert database.name.startswith(f"{PREFIX}{os.getpid()}_") and database.name in _databases(admin)
    with database.owner_connection() as owner:
        applied = owner.execute("SELECT count(*) FROM ql3.schema_migrations").fetchone()[0]
    assert applied >= 1
    if ending == "the session ends":
        with pytest.raises(StopIteration):
            next(session)
    else:
        with pytest.raises(RuntimeError, match="a failing test session"):
            session.throw(RuntimeError("a failing test session"))
    assert database.name not in _databases(admin)


def test_a_database_a_killed_session_left_is_reaped_and_a_live_ones_is_kept(admin: Any) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_name, live_name = f"{PREFIX}{int(gone.stdout)}_0dead", f"{PREFIX}{os.getpid()}_0live"
    for name in (dead_name, live_name):
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        dropped = reap_orphans(admin)
        assert dead_name in dropped and live_name not in dropped
        present = _databases(admin)
        assert dead_name not in present and live_name in present
    finally:
        for name in (dead_name, live_name):
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
