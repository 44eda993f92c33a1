"""Hostile paths, second round: log paths named by the database, FIFOs beside it, files in the log
directory that are not this service's, and the default database of root's CLI. In-process through
the real CLI (``main``), the same code path as the executable."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from edge_runtime.cli.main import main
from edge_runtime.local.database import LocalDatabase
from edge_runtime.service.log_capture import log_paths
from tests.support.supervisor_rig import SupervisorRig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDGE_RUNTIME_CONFIG", raising=False)
    monkeypatch.delenv("EDGE_RUNTIME_LOG_DIR", raising=False)


def _cli(capsys: pytest.CaptureFixture[str], db_path: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--db", str(db_path), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _ended_run(db: LocalDatabase, tmp_path: Path) -> str:
    rig = SupervisorRig(db, tmp_path, slots=1)
    try:
        run_id = rig.submit("echo the-real-log")
        assert rig.run_until_ended(run_id) == "succeeded"
    finally:
        rig.close()
    return run_id


def _set_log_path(db_path: Path, run_id: str, log_path: str) -> None:
    connection = apsw.Connection(str(db_path))
    try:
        connection.execute("UPDATE run_attempts SET log_path = ? WHERE run_id = ?", (log_path, run_id))
    finally:
        connection.close()


# ------------------------------------------------------------------ log paths named by the database


def test_logs_prints_the_attempts_own_log(capsys, db: LocalDatabase, db_path: Path, tmp_path: Path) -> None:
    run_id = _ended_run(db, tmp_path)
    code, out, err = _cli(capsys, db_path, "logs", run_id)
    assert (code, err) == (0, "") and "the-real-log" in out


@pytest.mark.parametrize("target", ["secret", "/proc/self/environ", "/proc/self/mem", "other-attempt", "dotdot"])
def test_logs_refuses_a_log_path_that_is_not_the_attempts_log_in_the_log_dir(
        capsys, db: LocalDatabase, db_path: Path, tmp_path: Path, target: str) -> None:
    run_id = _ended_run(db, tmp_path)
    secret = tmp_path / "root-only"
    secret.write_text("SECRET-CONTENT\n")
    own_log = log_paths(tmp_path / "logs", _attempt_id(db_path, run_id))[0]
    hostile = {"secret": str(secret), "other-attempt": str(tmp_path / "logs" / "someone-else.log"),
               "dotdot": f"{tmp_path}/logs/../root-only"}.get(target, target)
    if target == "other-attempt":
        Path(hostile).write_text("SECRET-CONTENT\n")
    _set_log_path(db_path, run_id, hostile)
    code, out, err = _cli(capsys, db_path, "logs", run_id)
    assert code == 1 and out == "" and "Traceback" not in err
    assert err.startswith("Error: ") and err.rstrip().endswith("[LOG_PATH_REFUSED]") and err.count("\n") == 1, err
    assert str(own_log) in err  # names the only file it would read


def test_logs_opens_the_log_without_following_a_symlink_in_its_place(capsys, db: LocalDatabase, db_path: Path,
                                                                     tmp_path: Path) -> None:
    run_id = _ended_run(db, tmp_path)
    own_log = log_paths(tmp_path / "logs", _attempt_id(db_path, run_id))[0]
    secret = tmp_path / "root-only"
    secret.write_text("SECRET-CONTENT\n")
    own_log.unlink()
    own_log.symlink_to(secret)
    code, out, err = _cli(capsys, db_path, "logs", run_id)
    assert code == 1 and "SECRET" not in out and err.rstrip().endswith("[LOG_UNREADABLE]")


def _attempt_id(db_path: Path, run_id: str) -> str:
    connection = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return connection.execute("SELECT id FROM run_attempts WHERE run_id = ?", (run_id,)).fetchall()[-1][0]
    finally:
        connection.close()


# ------------------------------------------------------------------ FIFOs beside the database


def _cli_process(db_path: Path, *argv: str) -> "subprocess.CompletedProcess[str]":
    """The CLI in a child: a command that hangs on a FIFO fails the test by its timeout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_RUNTIME_")}
    return subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(db_path), *argv], capture_output=True,
                          text=True, timeout=60, env={**env, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("argv", [["list"], ["submit", "--", "true"], ["check"]])
def test_a_fifo_beside_the_database_is_refused_without_hanging(db: LocalDatabase, db_path: Path, suffix: str,
                                                                argv: list[str]) -> None:
    db.close()
    side = Path(f"{db_path}{suffix}")
    side.unlink(missing_ok=True)
    os.mkfifo(side, 0o600)
    result = _cli_process(db_path, *argv)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("Error: ") and f"{side} is not a regular file" in result.stderr, result.stderr
    assert stat.S_ISFIFO(os.lstat(side).st_mode)  # left as found


# ------------------------------------------------------------------ root's default database


def _owned_by_another_user(path: Path) -> Path:
    path.mkdir(mode=0o755, exist_ok=True)
    os.chown(path, 4242, 4242)
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
@pytest.mark.parametrize("argv", [["submit", "--", "true"], ["list"]])
def test_the_default_database_under_another_users_home_is_refused(tmp_path: Path, argv: list[str]) -> None:
    home = _owned_by_another_user(tmp_path / "home-of-4242")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EDGE_RUNTIME_", "XDG_"))}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "edge_runtime", *argv], capture_output=True, text=True,
                            timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("Error: refusing the database's directory") and "owned by uid 4242" in result.stderr
    assert not (home / ".local").exists()  # nothing created in that user's home


def test_a_relative_xdg_state_home_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_runtime.cli.db_path import default_db_path

    monkeypatch.setenv("HOME", str(tmp_path))  # what "~" expands to
    env = {"HOME": str(tmp_path), "XDG_STATE_HOME": "relative/state"}
    assert default_db_path(env) == str(tmp_path / ".local" / "state" / "edge-runtime" / "edge-runtime.db")
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    assert default_db_path(env) == str(tmp_path / "state" / "edge-runtime" / "edge-runtime.db")


@pytest.mark.parametrize("argv", [["submit", "--", "true"], ["migrate"], ["schedule", "add", "@daily", "--", "true"]])
def test_writing_commands_refuse_a_database_directory_others_can_write(capsys, tmp_path: Path, argv: list[str]) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    db_path = shared / "edge-runtime.db"
    code, out, err = _cli(capsys, db_path, *argv)
    assert code == 1 and out == "" and err.startswith("Error: refusing the database's directory"), err
    assert "writable by group or others" in err and not db_path.exists()


# ------------------------------------------------------------------ symlinks on a trusted path


@pytest.mark.skipif(os.geteuid() != 0, reason="a symlink owned by another user needs root")
def test_a_symlink_owned_by_another_user_on_the_path_is_refused(tmp_path: Path) -> None:
    from edge_runtime.service.trusted_paths import directory_problem

    trusted = tmp_path / "root-owned"
    trusted.mkdir(mode=0o700)
    link = tmp_path / "flippable"
    link.symlink_to(trusted)
    assert directory_problem(link) is None  # root's own symlink to a trusted directory is fine
    os.lchown(link, 4242, 4242)  # now its owner can point it at their own directory at any time
    problem = directory_problem(link / ".")
    assert problem is not None and f"{link} is a symlink owned by uid 4242" in problem
    assert directory_problem(trusted) is None


def test_serve_refuses_a_database_swapped_between_the_check_and_the_open(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_runtime.cli import serve
    from edge_runtime.local import store as local_store
    from edge_runtime.local.clock import ManualClock
    from edge_runtime.local.database import open_database
    from edge_runtime.service.config import load_config
    from edge_runtime.service.trusted_paths import UntrustedDirectoryError

    db_path = tmp_path / "edge-runtime.db"
    other = tmp_path / "planted.db"
    for path in (db_path, other):
        open_database(path, clock=ManualClock(1_700_000_000_000)).close()
    real_opener = local_store.local_store_opener

    def swapping_opener(path, **kwargs):
        open_real = real_opener(path, **kwargs)

        def open_swapped():
            os.replace(other, db_path)  # what a symlink flip does between the check and apsw's open
            return open_real()
        return open_swapped

    monkeypatch.setattr(local_store, "local_store_opener", swapping_opener)
    service = serve.build_service(str(db_path), load_config(env={}))
    with pytest.raises(UntrustedDirectoryError, match="the file opened is not the one whose directory was checked"):
        service._open_store()


# ------------------------------------------------------------------ a symlink flipped while checked

#: Checks (then opens) made while the attacker flips: a check that looks at the name more than
#: once passed and opened their database 1 to 4 times in 5000 tries (5 runs of 5).
TRIES = 10_000


def test_serve_never_opens_the_database_of_a_user_who_flips_a_symlink_on_its_path() -> None:
    """The attacker's name is, at each instant, their own directory or their symlink to root's:
    a check that looks at it more than once (lstat, then stat, then the open by name) can see
    the directory, then the symlink, then the directory again, and root serves their database."""
    from edge_runtime.cli import serve
    from edge_runtime.local.clock import ManualClock
    from edge_runtime.local.database import open_database
    from edge_runtime.service.config import load_config
    from edge_runtime.contract.errors import EdgeRuntimeError
    from edge_runtime.service.trusted_paths import UntrustedDirectoryError
    from tests.support.symlink_flipper import ATTACKER_UID, flip_scene, flipping

    with flip_scene() as scene:
        for directory in (scene.good, scene.evil()):
            open_database(directory / "edge-runtime.db", clock=ManualClock(1_700_000_000_000)).close()
        planted = scene.evil() / "edge-runtime.db"
        os.chown(planted, ATTACKER_UID, ATTACKER_UID)
        evil_db = os.stat(planted)
        service = serve.build_service(str(scene.flipped / "edge-runtime.db"), load_config(env={}))
        served_evil = refused = 0
        with flipping(scene):
            for _ in range(TRIES):
                try:
                    store = service._open_store()
                except (EdgeRuntimeError, OSError):  # refused (or a check that tripped over the flip itself)
                    refused += 1
                    continue
                try:
                    held = {os.stat(f"/proc/self/fd/{fd}")[1:3] for fd in os.listdir("/proc/self/fd")
                            if os.path.exists(f"/proc/self/fd/{fd}")}
                    served_evil += (evil_db.st_ino, evil_db.st_dev) in held
                finally:
                    store.close()
        assert served_evil == 0, f"root served the attacker's database {served_evil} times of {TRIES}"
        # Either way the name is the attacker's (their directory or their symlink): never trusted.
        assert refused == TRIES
        with pytest.raises(UntrustedDirectoryError, match=r"sticky/x is (a symlink )?owned by uid 65534"):
            service._open_store()  # and says why, naming the attacker's entry


def test_a_write_command_refuses_a_database_swapped_between_the_check_and_the_open(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_runtime.local import database
    from edge_runtime.local.clock import ManualClock

    db_path = tmp_path / "edge-runtime.db"
    other = tmp_path / "planted.db"
    for path in (db_path, other):
        database.open_database(path, clock=ManualClock(1_700_000_000_000)).close()
    real_open = database.open_database

    def swapping_open(path, **kwargs):
        os.replace(other, db_path)  # what a symlink flip does between the check and apsw's open
        return real_open(path, **kwargs)

    monkeypatch.setattr(database, "open_database", swapping_open)
    code, out, err = _cli(capsys, db_path, "submit", "--", "true")
    assert (code, out) == (1, "") and "the file opened is not the one whose directory was checked" in err, err
