"""A task's own message through the running service (docs/notifications.md, "A script's own
message"): a real ``serve`` runs tasks whose command is ``edge-runtime notify send`` with no
``--db`` and no ``--env``; the message arrives once, as the Run's; a forged token and the token of
an Attempt that ended are refused with the code and queue nothing; the per-Attempt cap; the token
never shows in ``logs``, ``events``, ``show`` or the service's log."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from edge_runtime.contract.notifications import MAX_TASK_MESSAGES
from edge_runtime.contract.task_notify import NOTIFY_VARIABLE, TOKEN_PREFIX, Capability
from tests.support.notify_receiver import Receiver
from tests.support.service_harness import Harness, wait_for

pytestmark = pytest.mark.e2e

CLI = f"{sys.executable} -m edge_runtime"


def _setup(harness: Harness, receiver: Receiver) -> None:
    harness.cli("migrate")
    harness.cli("notify", "channel", "add", "webhook", "--name", "hook", "--secret-param", f"url={receiver.url}/hook")
    harness.cli("notify", "default", "hook:on=failed")  # the channel a message naming none goes to


def test_a_tasks_message_arrives_once_without_the_database_and_its_token_never_shows(harness: Harness) -> None:
    with Receiver("webhook") as receiver:
        _setup(harness, receiver)
        service = harness.serve()
        # The task prints its capability (as `env` would) and sends with neither --db nor --env.
        run = harness.submit("sh", "-c", f'echo "cap=${NOTIFY_VARIABLE}"; {CLI} notify send "t" "b" && echo SENT')
        harness.wait_status(run, "succeeded")
        wait_for(lambda: len(receiver.received) >= 1, "the task's message")
        logs = harness.cli("logs", run).stdout
        events = harness.cli("events", run).stdout
        shown = harness.cli("show", run).stdout
        listed = harness.cli("notify", "list", "--run", run).stdout
        service_log = service.log()
    assert [r.json()["title"] for r in receiver.received] == ["t"]
    assert receiver.received[0].json()["content"] == "b"
    assert "SENT" in logs and "cap=1;@edge-runtime-notify." in logs  # the variable was there ...
    assert TOKEN_PREFIX not in logs + events + shown + service_log  # ... its token masked everywhere
    assert "***" in logs
    assert "message 't'" in listed and "sent" in shown  # the Run's: `show RUN` and `notify list --run`
    assert "notify.task_message_queued" in service_log and "uid=0" in service_log


def test_a_forged_token_and_an_ended_attempts_token_are_refused_and_nothing_is_queued(harness: Harness) -> None:
    with Receiver("webhook") as receiver:
        _setup(harness, receiver)
        service = harness.serve()
        # An ended Attempt's capability, kept by a task that printed it.
        ended = harness.submit("sh", "-c", f'printf %s "${NOTIFY_VARIABLE}"')
        harness.wait_status(ended, "succeeded")
        attempt = harness.detail(ended).attempts[-1]
        with open(harness.tmp / "logs" / f"{attempt.id}.log", encoding="utf-8") as log:  # the raw log, unmasked
            capability = Capability.parse(log.read())
        assert capability is not None
        forged = Capability(capability.address, capability.attempt_id, TOKEN_PREFIX + "A" * 43).text()
        results = [  # as a task would call it: no --db
            subprocess.run([sys.executable, "-m", "edge_runtime", "notify", "send", "late", "x", "--json"],
                           capture_output=True, text=True, timeout=60, env={**harness.env, NOTIFY_VARIABLE: text})
            for text in (capability.text(), forged)]
        listed = harness.cli("notify", "list").stdout
        service_log = service.log()
    for result in results:
        assert result.returncode != 0
        assert json.loads(result.stderr)["error"]["code"] == "NOTIFY_TOKEN_INVALID"
    assert "late" not in listed and receiver.received == []
    assert service_log.count("notify.task_message_refused") == 2
    assert capability.token not in service_log


def test_an_attempt_sends_at_most_the_cap_through_a_channel(harness: Harness) -> None:
    with Receiver("webhook") as receiver:
        _setup(harness, receiver)
        harness.serve()
        run = harness.submit("sh", "-c", f'for i in $(seq {MAX_TASK_MESSAGES + 2}); do '
                                         f'{CLI} notify send "n$i" "b" --json 2>>err.txt || echo "REFUSED $i"; done; '
                                         f'cat err.txt')
        harness.wait_status(run, "succeeded")
        wait_for(lambda: len(receiver.received) >= MAX_TASK_MESSAGES, "the capped messages")
        logs = harness.cli("logs", run).stdout
        listed = harness.cli("notify", "list", "--run", run).stdout
    assert f"REFUSED {MAX_TASK_MESSAGES + 1}" in logs and f"REFUSED {MAX_TASK_MESSAGES + 2}" in logs
    assert "REFUSED 1\n" not in logs
    assert "NOTIFY_TASK_LIMIT" in logs and f"{MAX_TASK_MESSAGES} messages" in logs
    assert listed.count("message 'n") == MAX_TASK_MESSAGES


def test_a_task_readopted_by_a_restarted_service_still_sends(harness: Harness) -> None:
    go = harness.tmp / "go"
    with Receiver("webhook") as receiver:
        _setup(harness, receiver)
        first = harness.serve()
        run = harness.submit("sh", "-c", f'while [ ! -e {go} ]; do sleep 0.05; done; {CLI} notify send "after" "restart"')
        harness.wait_running(run)
        assert first.stop() == 0  # the Attempt is left running, to be re-adopted
        second = harness.serve(worker_id="e2e-worker")
        second.wait_log("recovery.done")
        go.touch()
        harness.wait_status(run, "succeeded")
        wait_for(lambda: len(receiver.received) >= 1, "the message sent after the restart")
    assert [r.json()["title"] for r in receiver.received] == ["after"]
    assert "notify.task_message_queued" in second.log()
