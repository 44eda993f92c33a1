"""Who gets a panel connection when they run short, without a socket: a share per peer, and
connections that have not sent a whole request giving way to new ones."""

from __future__ import annotations

from dataclasses import dataclass

from edge_runtime.panel.connections import MAX_CONNECTIONS, MAX_CONNECTIONS_PER_PEER, make_room


@dataclass
class Conn:
    peer: str
    waiting_since: float
    waiting: bool = True
    lingering: bool = False


def _held(peer: str, count: int, *, start: float = 0.0, **kw) -> list[Conn]:
    return [Conn(peer, start + i, **kw) for i in range(count)]


def test_room_while_below_both_limits() -> None:
    assert make_room("a", []) == (True, None)
    held = _held("a", MAX_CONNECTIONS_PER_PEER - 1) + _held("b", MAX_CONNECTIONS - MAX_CONNECTIONS_PER_PEER)
    assert make_room("a", held) == (True, None)


def test_a_peer_at_its_share_gives_way_to_itself_oldest_first() -> None:
    held = _held("a", MAX_CONNECTIONS_PER_PEER, start=10) + _held("b", 1, start=0)
    room = make_room("a", held)
    assert room.admit and room.evict is held[0]  # a's longest waiting, not b's older one


def test_the_reported_attack_one_client_holding_every_connection() -> None:
    """16 idle connections from one address could not even be held: beyond its share each new
    one of its own replaced its oldest; and the owner, from another address, finds room."""
    held: list[Conn] = []
    for i in range(MAX_CONNECTIONS):
        room = make_room("attacker", held)
        assert room.admit
        if room.evict is not None:
            held.remove(room.evict)
        held.append(Conn("attacker", float(i)))
    assert len(held) == MAX_CONNECTIONS_PER_PEER
    assert make_room("owner", held) == (True, None)


def test_when_all_are_taken_the_peer_holding_the_most_gives_way() -> None:
    held = _held("big", 5, start=50) + _held("small", 1, start=0) + [Conn(f"p{i}", 1.0 + i) for i in range(10)]
    assert len(held) == MAX_CONNECTIONS
    room = make_room("new", held)
    assert room.admit and room.evict is held[0]  # big's oldest, though every single one is older


def test_when_all_are_taken_from_as_many_addresses_the_longest_waiting_gives_way() -> None:
    held = [Conn(f"p{i}", 100.0 - i) for i in range(MAX_CONNECTIONS)]
    room = make_room("owner", held)
    assert room.admit and room.evict is held[-1]


def test_a_lingering_connection_gives_way_first() -> None:
    held = _held("big", 5) + [Conn(f"p{i}", 1.0 + i) for i in range(10)] + [Conn("done", 99.0, lingering=True)]
    room = make_room("new", held)
    assert room.evict is held[-1]


def test_a_connection_being_answered_never_gives_way() -> None:
    answering = _held("a", MAX_CONNECTIONS_PER_PEER, waiting=False)
    assert make_room("a", answering) == (False, None)  # its own are all busy: the new one is refused
    full = _held("b", MAX_CONNECTIONS_PER_PEER, waiting=False) + [Conn(f"p{i}", float(i), waiting=False) for i in range(10)]
    assert make_room("c", full) == (False, None)
    full[-1].waiting = True
    assert make_room("c", full).evict is full[-1]
