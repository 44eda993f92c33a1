"""A service started by procd or cron may have no $HOME and run as a uid with no passwd entry:
the CLI must still start, and a command that needs the default database path must say why there
is none instead of crashing in ``expanduser``. (build/cross/qemu-test.sh runs the built binary
that way too: in the musl root, which has no /etc/passwd, with an empty environment.)"""

from __future__ import annotations

import pwd

import pytest

from edge_runtime.cli.db_path import DatabasePathError, default_db_path
from edge_runtime.cli.main import main


def _no_home(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HOME", "XDG_STATE_HOME", "EDGE_RUNTIME_DB"):
        monkeypatch.delenv(name, raising=False)

    def unknown_uid(uid: int):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", unknown_uid)


def test_default_path_without_home_is_a_clear_error(monkeypatch) -> None:
    _no_home(monkeypatch)
    with pytest.raises(DatabasePathError, match=r"\$HOME is not set.*--db PATH") as caught:
        default_db_path()
    assert caught.value.code == "DB_PATH_UNKNOWN"


def test_cli_without_home_names_the_fix_and_an_explicit_db_works(monkeypatch, capsys, tmp_path) -> None:
    _no_home(monkeypatch)
    assert main(["list"]) == 1
    assert capsys.readouterr().err.startswith("Error: cannot expand '~/.local/state'")
    assert main(["--db", str(tmp_path / "x.db"), "migrate"]) == 0
    monkeypatch.setenv("EDGE_RUNTIME_DB", str(tmp_path / "y.db"))
    assert main(["migrate"]) == 0
    assert (tmp_path / "y.db").exists()
