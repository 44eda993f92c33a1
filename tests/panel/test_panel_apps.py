"""The OpenAPI's apps and tokens in the Local database: digests only, one token per window however
often an app asks, a live token never taken back, the scopes a token opens, refusals that write nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edge_runtime.contract.panel_apps import (
    DEFAULT_TOKEN_TTL_MS,
    MAX_APPS,
    TOKEN_WINDOWS_PER_TTL,
    AppScope,
    InvalidPanelAppError,
    PanelAppExistsError,
    PanelAppLimitError,
    PanelAppNotFoundError,
    check_app_name,
    parse_scopes,
    token_window_ms,
)
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.database import open_database
from edge_runtime.local.panel_apps import LocalPanelApps

START_MS = 1_800_000_000_000
DAY_MS = 86_400_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def db(tmp_path: Path, clock: ManualClock):
    database = open_database(str(tmp_path / "edge.db"), clock=clock)
    yield database
    database.close()


def _rows(db, sql: str) -> list[tuple]:
    return db.connection.execute(sql).fetchall()


def test_an_app_gets_url_safe_credentials_and_only_the_secrets_digest_is_kept(db, tmp_path: Path) -> None:
    apps = LocalPanelApps(db)
    made = apps.add("mcp", [AppScope.CRONS, AppScope.LOGS], DEFAULT_TOKEN_TTL_MS)
    assert re.fullmatch(r"[0-9A-Za-z_-]{12}", made.client_id) and re.fullmatch(r"[0-9A-Za-z_-]{24}", made.client_secret)
    for text in (made.client_id, made.client_secret):  # as QingLong's: a digit, both cases and - or _
        assert re.search(r"\d", text) and re.search("[a-z]", text) and re.search("[A-Z]", text) and re.search("[-_]", text)
    [listed] = apps.list()
    assert (listed.name, listed.client_id, listed.scopes, listed.token_ttl_ms, listed.live_tokens) == (
        "mcp", made.client_id, [AppScope.CRONS, AppScope.LOGS], DEFAULT_TOKEN_TTL_MS, 0)
    issued = apps.issue_token(made.client_id, made.client_secret)
    assert issued is not None
    db.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("edge.db"))
    assert made.client_id.encode() in stored  # not a secret: it names the app
    assert made.client_secret.encode() not in stored and issued.token.encode() not in stored
    events = _rows(db, "SELECT type, payload FROM device_events WHERE type LIKE 'panel.app%' ORDER BY id")
    assert [e[0] for e in events] == ["panel.app_added", "panel.app_token"]
    assert all(made.client_secret not in e[1] and issued.token not in e[1] for e in events)


def test_a_token_per_window_however_often_an_app_asks_and_a_live_one_is_never_taken_back(db, clock) -> None:
    apps = LocalPanelApps(db)
    made = apps.add("mcp", [AppScope.CRONS], DEFAULT_TOKEN_TTL_MS)
    window = token_window_ms(DEFAULT_TOKEN_TTL_MS)
    assert window == DAY_MS
    first = apps.issue_token(made.client_id, made.client_secret)
    assert first.expires_at_ms >= START_MS + DEFAULT_TOKEN_TTL_MS  # at least the lifetime
    assert first.expires_at_ms <= START_MS + DEFAULT_TOKEN_TTL_MS + window
    changes = db.connection.total_changes()
    for _ in range(50):  # an MCP server asks per tool call: the same token, and no write
        assert apps.issue_token(made.client_id, made.client_secret) == first
    assert db.connection.total_changes() == changes
    issued = [first]
    for _ in range(3 * TOKEN_WINDOWS_PER_TTL):  # ninety days of asking a few times a day
        for _ in range(4):
            clock.advance(window // 4)
            token = apps.issue_token(made.client_id, made.client_secret)
            if token != issued[-1]:
                issued.append(token)
        now = clock.now_ms()
        for old in issued:  # every token not yet expired still opens the app, and no expired one does
            assert (apps.check_token(old.token).app is not None) == (old.expires_at_ms > now)
        rows = _rows(db, "SELECT count(*) FROM panel_app_tokens")[0][0]
        assert rows <= TOKEN_WINDOWS_PER_TTL + 2  # bounded: expired ones are deleted as new ones come
    assert len({t.token for t in issued}) == len(issued) > 3 * TOKEN_WINDOWS_PER_TTL - 2
    assert apps.list()[0].live_tokens <= TOKEN_WINDOWS_PER_TTL + 2


def test_wrong_credentials_get_no_token_and_write_nothing(db) -> None:
    apps = LocalPanelApps(db)
    made = apps.add("uploader", [AppScope.ENVS], DEFAULT_TOKEN_TTL_MS)
    other = apps.add("other", [AppScope.ENVS], DEFAULT_TOKEN_TTL_MS)
    changes = db.connection.total_changes()
    for client_id, secret in ((made.client_id, other.client_secret), (made.client_id, made.client_secret[:-1]),
                              ("x" * 12, made.client_secret), ("", ""), (made.client_id, "s" * 300),
                              (made.client_id, None), (None, made.client_secret)):
        assert apps.issue_token(client_id, secret) is None
    assert db.connection.total_changes() == changes
    assert apps.check_token("not-a-token").app is None and apps.check_token("").app is None


def test_a_token_opens_its_apps_scopes_and_removing_the_app_ends_it(db) -> None:
    apps = LocalPanelApps(db)
    made = apps.add("bot", [AppScope.CRONS, AppScope.SYSTEM], DEFAULT_TOKEN_TTL_MS)
    token = apps.issue_token(made.client_id, made.client_secret).token
    check = apps.check_token(token)
    assert check.app.name == "bot" and check.app.scopes == [AppScope.CRONS, AppScope.SYSTEM]
    apps.remove("bot")
    assert apps.check_token(token).app is None
    assert _rows(db, "SELECT count(*) FROM panel_app_tokens") == [(0,)]
    assert apps.issue_token(made.client_id, made.client_secret) is None
    with pytest.raises(PanelAppNotFoundError):
        apps.remove("bot")


def test_a_short_lifetime_expires_its_tokens(db, clock) -> None:
    apps = LocalPanelApps(db)
    made = apps.add("short", [AppScope.LOGS], 3_600_000)
    issued = apps.issue_token(made.client_id, made.client_secret)
    assert START_MS + 3_600_000 <= issued.expires_at_ms <= START_MS + 3_600_000 + token_window_ms(3_600_000)
    clock.set(issued.expires_at_ms)
    assert apps.check_token(issued.token) == (None, True)


def test_refused_names_scopes_lifetimes_duplicates_and_more_than_the_limit(db) -> None:
    apps = LocalPanelApps(db)
    for name in ("", "-x", "a b", "x" * 65, "名字", "a/b"):
        with pytest.raises(InvalidPanelAppError):
            check_app_name(name)
    assert check_app_name("mcp.server_1-a") == "mcp.server_1-a"
    for text in ("scripts", "crons,crons", "crons,", "", "CRONS", "user", "dependencies"):
        with pytest.raises(InvalidPanelAppError):
            parse_scopes(text)
    assert parse_scopes("crons, envs,logs,subscriptions,system") == list(AppScope)
    for ttl in (59_999, 366 * DAY_MS):
        with pytest.raises(InvalidPanelAppError):
            apps.add("x", [AppScope.CRONS], ttl)
    apps.add("x", [AppScope.CRONS], DEFAULT_TOKEN_TTL_MS)
    with pytest.raises(PanelAppExistsError):
        apps.add("x", [AppScope.CRONS], DEFAULT_TOKEN_TTL_MS)
    for n in range(MAX_APPS - 1):
        apps.add(f"a{n}", [AppScope.CRONS], DEFAULT_TOKEN_TTL_MS)
    with pytest.raises(PanelAppLimitError):
        apps.add("one-more", [AppScope.CRONS], DEFAULT_TOKEN_TTL_MS)
    assert len(apps.list()) == MAX_APPS
