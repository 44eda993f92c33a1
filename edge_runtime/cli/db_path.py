"""Where the database lives when ``--db`` is not given."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DB_ENV_VAR = "EDGE_RUNTIME_DB"
DB_FILE_NAME = "edge-runtime.db"


def default_db_path(env: Mapping[str, str] | None = None) -> Path:
    """``$EDGE_RUNTIME_DB``, else ``$XDG_STATE_HOME/edge-runtime/edge-runtime.db``,
    else ``~/.local/state/edge-runtime/edge-runtime.db``."""
    env = os.environ if env is None else env
    explicit = env.get(DB_ENV_VAR)
    if explicit:
        return Path(explicit)
    state_home = env.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(state_home).expanduser() / "edge-runtime" / DB_FILE_NAME


def ensure_parent(path: str) -> None:
    """Create the database's directory (private to the user) if it is missing."""
    Path(path).expanduser().parent.mkdir(mode=0o700, parents=True, exist_ok=True)
