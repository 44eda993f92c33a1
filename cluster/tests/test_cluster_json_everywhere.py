"""Every ``edge-runtime-cluster`` command that takes ``--json`` prints JSON, for success and errors.

The commands are found by walking the cluster CLI's parser: one added later with ``--json`` and no
entry below fails ``test_the_tables_cover_every_cluster_command_with_json``. Success prints JSON
on stdout; a runtime error is one ``{"error": {"code", "message"}}`` object on stderr, exit 1;
bad usage the same object with code ``USAGE``, exit 2.
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from cluster_postgres import cli as cluster_cli
from cluster_postgres.connection import DSN_ENV_VAR
from cluster_postgres.store import PostgresStore
from edge_runtime.cli.reporting import USAGE_ERROR_CODE
from edge_runtime.contract.runs import AttemptStatus, ProcessIdentity, SubmitRunCommand
from edge_runtime.contract.schedules import AddScheduleCommand
from edge_runtime.service.worker import WorkerSession
from tests.support.pg_unfenced_attempts import take_queued_run


def json_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not nested:
        return [path] if any("--json" in a.option_strings for a in parser._actions) else []
    return [found for action in nested for name, child in action.choices.items()
            for found in json_commands(child, (*path, name))]


class World:
    def __init__(self, pg_database: Any, owner: Any, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.dsn = pg_database.runtime_dsn
        store = PostgresStore(self.dsn)
        try:
            self.run = store.runs.submit(SubmitRunCommand(argv=["true"])).id
            self.to_cancel = store.runs.submit(SubmitRunCommand(argv=["sleep", "9"])).id
            self.blocked = store.runs.submit(SubmitRunCommand(argv=["sleep", "9"])).id
            attempt = take_queued_run(store.runs, self.blocked, actor_id="t")
            store.environment.set("PLAIN", "x", secret=False)  # entry 1
            store.environment.set("OTHER", "y", secret=False)  # entry 2
            self.schedule = store.schedules.add(AddScheduleCommand(expression="@daily", argv=["true"])).id
            self.logged = _ended_elsewhere_with_a_copy(store)
        finally:
            store.close()
        owner.execute("INSERT INTO ql3.run_cancellation_dispatches (run_id, attempt_id, status, version, dispatch_count, "
                      "last_result, created_at_ms, updated_at_ms) VALUES (%s, %s, 'blocked', 3, 2, 'identity_mismatch', 0, 0)",
                      (self.blocked, attempt.id))

    def channel(self) -> str:
        """A webhook channel whose URL is a receiver on 127.0.0.1 (a test message gets through)."""
        from tests.support.notify_receiver import Receiver

        self.receiver = Receiver("webhook").__enter__()
        store = PostgresStore(self.dsn)
        try:
            store.notifications.add_channel("hook", "webhook", {}, {"url": f"{self.receiver.url}/hook"})
        finally:
            store.close()
        return "hook"

    def cli(self, *argv: str) -> tuple[int, str, str]:
        try:
            code = cluster_cli.main(list(argv))
        except SystemExit as exc:
            code = exc.code
        out, err = self.capsys.readouterr()
        return code, out, err


def _ended_elsewhere_with_a_copy(store: PostgresStore) -> str:
    """A Run whose Attempt ran on another host, which stored the copy of its log ``hi``."""
    worker = WorkerSession(store.leases, worker_id="host-b", slots=1, session_lease_ms=120_000, run_lease_ms=60_000)
    worker.register()
    run_id = store.runs.submit(SubmitRunCommand(argv=["echo", "hi"])).id
    attempt_id = worker.start(run_id).lease.attempt_id
    store.runs.record_running(attempt_id, ProcessIdentity(99, 99, 5, str(uuid.uuid4())), log_path="/elsewhere/a.log",
                              actor_id=worker.owner)
    store.runs.finish_attempt(attempt_id, AttemptStatus.SUCCEEDED, actor_id=worker.owner, exit_code=0)
    store.attempt_logs.keep(attempt_id, b"hi\n", size_bytes=3, worker_id="host-b")
    return run_id


Argv = Callable[[World], list[str]]
SUCCESS: dict[tuple[str, ...], Argv] = {
    ("submit",): lambda w: ["submit", "--json", "--", "true"],
    ("cancel",): lambda w: ["cancel", w.to_cancel, "--json"],
    ("show",): lambda w: ["show", w.run, "--json"],
    ("list",): lambda w: ["list", "--json"],
    ("events",): lambda w: ["events", w.run, "--json"],
    ("logs",): lambda w: ["logs", w.logged, "--json"],
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
    ("check",): lambda w: ["check", "--dsn", w.dsn, "--json"],
    ("schedule", "add"): lambda w: ["schedule", "add", "@hourly", "--json", "--", "true"],
    ("schedule", "edit"): lambda w: ["schedule", "edit", w.schedule, "--name", "n", "--json"],
    ("schedule", "run"): lambda w: ["schedule", "run", w.schedule, "--json"],
    ("schedule", "list"): lambda w: ["schedule", "list", "--json"],
    ("schedule", "show"): lambda w: ["schedule", "show", w.schedule, "--json"],
    ("schedule", "pause"): lambda w: ["schedule", "pause", w.schedule, "--json"],
    ("schedule", "resume"): lambda w: ["schedule", "resume", w.schedule, "--json"],
    ("schedule", "remove"): lambda w: ["schedule", "remove", w.schedule, "--json"],
    ("retention", "show"): lambda w: ["retention", "show", "--json"],
    ("retention", "set"): lambda w: ["retention", "set", "--runs", "500", "--json"],
    ("notify", "channel", "add"): lambda w: ["notify", "channel", "add", "ntfy", "--name", "n",
                                             "--secret-param", "topic=abcdef-long", "--json"],
    ("notify", "channel", "list"): lambda w: ["notify", "channel", "list", "--json"],
    ("notify", "channel", "remove"): lambda w: ["notify", "channel", "remove", w.channel(), "--json"],
    ("notify", "channel", "test"): lambda w: ["notify", "channel", "test", w.channel(), "--json"],
    ("notify", "list"): lambda w: ["notify", "list", "--json"],
    ("notify", "send"): lambda w: ["notify", "send", "title", "body", "--channel", w.channel(), "--json"],
    ("notify", "default"): lambda w: ["notify", "default", w.channel(), "--json"],
}
ERRORS: dict[tuple[str, ...], tuple[Argv, str]] = {
    ("submit",): (lambda w: ["submit", "--json", "--name", "a\x01b", "--", "true"], "INVALID_NAME"),
    ("cancel",): (lambda w: ["cancel", "zzzz", "--json"], "RUN_NOT_FOUND"),
    ("show",): (lambda w: ["show", "zzzz", "--json"], "RUN_NOT_FOUND"),
    ("list",): (lambda w: ["list", "--json", "--dsn", "host=127.0.0.1 port=1 connect_timeout=2"],
                "CLUSTER_STORAGE_FAILED"),
    ("events",): (lambda w: ["events", "zzzz", "--json"], "RUN_NOT_FOUND"),
    ("logs",): (lambda w: ["logs", w.run, "--json"], "COMMAND_NOT_STARTED"),
    ("dispatch", "show"): (lambda w: ["dispatch", "show", "zzzz", "--json"], "RUN_NOT_FOUND"),
    ("dispatch", "rearm"): (lambda w: ["dispatch", "rearm", w.blocked, "--expected-version", "2", "--json"],
                            "CANCELLATION_DISPATCH_FENCE_REJECTED"),
    ("env", "set"): (lambda w: ["env", "set", "1BAD", "x", "--json"], "INVALID_VARIABLE"),
    ("env", "list"): (lambda w: ["env", "list", "--json", "--dsn", "host=127.0.0.1 port=1 connect_timeout=2"],
                      "CLUSTER_STORAGE_FAILED"),
    ("env", "remove"): (lambda w: ["env", "remove", "NONE_SUCH", "--json"], "VARIABLE_NOT_FOUND"),
    ("env", "add"): (lambda w: ["env", "add", "TOKEN", "short", "--secret", "--json"], "SECRET_TOO_SHORT"),
    ("env", "edit"): (lambda w: ["env", "edit", "9", "--remarks", "r", "--json"], "ENV_ENTRY_NOT_FOUND"),
    ("env", "enable"): (lambda w: ["env", "enable", "1", "9", "--json"], "ENV_ENTRY_NOT_FOUND"),
    ("env", "disable"): (lambda w: ["env", "disable", "9", "--json"], "ENV_ENTRY_NOT_FOUND"),
    ("env", "pin"): (lambda w: ["env", "pin", "9", "--json"], "ENV_ENTRY_NOT_FOUND"),
    ("env", "unpin"): (lambda w: ["env", "unpin", "9", "--json"], "ENV_ENTRY_NOT_FOUND"),
    ("env", "move"): (lambda w: ["env", "move", "1", "--before", "9", "--json"], "ENV_ENTRY_NOT_FOUND"),
    ("check",): (lambda w: ["check", "--dsn", "host=127.0.0.1 port=1 connect_timeout=2", "--json"],
                 "CLUSTER_STORAGE_FAILED"),
    ("schedule", "add"): (lambda w: ["schedule", "add", "*", "--json", "--", "true"], "INVALID_CRON_EXPRESSION"),
    ("schedule", "edit"): (lambda w: ["schedule", "edit", "none-such", "--name", "n", "--json"], "SCHEDULE_NOT_FOUND"),
    ("schedule", "run"): (lambda w: ["schedule", "run", "none-such", "--json"], "SCHEDULE_NOT_FOUND"),
    ("schedule", "list"): (lambda w: ["schedule", "list", "--json", "--dsn", "host=127.0.0.1 port=1 connect_timeout=2"],
                           "CLUSTER_STORAGE_FAILED"),
    ("schedule", "show"): (lambda w: ["schedule", "show", "none-such", "--json"], "SCHEDULE_NOT_FOUND"),
    ("schedule", "pause"): (lambda w: ["schedule", "pause", "none-such", "--json"], "SCHEDULE_NOT_FOUND"),
    ("schedule", "resume"): (lambda w: ["schedule", "resume", "none-such", "--json"], "SCHEDULE_NOT_FOUND"),
    ("schedule", "remove"): (lambda w: ["schedule", "remove", "none-such", "--json"], "SCHEDULE_NOT_FOUND"),
    ("retention", "show"): (lambda w: ["retention", "show", "--json", "--dsn", "host=127.0.0.1 port=1 connect_timeout=2"],
                            "CLUSTER_STORAGE_FAILED"),
    ("retention", "set"): (lambda w: ["retention", "set", "--runs", "0", "--json"], "CONFIG_INVALID"),
    ("notify", "channel", "add"): (lambda w: ["notify", "channel", "add", "pager", "--name", "p", "--json"],
                                   "NOTIFY_INVALID_CHANNEL"),
    ("notify", "channel", "list"): (lambda w: ["notify", "channel", "list", "--json", "--dsn",
                                               "host=127.0.0.1 port=1 connect_timeout=2"], "CLUSTER_STORAGE_FAILED"),
    ("notify", "channel", "remove"): (lambda w: ["notify", "channel", "remove", "none-such", "--json"],
                                      "NOTIFY_CHANNEL_NOT_FOUND"),
    ("notify", "channel", "test"): (lambda w: ["notify", "channel", "test", "none-such", "--json"],
                                    "NOTIFY_CHANNEL_NOT_FOUND"),
    ("notify", "list"): (lambda w: ["notify", "list", "--json", "--dsn", "host=127.0.0.1 port=1 connect_timeout=2"],
                         "CLUSTER_STORAGE_FAILED"),
    ("notify", "send"): (lambda w: ["notify", "send", "t", "b", "--channel", "none-such", "--json"],
                         "NOTIFY_CHANNEL_NOT_FOUND"),
    ("notify", "default"): (lambda w: ["notify", "default", "none-such:on=failed", "--json"],
                            "NOTIFY_CHANNEL_NOT_FOUND"),
}


@pytest.fixture
def world(pg_database: Any, owner: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> World:
    pg_database.reset(owner, None)
    monkeypatch.setenv(DSN_ENV_VAR, pg_database.runtime_dsn)
    return World(pg_database, owner, capsys)


def _one_json_error(err: str) -> dict[str, Any]:
    assert err.endswith("\n") and err.count("\n") == 1, err
    error = json.loads(err)
    assert list(error) == ["error"] and set(error["error"]) == {"code", "message"}, error
    return error["error"]


def test_the_tables_cover_every_cluster_command_with_json() -> None:
    found = set(json_commands(cluster_cli._parser()))
    assert len(found) >= 21
    assert found == set(SUCCESS) == set(ERRORS)


@pytest.mark.parametrize("command", sorted(SUCCESS), ids=" ".join)
def test_success_prints_json(world: World, command: tuple[str, ...]) -> None:
    code, out, err = world.cli(*SUCCESS[command](world))
    assert code in ((0, 1) if command == ("check",) else (0,)), err
    json.loads(out)
    assert "abcdef" not in out


@pytest.mark.parametrize("command", sorted(ERRORS), ids=" ".join)
def test_a_runtime_error_is_one_json_object_on_stderr_with_exit_code_1(world: World, command: tuple[str, ...]) -> None:
    argv, expected_code = ERRORS[command]
    code, out, err = world.cli(*argv(world))
    assert (code, out) == (1, ""), err
    assert _one_json_error(err)["code"] == expected_code


@pytest.mark.parametrize("command", sorted(SUCCESS), ids=" ".join)
def test_bad_usage_with_json_is_a_json_error_with_exit_code_2(world: World, command: tuple[str, ...]) -> None:
    code, out, err = world.cli(*command, "--json", "--no-such-option")
    assert (code, out) == (2, "")
    error = _one_json_error(err)
    assert error["code"] == USAGE_ERROR_CODE
    # The hint names the help of the subcommand the option was given to.
    assert error["message"].endswith(f"(try: edge-runtime-cluster {' '.join(command)} --help)"), error
