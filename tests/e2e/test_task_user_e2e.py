"""Tasks as another user (docs/operating.md, "Task user"), against a real ``serve`` run as root and a
real second user made for the test: its uid, groups and HOME, what it cannot read (the database,
where the panel's password hash and sessions are, and another task's log), the ``task_user``
setting, a schedule's user, and a user that does not exist (refused at once by the CLI, and an
Attempt that would run as one fails saying why)."""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.service_harness import Harness, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="switching a task to another user needs root (the service's "
                                                 "user on a router); run the suite as root to cover it"),
    pytest.mark.skipif(shutil.which("useradd") is None or shutil.which("userdel") is None,
                       reason="no useradd/userdel to make the throwaway task user with"),
]


class TaskUserFixture:
    def __init__(self, name: str, home: Path) -> None:
        self.name, self.home = name, home
        entry = pwd.getpwnam(name)
        self.uid, self.gid = entry.pw_uid, entry.pw_gid


@pytest.fixture
def task_user() -> Iterator[TaskUserFixture]:
    """A throwaway system user with a home of its own; removed (with its home) afterwards."""
    name = f"edge-t-{uuid.uuid4().hex[:8]}"
    home = Path(tempfile.mkdtemp(prefix="edge-task-home-"))
    subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", str(home), "--shell", "/bin/sh", name],
                   check=True, capture_output=True)
    try:
        entry = pwd.getpwnam(name)
        os.chown(home, entry.pw_uid, entry.pw_gid)
        os.chmod(home, 0o700)
        yield TaskUserFixture(name, home)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def reachable(harness: Harness) -> Harness:
    """The test's directories opened to others (pytest makes them 0700), so that only the
    service's own modes stand between the task user and the database and logs."""
    path = harness.tmp
    while path != path.parent and path.name != "tmp":
        if path.stat().st_uid == 0:
            os.chmod(path, 0o755)
        path = path.parent
    return harness


PROBE = ("id -u; id -g; id -G; echo HOME=$HOME USER=$USER; pwd; "
         "cat {db} >/dev/null 2>&1 && echo DB-READ || echo DB-REFUSED; "
         "ls {logs} >/dev/null 2>&1 && echo LOGS-LISTED || echo LOGS-REFUSED; "
         "cat {other_log} >/dev/null 2>&1 && echo LOG-READ || echo LOG-REFUSED; "
         "touch {db}.planted 2>/dev/null && echo DB-DIR-WRITTEN || echo DB-DIR-REFUSED")


def test_a_task_runs_as_its_user_and_reads_neither_the_database_nor_another_log(
        reachable: Harness, task_user: TaskUserFixture) -> None:
    harness = reachable
    first = harness.submit("sh", "-c", "echo the-other-task-secret-output")
    # The panel's secrets (its password hash, its sessions) are rows of the database.
    subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(harness.db_path), "panel", "password", "--stdin"],
                   input="a-panel-password-1234\n", text=True, env=harness.env, check=True, capture_output=True)
    harness.serve()
    harness.wait_status(first, "succeeded")
    other_log = harness.detail(first).attempts[-1].log_path
    logs = Path(other_log).parent
    probe = PROBE.format(db=harness.db_path, logs=logs, other_log=other_log)
    run_id = harness.cli("submit", "--user", task_user.name, "--", "sh", "-c", probe).stdout.strip()
    detail = harness.wait_status(run_id, "succeeded", "failed")
    out = harness.cli("logs", run_id).stdout.split("\n")
    assert detail.status.value == "succeeded", (detail, out)
    groups = {task_user.gid, *(g.gr_gid for g in grp.getgrall() if task_user.name in g.gr_mem)}
    assert out[0] == str(task_user.uid) and out[0] != "0"
    assert out[1] == str(task_user.gid)
    assert set(map(int, out[2].split())) == groups  # its own groups only: none of root's is kept
    assert out[3] == f"HOME={task_user.home} USER={task_user.name}"
    assert out[4] == str(task_user.home)  # no --cwd: its home (the service's work_dir is root's)
    assert out[5:9] == ["DB-REFUSED", "LOGS-REFUSED", "LOG-REFUSED", "DB-DIR-REFUSED"]
    assert detail.task_user == task_user.name
    assert f"user       {task_user.name}" in harness.cli("show", run_id).stdout
    # What the database and the logs are, that keeps it out (docs/operating.md, "Task user").
    for path in (harness.db_path, *harness.db_path.parent.glob(harness.db_path.name + "-*")):
        assert (os.stat(path).st_mode & 0o077) == 0, path  # the file and its -wal, -shm
    assert (os.stat(logs).st_mode & 0o077) == 0 and (os.stat(other_log).st_mode & 0o077) == 0


def test_the_task_user_setting_applies_to_runs_and_schedules_naming_none_and_root_stays_possible(
        reachable: Harness, task_user: TaskUserFixture) -> None:
    harness = reachable
    default = harness.submit("id", "-u")
    as_root = harness.cli("submit", "--user", "root", "--", "id", "-u").stdout.strip()
    schedule = harness.cli("schedule", "add", "--user", task_user.name, "@daily", "--", "id", "-un").stdout.strip()
    assert f"user       {task_user.name}" in harness.cli("schedule", "show", schedule).stdout
    harness.serve(env={"EDGE_RUNTIME_TASK_USER": task_user.name})
    fired = harness.cli("schedule", "run", schedule, "--json").stdout
    for run_id, wanted in ((default, str(task_user.uid)), (as_root, "0")):
        harness.wait_status(run_id, "succeeded")
        assert harness.cli("logs", run_id).stdout.strip() == wanted
    fired_id = json.loads(fired)["runId"]
    harness.wait_status(fired_id, "succeeded")
    assert harness.cli("logs", fired_id).stdout.strip() == task_user.name
    assert harness.detail(fired_id).task_user == task_user.name


