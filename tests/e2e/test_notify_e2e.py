"""Notifications end to end: a real ``serve`` sends a failed Run's message to a local receiver
once, with its log masked, and a task sends its own message with ``edge-runtime notify send``."""

from __future__ import annotations

import sys

from tests.support.notify_receiver import Receiver
from tests.support.service_harness import Harness, wait_for

SECRET = "account-secret-0123456789"


def test_a_failed_run_and_a_tasks_own_message_arrive_once(harness: Harness) -> None:
    with Receiver("webhook") as receiver:
        harness.cli("env", "set", "COOKIE", SECRET, "--secret")
        harness.cli("notify", "channel", "add", "webhook", "--name", "hook", "--secret-param",
                    f"url={receiver.url}/hook")
        harness.cli("notify", "default", "hook:on=failed")
        service = harness.serve()
        service.wait_log("notify.transports")
        failed = harness.submit("sh", "-c", 'echo "cookie is $COOKIE"; exit 4')
        own = harness.cli("submit", "--", sys.executable, "-m", "edge_runtime", "--db", str(harness.db_path),
                          "notify", "send", "from a task", "all good").stdout.strip()
        harness.wait_status(own, "succeeded")
        wait_for(lambda: len(receiver.received) >= 2, "both messages")
        shown = harness.cli("show", failed).stdout
        listed = harness.cli("notify", "list").stdout
    by_title = {r.json()["title"]: r.json() for r in receiver.received}
    assert len(receiver.received) == 2 and "from a task" in by_title
    task_message = by_title.pop("from a task")
    assert task_message["content"] == "all good"
    [(title, run_message)] = by_title.items()
    assert title.startswith("sh -c echo") and title.endswith(": failed")  # a Run without a name: its command
    assert run_message["status"] == "failed" and run_message["run"] == failed
    assert "Exit: 4" in run_message["content"] and "cookie is ***" in run_message["content"]
    assert SECRET not in run_message["content"]
    assert "notify" in shown and "sent" in shown
    assert listed.count("sent") == 2
    assert SECRET not in service.log()
