"""A task's own message through the running service: the capability every Attempt gets, its
token's shape, and the request a task sends (docs/notifications.md, "A script's own message"). Pure.

Every Attempt's environment holds :data:`NOTIFY_VARIABLE`: where the service listens and a token
that opens only that Attempt, and only while it runs. ``edge-runtime notify send`` in a task hands
its message to the service with it, instead of opening the database (which a task user cannot,
and which holds the channels' secrets).

The token is a MAC of the Attempt's id under a random device key (``local/notify_handoff.py``):
nothing per Attempt is stored, and a restarted service still opens the tokens of the Attempts it
re-adopted. It has a fixed, recognisable shape (:data:`TOKEN_PREFIX` then
:data:`TOKEN_BODY_CHARS` URL-safe base64 characters) so that the one masking step
(``redaction.py``) hides it in every output without knowing its value: a task that prints its
environment shows ``***`` in ``logs``, the panel and the service's log.

This module imports nothing but ``re``: the masking step imports it.
"""

from __future__ import annotations

import re

#: The variable the service sets in every Attempt's environment (neither an env entry nor a
#: Run's own variable may set it).
NOTIFY_VARIABLE = "EDGE_RUNTIME_NOTIFY"
#: The version of the variable's layout, its first field.
CAPABILITY_VERSION = "1"
#: How a token begins: what the masking step recognises.
TOKEN_PREFIX = "ern1."
#: The URL-safe base64 of an HMAC-SHA256, without padding.
TOKEN_BODY_CHARS = 43
TOKEN_CHARS = len(TOKEN_PREFIX) + TOKEN_BODY_CHARS
#: The characters of a token's body.
TOKEN_BODY_ALPHABET = "A-Za-z0-9_-"
TOKEN_PATTERN = re.escape(TOKEN_PREFIX) + f"[{TOKEN_BODY_ALPHABET}]{{{TOKEN_BODY_CHARS}}}"
_TOKEN = re.compile(TOKEN_PATTERN)
_FIELD_SEPARATOR = ";"
#: An Attempt's id as the service writes it (a UUID's text, or the like): nothing else travels.
_ATTEMPT_ID = re.compile(r"[A-Za-z0-9_-]{1,36}")
#: The service's address: a Linux abstract-namespace socket name, written with a leading ``@``.
_ADDRESS = re.compile(r"@[A-Za-z0-9._-]{1,100}")


class Capability:
    """What :data:`NOTIFY_VARIABLE` holds: the service's address, the Attempt's id, its token."""

    __slots__ = ("address", "attempt_id", "token")

    def __init__(self, address: str, attempt_id: str, token: str) -> None:
        self.address, self.attempt_id, self.token = address, attempt_id, token

    def text(self) -> str:
        return _FIELD_SEPARATOR.join((CAPABILITY_VERSION, self.address, self.attempt_id, self.token))

    def __repr__(self) -> str:  # never the token: a traceback or a log line may print this
        return f"Capability({self.address!r}, {self.attempt_id!r}, token=***)"

    @classmethod
    def parse(cls, text: str) -> Capability | None:
        """The capability in ``text`` (the variable's value), or None when it is not one (another
        version, a field of the wrong shape): the environment is hostile input."""
        fields = text.split(_FIELD_SEPARATOR)
        if len(fields) != 4 or fields[0] != CAPABILITY_VERSION:
            return None
        _, address, attempt_id, token = fields
        if not (_ADDRESS.fullmatch(address) and _ATTEMPT_ID.fullmatch(attempt_id) and _TOKEN.fullmatch(token)):
            return None
        return cls(address, attempt_id, token)


def is_token(text: str) -> bool:
    return _TOKEN.fullmatch(text) is not None


def is_attempt_id(text: str) -> bool:
    """Whether ``text`` has the shape of an Attempt's id (what a request may name, and be logged with)."""
    return _ATTEMPT_ID.fullmatch(text) is not None
