"""Every command that takes ``--json`` prints JSON, for success and for errors.

The commands are found by walking the CLI's parser, so a command added later with ``--json`` and
no entry in the tables below fails ``test_the_tables_cover_every_command_with_json``: it cannot
forget. For each: success prints JSON on stdout (exit 0; ``check`` exits 1 when not ready, its
report still JSON); a runtime error is one JSON object on stderr, ``{"error": {"code",
"message"}}``, exit 1, nothing on stdout; bad usage is the same object with code ``USAGE``, exit 2.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.cli.main import main
from edge_runtime.cli.reporting import USAGE_ERROR_CODE
from edge_runtime.cli.parser import build_parser


def json_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The command paths (``("schedule", "show")``) whose parser takes ``--json``."""
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not nested:
        return [path] if any("--json" in a.option_strings for a in parser._actions) else []
    return [found for action in nested for name, child in action.choices.items()
            for found in json_commands(child, (*path, name))]


class World:
    """One database with something for every command to act on."""

    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        (tmp_path / "state").mkdir(mode=0o700)
        self.db = str(tmp_path / "state" / "e.db")
        self.run = self.out("submit", "--", "true")
        self.to_cancel = self.out("submit", "--", "sleep", "9")
        self.schedule = self.out("schedule", "add", "@daily", "--", "true")
        self.out("env", "set", "PLAIN", "x")  # entry 1
        self.out("env", "add", "PLAIN", "y")  # entry 2
        self.out("panel", "app", "add", "world-app", "--scopes", "crons")
        self.blocked = self.out("submit", "--", "sleep", "9")
        from edge_runtime.local.database import open_database
        from tests.support.unfenced_attempts import take_queued_run

        with open_database(self.db) as db:
            attempt = take_queued_run(db, self.blocked, actor_id="t")
            db.connection.execute(
                "INSERT INTO run_cancellation_dispatches (run_id, attempt_id, status, version, dispatch_count, "
                "last_result, created_at_ms, updated_at_ms) VALUES (?, ?, 'blocked', 3, 2, 'identity_mismatch', 0, 0)",
                (self.blocked, attempt.id))
        self.bad_db = str(tmp_path / "a-file")
        Path(self.bad_db).write_text("")
        self.log_dir = tmp_path / "logs"
        self.logged = self._ended_with_a_log()
        self.tmp = tmp_path

    def _ended_with_a_log(self) -> str:
        """A Run whose one Attempt printed ``hi`` into its log in ``log_dir``."""
        from edge_runtime.contract.runs import AttemptStatus, ProcessIdentity
        from edge_runtime.local.database import open_database
        from edge_runtime.local.runs import LocalRunRepository
        from edge_runtime.local.worker_lease import LocalWorkerLeaseRepository
        from edge_runtime.service.process_identity import read_boot_id
        from edge_runtime.service.worker import WorkerSession

        run_id = self.out("submit", "--", "echo", "hi")
        self.log_dir.mkdir(mode=0o700)
        with open_database(self.db) as db:
            worker = WorkerSession(LocalWorkerLeaseRepository(db), worker_id="w", slots=1, session_lease_ms=60_000,
                                   run_lease_ms=60_000)
            worker.register()
            attempt_id = worker.start(run_id).lease.attempt_id
            log = self.log_dir / f"{attempt_id}.log"
            log.write_text("hi\n")
            runs = LocalRunRepository(db)
            runs.record_running(attempt_id, ProcessIdentity(4242, 4242, 777, read_boot_id()), log_path=str(log),
                                actor_id=worker.owner)
            runs.finish_attempt(attempt_id, AttemptStatus.SUCCEEDED, actor_id=worker.owner, exit_code=0)
            worker.complete(attempt_id)
        return run_id

    def qinglong_data(self) -> str:
        """A QingLong data folder (made when a command needs one)."""
        from tests.support.qinglong_fixtures import make_data_folder

        return str(make_data_folder(self.tmp / "ql"))

    def scripts(self) -> str:
        """A folder with one script whose header asks for a schedule."""
        folder = self.tmp / "scripts"
        folder.mkdir(exist_ok=True)
        (folder / "a.js").write_text("// 0 9 * * * a.js\nconst $ = new Env('甲');\n")
        return str(folder)

    def repository(self) -> str:
        """A git repository (``file://``) with one scheduled script."""
        from tests.support.git_sources import Repo

        repo = Repo(self.tmp / "repo")
        repo.commit({"a.js": "// 0 9 * * * a.js\n"})
        return repo.url

    def subscription(self) -> str:
        """A subscription of :meth:`repository`'s repository."""
        return self.out("subscription", "add", self.repository(), "--folder", "repo")

    def channel(self) -> str:
        """A webhook channel whose URL is a receiver on 127.0.0.1 (a test message gets through)."""
        from tests.support.notify_receiver import Receiver

        self.receiver = Receiver("webhook").__enter__()
        self.out("notify", "channel", "add", "webhook", "--name", "hook", "--secret-param",
                 f"url={self.receiver.url}/hook")
        return "hook"

    def cli(self, *argv: str, db: str | None = None) -> tuple[int, str, str]:
        try:
            code = main(["--db", db or self.db, *argv])
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code
        out, err = self.capsys.readouterr()
        return code, out, err

    def out(self, *argv: str) -> str:
        code, out, err = self.cli(*argv)
        assert code == 0, (argv, err)
        return out.strip()


