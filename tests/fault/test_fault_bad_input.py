"""Bad input: hypothesis fuzzing of every JSON command decoder, the service configuration (file
and environment) and the command line. Only the documented errors may come out, never anything
else, and a refused input writes nothing."""

from __future__ import annotations

import json

import contextlib
import importlib
import inspect
import io
import os
import pkgutil
import random
import string
import subprocess
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import edge_runtime.contract
from tests.support import fault_stats
from edge_runtime.cli.main import main as cli_main
from edge_runtime.contract.cancellation_dispatch import (
    ClaimCommand,
    InvalidCommandError,
    RecordResultCommand,
)
from edge_runtime.contract.runs import InvalidRunCommandError, SubmitRunCommand
from edge_runtime.contract.worker_lease import InvalidWorkerLeaseCommandError
from edge_runtime.local.cancellation_dispatch import LocalCancellationDispatchRepository
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.service.config import ConfigError, ServiceConfig, load_config
from tests.support.fault_workloads import dump

pytestmark = pytest.mark.fault

CAMPAIGN = "bad-input"

#: The documented error of each contract module's decoders. A module that gains decoders must be
#: listed here, or the discovery test below fails: nothing escapes the fuzzing unnoticed.
DECODER_ERRORS: dict[str, type[Exception]] = {
    "edge_runtime.contract.cancellation_dispatch": InvalidCommandError,
    "edge_runtime.contract.worker_session": InvalidWorkerLeaseCommandError,
    "edge_runtime.contract.run_lease": InvalidWorkerLeaseCommandError,
    "edge_runtime.contract.worker_lease": InvalidWorkerLeaseCommandError,
    "edge_runtime.contract.runs": InvalidRunCommandError,
}


def _discover_decoders() -> list[tuple[str, Callable[[bytes], Any], type, type[Exception]]]:
    found = []
    for info in pkgutil.iter_modules(edge_runtime.contract.__path__):
        module = importlib.import_module(f"edge_runtime.contract.{info.name}")
        for name, value in vars(module).items():
            if (
                name.startswith("decode_")
                and callable(value)
                and getattr(value, "__module__", "") == module.__name__
                and len(inspect.signature(value).parameters) == 1  # a decoder, not a helper
            ):
                target = typing.get_type_hints(value).get("return")
                found.append((f"{info.name}.{name}", value, target, DECODER_ERRORS.get(module.__name__)))
    return sorted(found, key=lambda item: item[0])


DECODERS = _discover_decoders()


def _examples(long_mode: bool, short: int = 60, long: int = 600) -> int:
    return long if long_mode else short


def _settings(long_mode: bool, short: int = 60, long: int = 600) -> settings:
    return settings(max_examples=_examples(long_mode, short, long), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), database=None)


# --------------------------------------------------------------------------- value strategies

_nasty_ints = st.sampled_from([-1, 0, 1, 2, 2**31 - 1, 2**31, 2**53 - 1, 2**53, 2**63, 2**64, -(2**63)])
_nasty_text = st.one_of(
    st.text(max_size=8),
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=140),
    st.sampled_from(["", " ", "\x00", "a\x1fb", "\x7f", "x" * 36, "x" * 37, "x" * 128, "x" * 129, "null", "é"]),
)
_json_scalar = st.one_of(st.none(), st.booleans(), st.integers(), _nasty_ints, st.floats(allow_nan=False),
                         _nasty_text)
_json_value = st.recursive(
    _json_scalar,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(_nasty_text, children, max_size=4)),
    max_leaves=10,
)


def _field_names(target: type) -> list[str]:
    if target is None or not isinstance(target, type) or not issubclass(target, msgspec.Struct):
        return ["x"]
    return [field.encode_name for field in msgspec.structs.fields(target)]


def _command_like(target: type) -> st.SearchStrategy[bytes]:
    """JSON objects using the command's own field names (some missing, some extra, any values),
    plus raw bytes and arbitrary JSON documents."""
    names = _field_names(target)
    objects = st.dictionaries(st.one_of(st.sampled_from(names), _nasty_text), _json_value, max_size=len(names) + 2)
    return st.one_of(
        objects.map(msgspec.json.encode),
        _json_value.map(msgspec.json.encode),
        st.binary(max_size=64),
        objects.map(lambda obj: msgspec.json.encode(obj)[:-1]),  # truncated document
    )


# --------------------------------------------------------------------------- decoders


def test_every_decoder_is_discovered_and_has_a_documented_error() -> None:
    names = [name for name, *_ in DECODERS]
    assert "cancellation_dispatch.decode_claim_command" in names
    assert "cancellation_dispatch.decode_record_result_command" in names
    unmapped = [name for name, _, _, error in DECODERS if error is None]
    assert unmapped == [], f"decoders without a documented error: {unmapped}"


