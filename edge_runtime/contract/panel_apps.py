"""The panel's apps: the credentials other programs reach the device's OpenAPI with.

An app (``edge-runtime panel app add NAME --scopes crons,envs,logs``) has a name, a
``client_id`` and a ``client_secret`` (URL-safe characters, as QingLong's; the secret is shown
once and only its digest kept), the scopes it holds and the lifetime of the tokens it is given.
A program trades its id and secret for a bearer token (``GET /open/auth/token``); the token opens
the ``/open/<scope>/...`` routes of the scopes its app holds, and nothing else (docs/qinglong.md).

The scopes, the limits and the errors are declared here once; the Local store keeps the apps
(``edge_runtime/local/panel_apps.py``), the panel's server checks the tokens, and the QingLong
face names the scope of each of its routes.
"""

from __future__ import annotations

import enum
import re

import msgspec

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.validation import SafeInt

#: An app's name: what ``panel app list|remove`` names it by.
APP_NAME_MAX_LENGTH = 64
_APP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: At most this many apps on one device (each is a credential to watch over).
MAX_APPS = 32
#: The lifetime of a token (``--token-ttl``): QingLong's fixed 30 days by default.
DEFAULT_TOKEN_TTL_MS = 30 * 86_400_000
MIN_TOKEN_TTL_MS = 60_000
MAX_TOKEN_TTL_MS = 365 * 86_400_000
#: A token is issued per window of ``ttl / TOKEN_WINDOWS_PER_TTL`` (the same token to every request
#: of one window): an app has at most this many and two more live tokens, however often it asks.
TOKEN_WINDOWS_PER_TTL = 30
#: Characters of a ``client_id`` and a ``client_secret`` (as long as QingLong's).
CLIENT_ID_LENGTH = 12
CLIENT_SECRET_LENGTH = 24
#: The alphabet of both: URL-safe, so a client may put them in a query string unencoded.
CLIENT_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-"


class AppScope(enum.StrEnum):
    """What an app's token opens: the ``/open/<scope>/...`` routes of that name."""

    CRONS = "crons"  # the schedules (QingLong's crons): list, add, edit, run, stop, remove
    ENVS = "envs"  # the variables Runs get
    LOGS = "logs"  # the logs of the schedules' Runs
    SUBSCRIPTIONS = "subscriptions"  # the subscriptions: list, run, stop, enable, disable (never add or change)
    SYSTEM = "system"  # the version (nothing else under /open/system is served)


class PanelAppError(EdgeRuntimeError, code="PANEL_APP_ERROR"):
    """Base of the panel app errors."""


class InvalidPanelAppError(PanelAppError, code="INVALID_PANEL_APP"):
    """An app's name, scopes or token lifetime is not one the device takes."""


class PanelAppExistsError(PanelAppError, code="PANEL_APP_EXISTS"):
    """An app of this name exists already (remove it first to issue new credentials)."""


class PanelAppNotFoundError(PanelAppError, code="PANEL_APP_NOT_FOUND"):
    """No app has this name."""


class PanelAppLimitError(PanelAppError, code="PANEL_APP_LIMIT"):
    """The device holds :data:`MAX_APPS` apps already."""


class AppRecord(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """An app as ``panel app list --json`` prints it. Its field names are QingLong's (``client_id``,
    the name QingLong's clients are configured with), so they are snake_case."""

    name: str
    client_id: str
    scopes: list[AppScope]
    token_ttl_ms: SafeInt
    created_at_ms: SafeInt
    #: Tokens issued to it that have not expired.
    live_tokens: int = 0


class NewApp(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """What ``panel app add`` prints, once: the app and its ``client_secret``."""

    name: str
    client_id: str
    client_secret: str
    scopes: list[AppScope]
    token_ttl_ms: SafeInt


class IssuedToken(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """A bearer token given for an app's id and secret, and when it expires."""

    token: str
    expires_at_ms: SafeInt


def check_app_name(name: object) -> str:
    """``name`` if it can name an app, else :class:`InvalidPanelAppError`."""
    if type(name) is not str or _APP_NAME.fullmatch(name) is None:
        raise InvalidPanelAppError(
            f"an app's name is 1 to {APP_NAME_MAX_LENGTH} letters, digits, '_', '.' or '-', beginning with a "
            f"letter or digit; got {name!r}")
    return name


def parse_scopes(text: str) -> list[AppScope]:
    """The scopes of a comma-separated list (``crons,envs,logs``): known ones only, each once."""
    names = [part.strip() for part in text.split(",")]
    known = [s.value for s in AppScope]
    scopes: list[AppScope] = []
    for name in names:
        if name not in known:
            raise InvalidPanelAppError(f"unknown scope {name!r}: the scopes are {', '.join(known)}")
        if AppScope(name) in scopes:
            raise InvalidPanelAppError(f"scope {name!r} is given twice")
        scopes.append(AppScope(name))
    return scopes


def check_token_ttl_ms(ttl_ms: int) -> int:
    if not MIN_TOKEN_TTL_MS <= ttl_ms <= MAX_TOKEN_TTL_MS:
        raise InvalidPanelAppError("a token lifetime (--token-ttl) is 1m to 365d")
    return ttl_ms


def token_window_ms(ttl_ms: int) -> int:
    """The window a token is issued per, for tokens that live ``ttl_ms``."""
    return max(1000, ttl_ms // TOKEN_WINDOWS_PER_TTL)
