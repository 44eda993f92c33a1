"""No command of ``edge-runtime-cluster`` prints a DSN's password: psycopg's parse errors quote the
text around the mistake (``invalid percent-encoded token: "S3cr%zzPass"``), so every command parses
its DSN through the one describer first. Needs no server: the DSN is refused before any connect."""

from __future__ import annotations

import pytest

from cluster_postgres.cli import main

SECRET = "S3cr%zzPass"
BAD_DSNS = (f"postgresql://ql3:{SECRET}@127.0.0.1:5432/ql3", f"host=127.0.0.1 password='{SECRET}")


@pytest.mark.parametrize("dsn", BAD_DSNS)
@pytest.mark.parametrize("command", [["bootstrap", "--admin-dsn", "{dsn}", "--database", "ql3"], ["migrate", "--dsn", "{dsn}"],
                                     ["check", "--dsn", "{dsn}"], ["list", "--dsn", "{dsn}"],
                                     ["show", "r1", "--dsn", "{dsn}"]])
def test_no_command_prints_the_password_of_a_malformed_dsn(capsys: pytest.CaptureFixture[str], dsn: str,
                                                          command: list[str]) -> None:
    code = main([dsn if word == "{dsn}" else word for word in command])
    captured = capsys.readouterr()
    assert code == 1, captured
    assert "S3cr" not in captured.out + captured.err and "zz" not in captured.err
    assert captured.err.startswith("Error: the DSN is not a valid PostgreSQL connection string")
    assert captured.err.rstrip().endswith("[CLUSTER_DSN_INVALID]")
