"""Where the database lives when ``--db`` is not given."""

from __future__ import annotations

import os

from edge_runtime.contract.errors import EdgeRuntimeError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the submit hand-off stays lean)
if TYPE_CHECKING:
    from collections.abc import Mapping

DB_ENV_VAR = "EDGE_RUNTIME_DB"
DB_FILE_NAME = "edge-runtime.db"
#: Where the database lives when neither ``$EDGE_RUNTIME_DB`` nor ``$XDG_STATE_HOME`` is set.
DEFAULT_STATE_HOME = "~/.local/state"


class DatabasePathError(EdgeRuntimeError, code="DB_PATH_UNKNOWN"):
    """No database path was given and none can be derived (no home directory)."""


def default_db_path(env: Mapping[str, str] | None = None) -> str:
    """``$EDGE_RUNTIME_DB``, else ``$XDG_STATE_HOME/edge-runtime/edge-runtime.db``,
    else ``~/.local/state/edge-runtime/edge-runtime.db``."""
    env = os.environ if env is None else env
    explicit = env.get(DB_ENV_VAR)
    if explicit:
        return explicit
    state_home = env.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(state_home):  # the XDG spec: a relative path is invalid and is ignored
        state_home = DEFAULT_STATE_HOME
    return os.path.join(_expanded(state_home), "edge-runtime", DB_FILE_NAME)


def _expanded(path: str) -> str:
    # A service started by procd or cron may have no $HOME and a uid with no passwd entry:
    # ``~`` then stays as it is, which must become a clear error, not a directory named ``~``.
    expanded = os.path.expanduser(path)
    if expanded.startswith("~"):
        raise DatabasePathError(
            f"cannot expand {path!r}: $HOME is not set and the user has no home directory; "
            f"give --db PATH or set ${DB_ENV_VAR}"
        )
    return expanded


def ensure_parent(path: str) -> None:
    """Create the database's directory (private to the user) if it is missing."""
    os.makedirs(os.path.dirname(os.path.abspath(_expanded(path))), mode=0o700, exist_ok=True)


def require_trusted_database_directory(path: str) -> None:
    """Refuse a database whose directory (or, when it does not exist yet, its nearest existing
    ancestor) another user can change: the check ``serve`` applies, for every command that
    writes and for a default path (``$HOME`` and ``$XDG_STATE_HOME`` come from the environment,
    which ``sudo -E`` passes to root unchanged).

    Raises:
        UntrustedDirectoryError: the directory or one above it belongs to someone other than this
            user or root, or can be written by group or others.
    """
    from edge_runtime.service.trusted_paths import require_trusted_directory

    directory = os.path.dirname(os.path.abspath(_expanded(path)))
    while not os.path.exists(directory) and directory != os.path.dirname(directory):
        directory = os.path.dirname(directory)
    require_trusted_directory(directory, "database's directory")