@pytest.mark.parametrize("name,decode,target,error", DECODERS, ids=[d[0] for d in DECODERS])
def test_decoder_raises_only_its_documented_error(
    name: str, decode: Callable[[bytes], Any], target: type, error: type[Exception], long_mode: bool
) -> None:
    refused = 0
    accepted = 0

    @_settings(long_mode, 40, 1_500)
    @given(data=_command_like(target))
    def check(data: bytes) -> None:
        nonlocal refused, accepted
        try:
            command = decode(data)
        except error as exc:
            refused += 1
            assert str(exc), "an error must say what is wrong"
            assert exc.retryable is False
            return
        accepted += 1
        assert isinstance(command, target)
        # Whatever is accepted survives its own round trip unchanged (exact shape).
        assert decode(msgspec.json.encode(command)) == command

    check()
    with pytest.raises(error):
        decode("not bytes")  # type: ignore[arg-type]
    fault_stats.add(fault_stats.BAD_INPUTS, refused + 1, campaign=CAMPAIGN)
    assert refused > 0


def test_bad_commands_built_in_python_write_nothing(tmp_path: Path, long_mode: bool) -> None:
    """Commands built from Python values meet the same checks, before any transaction."""
    db = open_database(tmp_path / "edge-runtime.db", clock=ManualClock(1_700_000_000_000))
    repo = LocalCancellationDispatchRepository(db)
    runs = LocalRunRepository(db)
    runs.submit(SubmitRunCommand(argv=["/bin/true"]))
    before = dump(db)
    refused = 0
    values = st.one_of(_json_scalar, st.lists(_json_scalar, max_size=2))

    @_settings(long_mode, 80, 1_000)
    @given(kind=st.sampled_from(["claim", "record", "submit"]), args=st.lists(values, min_size=7, max_size=8))
    def check(kind: str, args: list[Any]) -> None:
        nonlocal refused
        try:
            if kind == "claim":
                repo.claim(ClaimCommand(*args[:6]))
            elif kind == "record":
                repo.record_result(RecordResultCommand(*args[:7]))
            else:
                runs.submit(SubmitRunCommand(argv=args[0], name=args[1]))
        except (InvalidCommandError, InvalidRunCommandError):
            refused += 1
        except (TypeError, msgspec.ValidationError) as exc:
            raise AssertionError(f"undocumented error {type(exc).__name__}: {exc}") from None
        else:
            return  # a valid command; the repository decided (not_eligible, fence, ...)
        assert dump(db) == before

    try:
        check()
    finally:
        db.close()
    fault_stats.add(fault_stats.BAD_INPUTS, refused, campaign=CAMPAIGN)
    assert refused > 0


# --------------------------------------------------------------------------- configuration

_CONFIG_KEYS = [field.name for field in msgspec.structs.fields(ServiceConfig)]
_toml_scalar = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str),
    _nasty_ints.map(str),
    st.booleans().map(lambda b: "true" if b else "false"),
    _nasty_text.map(lambda text: msgspec.json.encode(text).decode()),
    st.sampled_from(["1.5", "[1, 2]", "{ a = 1 }", "nan", "inf", "1979-05-27", '"""x"""', "", "=", "0x10"]),
)
_toml_line = st.one_of(
    st.tuples(st.sampled_from(_CONFIG_KEYS), _toml_scalar).map(lambda kv: f"{kv[0]} = {kv[1]}"),
    st.tuples(st.text(alphabet=string.ascii_letters + "_-. ", min_size=1, max_size=12), _toml_scalar).map(
        lambda kv: f"{kv[0]} = {kv[1]}"),
    st.sampled_from(["[service]", "[[x]]", "#", "worker_id", "slots = 1\nslots = 2"]),
)
_toml_documents = st.one_of(
    st.lists(_toml_line, max_size=6).map(lambda lines: "\n".join(lines).encode()),
    st.binary(max_size=80),
)


def test_config_file_and_environment_raise_only_config_errors(tmp_path: Path, long_mode: bool) -> None:
    path = tmp_path / "edge-runtime.toml"
    refused = 0

    @_settings(long_mode, 150, 2_000)
    @given(
        document=_toml_documents,
        env=st.dictionaries(st.sampled_from([f"EDGE_RUNTIME_{key.upper()}" for key in _CONFIG_KEYS]), _nasty_text,
                            max_size=2),
    )
    def check(document: bytes, env: dict[str, str]) -> None:
        nonlocal refused
        if any("\x00" in value for value in env.values()):
            return  # an environment cannot hold NUL
        path.write_bytes(document)
        try:
            config = load_config(path, env=env)
        except ConfigError as exc:
            refused += 1
            assert str(exc).startswith(("config file", "invalid configuration", "EDGE_RUNTIME_")), str(exc)
            return
        assert isinstance(config, ServiceConfig)

    check()
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.toml", env={})
    fault_stats.add(fault_stats.BAD_INPUTS, refused + 1, campaign=CAMPAIGN)
    assert refused > 0


