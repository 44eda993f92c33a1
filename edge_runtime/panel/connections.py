"""Who gets a connection to the panel when they run short: a fair share per peer, and room for new
connections made by those that have not sent a whole request.

The server holds at most :data:`MAX_CONNECTIONS`, and at most :data:`MAX_CONNECTIONS_PER_PEER`
from one address (a browser opens at most 6 to one host). A connection is *waiting* while it has
not sent a whole request: just opened, idle between keep-alive requests, part of a request in,
or lingering after a refusal. One that is answering (its request was whole; the answer is being
sent) is never closed for another. When a new connection arrives (:func:`make_room`):

- from a peer already at its share, that peer's own longest-waiting connection gives way;
- when all are taken, the longest-waiting connection of the peer holding the most gives way (a
  lingering one first: its answer is already out);
- when no connection can give way, the new one is refused (closed at once, nothing read).

So connections held open by one client, idle or sending half a request, from one address or from
many, can delay nobody: the newest connection gets in, and its request is read as soon as it
arrives. The owner behind an SSH tunnel shares 127.0.0.1 with every local user: there, the
owner's new connection is that address's newest, the last of it to give way.
"""

from __future__ import annotations

import collections
from collections.abc import Collection
from typing import NamedTuple, Protocol

MAX_CONNECTIONS = 16
MAX_CONNECTIONS_PER_PEER = 6


class Held(Protocol):
    """What :func:`make_room` reads of a connection the server holds."""

    @property
    def peer(self) -> str: ...

    @property
    def waiting_since(self) -> float:
        """Monotonic time since which it has been waiting (when it was opened, or when its last answer was out)."""

    @property
    def waiting(self) -> bool:
        """It has not sent a whole request (nothing is being answered on it)."""

    @property
    def lingering(self) -> bool:
        """Its last answer (a refusal) is out; it is kept only to read what the client still sends."""


class Room(NamedTuple):
    """The decision for a new connection."""

    #: Serve the new connection (False: close it at once).
    admit: bool
    #: The held connection to close first, if any.
    evict: Held | None = None


def make_room(peer: str, held: Collection[Held]) -> Room:
    """Whether a new connection from ``peer`` is served, and which held connection gives way for it."""
    own = [c for c in held if c.peer == peer]
    if len(own) >= MAX_CONNECTIONS_PER_PEER:
        pool: Collection[Held] = own
    elif len(held) >= MAX_CONNECTIONS:
        pool = held
    else:
        return Room(True)
    counts = collections.Counter(c.peer for c in held)
    candidates = [c for c in pool if c.waiting]
    if not candidates:
        return Room(False)
    return Room(True, min(candidates, key=lambda c: (not c.lingering, -counts[c.peer], c.waiting_since)))
