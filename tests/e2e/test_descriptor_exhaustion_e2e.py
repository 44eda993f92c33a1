"""Against a real ``serve``: descriptor exhaustion is a retryable start failure.

The service's descriptor limit is lowered (``prlimit`` on the running service) to a few above what
it holds at rest, then Runs are queued that run for a while, each holding its watch (a pidfd)
while a descendant that ignores SIGTERM outlives its leader within its monitor's grace, so the
table fills up: starts hit ``EMFILE`` at whatever step of the start sequence the count falls on. The service must stay up, every Run must end
exactly once (succeeded: each start that found no descriptor was put back in the queue and
retried once descriptors were free again), none of its output may be lost, and once the
descendants exited the service holds exactly the descriptors it held at rest.
"""

from __future__ import annotations

import os
import resource
import time

import pytest
from tests.support.service_harness import Harness, wait_for

pytestmark = pytest.mark.e2e

#: Each task's leader runs this long (the service holds its pidfd), and a descendant it leaves as long
#: again (its monitor waits for it within the grace before it writes the status).
HOLD_S = 1.5


def _fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.parametrize("spare", [4, 5, 6])
def test_serve_survives_descriptor_exhaustion_and_runs_each_run_once(harness: Harness, spare: int) -> None:
    # The descendants ignore the SIGTERM their monitor sends them when the leader exits, and end on
    # their own within its grace (so each Run succeeds with them counted, none killed).
    service = harness.serve("--slots", "4", grace_ms=10_000, env={"EDGE_RUNTIME_LOG_LINGER_MS": "60000"})
    pid = service.process.pid
    at_rest = _fd_count(pid)
    # RLIMIT_NOFILE bounds the descriptor numbers; the service's are dense from 0, so this leaves
    # ``spare`` free: a start needs 4 at once (the log, the status file, the monitor's report pipe)
    # and each running Attempt keeps 1 (its pidfd).
    limit = max(int(name) for name in os.listdir(f"/proc/{pid}/fd")) + 1 + spare
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    started = time.monotonic()
    run_ids = harness.submit_many(
        [["sh", "-c", f"(trap '' TERM; sleep {HOLD_S}) & echo output-of-$EDGE_RUNTIME_RUN_ID; sleep {HOLD_S}"]
         for _ in range(8)])
    details = {run_id: harness.wait_status(run_id, "succeeded", "failed", "lost", "cancelled", timeout=90)
               for run_id in run_ids}
    print(f"spare={spare} limit={limit} at_rest={at_rest}: 8 Runs ended in {time.monotonic() - started:.1f}s, "
          f"attempts per Run {[len(d.attempts) for d in details.values()]}")
    assert service.process.poll() is None, service.log()
    log = service.log()
    assert "Too many open files" in log  # the limit was really hit (else this test proves nothing)
    for run_id, detail in details.items():
        assert detail.status.value == "succeeded", (run_id, detail.attempts, log)
        assert harness.event_types(run_id).count("run.succeeded") == 1
        # Every start that failed for lack of descriptors ended its Attempt without a process.
        assert all(a.status.value == "lost" and a.identity is None for a in detail.attempts[:-1])
        assert f"output-of-{run_id}" in harness.cli("logs", run_id).stdout  # no output lost
    assert "Traceback" not in log and "attempt.log_unavailable" not in log
    # Nothing leaked: once the descendants exit, their captures close and the count is back.
    wait_for(lambda: _fd_count(pid) == at_rest, f"the service back at {at_rest} descriptors", timeout=30)