Argv = Callable[[World], list[str]]
#: A successful call of each command with --json.
SUCCESS: dict[tuple[str, ...], Argv] = {
    ("submit",): lambda w: ["submit", "--json", "--env", "A=1", "--", "true"],
    ("cancel",): lambda w: ["cancel", w.to_cancel, "--json"],
    ("show",): lambda w: ["show", w.run, "--json"],
    ("list",): lambda w: ["list", "--json"],
    ("events",): lambda w: ["events", w.run, "--json"],
    ("logs",): lambda w: ["logs", w.logged, "--json", "--log-dir", str(w.log_dir)],
    ("dispatch", "show"): lambda w: ["dispatch", "show", w.blocked, "--json"],
    ("dispatch", "rearm"): lambda w: ["dispatch", "rearm", w.blocked, "--expected-version", "3", "--json"],
    ("env", "set"): lambda w: ["env", "set", "TOKEN", "abcdef-long", "--secret", "--json"],
    ("env", "list"): lambda w: ["env", "list", "--json"],
    ("env", "remove"): lambda w: ["env", "remove", "PLAIN", "--json"],
    ("env", "add"): lambda w: ["env", "add", "TOKEN", "abcdef-long", "--secret", "--remarks", "r", "--json"],
    ("env", "edit"): lambda w: ["env", "edit", "1", "--remarks", "r", "--json"],
    ("env", "enable"): lambda w: ["env", "enable", "1", "2", "--json"],
    ("env", "disable"): lambda w: ["env", "disable", "2", "--json"],
    ("env", "pin"): lambda w: ["env", "pin", "2", "--json"],
    ("env", "unpin"): lambda w: ["env", "unpin", "2", "--json"],
    ("env", "move"): lambda w: ["env", "move", "2", "--before", "1", "--json"],
    ("schedule", "add"): lambda w: ["schedule", "add", "@hourly", "--json", "--", "true"],
    ("schedule", "edit"): lambda w: ["schedule", "edit", w.schedule, "--name", "n", "--json"],
    ("schedule", "run"): lambda w: ["schedule", "run", w.schedule, "--json"],
    ("schedule", "list"): lambda w: ["schedule", "list", "--json"],
    ("schedule", "show"): lambda w: ["schedule", "show", w.schedule, "--json"],
    ("schedule", "pause"): lambda w: ["schedule", "pause", w.schedule, "--json"],
    ("schedule", "resume"): lambda w: ["schedule", "resume", w.schedule, "--json"],
    ("schedule", "remove"): lambda w: ["schedule", "remove", w.schedule, "--json"],
    ("check",): lambda w: ["check", "--json"],
    ("import", "qinglong"): lambda w: ["import", "qinglong", w.qinglong_data(), "--dry-run", "--json"],
    ("scripts", "scan"): lambda w: ["scripts", "scan", w.scripts(), "--add", "--json"],
    ("panel", "app", "add"): lambda w: ["panel", "app", "add", "another", "--scopes", "envs", "--json"],
    ("panel", "app", "list"): lambda w: ["panel", "app", "list", "--json"],
    ("panel", "app", "remove"): lambda w: ["panel", "app", "remove", "world-app", "--json"],
    ("subscription", "add"): lambda w: ["subscription", "add", w.repository(), "--json"],
    ("subscription", "list"): lambda w: ["subscription", "list", "--json"],
    ("subscription", "run"): lambda w: ["subscription", "run", w.subscription(), "--json"],
    ("subscription", "pause"): lambda w: ["subscription", "pause", w.subscription(), "--json"],
    ("subscription", "resume"): lambda w: ["subscription", "resume", w.subscription(), "--json"],
    ("subscription", "remove"): lambda w: ["subscription", "remove", w.subscription(), "--purge", "--json"],
    ("subscription", "pull"): lambda w: ["subscription", "pull", w.subscription(), "--json"],
    ("notify", "channel", "add"): lambda w: ["notify", "channel", "add", "ntfy", "--name", "n",
                                             "--secret-param", "topic=abcdef-long", "--json"],
    ("notify", "channel", "list"): lambda w: ["notify", "channel", "list", "--json"],
    ("notify", "channel", "remove"): lambda w: ["notify", "channel", "remove", w.channel(), "--json"],
    ("notify", "channel", "test"): lambda w: ["notify", "channel", "test", w.channel(), "--json"],
    ("notify", "list"): lambda w: ["notify", "list", "--json"],
    ("notify", "send"): lambda w: ["notify", "send", "title", "body", "--channel", w.channel(), "--json"],
    ("notify", "default"): lambda w: ["notify", "default", w.channel(), "--json"],
}
#: A call of each command with --json that fails at run time (exit 1), and the code it must carry
#: (None: any, for the commands with no input of their own to get wrong: their database is a file
#: that is not one).
ERRORS: dict[tuple[str, ...], tuple[Argv, str | None]] = {
    ("submit",): (lambda w: ["submit", "--json", "--name", "a\x01b", "--", "true"], "INVALID_NAME"),
    ("cancel",): (lambda w: ["cancel", "zzzz", "--json"], "RUN_NOT_FOUND"),
    ("show",): (lambda w: ["show", "zzzz", "--json"], "RUN_NOT_FOUND"),
    ("list",): (lambda w: ["--db", w.bad_db, "list", "--json"], None),
    ("events",): (lambda w: ["events", "zzzz", "--json"], "RUN_NOT_FOUND"),
    ("logs",): (lambda w: ["logs", w.run, "--json"], "COMMAND_NOT_STARTED"),
    ("dispatch", "show"): (lambda w: ["dispatch", "show", "zzzz", "--json"], "RUN_NOT_FOUND"),
    ("dispatch", "rearm"): (lambda w: ["dispatch", "rearm", w.blocked, "--expected-version", "2", "--json"],
                            "CANCELLATION_DISPATCH_FENCE_REJECTED"),
    ("env", "set"): (lambda w: ["env", "set", "1BAD", "x", "--json"], "INVALID_VARIABLE"),
    ("env", "list"): (lambda w: ["--db", w.bad_db, "env", "list", "--json"], None),
    ("env", "remove"): (lambda w: ["env", "remove", "NONE_SUCH", "--json"], "VARIABLE_NOT_FOUND"),
    ("env", "add"): (lambda w: ["env", "add", "TOKEN", "short", "--secret", "--json"], "SECRET_TOO_SHORT"),
    ("env", "edit"): (lambda w: ["env", "edit", "9", "--remarks", "r", "--json"], "ENV_ENTRY_NOT_FOUND"),
    ("env", "enable"): (lambda w: ["env", "enable", "1", "9", "--json"], "ENV_ENTRY_NOT_FOUND"),
    ("env", "disable"): (lambda w: ["env", "disable", "9", "--json"], "ENV_ENTRY_NOT_FOUND"),
    ("env", "pin"): (lambda w: ["env", "pin", "9", "--json"], "ENV_ENTRY_NOT_FOUND"),
    ("env", "unpin"): (lambda w: ["env", "unpin", "9", "--json"], "ENV_ENTRY_NOT_FOUND"),
    ("env", "move"): (lambda w: ["env", "move", "1", "--before", "9", "--json"], "ENV_ENTRY_NOT_FOUND"),
    ("schedule", "add"): (lambda w: ["schedule", "add", "*", "--json", "--", "true"], "INVALID_CRON_EXPRESSION"),
    ("schedule", "edit"): (lambda w: ["schedule", "edit", "none-such", "--name", "n", "--json"], "SCHEDULE_NOT_FOUND"),
    ("schedule", "run"): (lambda w: ["schedule", "run", "none-such", "--json"], "SCHEDULE_NOT_FOUND"),
    ("schedule", "list"): (lambda w: ["--db", w.bad_db, "schedule", "list", "--json"], None),
    ("schedule", "show"): (lambda w: ["schedule", "show", "none-such", "--json"], "SCHEDULE_NOT_FOUND"),
    ("schedule", "pause"): (lambda w: ["schedule", "pause", "none-such", "--json"], "SCHEDULE_NOT_FOUND"),
    ("schedule", "resume"): (lambda w: ["schedule", "resume", "none-such", "--json"], "SCHEDULE_NOT_FOUND"),
    ("schedule", "remove"): (lambda w: ["schedule", "remove", "none-such", "--json"], "SCHEDULE_NOT_FOUND"),
    ("check",): (lambda w: ["--db", w.bad_db, "check", "--json"], None),
    ("import", "qinglong"): (lambda w: ["import", "qinglong", str(w.tmp / "none-such"), "--json"],
                             "QINGLONG_SOURCE_REFUSED"),
    ("scripts", "scan"): (lambda w: ["scripts", "scan", str(w.tmp / "none-such"), "--json"], "QINGLONG_SOURCE_REFUSED"),
    ("panel", "app", "add"): (lambda w: ["panel", "app", "add", "x", "--scopes", "scripts", "--json"], "INVALID_PANEL_APP"),
    ("panel", "app", "list"): (lambda w: ["--db", w.bad_db, "panel", "app", "list", "--json"], None),
    ("panel", "app", "remove"): (lambda w: ["panel", "app", "remove", "none-such", "--json"], "PANEL_APP_NOT_FOUND"),
    ("subscription", "add"): (lambda w: ["subscription", "add", "ssh://git@x/y.git", "--json"], "INVALID_SUBSCRIPTION"),
    ("subscription", "list"): (lambda w: ["--db", w.bad_db, "subscription", "list", "--json"], None),
    ("subscription", "run"): (lambda w: ["subscription", "run", "none-such", "--json"], "SUBSCRIPTION_NOT_FOUND"),
    ("subscription", "pause"): (lambda w: ["subscription", "pause", "none-such", "--json"], "SUBSCRIPTION_NOT_FOUND"),
    ("subscription", "resume"): (lambda w: ["subscription", "resume", "none-such", "--json"],
                                 "SUBSCRIPTION_NOT_FOUND"),
    ("subscription", "remove"): (lambda w: ["subscription", "remove", "none-such", "--json"],
                                 "SUBSCRIPTION_NOT_FOUND"),
    ("subscription", "pull"): (lambda w: ["subscription", "pull", "none-such", "--json"], "SUBSCRIPTION_NOT_FOUND"),
    ("notify", "channel", "add"): (lambda w: ["notify", "channel", "add", "pager", "--name", "p", "--json"],
                                   "NOTIFY_INVALID_CHANNEL"),
    ("notify", "channel", "list"): (lambda w: ["--db", w.bad_db, "notify", "channel", "list", "--json"], None),
    ("notify", "channel", "remove"): (lambda w: ["notify", "channel", "remove", "none-such", "--json"],
                                      "NOTIFY_CHANNEL_NOT_FOUND"),
    ("notify", "channel", "test"): (lambda w: ["notify", "channel", "test", "none-such", "--json"],
                                    "NOTIFY_CHANNEL_NOT_FOUND"),
    ("notify", "list"): (lambda w: ["--db", w.bad_db, "notify", "list", "--json"], None),
    ("notify", "send"): (lambda w: ["notify", "send", "t", "b", "--channel", "none-such", "--json"],
                         "NOTIFY_CHANNEL_NOT_FOUND"),
    ("notify", "default"): (lambda w: ["notify", "default", "none-such:on=failed", "--json"],
                            "NOTIFY_CHANNEL_NOT_FOUND"),
}