def test_a_user_that_does_not_exist_is_refused_at_once_and_fails_the_attempt_saying_why(
        harness: Harness, task_user: TaskUserFixture) -> None:
    for args in (("submit", "--user", "edge-nosuch-user", "--", "true"),
                 ("schedule", "add", "--user", "edge-nosuch-user", "@daily", "--", "true")):
        refused = harness.cli(*args, check=False)
        assert refused.returncode == 1 and refused.stderr.startswith("Error:"), refused
        assert "'edge-nosuch-user': no such user on this device" in refused.stderr
    assert not harness.db_path.exists()  # refused before anything was stored
    # A user removed after its Run was queued: the Attempt fails, with the stable code and why.
    run_id = harness.cli("submit", "--user", task_user.name, "--", "true").stdout.strip()
    subprocess.run(["userdel", task_user.name], check=True, capture_output=True)
    service = harness.serve()
    detail = harness.wait_status(run_id, "failed")
    reason = detail.attempts[-1].end_reason
    assert f"the task user {task_user.name!r} does not exist on this device" in reason
    assert "SERVICE_TASK_USER_UNKNOWN" in reason
    assert detail.attempts[-1].identity is None  # nothing was started
    wait_for(lambda: "attempt.task_user_unknown" in service.log(), "the service to log it")


def test_a_setting_naming_no_user_is_said_at_start(harness: Harness) -> None:
    service = harness.serve(env={"EDGE_RUNTIME_TASK_USER": "edge-nosuch-user"})
    assert "service.task_user_unknown" in service.log() and "edge-nosuch-user" in service.log()
    run_id = harness.submit("true")
    detail = harness.wait_status(run_id, "failed")
    assert "SERVICE_TASK_USER_UNKNOWN" in detail.attempts[-1].end_reason


#: The interpreter a task user can run (``sys.executable`` is under root's 0700 home here), with
#: this checkout and its dependencies on its path.
SYSTEM_PYTHON = "/usr/bin/python3"


def test_a_task_users_own_message_goes_through_the_service_and_the_database_stays_closed(
        reachable: Harness, task_user: TaskUserFixture) -> None:
    import sysconfig

    from tests.support.notify_receiver import Receiver

    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                             text=True, check=False).stdout.strip() if os.path.exists(SYSTEM_PYTHON) else ""
    if version != str(sys.version_info[:2]):
        pytest.skip(f"no {SYSTEM_PYTHON} of this Python version for the task user to run edge-runtime with")
    harness = reachable
    checkout = Path(__file__).resolve().parents[2]
    path = f"{checkout}:{sysconfig.get_paths()['purelib']}"
    with Receiver("webhook") as receiver:
        harness.cli("migrate")
        harness.cli("notify", "channel", "add", "webhook", "--name", "hook", "--secret-param", f"url={receiver.url}/hook")
        service = harness.serve()
        script = (f"PYTHONPATH={path} PYTHONDONTWRITEBYTECODE=1 {SYSTEM_PYTHON} -m edge_runtime notify send "
                  f"'from a task user' 'hello' --channel hook && echo SENT; id -u; "
                  f"cat {harness.db_path} >/dev/null 2>&1 && echo DB-READ || echo DB-REFUSED; "
                  f"cat {harness.db_path}.notify-key >/dev/null 2>&1 && echo KEY-READ || echo KEY-REFUSED")
        run_id = harness.cli("submit", "--user", task_user.name, "--", "sh", "-c", script).stdout.strip()
        detail = harness.wait_status(run_id, "succeeded", "failed")
        out = harness.cli("logs", run_id).stdout
        wait_for(lambda: len(receiver.received) >= 1, "the task user's message", timeout=30)
    assert detail.status.value == "succeeded", out
    assert out.split("\n")[-4:-1] == [str(task_user.uid), "DB-REFUSED", "KEY-REFUSED"], out
    assert "SENT" in out
    assert [r.json()["title"] for r in receiver.received] == ["from a task user"]
    assert f"notify.task_message_queued uid={task_user.uid} " in service.log()  # the peer's uid, logged


def test_a_squatter_on_the_task_message_socket_gets_no_token(task_user: TaskUserFixture, tmp_path: Path) -> None:
    """Any local user may bind the abstract name first: the client sends its token only to root
    or its own user."""
    import socket

    from edge_runtime.contract.notifications import NotifyServiceUnavailableError
    from edge_runtime.contract.task_notify import Capability
    from edge_runtime.local import notify_handoff as wire

    address = wire.address_of(tmp_path / "edge-runtime.db")
    ready_r, ready_w = os.pipe()
    got_r, got_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the squatter, as the task user
        try:
            os.close(ready_r)
            os.close(got_r)
            os.setgid(task_user.gid)
            os.setuid(task_user.uid)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sock.bind(b"\0" + address[1:].encode())
            sock.listen(1)
            os.write(ready_w, b"1")
            conn, _ = sock.accept()
            conn.settimeout(5)
            try:
                os.write(got_w, conn.recv(65536) or b"-")
            except OSError:
                os.write(got_w, b"-")
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(got_w)
    try:
        assert os.read(ready_r, 1) == b"1"
        token = wire.derive_token(b"k" * wire.KEY_BYTES, "an-attempt")
        with pytest.raises(NotifyServiceUnavailableError, match=f"held by uid {task_user.uid}"):
            wire.send_to_service(Capability(address, "an-attempt", token), "t", "b", [])
        received = os.read(got_r, 65536)
    finally:
        os.waitpid(pid, 0)
    assert token.encode() not in received and received == b"-"
