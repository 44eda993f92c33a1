"""The panel's address: off by default, an IP literal (or localhost) written by the user, from the
TOML file, the environment and the ``serve`` flag alike."""

from __future__ import annotations

import msgspec
import pytest

from edge_runtime.cli.parser import build_parser
from edge_runtime.cli.serve import service_overrides
from edge_runtime.service.config import ConfigError, ServiceConfig, load_config, parse_listen


def test_no_panel_by_default() -> None:
    config = load_config(env={})
    assert config.panel_listen is msgspec.UNSET and config.resolved_panel_listen() is None


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:5700", ("127.0.0.1", 5700)),
    ("localhost:5700", ("127.0.0.1", 5700)),
    ("[::1]:8080", ("::1", 8080)),
    ("192.168.1.1:5700", ("192.168.1.1", 5700)),
    ("0.0.0.0:5700", ("0.0.0.0", 5700)),
])
def test_an_address_is_served_exactly_as_written(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["5700", ":5700", "127.0.0.1", "127.0.0.1:70000", "router.lan:5700",
                                  "::1:5700", "[127.0.0.1]:5700", "127.0.0.1:57a0", "example.com:80"])
def test_anything_but_an_ip_literal_and_port_is_refused(text: str) -> None:
    # Said as every configuration error is (the bad-input campaign's rule): what is invalid, and where.
    with pytest.raises(ConfigError, match=r"^invalid configuration: panel_listen"):
        load_config(env={"EDGE_RUNTIME_PANEL_LISTEN": text})


def test_file_environment_and_flag_in_that_order(tmp_path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('panel_listen = "127.0.0.1:5700"\n')
    assert load_config(path, env={}).resolved_panel_listen() == ("127.0.0.1", 5700)
    env = {"EDGE_RUNTIME_PANEL_LISTEN": "127.0.0.1:5701"}
    assert load_config(path, env=env).resolved_panel_listen() == ("127.0.0.1", 5701)
    args = build_parser(load=("serve",)).parse_args(["serve", "--panel-listen", "[::1]:5702"])
    assert load_config(path, env=env, overrides=service_overrides(args)).resolved_panel_listen() == ("::1", 5702)


def test_the_struct_refuses_a_bad_address_too() -> None:
    with pytest.raises(ConfigError):
        ServiceConfig(panel_listen="nowhere")
