"""A task's environment (docs/environment.md): composition, shared variables on the device store,
and the pass_env / work_dir settings (masking: test_redaction.py)."""

from __future__ import annotations

import pytest

from edge_runtime.contract.environment import (
    InvalidVariableError,
    VariableNotFoundError,
    compose_environment,
    parse_assignments,
)
from edge_runtime.local.database import LocalDatabase
from edge_runtime.local.environment import LocalEnvironmentRepository
from edge_runtime.service.config import ConfigError, load_config

SERVICE_ENV = {"PATH": "/bin", "HOME": "/root", "LANG": "C.UTF-8", "AWS_SECRET": "x", "PROXY": "p",
               "LD_PRELOAD": "/evil.so"}


def test_the_base_then_pass_env_then_shared_then_own_and_always_the_ids() -> None:
    env = compose_environment(SERVICE_ENV, pass_env=["PROXY"], shared={"A": "shared", "B": "shared"},
                              own={"B": "own"}, run_id="r1", attempt_id="a1")
    assert env == {"PATH": "/bin", "HOME": "/root", "LANG": "C.UTF-8", "PROXY": "p", "A": "shared", "B": "own",
                   "EDGE_RUNTIME_RUN_ID": "r1", "EDGE_RUNTIME_ATTEMPT_ID": "a1"}
    # Nothing else of the service's environment, and a PATH even when the service has none.
    assert compose_environment({}, run_id="r", attempt_id="a")["PATH"].startswith("/usr/local/sbin")


def test_assignments_are_parsed_and_bad_ones_refused() -> None:
    assert parse_assignments(["A=1", "B=x=y", "A=2"]) == {"A": "2", "B": "x=y"}
    for bad in ("NOEQUALS", "1A=x", "EDGE_RUNTIME_RUN_ID=x", "A-B=x"):
        with pytest.raises(InvalidVariableError):
            parse_assignments([bad])


def test_env_entries_on_the_device_store_never_list_a_secrets_value(db: LocalDatabase) -> None:
    repo = LocalEnvironmentRepository(db)
    repo.set("PLAIN", "v1", secret=False)
    made = repo.set("TOKEN", "s3cr3t-value", secret=True)
    assert made.secret and "s3cr3t-value" not in repr(made)
    repo.set("PLAIN", "v2", secret=False)  # its one entry, replaced in place
    listed = {v.name: v for v in repo.list()}
    assert listed["PLAIN"].value == "v2" and listed["PLAIN"].id == 1 and listed["TOKEN"].secret
    assert "s3cr3t-value" not in repr(repo.list())
    assert repo.task_values() == {"PLAIN": "v2", "TOKEN": "s3cr3t-value"}
    assert repo.secret_values() == ["s3cr3t-value"]
    repo.remove_name("TOKEN")
    with pytest.raises(VariableNotFoundError):
        repo.remove_name("TOKEN")
    with pytest.raises(InvalidVariableError):
        repo.set("BAD NAME", "x", secret=False)


def test_pass_env_and_work_dir_settings(tmp_path) -> None:
    config = load_config(env={"EDGE_RUNTIME_PASS_ENV": "HTTP_PROXY, NO_PROXY", "EDGE_RUNTIME_WORK_DIR": "/srv/x"})
    assert config.pass_env == ["HTTP_PROXY", "NO_PROXY"]
    assert str(config.resolved_work_dir(str(tmp_path / "db"))) == "/srv/x"
    assert load_config(env={}).resolved_work_dir(str(tmp_path / "edge.db")) == tmp_path / "work"


def test_the_scripts_dir_setting(tmp_path, monkeypatch) -> None:
    assert load_config(env={}).resolved_scripts_dir(str(tmp_path / "edge.db")) == tmp_path / "scripts"
    config = load_config(env={"EDGE_RUNTIME_SCRIPTS_DIR": "/mnt/usb/scripts"})
    assert str(config.resolved_scripts_dir(str(tmp_path / "edge.db"))) == "/mnt/usb/scripts"
    assert str(config.scripts_dir_beside(tmp_path)) == "/mnt/usb/scripts"  # a cluster worker's too
    monkeypatch.chdir(tmp_path)  # a relative setting is taken from where serve starts, once
    relative = load_config(env={"EDGE_RUNTIME_SCRIPTS_DIR": "mine"})
    assert relative.resolved_scripts_dir("/srv/edge.db") == tmp_path / "mine"
    with pytest.raises(ConfigError, match="scripts_dir"):
        load_config(env={"EDGE_RUNTIME_SCRIPTS_DIR": ""})