@pytest.fixture
def world(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> World:
    return World(tmp_path, capsys)


def _one_json_error(err: str) -> dict[str, Any]:
    assert err.endswith("\n") and err.count("\n") == 1, err
    error = json.loads(err)
    assert list(error) == ["error"] and set(error["error"]) == {"code", "message"}, error
    assert all(isinstance(v, str) and v for v in error["error"].values()), error
    return error["error"]


def test_the_tables_cover_every_command_with_json() -> None:
    found = set(json_commands(build_parser()))
    assert len(found) >= 19  # the walk found the commands (a broken walk would find none)
    assert found == set(SUCCESS) == set(ERRORS)


@pytest.mark.parametrize("command", sorted(SUCCESS), ids=" ".join)
def test_success_prints_json(world: World, command: tuple[str, ...]) -> None:
    code, out, err = world.cli(*SUCCESS[command](world))
    assert code == (code if command == ("check",) else 0), err
    assert code in (0, 1) and "Error" not in err
    json.loads(out)  # one JSON document, whatever its shape
    assert "abcdef" not in out  # a secret's value is never printed, not even by the set that made it


@pytest.mark.parametrize("command", sorted(ERRORS), ids=" ".join)
def test_a_runtime_error_is_one_json_object_on_stderr_with_exit_code_1(world: World, command: tuple[str, ...]) -> None:
    argv, expected_code = ERRORS[command]
    args = argv(world)
    code, out, err = world.cli(*args[2:], db=args[1]) if args[0] == "--db" else world.cli(*args)
    assert (code, out) == (1, ""), err
    error = _one_json_error(err)
    assert error["code"] == expected_code or expected_code is None
    # Without --json the same error is the one text line, same exit code.
    plain = [a for a in args if a != "--json"]
    code, _, err = world.cli(*plain[2:], db=plain[1]) if plain[0] == "--db" else world.cli(*plain)
    assert code == 1 and err.startswith("Error: ") and err.rstrip().endswith(f"[{error['code']}]")


@pytest.mark.parametrize("command", sorted(SUCCESS), ids=" ".join)
def test_bad_usage_with_json_is_a_json_error_with_exit_code_2(world: World, command: tuple[str, ...]) -> None:
    code, out, err = world.cli(*command, "--json", "--no-such-option")
    assert (code, out) == (2, "")
    error = _one_json_error(err)
    assert error["code"] == USAGE_ERROR_CODE and "--help" in error["message"]