# --------------------------------------------------------------------------- command line

#: Every command but ``serve`` (which would start a service in this process; its flags and
#: configuration are covered by the config fuzzing above and by the service campaign).
_COMMANDS = ["submit", "cancel", "show", "list", "events", "logs", "dispatch", "migrate", "check", "rearm", "schedule"]
_FLAGS = ["--json", "--reason", "--name", "--status", "--limit", "--attempt", "--expected-version", "--",
          "--timeout", "--overlap", "add", "list", "pause", "remove", "@every 1s", "61 * * * *", "1h30m",
          "-h", "--help", "--version", "show", "rearm", "running", "queued", "0", "-1", "99999999999999999999"]


def test_cli_arguments_give_usage_or_runtime_errors_only(
    tmp_path: Path, long_mode: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_path = tmp_path / "edge-runtime.db"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EDGE_RUNTIME_DB", str(db_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("EDGE_RUNTIME_CONFIG", raising=False)
    with open_database(db_path, clock=ManualClock(1_700_000_000_000)) as db:
        run = LocalRunRepository(db).submit(SubmitRunCommand(argv=["/bin/true"]))
    token = st.one_of(st.sampled_from(_FLAGS), st.just(run.id), _nasty_text.filter(lambda t: "\x00" not in t))
    refused = 0

    @_settings(long_mode, 120, 1_500)
    @given(command=st.sampled_from(_COMMANDS), args=st.lists(token, max_size=5))
    def check(command: str, args: list[str]) -> None:
        nonlocal refused
        if "--db" in args:
            return
        with open_database(db_path, create=False) as db:
            before = dump(db)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli_main([command, *args])
            except SystemExit as exit_:
                code = exit_.code
        stderr = err.getvalue()
        assert "Traceback" not in stderr
        assert code in (0, 1, 2), (command, args, code, stderr)
        if code == 0:
            return
        refused += 1
        # With --json an error is one JSON object (its code and message) instead of the Error: line.
        assert (stderr.startswith("Error: ") or stderr.startswith("usage:")
                or set(json.loads(stderr)["error"]) == {"code", "message"}), stderr
        with open_database(db_path, create=False) as db:
            assert dump(db) == before, f"a refused command wrote: {[command, *args]}"

    check()
    fault_stats.add(fault_stats.BAD_INPUTS, refused, campaign=CAMPAIGN)
    assert refused > 0


# --------------------------------------------------------------------------- serve, end to end

_BAD_SERVE_CONFIGS = [
    b"slots = 0\n",
    b"slots = \"two\"\n",
    b"grace_ms = -1\n",
    b"unknown_key = 1\n",
    b"worker_id = \"bad\\u0007id\"\n",
    b"retry_base_ms = 5000\nretry_max_ms = 10\n",
    b"[table]\nslots = 1\n",
    b"\xff\xfe not toml",
    b"slots = 1\nslots = 2\n",
    b"log_max_bytes = 1\n",
    b"dispatch_lease_ms = 300001\n",
    b"poll_interval_ms = 1.5\n",
]


def test_serve_refuses_a_bad_config_file_cleanly(tmp_path: Path, rng: random.Random, long_mode: bool) -> None:
    """The real ``serve`` process: exit 1, one ``Error: ... [CONFIG_INVALID]`` line, no traceback,
    and no database created, for each bad configuration file."""
    cases = _BAD_SERVE_CONFIGS if long_mode else rng.sample(_BAD_SERVE_CONFIGS, 2)
    env = {key: value for key, value in os.environ.items() if not key.startswith("EDGE_RUNTIME_")}
    for index, document in enumerate(cases):
        config = tmp_path / f"bad-{index}.toml"
        config.write_bytes(document)
        db_path = tmp_path / f"device-{index}" / "edge-runtime.db"
        result = subprocess.run(
            [sys.executable, "-m", "edge_runtime", "--db", str(db_path), "serve", "--config", str(config)],
            capture_output=True, text=True, env=env, timeout=60,
        )
        assert result.returncode == 1, (document, result.returncode, result.stderr)
        assert "Traceback" not in result.stderr
        assert result.stderr.startswith("Error: ") and result.stderr.rstrip().endswith("[CONFIG_INVALID]"), result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not db_path.exists(), "a refused configuration created the database"
    fault_stats.add(fault_stats.BAD_INPUTS, len(cases), campaign=CAMPAIGN)
