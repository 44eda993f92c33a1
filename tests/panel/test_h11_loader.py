"""h11's event classes through edge_runtime.panel.h11_loader's stand-in for ``dataclasses`` (the
artifacts leave it out) behave as through the real one: reprs, equality, hashing, frozen fields."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_EXCHANGE = textwrap.dedent("""
    import sys
    if sys.argv[1] == "stand-in":
        sys.modules["dataclasses"] = None  # as absent as in the artifact
    from edge_runtime.panel.h11_loader import load_h11
    h11 = load_h11()
    print("real" if hasattr(sys.modules["dataclasses"], "fields") else "stand-in")
    server = h11.Connection(h11.SERVER)
    server.receive_data(b"POST /x HTTP/1.1\\r\\nHost: h\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n2\\r\\n{}\\r\\n0\\r\\n\\r\\n")
    events = [server.next_event() for _ in range(3)]
    print([repr(e) for e in events])
    print(events[2] == h11.EndOfMessage(), events[1] == h11.Data(data=b"{}"), events[0] == events[1])
    print(hash(h11.ConnectionClosed()) == hash(h11.ConnectionClosed()), h11.ConnectionClosed() == h11.ConnectionClosed())
    for event in events:
        try:
            hash(event)
            print("hashable")
        except TypeError:
            print("unhashable")
    try:
        events[0].method = b"GET"
    except AttributeError as exc:
        print(type(exc).__name__)
    print(server.send(h11.Response(status_code=200, headers=[("content-length", "0")])))
""")


def _run(mode: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _EXCHANGE, mode], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_stand_in_gives_h11_what_dataclasses_gives_it() -> None:
    real, stand_in = _run("real"), _run("stand-in")
    assert real[0] == "real" and stand_in[0] == "stand-in"
    assert stand_in[1:] == real[1:]
    assert "Request(method=b'POST'" in real[1]
